"""Daily usage aggregates (DESIGN.md §4): every GPU's business day split into the five states, in
integer ticks, per team and project; the same by hour (per team) and by holder (job or booking, for
the daily board); unplaced allocations per team, project and GPU model; and the queue of ranges whose
aggregates must be recomputed (filled by database triggers, so every writer of rollups, allocations,
holds and node statuses marks what it touched)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class UsageState(models.TextChoices):
    BUSY = "busy", _("Busy")
    IDLE = "idle", _("Idle")
    UNMEASURED = "unmeasured", _("Unmeasured")
    UNALLOCATED = "unallocated", _("Unallocated")
    DOWN = "down", _("Down")


class RefinedTicks(models.Model):
    """The refinements of a row's busy or idle ticks (DESIGN.md §4, "Beyond the duty cycle"; issue 16):
    parts of ``ticks``, never a state of their own (``accounting.usage.states.REFINES``)."""

    sm_ticks = models.BigIntegerField(_("busy ticks with SM data"), default=0, help_text=_(
        "Busy ticks of minutes with an SM activity (NVML GPM); none where the GPU has no GPM."))
    shallow_ticks = models.BigIntegerField(_("shallow busy ticks"), default=0, help_text=_(
        "Busy ticks of minutes whose SM activity was under CARDHOUR_SHALLOW_SM_PCT."))
    low_power_ticks = models.BigIntegerField(_("busy ticks at idle power"), default=0, help_text=_(
        "Busy ticks of minutes under the GPU model's idle-power floor (CARDHOUR_IDLE_POWER_FLOOR_W)."))
    memory_held_ticks = models.BigIntegerField(_("idle ticks with memory held"), default=0, help_text=_(
        "Idle ticks of minutes whose GPU used more memory than CARDHOUR_MEMORY_HELD_MIB."))

    class Meta:
        abstract = True


def refinement_constraints(prefix: str) -> list[models.BaseConstraint]:
    """Each refinement is part of the row's ticks, and refines the state it belongs to only."""
    return [
        models.CheckConstraint(
            condition=models.Q(sm_ticks__gte=0, shallow_ticks__gte=0, low_power_ticks__gte=0, memory_held_ticks__gte=0,
                               sm_ticks__lte=models.F("ticks"), shallow_ticks__lte=models.F("sm_ticks"),
                               low_power_ticks__lte=models.F("ticks"), memory_held_ticks__lte=models.F("ticks")),
            name=f"{prefix}_refined_within_ticks",
        ),
        models.CheckConstraint(
            condition=models.Q(state="busy") | models.Q(sm_ticks=0, shallow_ticks=0, low_power_ticks=0),
            name=f"{prefix}_busy_refinements_on_busy",
        ),
        models.CheckConstraint(
            condition=models.Q(state="idle") | models.Q(memory_held_ticks=0), name=f"{prefix}_idle_refinement_on_idle",
        ),
    ]


class DailyUsage(RefinedTicks):
    """Ticks of one GPU's business day in one state, held by one team and project (or none)."""

    day = models.DateField(_("day"), help_text=_("Business day (CARDHOUR_BUSINESS_TIME_ZONE)."))
    gpu = models.ForeignKey("cluster.Gpu", on_delete=models.PROTECT, related_name="+", verbose_name=_("GPU"))
    state = models.CharField(_("state"), max_length=16, choices=UsageState.choices)
    team = models.ForeignKey(
        "teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("team")
    )
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("project"),
    )
    ticks = models.BigIntegerField(_("ticks"), help_text=_("1/840,000 GPU-second each."))

    class Meta:
        verbose_name = _("daily usage")
        verbose_name_plural = _("daily usage")
        indexes = [models.Index(fields=["day", "team"]), models.Index(fields=["gpu", "day"])]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "gpu", "state", "team", "project"], nulls_distinct=False, name="daily_usage_one_row",
            ),
            models.CheckConstraint(condition=models.Q(ticks__gt=0), name="daily_usage_positive"),
            models.CheckConstraint(condition=models.Q(state__in=UsageState.values), name="daily_usage_known_state"),
            models.CheckConstraint(
                condition=models.Q(state__in=["busy", "idle", "unmeasured"]) | models.Q(team__isnull=True),
                name="daily_usage_team_only_when_allocated",
            ),
            *refinement_constraints("daily_usage"),
        ]

    def __str__(self) -> str:
        return f"{self.day} gpu {self.gpu_id} {self.state} {self.ticks}"


