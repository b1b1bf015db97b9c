"""The usage report (issue 6, DESIGN.md §4): card-hours per team, project, GPU model, node or GPU over any
window ``[start, end)``, that add up.

**Window.** ``start`` and ``end`` are aware datetimes on whole minutes (the finest resolution stored),
``end`` after ``start``, at most 400 days apart; anything else is refused with :class:`UsageReportRefused`
(a ``ValueError`` naming the field). The business days lying wholly inside the window are read from the
daily aggregates (``DailyUsage``, ``DailyUnplacedUsage``), summed by PostgreSQL with GROUP BY: a fixed
number of queries whatever the number of days, GPUs or teams. The partial edges, from ``start`` to the
first whole day and from the end of the last whole day to ``end``, are computed live
(:func:`~accounting.usage.services.usage_of_window`, :func:`~accounting.usage.services.unplaced_of_window`), exact to the
minute; a window that holds no whole business day (one within a day, say) is computed live throughout.
Nothing after ``now``'s minute is counted: the live parts stop there and no day after now's is read (the
day holding now is read from its aggregates, which the aggregation keeps current every few minutes).

**Groupings** (``by``, one of :data:`BY_CHOICES`):

- ``team``: one row per team, with its ``cost_centre``. ``card_hours_allocated`` = busy + idle +
  unmeasured, where unmeasured includes the team's *unplaced* usage (jobs whose GPUs are not known).
  ``project`` and ``gpu_model`` are empty, and so are unallocated, down and capacity: they belong to GPUs,
  not to teams.
- ``project``: one row per (team, project); ``project`` is empty for the team's usage without a project.
- Usage held by no team (processes observed on a GPU that no job maps to a team) is a row whose ``team`` is
  empty; only admins, finance and the command line see it.
- ``gpu_model``, ``node``, ``gpu``: the five GPU states, every figure filled, team and project empty;
  capacity = busy + idle + unmeasured + unallocated + down. Unplaced usage is in no GPU's states (its GPUs
  are not known), so these rows leave it out: their allocated total is the teams' less the unplaced
  card-hours. ``by="node"`` and ``by="gpu"`` add one key column after ``gpu_model`` (see
  :func:`report_columns`): ``node`` (the hostname) or ``gpu`` ("hostname/index"); ``gpu_model`` then names
  the node's models (", "-joined when it has several) or the GPU's.

Rows hold only what has usage, sorted by team name and project name (usage without a team or project
last), model short name, hostname, or hostname and GPU index.

**Figures.** Card-hours are ``Decimal`` with 4 places, converted once from integer ticks so that each
row adds up exactly (:func:`accounting.usage.figures.row_figures`).

**data_complete_to** (:func:`accounting.usage.selectors.data_complete_to`): how far the figures can be
trusted; the cluster's watermark on team, project and model rows and on the report, the node's on node
and GPU rows.

**pending_buckets** (:func:`pending_buckets`): work the worker has not done yet that overlaps the window:
dirty minute and hour rollup buckets plus usage change marks (``UsageDirty``). Until it is done, the
figures after ``pending_from`` may change (samples not rolled up read as unmeasured or unallocated, days
not re-aggregated as they were). The command prints it as a warning; the API gives both fields in JSON
and an ``X-Cardhour-Pending-Buckets`` header on downloads. An import finishes this work itself unless
``--defer`` (accounting/usage/replay.py).

**Scoping** (DESIGN.md §2): ``user=None`` (the command line) sees everything; admin and finance every
team. Leads and engineers see team and project rows of their own teams only, never another team's nor
the unattributed row. Model, node and GPU rows are cluster-wide figures with no team in them: every
signed-in role sees them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property

from django.db import connection
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from accounting.models import DailyUnplacedUsage, DailyUsage, UsageDirty
from accounting.money.exports import json_value, rows_as_json
from accounting.usage.figures import row_figures
from accounting.usage.selectors import data_complete_to
from accounting.usage.services import unplaced_of_window, usage_of_window
from accounting.usage.states import ALLOCATED_STATES, UNMEASURED
from cluster.models import DirtyBucket, Gpu
from cluster.telemetry.dirty_marks import floor_minute
from core.timeutils import business_day_bounds, business_day_of, business_today, business_zone
from teams.models import Project, Team
from teams.selectors import visible_team_ids

BY_CHOICES = ("team", "project", "gpu_model", "node", "gpu")
GPU_GROUPINGS = ("gpu_model", "node", "gpu")
COLUMNS = [
    "start", "end", "team", "cost_centre", "project", "gpu_model", "card_hours_allocated", "card_hours_busy",
    "card_hours_idle", "card_hours_unmeasured", "card_hours_unallocated", "card_hours_down", "capacity_card_hours",
    "data_complete_to",
]
TIME_COLUMNS = ("start", "end", "data_complete_to")
MAX_SPAN = timedelta(days=400)


class UsageReportRefused(ValueError):
    """A report parameter that breaks a rule: ``field`` names it, ``message`` says the rule."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class UsageReport:
    """The report's table: ``rows`` are dicts keyed by ``columns``; ``data_complete_to`` the cluster's watermark;
    ``pending_buckets`` the work not yet done over the window ``[start, end)``, after ``pending_from`` (see the
    module docstring; read on first use, one query, so pages that do not show it do not pay for it)."""

    columns: list[str]
    rows: list[dict]
    data_complete_to: datetime | None
    start: datetime | None = None
    end: datetime | None = None

    @cached_property
    def _pending(self) -> tuple[int, datetime | None]:
        return pending_buckets(start=self.start, end=self.end) if self.start is not None else (0, None)

    @property
    def pending_buckets(self) -> int:
        return self._pending[0]

    @property
    def pending_from(self) -> datetime | None:
        return self._pending[1]

    def as_json(self) -> dict:
        """The JSON answer of the API and of ``usage_report --format json``: columns, rows, data_complete_to,
        pending_buckets and pending_from."""
        body = rows_as_json(self.columns, self.rows, data_complete_to=self.data_complete_to)
        body["pending_buckets"] = self.pending_buckets
        body["pending_from"] = json_value(self.pending_from, business_zone())
        return body


