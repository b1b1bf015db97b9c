"""Jobs from files: the generic jobs CSV (DESIGN.md §3) here, Slurm's sacct output in cluster.sacct.

A file is read into ``JobInput`` records, the very records ``job_upsert`` takes (teams, projects, GPU
models and GPUs resolved), checked by the same rules (``JobInput.problems()``, plus the column limits
the database would refuse), then written set-based by ``cluster.job_write.jobs_write`` rather than by
one ``job_upsert`` per row, which costs several queries a job. Both give the same rows (tested).

Choices of the generic CSV, beyond DESIGN.md §3:
- ``team`` is a team's slug; ``project`` a project's slug within that team (empty: none).
- ``gpu_model`` is a GPU model's short name or NVML name, any case; empty with placed GPUs of one
  model: that model.
- ``gpu_indices`` lists NVML indices on ``node`` (``0,1``, ``0;1``, ``0 1``, ``0-3``); one whole GPU
  each, so their number must equal ``gpu_count``; a fractional ``gpu_count`` is unplaced. A ``node``
  without indices: unplaced, of the node's GPU model when the row names none.
- optional extra columns: ``name, account, partition, data_ready`` (true/false/1/0/yes/no).
- ``state`` is one of JobState's values, any case. A run that ended (not pending or running) but has
  a start and no end is refused: its allocation would run on forever.
- rows are applied in file order, as upserting them one by one would be: of two rows of one run the
  later wins, and a started row adopts the run's pending row (job_upsert's rules); a row whose
  effect a later row replaces counts as skipped.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.db import transaction

from accounting.models import Project, Team
from cluster.choices import GpuStatus
from cluster.importer import ImportRefused
from cluster.job_write import jobs_write
from cluster.jobs import JobInput
from cluster.models import Gpu, GpuModel, Job, JobSource, JobState, Node

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
    unmapped_accounts: Counter = field(default_factory=Counter)  # sacct account → rows rejected
    teams_created: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"rows read {self.rows_read}, imported {self.imported}, updated {self.updated}, unchanged "
            f"{self.unchanged}, skipped {sum(self.skipped.values())}, rejected {len(self.rejected)}"
        ]
        if self.skipped:
            lines.append("skipped: " + ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items())))
        if self.unmapped_accounts:
            lines.append("unmapped accounts (rows rejected; map them with a Slurm account identity, or --create-teams): "
                         + ", ".join(f"{account or '(empty)'} ({n})" for account, n in sorted(self.unmapped_accounts.items())))
        if self.teams_created:
            lines.append("teams created: " + ", ".join(self.teams_created))
        return "\n".join(lines)

    def refusal(self) -> str:
        shown = "; ".join(f"line {line}: {reason}" for line, reason in self.rejected[:20])
        more = f" (and {len(self.rejected) - 20} more)" if len(self.rejected) > 20 else ""
        return f"--strict: {len(self.rejected)} bad row(s), nothing imported: {shown}{more}"


class Lookups:
    """Names in files → rows, each loaded once per import (a 100,000-row file names a few dozen)."""

    def __init__(self) -> None:
        self.teams = {team.slug: team for team in Team.objects.all()}
        self.projects = {(p.team_id, p.slug): p for p in Project.objects.all()}
        self.models: dict[str, GpuModel] = {}
        for model in GpuModel.objects.all():
            self.models[model.name.lower()] = model
            self.models.setdefault(model.short_name.lower(), model)
        self._node_gpus: dict[str, dict[int, Gpu] | None] = {}

    def model(self, text: str) -> GpuModel | None:
        """A GPU model by short or NVML name, any case (``_`` and ``-`` read as spaces for NVML names)."""
        key = text.strip().lower()
        return self.models.get(key) or self.models.get(key.replace("_", " ").replace("-", " "))

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


# --- cells ---------------------------------------------------------------------------------------

def parse_utc(text: str, column: str) -> datetime | None:
    """ISO-8601 with an offset, or epoch seconds, as an aware UTC datetime; empty: None."""
    if not text:
        return None
    try:
        seconds = Decimal(text)
    except InvalidOperation:
        seconds = None
    try:
        if seconds is not None and seconds.is_finite():
            whole = int(seconds)
            return datetime.fromtimestamp(whole, UTC) + timedelta(microseconds=int((seconds - whole) * 1_000_000))
        moment = datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{column}: {text!r} is not ISO-8601 or epoch seconds") from None
    if moment.tzinfo is None:
        raise ValueError(f"{column}: {text!r} needs a UTC offset (e.g. 2026-11-02T08:00:00+00:00)")
    return moment.astimezone(UTC)


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
        if not (low.isdigit() and (not high or high.isdigit())):
            raise ValueError(f"gpu_indices: {text!r} is not a list of GPU indices (e.g. 0,1 or 0-3)")
        indices.extend(range(int(low), int(high or low) + 1))
    if len(set(indices)) != len(indices):
        raise ValueError(f"gpu_indices: {text!r} names a GPU twice")
    return indices


# --- the generic CSV -----------------------------------------------------------------------------

def read_jobs_csv(path: Path, *, source: str, lookups: Lookups, report: JobImportReport) -> Iterator[tuple[int, JobInput]]:
    """The file's jobs, line by line; bad rows go to ``report.rejected`` with their reason."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        header = [name.strip() for name in next(reader, [])]
        missing = [name for name in CSV_REQUIRED if name not in header]
        if missing:
            raise ImportRefused(
                f"the header lacks the required column(s) {', '.join(missing)} (needs {', '.join(CSV_REQUIRED)})"
            )
        where = {name: header.index(name) for name in (*CSV_REQUIRED, *CSV_OPTIONAL) if name in header}
        next_line = reader.line_num + 1
        for row in reader:
            line, next_line = next_line, reader.line_num + 1  # a quoted cell may span lines
            if not any(cell.strip() for cell in row):
                continue
            report.rows_read += 1
            cells = {name: row[i].strip() if i < len(row) else "" for name, i in where.items()}
            try:
                yield line, _csv_job(cells, source=source, lookups=lookups)
            except ValueError as error:
                report.rejected.append((line, str(error)))