class DailyUnplacedUsage(models.Model):
    """Ticks of one business day held by a team's jobs whose GPUs are not known: allocated and
    unmeasured for the team, in no GPU's states (DESIGN.md §4)."""

    day = models.DateField(_("day"))
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="+", verbose_name=_("team"))
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("project"),
    )
    gpu_model = models.ForeignKey(
        "cluster.GpuModel", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("GPU model"),
    )
    ticks = models.BigIntegerField(_("ticks"))

    class Meta:
        verbose_name = _("daily unplaced usage")
        verbose_name_plural = _("daily unplaced usage")
        indexes = [models.Index(fields=["day", "team"])]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "team", "project", "gpu_model"], nulls_distinct=False, name="daily_unplaced_one_row",
            ),
            models.CheckConstraint(condition=models.Q(ticks__gt=0), name="daily_unplaced_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.day} team {self.team_id} unplaced {self.ticks}"


class UsageDirty(models.Model):
    """A time range whose daily aggregates must be recomputed: of one GPU, of a node's GPUs, or (both
    empty) of unplaced usage. Inserted by triggers on the tables usage is computed from."""

    gpu_id = models.BigIntegerField(null=True, blank=True)
    node_id = models.BigIntegerField(null=True, blank=True)
    lo = models.DateTimeField()
    hi = models.DateTimeField(null=True, blank=True, help_text=_(
        "End of the range (exclusive); empty for a range still open (a running job): up to the application's "
        "now when it is recomputed."))
    marked_at = models.DateTimeField(auto_now_add=True, help_text=_(
        "When the mark was written (the database's clock; shown to people, never decides anything)."))

    class Meta:
        verbose_name = _("usage to recompute")
        verbose_name_plural = _("usage to recompute")

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} node {self.node_id} {self.lo}–{self.hi}"


