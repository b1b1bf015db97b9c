"""Jobs from schedulers, CSV, sacct and what agents observe, and the GPUs they held (DESIGN.md §3, §4)."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from cluster.inventory.models import Gpu, GpuModel
from core.choices import ColouredChoices
from core.timewindow import validate_in_window


class JobSource(models.TextChoices):
    SLURM = "slurm", _("Slurm")
    KUBERNETES = "kubernetes", _("Kubernetes")
    API = "api", _("API")
    CSV = "csv", _("CSV import")
    OBSERVED = "observed", _("Observed on the GPUs")


class JobState(ColouredChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    PREEMPTED = "preempted", _("Preempted")
    REQUEUED = "requeued", _("Requeued")

    @classmethod
    def _colours(cls):
        return {
            "pending": "grey", "running": "green", "completed": "grey", "failed": "red",
            "cancelled": "amber", "preempted": "amber", "requeued": "amber",
        }

    @classmethod
    def interrupted(cls) -> tuple[str, ...]:
        """States after which a job that runs again has recovered from an interruption (DESIGN.md §4)."""
        return (cls.FAILED, cls.PREEMPTED, cls.REQUEUED)


class JobQuerySet(models.QuerySet):
    def visible_to(self, user) -> JobQuerySet:
        """Admin and finance: all. A lead: their teams' jobs. An engineer: their own team's jobs."""
        from teams.models import Team
        from teams.roles import sees_all_teams

        if sees_all_teams(user):
            return self  # unattributed observed jobs included: someone must see them to map them
        return self.filter(team__in=Team.objects.visible_to(user))


class Job(models.Model):
    """One run of a job: a requeued job keeps a row per run (keyed by source, external id and start)."""

    source = models.CharField(_("source"), max_length=16, choices=JobSource.choices)
    external_id = models.CharField(_("job id"), max_length=200)
    name = models.CharField(_("name"), max_length=300, blank=True)
    user = models.CharField(_("user"), max_length=100, blank=True, help_text=_("Scheduler or unix user name."))
    team = models.ForeignKey(
        "teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="jobs", verbose_name=_("team")
    )
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="jobs",
        verbose_name=_("project"),
    )
    account = models.CharField(_("scheduler account"), max_length=100, blank=True)
    partition = models.CharField(_("partition"), max_length=100, blank=True)
    priority = models.IntegerField(_("priority"), null=True, blank=True)
    gpu_count = models.DecimalField(
        _("GPUs requested"), max_digits=9, decimal_places=3, default=0, validators=[MinValueValidator(0)],
        help_text=_("May be fractional: a shared GPU."),
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("GPU model")
    )
    estimated_card_hours = models.DecimalField(
        _("estimated card-hours"), max_digits=14, decimal_places=3, null=True, blank=True,
        validators=[MinValueValidator(0)],
    )
    data_ready = models.BooleanField(_("data ready"), null=True, blank=True)
    data_ready_at = models.DateTimeField(
        _("data ready at"), null=True, blank=True, validators=[validate_in_window],
        help_text=_("When the job's input data is (or was) ready; empty: unknown, or ready from the start."),
    )
    state = models.CharField(_("state"), max_length=16, choices=JobState.choices, default=JobState.PENDING)
    submit_time = models.DateTimeField(_("submitted"), null=True, blank=True)
    start_time = models.DateTimeField(_("started"), null=True, blank=True)
    end_time = models.DateTimeField(_("ended"), null=True, blank=True)
    node_list = models.CharField(_("nodes"), max_length=500, blank=True, help_text=_("As the scheduler wrote it."))
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submit_time", "-id"]
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        indexes = [
            models.Index(fields=["team", "-submit_time"]),
            models.Index(fields=["user"]),
            models.Index(fields=["state"]),
            models.Index(fields=["start_time"]),
            models.Index(fields=["updated_at"]),
            models.Index(
                fields=["external_id"], opclasses=["text_pattern_ops"], condition=models.Q(source="slurm"),
                name="job_slurm_id_prefix",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_id", "start_time"], nulls_distinct=False, name="job_one_row_per_run"
            ),
            models.CheckConstraint(
                condition=models.Q(end_time__isnull=True) | models.Q(start_time__isnull=True)
                | models.Q(end_time__gte=models.F("start_time")),
                name="job_ends_after_start",
            ),
            models.CheckConstraint(condition=models.Q(gpu_count__gte=0), name="job_gpu_count_not_negative"),
            models.CheckConstraint(
                condition=models.Q(team__isnull=False) | models.Q(source=JobSource.OBSERVED), name="job_has_team"
            ),
            models.CheckConstraint(condition=models.Q(state__in=JobState.values), name="job_known_state"),
        ]

    def __str__(self) -> str:
        return f"{self.get_source_display()} {self.external_id}"

    @property
    def state_colour(self) -> str:
        return JobState(self.state).colour


class AllocationOrigin(models.TextChoices):
    SCHEDULER = "scheduler", _("Scheduler record")
    OBSERVED = "observed", _("Observed process")


class AllocationQuerySet(models.QuerySet):
    def counted(self) -> AllocationQuerySet:
        """The allocations that count a job's usage, once: its placed scheduler allocations if it has
        any, else its observed ones, else its unplaced one (docs/decisions.md, observed usage)."""
        placed = Allocation.objects.filter(
            job=models.OuterRef("job"), origin=AllocationOrigin.SCHEDULER, gpu__isnull=False
        )
        observed = Allocation.objects.filter(job=models.OuterRef("job"), origin=AllocationOrigin.OBSERVED)
        return self.exclude(models.Q(origin=AllocationOrigin.OBSERVED) & models.Exists(placed)).exclude(
            models.Q(origin=AllocationOrigin.SCHEDULER, gpu__isnull=True)
            & (models.Exists(placed) | models.Exists(observed))
        )


class Allocation(models.Model):
    """A GPU (or a share of one) held by a job over a time range. Without a GPU it is *unplaced*: the
    job's GPUs are unknown, and ``share`` holds all of its GPUs (DESIGN.md §4)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations", verbose_name=_("job"))
    gpu = models.ForeignKey(
        Gpu, on_delete=models.PROTECT, null=True, blank=True, related_name="allocations", verbose_name=_("GPU")
    )
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("GPU model")
    )
    share = models.PositiveBigIntegerField(
        _("share"), help_text=_("GPU share in 1/840,000 of a GPU (= ticks per second); unplaced: all the job's GPUs.")
    )
    start = models.DateTimeField(_("from"))
    end = models.DateTimeField(
        _("until"), null=True, blank=True,
        help_text=_("Empty while a scheduler's job runs; an observed allocation ends where its process was last seen."),
    )
    origin = models.CharField(_("origin"), max_length=16, choices=AllocationOrigin.choices, default=AllocationOrigin.SCHEDULER)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["job", "gpu", "start"]
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        indexes = [
            models.Index(fields=["gpu", "start"]), models.Index(fields=["start"]), models.Index(fields=["origin", "end"]),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(share__gt=0), name="allocation_share_positive"),
            models.CheckConstraint(
                condition=models.Q(end__isnull=True) | models.Q(end__gte=models.F("start")), name="allocation_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job} on {self.gpu or 'unplaced'}"

    @property
    def unplaced(self) -> bool:
        return self.gpu_id is None


class IdentityKind(models.TextChoices):
    UNIX_USER = "unix_user", _("Unix user")
    SLURM_ACCOUNT = "slurm_account", _("Slurm account")


class TeamIdentity(models.Model):
    """A name a scheduler or a GPU process carries (a unix user, a Slurm account) and the team (and
    project) its usage belongs to. Admins edit these."""

    kind = models.CharField(_("kind"), max_length=16, choices=IdentityKind.choices)
    name = models.CharField(_("name"), max_length=100)
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="identities", verbose_name=_("team"))
    project = models.ForeignKey(
        "teams.Project", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("project")
    )

    class Meta:
        ordering = ["kind", "name"]
        verbose_name = _("team identity")
        verbose_name_plural = _("team identities")
        constraints = [models.UniqueConstraint(fields=["kind", "name"], name="identity_unique_name")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name} → {self.team}"


class ObservedScanState(models.Model):
    """How far the observed-usage scan has read one node's samples (cluster/jobs/observed/)."""

    node = models.OneToOneField(
        "cluster.Node", on_delete=models.CASCADE, primary_key=True, related_name="observed_scan", verbose_name=_("node")
    )
    scanned_to = models.DateTimeField(_("scanned to"), help_text=_("Newest sample time whose processes were read."))
    scanned_at = models.DateTimeField(_("scanned at"), auto_now=True)

    class Meta:
        verbose_name = _("observed-usage scan state")
        verbose_name_plural = _("observed-usage scan states")

    def __str__(self) -> str:
        return f"{self.node_id} to {self.scanned_to:%Y-%m-%d %H:%M:%S}"
