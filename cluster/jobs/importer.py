"""Jobs from files: the generic jobs CSV (DESIGN.md §3) here, Slurm's sacct output in cluster.jobs.sacct.

A file is read into ``JobInput`` records, the very records ``job_upsert`` takes (teams, projects, GPU
models and GPUs resolved), checked by the same rules (``JobInput.problems()``, plus the column limits
the database would refuse), then written set-based by ``cluster.jobs.write.jobs_write`` rather than by
one ``job_upsert`` per row, which costs several queries a job. Both give the same rows (tested).

Choices of the generic CSV, beyond DESIGN.md §3:
- ``team`` is a team's slug; ``project`` a project's slug within that team (empty: none). With
  ``create_teams`` (``--create-teams``) a slug that names no team or project creates it (name = slug,
  cost centre from the slug), reported in the summary.
- ``gpu_model`` is a GPU model's NVML name, short name or alias, any case
  (:class:`cluster.inventory.sync.GpuModelCatalogue`); a name that matches none creates a model of that
  name (memory unknown), reported, never a rejected row. Empty with placed GPUs of one model: that model.
- ``gpu_indices`` lists NVML indices on ``node`` (``0,1``, ``0;1``, ``0 1``, ``0-3``, each at most
  ``GPU_INDEX_MAX``); one whole GPU each, so their number must equal ``gpu_count``; a fractional
  ``gpu_count`` is unplaced. A ``node`` without indices: unplaced, of the node's GPU model when the row
  names none.
- times lie in the supported window and at most a day after now (core.timewindow.check_job_time).
- nothing is created for a rejected row: teams, projects and GPU models a row names are made only
  when the row is written (``Lookups.save_new``).
- optional extra columns: ``name, account, partition, data_ready`` (true/false/1/0/yes/no).
- ``state`` is one of JobState's values, any case. A run that ended (not pending or running) but has
  a start and no end is refused: its allocation would run on forever.
- rows are applied in file order, as upserting them one by one would be: of two rows of one run the
  later wins, and a started row adopts the run's pending row (job_upsert's rules); a row whose
  effect a later row replaces counts as skipped.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from cluster.choices import GpuStatus
from cluster.inventory.sync import GpuModelCatalogue, GpuModelNames, check_gpu_model_name
from cluster.jobs.services import JobInput
from cluster.jobs.write import jobs_write
from cluster.models import Gpu, GpuModel, Job, JobSource, JobState, Node, TeamIdentity
from cluster.telemetry.importer import GPU_INDEX_MAX, ImportRefused, listed
from core.import_lines import csv_rows
from core.timewindow import check_job_time
from teams.models import Project, Team

__all__ = ["ImportRefused", "JobImportReport", "Lookups", "import_jobs_csv", "read_jobs_csv", "write_checked"]

CSV_REQUIRED = (
    "job_id", "user", "team", "project", "gpu_count", "gpu_model", "submit_time", "start_time", "end_time", "state",
)
CSV_OPTIONAL = (
    "node", "gpu_indices", "priority", "estimated_card_hours", "name", "account", "partition", "data_ready",
)
STATES = frozenset(JobState.values)  # a constant: JobState.values builds a new list at each use
FINISHED = STATES - {JobState.PENDING, JobState.RUNNING}
GPU_COUNT_MAX = Decimal("999999.999")  # Job.gpu_count: 9 digits, 3 decimals
CARD_HOURS_MAX = Decimal("99999999999.999")  # Job.estimated_card_hours: 14 digits, 3 decimals
INT4 = 2**31 - 1
TEXT_LIMITS = {
    name: Job._meta.get_field(name).max_length
    for name in ("external_id", "name", "user", "account", "partition", "node_list")
}
TRUE, FALSE = frozenset({"true", "t", "yes", "y", "1"}), frozenset({"false", "f", "no", "n", "0"})


@dataclass
class JobImportReport:
    """What an import did, row by row where it matters (line numbers count the header as line 1)."""

    rows_read: int = 0
    imported: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason → rows
    rejected: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[tuple[int, str]] = field(default_factory=list)  # rows kept with a caveat (bytes replaced)
    unmapped_accounts: Counter = field(default_factory=Counter)  # sacct account → rows rejected
    unmapped_users: Counter = field(default_factory=Counter)  # sacct user (no account) → rows rejected
    default_team_rows: int = 0  # sacct rows sent to --default-team
    default_team: str = ""
    teams_created: list[str] = field(default_factory=list)
    projects_created: list[str] = field(default_factory=list)  # "team/project"
    models_created: list[str] = field(default_factory=list)
    encoding: str = "utf-8"

    def summary(self) -> str:
        lines = [
            f"rows read {self.rows_read}, imported {self.imported}, updated {self.updated}, unchanged "
            f"{self.unchanged}, skipped {sum(self.skipped.values())}, rejected {len(self.rejected)}"
        ]
        if self.encoding != "utf-8":
            lines.append(f"read as {self.encoding.upper()} (it had a byte-order mark)")
        if self.skipped:
            lines.append("skipped: " + ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items())))
        if self.unmapped_accounts:
            lines.append("unmapped accounts (rows rejected; map them with a Slurm account identity, or --create-teams): "
                         + ", ".join(f"{account or '(empty)'} ({n})" for account, n in sorted(self.unmapped_accounts.items()))
                         + "; or send such rows to one team with --default-team SLUG")
        if self.unmapped_users:
            lines.append("unmapped users (no account; rows rejected; map them with a unix user identity, or "
                         "--default-team): " + ", ".join(f"{user or '(empty)'} ({n})" for user, n in sorted(self.unmapped_users.items())))
        if self.default_team_rows:
            lines.append(f"rows sent to the default team {self.default_team}: {self.default_team_rows}")
        if self.teams_created:
            lines.append("teams created: " + listed(self.teams_created))
        if self.projects_created:
            lines.append("projects created: " + listed(self.projects_created))
        if self.models_created:
            lines.append("GPU models created (memory unknown; if one is a known model under another name, add a GPU "
                         "model alias in the admin before importing): " + listed(self.models_created))
        return "\n".join(lines)

    def refusal(self) -> str:
        shown = "; ".join(f"line {line}: {reason}" for line, reason in self.rejected[:20])
        more = f" (and {len(self.rejected) - 20} more)" if len(self.rejected) > 20 else ""
        return f"--strict: {len(self.rejected)} bad row(s), nothing imported: {shown}{more}"


class Lookups:
    """Names in files → rows, each loaded once per import (a 100,000-row file names a few dozen).

    Teams, projects and GPU models that a file names and that do not exist come back unsaved (pk
    None); :meth:`save_new` saves those the written rows use, so a rejected row creates nothing."""

    def __init__(self, *, create_teams: bool = False) -> None:
        self.create_teams = create_teams
        self.teams = {team.slug: team for team in Team.objects.all()}
        self.projects = {(p.team.slug, p.slug): p for p in Project.objects.select_related("team")}
        self.models = GpuModelCatalogue()
        self.model_names = GpuModelNames()
        self.identities: list[tuple[str, str, Team]] = []  # (kind, name, team) to record for saved teams
        self._node_gpus: dict[str, dict[int, Gpu] | None] = {}

    def model(self, text: str) -> GpuModel:
        """A GPU model by NVML name, short name or alias, any case (``_`` and ``-`` read as spaces for NVML
        names); an unknown name gives an unsaved model of that name, created by :meth:`save_new`."""
        found = self.models.match(text)
        if found is None:
            name = check_gpu_model_name(text)
            found = GpuModel(name=name, short_name=name[:32], memory_mib=0)
            self.models.add(name, found)
        return found

    def team(self, slug: str, *, column: str = "team") -> Team:
        """The team with this slug; with ``create_teams`` an unsaved new one, else a ValueError."""
        if not slug:
            raise ValueError(f"{column}: is required")
        team = self.teams.get(slug)
        if team is None:
            if not self.create_teams:
                raise ValueError(f"{column}: no team with slug {slug!r} (--create-teams creates it)")
            if not SLUG.fullmatch(slug):
                raise ValueError(f"{column}: {slug[:60]!r} is not a slug (letters, digits, '-' and '_', at most 50)")
            team = self.teams[slug] = new_team(slug, slug)
        return team

    def project(self, team: Team, slug: str) -> Project | None:
        """The team's project with this slug (empty: none); with ``create_teams`` an unsaved new one."""
        if not slug:
            return None
        project = self.projects.get((team.slug, slug))
        if project is None:
            if not self.create_teams:
                raise ValueError(f"project: team {team.slug} has no project with slug {slug!r}")
            if not SLUG.fullmatch(slug):
                raise ValueError(f"project: {slug[:60]!r} is not a slug (letters, digits, '-' and '_', at most 50)")
            project = self.projects[(team.slug, slug)] = Project(team=team, slug=slug, name=slug)
        return project

    def save_new(self, jobs: Iterable[JobInput], report: JobImportReport) -> None:
        """Save the unsaved teams, projects and GPU models that ``jobs`` use (and the identities of
        saved teams), listing them in ``report``; point the jobs at the saved GPU models."""
        saved_models: dict[int, GpuModel] = {}
        for data in jobs:
            team = data.team
            if team is not None and team.pk is None:
                if Team.objects.filter(name=team.name).exists():
                    team.name = f"{team.name} (imported)"[:100]
                team.save()
                report.teams_created.append(team.slug)
            project = data.project
            if project is not None and project.pk is None:
                project.team = project.team  # the team may have been saved just now: take its id
                if Project.objects.filter(team=project.team, name__iexact=project.name).exists():
                    project.name = f"{project.name} ({project.slug})"[:100]
                project.save()
                report.projects_created.append(f"{project.team.slug}/{project.slug}")
            model = data.gpu_model
            if model is not None and model.pk is None:
                if id(model) not in saved_models:
                    saved_models[id(model)] = self.model_names.resolve(model.name)
                data.gpu_model = saved_models[id(model)]
        for kind, name, team in self.identities:
            if team.pk is not None:
                TeamIdentity.objects.get_or_create(kind=kind, name=name, defaults={"team": team})
        report.models_created = list(self.model_names.created)

    def node_gpus(self, hostname: str) -> dict[int, Gpu] | None:
        """A node's whole GPUs by NVML index (None: unknown node). Where a retired GPU and its
        replacement share an index, the one in service wins."""
        if hostname not in self._node_gpus:
            node = Node.objects.filter(hostname=hostname).first()
            gpus = None
            if node is not None:
                # As the jobs API ranks them: in service, then missing, then retired; newest first.
                rank = {GpuStatus.ACTIVE: 0, GpuStatus.MAINTENANCE: 0, GpuStatus.MISSING: 1}
                gpus = {}
                found = Gpu.objects.filter(node=node, mig_parent__isnull=True).select_related("model")
                for gpu in sorted(found, key=lambda g: (rank.get(g.status, 2), -g.pk)):
                    gpus.setdefault(gpu.index, gpu)
            self._node_gpus[hostname] = gpus
        return self._node_gpus[hostname]