# ---- pure helpers ---------------------------------------------------------------------------------------

def report_columns(by: str) -> list[str]:
    """:data:`COLUMNS`, with the key column ``node`` or ``gpu`` after ``gpu_model`` for those groupings."""
    if by not in ("node", "gpu"):
        return list(COLUMNS)
    at = COLUMNS.index("gpu_model") + 1
    return [*COLUMNS[:at], by, *COLUMNS[at:]]


def window_problems(*, start: datetime, end: datetime) -> list[tuple[str, str]]:
    """(field, message) for each rule ``[start, end)`` breaks; empty when it is a valid report window."""
    problems = []
    for field, moment in (("start", start), ("end", end)):
        if timezone.is_naive(moment):
            problems.append((field, _("A time needs a UTC offset: write ISO-8601 such as 2026-11-01T00:00:00+08:00.")))
        elif moment.astimezone(UTC).second or moment.microsecond:
            problems.append((field, _("Must be on a whole minute (seconds 00): usage is stored by the minute.")))
    if problems:
        return problems
    if end <= start:
        problems.append(("end", _("Must be after start.")))
    elif end - start > MAX_SPAN:
        problems.append(("end", _("At most %(days)d days after start.") % {"days": MAX_SPAN.days}))
    return problems


def check_report(*, start: datetime, end: datetime, by: str) -> None:
    """Raise :class:`UsageReportRefused` for the first rule the parameters break."""
    if by not in BY_CHOICES:
        raise UsageReportRefused("by", _("Must be one of %(choices)s.") % {"choices": ", ".join(BY_CHOICES)})
    for field, message in window_problems(start=start, end=end):
        raise UsageReportRefused(field, message)


def whole_days_and_edges(start: datetime, end: datetime) -> tuple[tuple[date, date] | None, list[tuple]]:
    """((first, last) business days wholly inside ``[start, end)`` or None, [the partial edges as (lo, hi)])."""
    first = business_day_of(start)
    if business_day_bounds(first)[0] < start:
        first += timedelta(days=1)
    last = business_day_of(end)
    if business_day_bounds(last)[1] > end:
        last -= timedelta(days=1)
    if first > last:
        return None, [(start, end)]
    lo, hi = business_day_bounds(first)[0], business_day_bounds(last)[1]
    edges = [(a, b) for a, b in ((start, lo), (hi, end)) if a < b]
    return (first, last), edges


# ---- reads ------------------------------------------------------------------------------------------------