def _csv_job(cells: dict[str, str], *, source: str, lookups: Lookups) -> JobInput:
    team = lookups.teams.get(cells["team"])
    if team is None:
        raise ValueError(f"team: no team with slug {cells['team']!r}" if cells["team"] else "team: is required")
    project = None
    if cells["project"]:
        project = lookups.projects.get((team.pk, cells["project"]))
        if project is None:
            raise ValueError(f"project: team {team.slug} has no project with slug {cells['project']!r}")
    gpu_count = parse_decimal(cells["gpu_count"], "gpu_count", GPU_COUNT_MAX)
    if gpu_count is None:
        raise ValueError("gpu_count: is required (0 for a job without GPUs)")
    model = None
    if cells["gpu_model"]:
        model = lookups.model(cells["gpu_model"])
        if model is None:
            raise ValueError(f"gpu_model: {cells['gpu_model']!r} is no GPU model's short or NVML name")
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
        source=source, external_id=cells["job_id"], start_time=parse_utc(cells["start_time"], "start_time"),
        team=team, project=project, name=cells.get("name", ""), user=cells["user"],
        account=cells.get("account", ""), partition=cells.get("partition", ""),
        priority=parse_int(cells.get("priority", ""), "priority"), gpu_count=gpu_count, gpu_model=model,
        estimated_card_hours=parse_decimal(cells.get("estimated_card_hours", ""), "estimated_card_hours", CARD_HOURS_MAX),
        data_ready=(data_ready in TRUE) if data_ready else None, state=state,
        submit_time=parse_utc(cells["submit_time"], "submit_time"), end_time=parse_utc(cells["end_time"], "end_time"),
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
    elif model is not None and models != {model.pk}:
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


def write_checked(rows: Iterable[tuple[int, JobInput]], report: JobImportReport, *, strict: bool) -> None:
    """Check every row, then write the good ones in file order (call inside a transaction).
    ``strict``: any bad row refuses the whole file (ImportRefused), after every row is checked."""
    good = []
    for line, data in rows:
        problems = import_problems(data)
        if problems:
            report.rejected.append((line, "; ".join(problems)))
        else:
            good.append(data)
    report.rejected.sort()
    if strict and report.rejected:
        raise ImportRefused(report.refusal())
    counts = jobs_write(good)
    report.imported, report.updated, report.unchanged = counts.created, counts.updated, counts.unchanged
    if counts.superseded:
        report.skipped["same run again later in the file"] += counts.superseded


def import_jobs_csv(path: Path, *, source: str = JobSource.CSV, strict: bool = False) -> JobImportReport:
    """Import the generic jobs CSV; bad rows are reported by line, the rest kept unless ``strict``."""
    report = JobImportReport()
    with transaction.atomic():
        rows = read_jobs_csv(path, source=source, lookups=Lookups(), report=report)
        write_checked(rows, report, strict=strict)
    return report
