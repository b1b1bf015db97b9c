"""Jobs in the API: the row a reader sees, the record a scheduler hook posts, and the list's filters.

Writes go through ``cluster.jobs.services.job_upsert``; the write serializer only reads the request, resolves
names (team, project, GPU model, node and GPU indices) and checks the rules, so every 400 names its
field. A write merges onto the stored run: fields a request leaves out keep their stored values (a
new run takes the defaults), so an epilog may post only what it learnt.

Long because the jobs API's three serializers (read, write, filters) are one page module: the
architecture rules know page code by its module name (``serializers``, ``api``, ``views``), so a second
file for the write serializer would read as domain code importing pages. Most of the length is
:class:`JobWriteSerializer`, which turns a scheduler hook's record (team, project and model names,
node and GPU indices, times) into ``job_upsert``'s keywords, merged onto the stored run.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from django.db.models import F, Prefetch
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cluster.choices import GpuStatus
from cluster.inventory.serializers import InventoryNameFields
from cluster.jobs.selectors import is_service_token, teams_writable_by
from cluster.jobs.services import JOB_FIELDS, JobInput, job_time_errors, scheduler_team
from cluster.models import (
    Allocation,
    AllocationOrigin,
    Gpu,
    GpuModel,
    IdentityKind,
    Job,
    JobSource,
    JobState,
    TeamIdentity,
)
from core.api import AwareDateTimeField, JsonText, WindowedModelSerializer
from core.timewindow import window_message
from core.units import TICKS_PER_GPU_SECOND
from teams.models import Project, Team

MAX_GPU_INDEX = 32767  # Gpu.index is a PositiveSmallIntegerField
MAX_GPU_INDICES = 256
ORDERINGS = ("submit_time", "start_time", "end_time", "gpu_count", "priority")


def decimal_text(fraction: Fraction) -> str:
    """A fraction as a plain decimal string ("1", "0.5", "2.25"); one with no finite decimal (a 1g
    slice of a 7-slice GPU) to 6 places."""
    denominator = fraction.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    value = Decimal(fraction.numerator) / Decimal(fraction.denominator)
    if denominator != 1:
        value = value.quantize(Decimal("0.000001"))
    return format(value.normalize(), "f")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": MAX_GPU_INDEX}},
            {"type": "string", "example": "0,1,2"},
        ],
        "nullable": True,
        "description": "NVML indices of the GPUs on `node`: a list, or a string such as \"0,1,2\" or \"0-3\".",
    }
)
class GpuIndicesField(serializers.Field):
    """GPU indices on a node, as a list of integers or Slurm's text ("0,1,2", "0-3")."""

    default_error_messages = {
        "invalid": _('GPU indices are a list of integers or a string such as "0,1,2" or "0-3".'),
        "too_big": _("A GPU index is at most {max}."),
        "too_many": _("At most {max} GPU indices."),
        "repeated": _("GPU index {index} is named twice."),
    }
    _part = re.compile(r"^(\d+)(?:-(\d+))?$")

    def to_internal_value(self, data) -> list[int]:
        if isinstance(data, str):
            indices = []
            for part in filter(None, (p.strip() for p in data.split(","))):
                match = self._part.match(part)
                if match is None:
                    self.fail("invalid")
                first, last = int(match[1]), int(match[2] or match[1])
                if last < first:
                    self.fail("invalid")
                if last > MAX_GPU_INDEX:
                    self.fail("too_big", max=MAX_GPU_INDEX)
                if last - first >= MAX_GPU_INDICES:
                    self.fail("too_many", max=MAX_GPU_INDICES)
                indices.extend(range(first, last + 1))
        elif isinstance(data, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in data):
            indices = list(data)
        else:
            self.fail("invalid")
        if any(i > MAX_GPU_INDEX for i in indices):
            self.fail("too_big", max=MAX_GPU_INDEX)
        if len(indices) > MAX_GPU_INDICES:
            self.fail("too_many", max=MAX_GPU_INDICES)
        seen = set()
        for index in indices:
            if index in seen:
                self.fail("repeated", index=index)
            seen.add(index)
        return indices

    def to_representation(self, value):
        return value