_PENDING_SQL = f"""
    WITH rollups AS (
        SELECT bucket FROM {DirtyBucket._meta.db_table}
        WHERE bucket < %(end)s
          AND bucket + CASE WHEN level = 'hour' THEN interval '1 hour' ELSE interval '1 minute' END > %(start)s
    ), marks AS (
        -- an open range (a running job) has no end yet: it reaches every window after its start
        SELECT lo FROM {UsageDirty._meta.db_table} WHERE lo < %(end)s AND (hi IS NULL OR hi > %(start)s)
    )
    SELECT (SELECT count(*) FROM rollups) + (SELECT count(*) FROM marks),
           least((SELECT min(bucket) FROM rollups), (SELECT min(lo) FROM marks))
"""  # noqa: S608 (table names from model metadata; values are bound)


def pending_buckets(*, start: datetime, end: datetime) -> tuple[int, datetime | None]:
    """(dirty rollup buckets + usage change marks overlapping ``[start, end)``, the earliest instant in the
    window they concern or None), in one query."""
    with connection.cursor() as cursor:
        cursor.execute(_PENDING_SQL, {"start": start, "end": end})
        count, earliest = cursor.fetchone()
    return count, (max(earliest, start) if earliest is not None else None)


_SQL_KEYS = {
    "team": ("team_id",), "project": ("team_id", "project_id"), "gpu_model": ("gpu__model_id",),
    "node": ("gpu__node_id",), "gpu": ("gpu_id",),
}


@dataclass(frozen=True)
class _GpuInfo:
    node_id: int
    hostname: str
    index: int
    model_id: int
    model: str


def _gpu_table() -> dict[int, _GpuInfo]:
    rows = Gpu.objects.filter(mig_parent__isnull=True).values_list(
        "pk", "node_id", "node__hostname", "index", "model_id", "model__short_name")
    return {pk: _GpuInfo(*rest) for pk, *rest in rows}


def _gpu_key(by: str, gpu_id: int, gpus: dict[int, _GpuInfo]) -> Hashable:
    if by == "gpu":
        return gpu_id
    info = gpus[gpu_id]
    return info.model_id if by == "gpu_model" else info.node_id


def _add_days(out: dict, by: str, first: date, last: date) -> None:
    """Sum the daily aggregates of ``[first, last]`` by the grouping's key and state, in SQL."""
    keys = _SQL_KEYS[by]
    usage = DailyUsage.objects.filter(day__gte=first, day__lte=last)
    if by not in GPU_GROUPINGS:
        usage = usage.filter(state__in=ALLOCATED_STATES)
    for *key, state, ticks in usage.values_list(*keys, "state").annotate(ticks=Sum("ticks")).order_by():
        out[key[0] if len(key) == 1 else tuple(key)][state] += ticks
    if by in GPU_GROUPINGS:
        return  # unplaced usage is in no GPU's states
    unplaced = DailyUnplacedUsage.objects.filter(day__gte=first, day__lte=last)
    for *key, ticks in unplaced.values_list(*keys).annotate(ticks=Sum("ticks")).order_by():
        out[key[0] if len(key) == 1 else tuple(key)][UNMEASURED] += ticks


def _add_live(out: dict, by: str, start: datetime, end: datetime, now: datetime, gpus) -> None:
    """Add ``[start, end)`` computed from the inputs, up to ``now``'s minute."""
    for (gpu_id, state, team_id, project_id), ticks in usage_of_window(start=start, end=end, now=now).items():
        if by in GPU_GROUPINGS:
            out[_gpu_key(by, gpu_id, gpus)][state] += ticks
        elif state in ALLOCATED_STATES:
            out[team_id if by == "team" else (team_id, project_id)][state] += ticks
    if by in GPU_GROUPINGS:
        return
    unplaced = unplaced_of_window(start=start, end=min(end, floor_minute(now)), now=now)
    for (team_id, project_id, _model_id), ticks in unplaced.items():
        out[team_id if by == "team" else (team_id, project_id)][UNMEASURED] += ticks