SLUG = re.compile(r"[-a-zA-Z0-9_]{1,50}")


def new_team(slug: str, name: str) -> Team:
    """An unsaved team for a name a file gives (its cost centre derived from the name)."""
    cost_centre = re.sub(r"[^A-Za-z0-9._/-]", "-", name).lstrip("._/-")[:32] or slug[:32]
    return Team(name=name[:100], slug=slug, cost_centre=cost_centre)


# --- cells ---------------------------------------------------------------------------------------

def parse_utc(text: str, column: str) -> datetime | None:
    """ISO-8601 with an offset, or epoch seconds, as an aware UTC datetime; empty: None."""
    if not text:
        return None
    try:
        seconds = Decimal(text)
    except InvalidOperation:
        seconds = None
    shown = repr(text[:40])
    try:
        if seconds is not None and seconds.is_finite():
            whole = int(seconds)
            return datetime.fromtimestamp(whole, UTC) + timedelta(microseconds=int((seconds - whole) * 1_000_000))
        moment = datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        if seconds is not None:
            raise ValueError(f"{column}: {shown} is outside the supported window "
                             "2000-01-01T00:00:00Z … 2100-01-01T00:00:00Z") from None
        raise ValueError(f"{column}: {shown} is not ISO-8601 or epoch seconds") from None
    if moment.tzinfo is None:
        raise ValueError(f"{column}: {shown} needs a UTC offset (e.g. 2026-11-02T08:00:00+00:00)")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{column}: {shown} is outside the supported window "
                         "2000-01-01T00:00:00Z … 2100-01-01T00:00:00Z") from None