class UsageAggregateState(models.Model):
    """The one row saying up to where the aggregation has run (open days are recomputed each run)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    aggregated_to = models.DateTimeField(null=True, blank=True, help_text=_("The 'now' of the last complete run."))
    backfill_from = models.DateTimeField(null=True, blank=True, help_text=_(
        "While older history is being loaded (the demo's older months, or an operator's backfill): where it "
        "begins. Empty when none is loading."))
    backfill_before = models.DateTimeField(null=True, blank=True, help_text=_(
        "…and where it ends: figures from before this moment are incomplete until it is done."))

    class Meta:
        verbose_name = _("usage aggregation state")
        verbose_name_plural = _("usage aggregation state")

    def __str__(self) -> str:
        return f"aggregated to {self.aggregated_to}"


class DailyEnergy(models.Model):
    """Energy one GPU drew in one business day while held by one team and project (none: unallocated),
    shared among a minute's holders by their share of the GPU; in millijoules."""

    day = models.DateField(_("day"))
    gpu = models.ForeignKey("cluster.Gpu", on_delete=models.PROTECT, related_name="+", verbose_name=_("GPU"))
    team = models.ForeignKey(
        "teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("team")
    )
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("project"),
    )
    millijoules = models.BigIntegerField(_("energy (mJ)"))

    class Meta:
        verbose_name = _("daily energy")
        verbose_name_plural = _("daily energy")
        indexes = [models.Index(fields=["day", "team"])]
        constraints = [
            models.UniqueConstraint(fields=["day", "gpu", "team", "project"], nulls_distinct=False,
                                    name="daily_energy_one_row"),
            models.CheckConstraint(condition=models.Q(millijoules__gt=0), name="daily_energy_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.day} gpu {self.gpu_id} team {self.team_id} {self.millijoules} mJ"


class HourlyUsage(models.Model):
    """Ticks of one GPU in one state, held by one team (or none), over one hour of a business day: the
    day's rows sum exactly, per GPU, state and team, to its daily usage (over projects)."""

    day = models.DateField(_("day"), help_text=_("Business day (CARDHOUR_BUSINESS_TIME_ZONE)."))
    hour = models.DateTimeField(_("hour"), help_text=_(
        "Start of the UTC hour, or the day's start where the business day begins inside an hour."))
    gpu = models.ForeignKey(
        "cluster.Gpu", on_delete=models.PROTECT, related_name="+", verbose_name=_("GPU"), db_index=False,
    )
    state = models.CharField(_("state"), max_length=16, choices=UsageState.choices)
    team = models.ForeignKey(
        "teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("team"),
        db_index=False,
    )
    ticks = models.BigIntegerField(_("ticks"), help_text=_("1/840,000 GPU-second each."))

    class Meta:
        verbose_name = _("hourly usage")
        verbose_name_plural = _("hourly usage")
        # The unique index leads with the day: it serves reading a day; (gpu, day) serves a GPU's hours.
        indexes = [models.Index(fields=["gpu", "day"])]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "hour", "gpu", "state", "team"], nulls_distinct=False, name="hourly_usage_one_row",
            ),
            models.CheckConstraint(condition=models.Q(ticks__gt=0), name="hourly_usage_positive"),
            models.CheckConstraint(condition=models.Q(state__in=UsageState.values), name="hourly_usage_known_state"),
            models.CheckConstraint(
                condition=models.Q(state__in=["busy", "idle", "unmeasured"]) | models.Q(team__isnull=True),
                name="hourly_usage_team_only_when_allocated",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} gpu {self.gpu_id} {self.state} {self.ticks}"


class DailyHolderUsage(RefinedTicks):
    """Allocated ticks of one business day held by one job or booking on one GPU (none: an unplaced job)
    in one state: per day, GPU, state, team and project the holders sum to the daily usage."""

    day = models.DateField(_("day"))
    gpu = models.ForeignKey(
        "cluster.Gpu", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("GPU"),
        db_index=False,
    )
    # A deleted job or booking takes its rows along; the trigger on its allocations or holds marks the
    # day for recomputing, which rewrites the rest.
    job = models.ForeignKey(
        "cluster.Job", on_delete=models.CASCADE, null=True, blank=True, related_name="+", verbose_name=_("job"),
    )
    booking = models.ForeignKey(
        "cluster.Booking", on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        verbose_name=_("booking"),
    )
    team = models.ForeignKey(
        "teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("team"),
        db_index=False,
    )
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("project"), db_index=False,
    )
    state = models.CharField(_("state"), max_length=16, choices=UsageState.choices)
    ticks = models.BigIntegerField(_("ticks"), help_text=_("1/840,000 GPU-second each."))

    class Meta:
        verbose_name = _("daily holder usage")
        verbose_name_plural = _("daily holder usage")
        indexes = [models.Index(fields=["day", "team"]), models.Index(fields=["gpu", "day"])]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "gpu", "job", "booking", "state"], nulls_distinct=False, name="daily_holder_one_row",
            ),
            models.CheckConstraint(condition=models.Q(ticks__gt=0), name="daily_holder_positive"),
            models.CheckConstraint(
                condition=models.Q(state__in=["busy", "idle", "unmeasured"]), name="daily_holder_allocated_state",
            ),
            models.CheckConstraint(
                condition=models.Q(job__isnull=False, booking__isnull=True)
                | models.Q(job__isnull=True, booking__isnull=False),
                name="daily_holder_one_holder",
            ),
            models.CheckConstraint(
                condition=models.Q(gpu__isnull=False) | models.Q(job__isnull=False, state="unmeasured"),
                name="daily_holder_unplaced_is_a_job_unmeasured",
            ),
            *refinement_constraints("daily_holder"),
        ]

    def __str__(self) -> str:
        holder = f"job {self.job_id}" if self.job_id else f"booking {self.booking_id}"
        return f"{self.day} gpu {self.gpu_id} {holder} {self.state} {self.ticks}"


