"""The generic jobs CSV (DESIGN.md §3), read into checked ``JobInput`` records (the package docstring has
what every job file shares).

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
- optional extra columns: ``name, account, partition, data_ready`` (true/false/1/0/yes/no) and
  ``data_ready_at`` (when the input data is or was ready, as the times are written; in the supported window
  but, unlike the job's times, free to lie ahead of now).
- ``state`` is one of JobState's values, any case. A run that ended (not pending or running) but has
  a start and no end is refused: its allocation would run on forever.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from cluster.jobs.imports.shared import (
    GPU_COUNT_MAX,
    STATES,
    ImportRefused,
    JobImportReport,
    Lookups,
    parse_int,
    write_checked,
)
from cluster.jobs.services import JobInput
from cluster.models import GpuModel, JobSource, JobState
from cluster.telemetry.importer import GPU_INDEX_MAX
from core.import_lines import csv_rows
from core.timewindow import check_in_window, check_job_time

__all__ = ["ImportRefused", "import_jobs_csv", "read_jobs_csv"]

CSV_REQUIRED = (
    "job_id", "user", "team", "project", "gpu_count", "gpu_model", "submit_time", "start_time", "end_time", "state",
)
CSV_OPTIONAL = (
    "node", "gpu_indices", "priority", "estimated_card_hours", "name", "account", "partition", "data_ready",
    "data_ready_at",
)
CARD_HOURS_MAX = Decimal("99999999999.999")  # Job.estimated_card_hours: 14 digits, 3 decimals
TRUE, FALSE = frozenset({"true", "t", "yes", "y", "1"}), frozenset({"false", "f", "no", "n", "0"})


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
        data_ready=(data_ready in TRUE) if data_ready else None,
        data_ready_at=check_in_window(parse_utc(cells.get("data_ready_at", ""), "data_ready_at"), field="data_ready_at"),
        state=state,
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