def _collect(*, start, end, by, user, now) -> tuple[dict[Hashable, Counter], dict[int, _GpuInfo]]:
    check_report(start=start, end=end, by=by)
    gpu_level = by in GPU_GROUPINGS
    if user is not None and not user.is_authenticated:
        return {}, {}
    gpus = _gpu_table() if gpu_level else {}
    out: dict[Hashable, Counter] = defaultdict(Counter)
    days, edges = whole_days_and_edges(start, end)
    if days is not None:
        first, last = days[0], min(days[1], business_today(now=now))
        if first <= last:
            _add_days(out, by, first, last)
    for lo, hi in edges:
        _add_live(out, by, lo, hi, now, gpus)
    out = {key: ticks for key, ticks in out.items() if any(ticks.values())}
    if not gpu_level:
        visible = visible_team_ids(user)
        if visible is not None:
            out = {key: ticks for key, ticks in out.items() if (key if by == "team" else key[0]) in visible}
    return out, gpus


def usage_report_ticks(*, start: datetime, end: datetime, by: str, user=None,
                       now: datetime | None = None) -> dict[Hashable, Counter]:
    """The report's exact figures before rounding: {key: Counter(state → ticks)}. The key is the team id
    (``team``), (team id, project id) (``project``), the GPU model id, node id or GPU id; unplaced usage is
    in ``unmeasured``. Two adjacent windows' ticks add up to those of the window they make."""
    ticks, _gpus = _collect(start=start, end=end, by=by, user=user, now=now or timezone.now())
    return ticks


def usage_report(*, start: datetime, end: datetime, by: str, user=None, now: datetime | None = None) -> UsageReport:
    """Card-hours over ``[start, end)`` by ``by``, as ``user`` may see them (see the module docstring)."""
    now = now or timezone.now()
    ticks, gpus = _collect(start=start, end=end, by=by, user=user, now=now)
    cluster_complete, node_complete = data_complete_to(now=now)
    columns = report_columns(by)
    base = dict.fromkeys(columns)
    base.update(start=start, end=end, data_complete_to=cluster_complete)
    if by in GPU_GROUPINGS:
        rows = _gpu_rows(by, ticks, gpus, base, node_complete)
    else:
        rows = _team_rows(by, ticks, base)
    return UsageReport(columns=columns, rows=[row for _key, row in sorted(rows, key=lambda item: item[0])],
                       data_complete_to=cluster_complete, start=start, end=end)


def _last(name):
    """Sort key putting missing names (no team, no project) last."""
    return (name is None, (name or "").casefold(), name or "")


def _team_rows(by: str, ticks: dict, base: dict) -> list[tuple]:
    team_ids = {key if by == "team" else key[0] for key in ticks} - {None}
    teams = {pk: (name, cc) for pk, name, cc in Team.objects.filter(pk__in=team_ids).values_list(
        "pk", "name", "cost_centre")}
    projects = {}
    if by == "project":
        project_ids = {key[1] for key in ticks} - {None}
        projects = dict(Project.objects.filter(pk__in=project_ids).values_list("pk", "name"))
    rows = []
    for key, state_ticks in ticks.items():
        team_id, project_id = (key, None) if by == "team" else key
        team, cost_centre = teams.get(team_id, (None, None))
        project = projects.get(project_id)
        row = {**base, "team": team, "cost_centre": cost_centre, "project": project,
               **row_figures(state_ticks, gpu_level=False)}
        rows.append(((_last(team), _last(project)), row))
    return rows


def _gpu_rows(by: str, ticks: dict, gpus: dict[int, _GpuInfo], base: dict, node_complete: dict) -> list[tuple]:
    models = {info.model_id: info.model for info in gpus.values()}
    nodes: dict[int, tuple[str, set[str]]] = {}
    for info in gpus.values():
        nodes.setdefault(info.node_id, (info.hostname, set()))[1].add(info.model)
    rows = []
    for key, state_ticks in ticks.items():
        row = {**base, **row_figures(state_ticks, gpu_level=True)}
        if by == "gpu_model":
            row["gpu_model"] = models[key]
            sort_key = (models[key],)
        elif by == "node":
            hostname, node_models = nodes[key]
            row.update(gpu_model=", ".join(sorted(node_models)), node=hostname,
                       data_complete_to=node_complete.get(key))
            sort_key = (hostname,)
        else:
            info = gpus[key]
            row.update(gpu_model=info.model, gpu=f"{info.hostname}/{info.index}",
                       data_complete_to=node_complete.get(info.node_id))
            sort_key = (info.hostname, info.index)
        rows.append((sort_key, row))
    return rows