class HourlyModelUsage(models.Model):
    """The hourly usage summed over GPUs by GPU model (issue 15: the monthly profile reads a month of it
    instead of a row per GPU-hour): per day, hour, model, state and team, the sum of the day's
    ``HourlyUsage`` (its GPUs in service are :class:`HourlyModelCapacity`). Rewritten for the whole day each
    time the day is aggregated (``accounting.usage.detail.write_model_sums``)."""

    day = models.DateField(_("day"))
    hour = models.DateTimeField(_("hour"))
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, related_name="+",
                                  verbose_name=_("GPU model"), db_index=False)
    state = models.CharField(_("state"), max_length=16, choices=UsageState.choices)
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
                             verbose_name=_("team"), db_index=False)
    ticks = models.BigIntegerField(_("ticks"))

    class Meta:
        verbose_name = _("hourly usage by GPU model")
        verbose_name_plural = _("hourly usage by GPU model")
        constraints = [
            models.UniqueConstraint(fields=["day", "hour", "gpu_model", "state", "team"], nulls_distinct=False,
                                    name="hourly_model_usage_one_row"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} model {self.gpu_model_id} {self.state} {self.ticks}"


class HourlyModelCapacity(models.Model):
    """The whole GPUs (no MIG slice) of a model with usage rows in an hour of a business day: its GPUs in
    service then. Rewritten with :class:`HourlyModelUsage`."""

    day = models.DateField(_("day"))
    hour = models.DateTimeField(_("hour"))
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, related_name="+",
                                  verbose_name=_("GPU model"), db_index=False)
    gpus = models.PositiveIntegerField(_("GPUs"))

    class Meta:
        verbose_name = _("hourly GPUs in service by model")
        verbose_name_plural = _("hourly GPUs in service by model")
        constraints = [
            models.UniqueConstraint(fields=["day", "hour", "gpu_model"], name="hourly_model_capacity_one_row"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:%M} model {self.gpu_model_id} {self.gpus} GPUs"


class DailyModelUsage(RefinedTicks):
    """The daily usage summed over GPUs by GPU model: per day, model, state, team and project, the sum of the
    day's ``DailyUsage``. The boards' tiles and the week and month views read it where no pool or node
    narrows them (issue 15). Rewritten with :class:`HourlyModelUsage`."""

    day = models.DateField(_("day"))
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, related_name="+",
                                  verbose_name=_("GPU model"), db_index=False)
    state = models.CharField(_("state"), max_length=16, choices=UsageState.choices)
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
                             verbose_name=_("team"), db_index=False)
    project = models.ForeignKey("teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
                                verbose_name=_("project"), db_index=False)
    ticks = models.BigIntegerField(_("ticks"))

    class Meta:
        verbose_name = _("daily usage by GPU model")
        verbose_name_plural = _("daily usage by GPU model")
        constraints = [
            models.UniqueConstraint(fields=["day", "gpu_model", "state", "team", "project"], nulls_distinct=False,
                                    name="daily_model_usage_one_row"),
            *refinement_constraints("daily_model_usage"),
        ]

    def __str__(self) -> str:
        return f"{self.day} model {self.gpu_model_id} {self.state} {self.ticks}"


class DailyModelCapacity(models.Model):
    """The GPUs of a model with daily usage on a business day (its GPUs in service that day)."""

    day = models.DateField(_("day"))
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, related_name="+",
                                  verbose_name=_("GPU model"), db_index=False)
    gpus = models.PositiveIntegerField(_("GPUs"))

    class Meta:
        verbose_name = _("daily GPUs in service by model")
        verbose_name_plural = _("daily GPUs in service by model")
        constraints = [models.UniqueConstraint(fields=["day", "gpu_model"], name="daily_model_capacity_one_row")]

    def __str__(self) -> str:
        return f"{self.day} model {self.gpu_model_id} {self.gpus} GPUs"