def parse_decimal(text: str, column: str, highest: Decimal) -> Decimal | None:
    if not text:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{column}: {text!r} is not a number") from None
    if not value.is_finite() or abs(value) > highest:
        raise ValueError(f"{column}: {text!r} is out of range (at most {highest})")
    return value


def parse_int(text: str, column: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{column}: {text!r} is not a whole number") from None
    if abs(value) > INT4:
        raise ValueError(f"{column}: {text!r} is out of range")
    return value


def parse_indices(text: str) -> list[int]:
    """NVML indices: ``0,1``, ``0;1``, ``0 1``, ``0|1`` or ranges ``0-3``; each at most once."""
    indices: list[int] = []
    for part in text.replace(";", ",").replace("|", ",").replace(" ", ",").split(","):
        if not part:
            continue
        low, _dash, high = part.partition("-")
        if not (low.isascii() and low.isdigit() and (not high or (high.isascii() and high.isdigit()))):
            raise ValueError(f"gpu_indices: {text[:40]!r} is not a list of GPU indices (e.g. 0,1 or 0-3)")
        if len(high or low) > 4 or int(high or low) > GPU_INDEX_MAX:  # checked before a range is expanded
            raise ValueError(f"gpu_indices: {text[:40]!r} names an index beyond {GPU_INDEX_MAX}, the highest on a node")
        indices.extend(range(int(low), int(high or low) + 1))
    if len(set(indices)) != len(indices):
        raise ValueError(f"gpu_indices: {text!r} names a GPU twice")
    return indices


# --- the generic CSV -----------------------------------------------------------------------------

def read_jobs_csv(path: Path, *, source: str, lookups: Lookups, report: JobImportReport,
                  now: datetime | None = None) -> Iterator[tuple[int, JobInput]]:
    """The file's jobs, line by line; bad rows go to ``report.rejected`` with their reason; a row whose
    bytes were replaced (not UTF-8) is noted in ``report.warnings``, kept if it still reads."""
    now = now or timezone.now()
    for line, raw in csv_rows(path, required=CSV_REQUIRED, report=report, error_prefix="csv"):
        cells = {name: raw[name].strip() for name in (*CSV_REQUIRED, *CSV_OPTIONAL) if name in raw}
        try:
            yield line, _csv_job(cells, source=source, lookups=lookups, now=now)
        except ValueError as error:
            report.rejected.append((line, str(error)))


def _csv_job(cells: dict[str, str], *, source: str, lookups: Lookups, now: datetime) -> JobInput:
    gpu_count = parse_decimal(cells["gpu_count"], "gpu_count", GPU_COUNT_MAX)
    if gpu_count is None:
        raise ValueError("gpu_count: is required (0 for a job without GPUs)")
    times = {column: check_job_time(parse_utc(cells[column], column), field=column, now=now)
             for column in ("submit_time", "start_time", "end_time")}
    team = lookups.team(cells["team"])
    project = lookups.project(team, cells["project"])
    model = None
    if cells["gpu_model"]:
        try:
            model = lookups.model(cells["gpu_model"])
        except ValueError as error:
            raise ValueError(f"gpu_model: {error}") from None
    state = cells["state"].lower()
    if state not in STATES:
        raise ValueError(f"state: {cells['state']!r} is not one of {', '.join(JobState.values)}")
    node, gpus = cells.get("node", ""), None
    if node or cells.get("gpu_indices"):
        gpus, model = _placed(node, cells.get("gpu_indices", ""), gpu_count, model, lookups)
    data_ready = cells.get("data_ready", "").lower()
    if data_ready and data_ready not in TRUE | FALSE:
        raise ValueError(f"data_ready: {cells['data_ready']!r} is not true or false")
    return JobInput(
        source=source, external_id=cells["job_id"], start_time=times["start_time"],
        team=team, project=project, name=cells.get("name", ""), user=cells["user"],
        account=cells.get("account", ""), partition=cells.get("partition", ""),
        priority=parse_int(cells.get("priority", ""), "priority"), gpu_count=gpu_count, gpu_model=model,
        estimated_card_hours=parse_decimal(cells.get("estimated_card_hours", ""), "estimated_card_hours", CARD_HOURS_MAX),
        data_ready=(data_ready in TRUE) if data_ready else None, state=state,
        submit_time=times["submit_time"], end_time=times["end_time"],
        node_list=node, gpus=gpus,
    )


def _placed(node: str, indices_text: str, gpu_count: Decimal, model: GpuModel | None, lookups: Lookups):
    """The GPUs a row names, and its model (taken from them when the row names none)."""
    if not node:
        raise ValueError("gpu_indices: needs a node")
    known = lookups.node_gpus(node)
    if known is None:
        raise ValueError(f"node: no node {node!r}")
    if not indices_text:  # a known node, GPUs not said: unplaced, of the node's model if it has one
        models = {gpu.model for gpu in known.values()}
        return None, model or (models.pop() if len(models) == 1 else None)
    indices = parse_indices(indices_text)
    unknown = [i for i in indices if i not in known]
    if unknown:
        raise ValueError(f"gpu_indices: node {node} has no GPU {', '.join(map(str, unknown))}")
    if gpu_count != gpu_count.to_integral_value():
        # Placed allocations hold whole GPUs (job_upsert): a share of one GPU cannot be placed yet.
        raise ValueError(f"gpu_indices: a fractional gpu_count ({gpu_count}) cannot be placed on whole GPUs; "
                         "leave node and gpu_indices empty")
    if gpu_count != len(indices):
        raise ValueError(f"gpu_indices: {len(indices)} GPU(s) named for gpu_count {gpu_count}")
    gpus = [known[i] for i in indices]
    models = {gpu.model_id for gpu in gpus}
    if model is None and len(models) == 1:
        model = gpus[0].model
    elif model is not None and (model.pk is None or models != {model.pk}):
        raise ValueError(f"gpu_model: {model.short_name}, but node {node}'s GPUs {indices_text} are "
                         f"{', '.join(sorted({g.model.short_name for g in gpus}))}")
    return gpus, model


# --- checking and writing ------------------------------------------------------------------------

def import_problems(data: JobInput) -> list[str]:
    """``JobInput.problems()`` and what the database would refuse or an import should not store."""
    problems = [f"{name}: {rule}" for name, rule in data.problems().items()]
    for name, limit in TEXT_LIMITS.items():
        if len(getattr(data, name)) > limit:
            problems.append(f"{'job_id' if name == 'external_id' else name}: longer than {limit} characters")
    if data.state in FINISHED and data.start_time is not None and data.end_time is None:
        problems.append(f"end_time: a {data.state} run that started needs an end time (empty = still running)")
    return problems


def write_checked(rows: Iterable[tuple[int, JobInput]], report: JobImportReport, *, strict: bool,
                  lookups: Lookups | None = None) -> None:
    """Check every row, then write the good ones in file order (call inside a transaction), saving first
    the new teams, projects and GPU models of ``lookups`` that they use.
    ``strict``: any bad row refuses the whole file (ImportRefused), after every row is checked."""
    good = []
    for line, data in rows:
        problems = import_problems(data)
        if problems:
            report.rejected.append((line, "; ".join(problems)))
        else:
            good.append(data)
    report.rejected.sort()
    report.warnings.sort()
    if strict and report.rejected:
        raise ImportRefused(report.refusal())
    if lookups is not None:
        lookups.save_new(good, report)
    counts = jobs_write(good)
    report.imported, report.updated, report.unchanged = counts.created, counts.updated, counts.unchanged
    if counts.superseded:
        report.skipped["same run again later in the file"] += counts.superseded


def import_jobs_csv(path: Path, *, source: str = JobSource.CSV, strict: bool = False, create_teams: bool = False,
                    now: datetime | None = None) -> JobImportReport:
    """Import the generic jobs CSV; bad rows are reported by line, the rest kept unless ``strict``.
    ``create_teams``: a team or project slug that names none creates it."""
    report = JobImportReport()
    with transaction.atomic():
        lookups = Lookups(create_teams=create_teams)
        rows = list(read_jobs_csv(path, source=source, lookups=lookups, report=report, now=now))
        write_checked(rows, report, strict=strict, lookups=lookups)
    return report