class AllocationSerializer(WindowedModelSerializer):
    gpu = serializers.SlugRelatedField(
        slug_field="uuid", read_only=True, allow_null=True, help_text=_("The GPU's UUID; null when unplaced.")
    )
    gpu_model = serializers.SerializerMethodField(help_text=_("Short name of the GPU's model."))
    share_fraction = serializers.SerializerMethodField(
        help_text=_('GPUs held, as a decimal string ("1", "0.5"); unplaced: all the job\'s GPUs.')
    )

    class Meta:
        model = Allocation
        fields = ["gpu", "gpu_model", "share", "share_fraction", "start", "end", "origin"]
        read_only_fields = fields

    def get_gpu_model(self, allocation) -> str | None:
        model = allocation.gpu.model if allocation.gpu_id else allocation.gpu_model
        return model.short_name if model else None

    def get_share_fraction(self, allocation) -> str:
        return decimal_text(Fraction(allocation.share, TICKS_PER_GPU_SECOND))


class JobSerializer(WindowedModelSerializer):
    """A job run as the API shows it."""

    job_id = serializers.CharField(source="external_id", read_only=True, help_text=_("The scheduler's job id."))
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    gpu_model = serializers.SlugRelatedField(slug_field="short_name", read_only=True, allow_null=True)
    allocations = AllocationSerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id", "source", "job_id", "name", "user", "team", "project", "account", "partition", "priority",
            "gpu_count", "gpu_model", "estimated_card_hours", "data_ready", "data_ready_at", "state",
            "submit_time", "start_time", "end_time", "node_list", "allocations",
        ]
        read_only_fields = fields


def with_allocations(jobs):
    """Jobs with what a row shows, in three queries however many rows."""
    allocations = Allocation.objects.select_related("gpu__model", "gpu_model").order_by("start", "gpu__index", "pk")
    return jobs.select_related("team", "project", "gpu_model").prefetch_related(
        Prefetch("allocations", queryset=allocations)
    )


def stored_facts(job: Job) -> dict:
    """A stored run's facts as ``JobInput`` keywords, its scheduler-placed GPUs included."""
    placed = [a.gpu for a in job.allocations.all() if a.origin == AllocationOrigin.SCHEDULER and a.gpu_id]
    facts = {name: getattr(job, name) for name in JOB_FIELDS}
    return {
        **facts, "source": job.source, "external_id": job.external_id, "start_time": job.start_time,
        "gpus": placed or None,
    }


def gpu_total(gpus: list[Gpu]) -> Decimal:
    total = sum((Fraction(gpu.share, TICKS_PER_GPU_SECOND) for gpu in gpus), Fraction(0))
    return (Decimal(total.numerator) / Decimal(total.denominator)).quantize(Decimal("0.001"))


class WritableSourceField(serializers.ChoiceField):
    """The sources a client may write: all but ``observed`` (the system's), so the schema's enum says so."""

    def to_internal_value(self, data):
        if data == JobSource.OBSERVED:
            raise serializers.ValidationError(_("Observed jobs are written by the system, not through the API."))
        return super().to_internal_value(data)


class JobWriteSerializer(JsonText, InventoryNameFields, serializers.Serializer):
    """A job run as a scheduler hook posts it (``POST``) or a person corrects it (``PATCH``).

    ``validated_data["job"]`` is the ``JobInput`` for ``job_upsert``: the stored run's facts with the
    request's fields on top.
    """

    KEY_FIELDS = (("source", "source"), ("job_id", "external_id"), ("start_time", "start_time"))

    source = WritableSourceField(
        choices=[choice for choice in JobSource.choices if choice[0] != JobSource.OBSERVED], default=JobSource.API,
        help_text=_("Where the job comes from (default api). Observed jobs are the system's: not writable."),
    )
    job_id = serializers.CharField(source="external_id", max_length=200, help_text=_("The scheduler's job id."))
    name = serializers.CharField(max_length=300, required=False, allow_blank=True)
    user = serializers.CharField(max_length=100, required=False, allow_blank=True)
    team = serializers.SlugRelatedField(
        slug_field="slug", queryset=Team.objects.all(), required=False,
        error_messages={"does_not_exist": _("Unknown team “{value}”.")},
        help_text=_("Team slug. Left out on a new run: the team its Slurm account or unix user maps to "
                    "(team identities), else the team whose slug is the account. A lead writes only the teams "
                    "they lead."),
    )
    project = serializers.CharField(
        max_length=50, required=False, allow_blank=True, allow_null=True, help_text=_("Project slug in the team.")
    )
    account = serializers.CharField(max_length=100, required=False, allow_blank=True)
    partition = serializers.CharField(max_length=100, required=False, allow_blank=True)
    priority = serializers.IntegerField(required=False, allow_null=True, min_value=-(2**31), max_value=2**31 - 1)
    gpu_count = serializers.DecimalField(
        max_digits=9, decimal_places=3, min_value=Decimal(0), required=False,
        error_messages={"min_value": _("A GPU count must not be negative.")},
        help_text=_("GPUs requested; may be fractional (a shared GPU). With gpu_indices: their number."),
    )
    gpu_model = serializers.CharField(
        max_length=100, required=False, allow_blank=True, allow_null=True,
        help_text=_("Short name (H200) or NVML name (NVIDIA H200); with gpu_indices: the GPUs' model by default."),
    )
    estimated_card_hours = serializers.DecimalField(
        max_digits=14, decimal_places=3, min_value=Decimal(0), required=False, allow_null=True,
        error_messages={"min_value": _("Estimated card-hours must not be negative.")},
    )
    data_ready = serializers.BooleanField(required=False, allow_null=True)
    data_ready_at = AwareDateTimeField(
        required=False, allow_null=True,
        help_text=_("When the job's input data is (or was) ready; may lie ahead. Empty: unknown, or ready from "
                    "the start."),
    )
    state = serializers.ChoiceField(choices=JobState.choices, required=False)
    submit_time = AwareDateTimeField(required=False, allow_null=True)
    start_time = AwareDateTimeField(
        required=False, allow_null=True, help_text=_("Empty: never started. Part of the run's key.")
    )
    end_time = AwareDateTimeField(required=False, allow_null=True, help_text=_("Empty: still running."))
    node_list = serializers.CharField(max_length=500, required=False, allow_blank=True)
    node = serializers.CharField(
        max_length=253, required=False, allow_blank=True, allow_null=True, write_only=True,
        help_text=_("Hostname of the node the job ran on (sets node_list when that is empty)."),
    )
    gpu_indices = GpuIndicesField(
        required=False, allow_null=True, write_only=True,
        help_text=_("GPU indices on node: the job's allocations are placed on those GPUs. Empty: unplaced."),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")  # none while the schema is generated
        self.writable_teams = teams_writable_by(request) if request is not None else Team.objects.none()
        self.fields["team"].queryset = self.writable_teams  # another team's slug reads as unknown

    def validate(self, attrs):
        errors: dict[str, list[str]] = {}
        job = self.instance if self.instance is not None else self._stored_run(attrs)
        taken = False  # the key is another team's run: answered as a missing one until the rest is valid
        if self.instance is None and job is not None and not self.writable_teams.filter(pk=job.team_id).exists():
            job, taken = None, True
        if self.instance is not None:
            for name, attr in self.KEY_FIELDS:
                if attr in attrs and attrs[attr] != getattr(self.instance, attr):
                    errors[name] = [_("is part of the run's key (source, job_id, start_time): PATCH cannot change "
                                      "it; POST the other run instead.")]
        facts = stored_facts(job) if job is not None else {"team": None, "start_time": None}
        facts.update({name: value for name, value in attrs.items() if name not in ("node", "gpu_indices")})
        if facts["team"] is None:
            facts["team"], project = self._team_of_identity(facts.get("account", ""), facts.get("user", ""))
            if facts["team"] is None:
                errors["team"] = [_("is required: give a team slug, or map the job's Slurm account or unix user "
                                    "to a team (team identities).")]
            elif "project" not in attrs:
                facts["project"] = project
        if "project" in attrs:
            facts["project"] = self._project(attrs["project"], facts["team"], errors)
        errors.update({name: [window_message(error)]
                       for name, error in job_time_errors(attrs, now=timezone.now()).items()})
        self._place(attrs, facts, errors)
        if taken and not errors:  # the only answer a global key cannot hide; never whose run it is
            errors["job_id"] = [_("This key (source, job_id, start_time) is taken: post the run under another key.")]
        if errors:
            raise serializers.ValidationError(errors)
        data = JobInput(**facts)
        problems = data.problems()
        if problems:
            raise serializers.ValidationError({name: [rule] for name, rule in problems.items()})
        return {"job": data}

    def _stored_run(self, attrs) -> Job | None:
        key = {"source": attrs["source"], "external_id": attrs["external_id"], "start_time": attrs.get("start_time")}
        return with_allocations(Job.objects.filter(**key)).first()

    def _team_of_identity(self, account: str, user: str) -> tuple[Team | None, Project | None]:
        """The team of a run posted without one (the Slurm hooks send none), found as ``import_sacct``
        finds it, so both ways in agree: the account's identity, else the team whose slug is the account;
        then the unix user's identity. A team the caller may not write is not found."""
        identities = TeamIdentity.objects.values_list("team_id", "project_id")

        def team_by_slug(slug):
            team_pk = Team.objects.filter(slug=slug).values_list("pk", flat=True).first()
            return (team_pk, None) if team_pk else None

        found = scheduler_team(
            account, user,
            by_account=lambda name: identities.filter(kind=IdentityKind.SLURM_ACCOUNT, name=name).first(),
            by_slug=team_by_slug,
            by_user=lambda name: identities.filter(kind=IdentityKind.UNIX_USER, name=name).first(),
        )
        team = self.writable_teams.filter(pk=found[0]).first() if found else None
        if team is None:
            return None, None
        return team, Project.objects.filter(pk=found[1], team=team).first() if found[1] else None

    def _project(self, slug, team, errors) -> Project | None:
        if not slug or team is None:
            return None  # without a team, "team: is required" says what is wrong
        project = Project.objects.filter(team=team, slug=slug).first()
        if project is not None:
            return project
        elsewhere = Project.objects.filter(slug=slug, team__in=self.writable_teams).select_related("team").first()
        if elsewhere is not None:
            errors["project"] = [_("Project “%(project)s” belongs to team “%(other)s”, not “%(team)s”.") % {
                "project": slug, "other": elsewhere.team.slug, "team": team.slug}]
        else:
            errors["project"] = [_("Unknown project “%(project)s” in team “%(team)s”.") % {
                "project": slug, "team": team.slug}]
        return None

    def _place(self, attrs, facts, errors) -> None:
        """Resolve node + gpu_indices into the GPUs the run held, and keep count and model consistent."""
        node = attrs.get("node")
        if node is not None and not attrs.get("node_list") and not facts.get("node_list"):
            facts["node_list"] = node.hostname
        placing = "gpu_indices" in attrs
        if placing:
            indices = attrs["gpu_indices"] or []
            facts["gpus"] = self._gpus(node, indices, facts.get("gpus"), errors) if indices else None
        gpus = facts.get("gpus")
        if not gpus:
            return
        total = gpu_total(gpus)
        if "gpu_count" in attrs and attrs["gpu_count"] != total:
            errors["gpu_count"] = [_("is %(count)s, but the job holds %(total)s GPUs on its node.") % {
                "count": attrs["gpu_count"].normalize(), "total": total.normalize()}]
        elif placing:
            facts["gpu_count"] = total
        models = {gpu.model for gpu in gpus}
        if "gpu_model" in attrs and attrs["gpu_model"] is not None and models != {attrs["gpu_model"]}:
            errors["gpu_model"] = [_("is %(model)s, but the job's GPUs are %(models)s.") % {
                "model": attrs["gpu_model"].short_name, "models": ", ".join(sorted(m.short_name for m in models))}]
        elif placing and "gpu_model" not in attrs and len(models) == 1:
            facts["gpu_model"] = models.pop()

    def _gpus(self, node, indices, placed, errors) -> list[Gpu] | None:
        if node is None:
            nodes = {gpu.node for gpu in placed or []}
            if len(nodes) != 1:
                errors["node"] = [_("is required with gpu_indices: name the node those GPUs are on.")]
                return None
            node = nodes.pop()
        # A whole GPU at each index; a live one before a missing or retired one that held the index earlier.
        rank = {GpuStatus.ACTIVE: 0, GpuStatus.MAINTENANCE: 0, GpuStatus.MISSING: 1}
        candidates = Gpu.objects.filter(node=node, index__in=indices, mig_parent__isnull=True).select_related(
            "model", "node"
        )
        by_index: dict[int, Gpu] = {}
        for gpu in sorted(candidates, key=lambda g: (rank.get(g.status, 2), -g.pk)):
            by_index.setdefault(gpu.index, gpu)
        unknown = [str(index) for index in indices if index not in by_index]
        if unknown:
            errors["gpu_indices"] = [_("Node %(node)s has no GPU %(indices)s.") % {
                "node": node.hostname, "indices": ", ".join(unknown)}]
            return None
        return [by_index[index] for index in indices]


class JobFilterSerializer(serializers.Serializer):
    """The job list's query parameters; every one optional, an unknown value is a 400 naming it."""

    team = serializers.CharField(required=False, allow_blank=True, help_text=_("Team slug."))
    project = serializers.CharField(required=False, allow_blank=True, help_text=_("Project slug."))
    user = serializers.CharField(required=False, allow_blank=True, help_text=_("Scheduler or unix user name."))
    state = serializers.ChoiceField(choices=JobState.choices, required=False, allow_blank=True)
    gpu_model = serializers.CharField(required=False, allow_blank=True, help_text=_("GPU model short name."))
    source = serializers.ChoiceField(choices=JobSource.choices, required=False, allow_blank=True)
    started_after = AwareDateTimeField(required=False, allow_null=True, help_text=_("Runs that started at or after."))
    started_before = AwareDateTimeField(required=False, allow_null=True, help_text=_("Runs that started before."))
    ordering = serializers.ChoiceField(
        choices=[*ORDERINGS, *(f"-{name}" for name in ORDERINGS)], required=False, allow_blank=True,
        help_text=_("Sort key; a leading '-' sorts descending. Default: newest submitted first."),
    )

    def validate_team(self, slug):
        if slug and not self._teams().filter(slug=slug).exists():
            raise serializers.ValidationError(_("Unknown team “%(team)s”.") % {"team": slug})
        return slug

    def validate_project(self, slug):
        if slug and not Project.objects.filter(team__in=self._teams(), slug=slug).exists():
            raise serializers.ValidationError(_("Unknown project “%(project)s”.") % {"project": slug})
        return slug

    def validate_gpu_model(self, name):
        if name and not GpuModel.objects.filter(short_name=name).exists():
            raise serializers.ValidationError(_("Unknown GPU model “%(name)s”.") % {"name": name})
        return name

    def validate(self, attrs):
        after, before = attrs.get("started_after"), attrs.get("started_before")
        if after is not None and before is not None and before <= after:
            raise serializers.ValidationError({"started_before": [_("must be later than started_after.")]})
        return attrs

    def _teams(self):
        request = self.context["request"]
        return Team.objects.all() if is_service_token(request) else Team.objects.visible_to(request.user)

    def filter(self, jobs):
        """Apply the validated filters and ordering; call after ``is_valid()``."""
        data = self.validated_data
        lookups = {"team__slug": "team", "project__slug": "project", "user": "user", "state": "state",
                   "gpu_model__short_name": "gpu_model", "source": "source",
                   "start_time__gte": "started_after", "start_time__lt": "started_before"}
        for lookup, name in lookups.items():
            if data.get(name) not in (None, ""):
                jobs = jobs.filter(**{lookup: data[name]})
        if data.get("ordering"):
            name = data["ordering"].lstrip("-")
            key = F(name).desc(nulls_last=True) if data["ordering"].startswith("-") else F(name).asc(nulls_last=True)
            jobs = jobs.order_by(key, "-id")
        return jobs
