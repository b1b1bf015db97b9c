"""The daily board's hours (issue 14): every GPU-hour of the day with its ticks per state and its mean
utilization, from the hourly usage (``HourlyUsage``) and the hour rollups, read once as integer columns
(:func:`read_day`) and summed by numpy; from it the timeline (the sum per hour), the heatmap (one row per
GPU, or at scale per node or pool: :func:`group_hours`) and the utilization bands (the allocated measured ticks of every GPU-hour pooled by its mean
utilization).

Never raw samples: the hour rollup's ``util_mean`` is the mean of the hour's minutes weighted by the
seconds they were measured (``cluster/telemetry/rollup_math.py``). An hour the aggregation has not
reached yet (the rest of today, or a day still being recomputed) is marked ``partial``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd
from django.db import connection

from accounting.models import HourlyUsage, UsageAggregateState
from accounting.usage.states import ALLOCATED_STATES, BUSY, DOWN, IDLE, UNALLOCATED
from boards.maths import BANDS, NODE_ROWS, OTHER_TEAMS, SERIES
from boards.scope import BoardScope
from cluster.inventory.holders import visible_spans_between
from cluster.models import Gpu, HourRollup, Node
from core.queries import numpy_rows
from teams.models import Team

HOUR_COLUMNS = ["gpu_id", "node", "label", "hour", *SERIES, "util", "teams", "holders", "partial"]
GROUP_COLUMNS = ["group", "gpus", "hour", *SERIES, "util_ticks", "util", "teams", "partial"]
TIMELINE_COLUMNS = ["hour", *SERIES, "capacity", "partial"]
HOUR_S = 3600
_SERIES_CODE = {state: SERIES.index(state) for state in (*ALLOCATED_STATES, UNALLOCATED, DOWN)}
_OTHER = SERIES.index(OTHER_TEAMS)
_ALLOCATED_CODES = [_SERIES_CODE[state] for state in ALLOCATED_STATES]

# The day's rows as plain integers (no timestamps: Django reads each one in Python, 24,000 of them cost
# more than the query); summed per GPU-hour by numpy, not by a GROUP BY of seven FILTERs.
_HOURLY_SQL = """
    SELECT h.gpu_id, date_part('epoch', h.hour)::bigint, (CASE h.state {states} END)::bigint, coalesce(h.team_id, 0), h.ticks
    FROM {hourly} h
    WHERE h.day = %(day)s {in_scope}
"""

_GPUS_SQL = "SELECT g.id, n.hostname, g.index, n.pool FROM {gpu} g JOIN {node} n ON n.id = g.node_id WHERE {scope}"

# The hour rollups of the day's UTC hours (a day starting inside an hour reads that hour's too).
_UTIL_SQL = """
    SELECT r.gpu_id, date_part('epoch', r.bucket)::bigint, r.util_mean
    FROM {rollup} r
    WHERE r.bucket >= date_trunc('hour', %(start)s::timestamptz) AND r.bucket < %(end)s AND r.util_covered_s > 0
      {in_scope}
"""

def _tables() -> dict:
    return {"hourly": HourlyUsage._meta.db_table, "gpu": Gpu._meta.db_table, "node": Node._meta.db_table,
            "rollup": HourRollup._meta.db_table}


def computed_to(scope: BoardScope) -> datetime:
    """Up to where the day's hourly usage is computed: the last aggregation's now (and never past now)."""
    aggregated = UsageAggregateState.objects.filter(id=1).values_list("aggregated_to", flat=True).first()
    return min(aggregated or scope.bounds[0], scope.now)


def _in_scope(column: str, where: str) -> str:
    """``AND column IN (the GPUs in scope)``, or nothing for a board of every GPU."""
    if where == "TRUE":
        return ""
    gpu, node = Gpu._meta.db_table, Node._meta.db_table
    return f"AND {column} IN (SELECT g.id FROM {gpu} g JOIN {node} n ON n.id = g.node_id WHERE {where})"  # noqa: S608 (names from model metadata; values are bound)


def _fetch(sql: str, params: dict, kinds: str) -> np.ndarray:
    with connection.cursor() as cursor:
        return numpy_rows(cursor, sql, params, kinds)


@dataclass(frozen=True)
class DayRows:
    """The day's hourly usage rows in scope, as columns (:func:`read_day`): ``code`` indexes
    :data:`SERIES` (the state as stored: never other teams), ``team`` 0 for none; ``gpus`` are
    (id, hostname, index, pool) by node and GPU index, and each row is in GPU-hour ``cell_of`` of ``cells``
    (the rank of its GPU × the number of ``hours`` + the hour's column), whose mean utilization is
    ``cell_util`` (NaN: none measured)."""

    gpus: list[tuple[int, str, int, str]]
    gpu_ids: np.ndarray
    code: np.ndarray
    team: np.ndarray
    ticks: np.ndarray
    hours: np.ndarray
    cells: np.ndarray
    cell_of: np.ndarray
    cell_util: np.ndarray

    @property
    def empty(self) -> bool:
        return not len(self.ticks)


def _pair(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Two non-negative integer columns (``low`` under 2**32) as one sortable key."""
    return high * 2**32 + low


def read_day(scope: BoardScope) -> DayRows:
    """The day's hourly usage of the GPUs in scope with each GPU-hour's mean utilization, in three queries
    (rows, GPUs, hour rollups). Each result is packed into one bytea by PostgreSQL and unpacked by numpy:
    no timestamps and no Python tuple per row (Django reads each timestamp in Python, and 36,000 of them
    cost more than the query). numpy places the rows in GPU-hours, not a GROUP BY of seven FILTERs. The
    board's hours (:func:`day_hours`), its utilization bands and the always-full candidates read these."""
    where, params = scope.gpu_sql("g", "n")
    start, end = scope.bounds
    params.update(day=scope.day, start=start, end=end)
    states = " ".join(f"WHEN '{state}' THEN {code}" for state, code in _SERIES_CODE.items())
    rows = _fetch(_HOURLY_SQL.format(states=states, in_scope=_in_scope("h.gpu_id", where), **_tables()), params, "iiiii")
    gpu_of, hour_s, code, team, ticks = rows.T
    if not len(rows):
        empty = np.array([], dtype=np.int64)
        return DayRows(gpus=[], gpu_ids=empty, code=code, team=team, ticks=ticks, hours=empty, cells=empty,
                       cell_of=empty, cell_util=np.array([]))
    with connection.cursor() as cursor:  # every GPU in scope (a few thousand at most), kept where it has rows
        cursor.execute(_GPUS_SQL.format(scope=where, **_tables()), params)
        used = set(np.unique(gpu_of).tolist())
        gpus = sorted((g for g in cursor.fetchall() if g[0] in used), key=lambda g: (g[1], g[2], g[0]))
    gpu_ids = np.array([g[0] for g in gpus], dtype=np.int64)
    by_id = np.argsort(gpu_ids)
    rank = by_id[np.searchsorted(gpu_ids[by_id], gpu_of)]
    hours, column = np.unique(hour_s, return_inverse=True)
    cells, cell_of = np.unique(rank * len(hours) + column, return_inverse=True)
    cell_gpu, cell_column = np.divmod(cells, len(hours))
    cell_util = _utilization(scope, where, params, gpu_ids[cell_gpu], hours[cell_column])
    return DayRows(gpus=gpus, gpu_ids=gpu_ids, code=code, team=team, ticks=ticks, hours=hours, cells=cells,
                   cell_of=cell_of, cell_util=cell_util)


def day_hours(scope: BoardScope, *, user, done: datetime | None = None, day: DayRows | None = None) -> pd.DataFrame:
    """One row per GPU-hour of the day in scope (:data:`HOUR_COLUMNS`; ticks per series, ``util`` the hour's
    mean utilization or NaN, ``teams`` the names of the teams holding it, ``holders`` what the viewer may
    see of the jobs and bookings in the hour; ``partial`` after ``done``, default :func:`computed_to`),
    ordered by node, GPU index and hour. Under a team filter, busy, idle and unmeasured are the team's and
    the other teams' allocated ticks are ``other_teams``. From ``day`` (:func:`read_day`, three queries,
    read here when not given), then the teams' names and the holdings (jobs, bookings): three more."""
    day = read_day(scope) if day is None else day
    if day.empty:
        return pd.DataFrame(columns=HOUR_COLUMNS)
    code, team = _seen_codes(day, scope), day.team
    series = np.zeros((len(day.cells), len(SERIES)), dtype=np.int64)
    np.add.at(series, (day.cell_of, code), day.ticks)
    cell_gpu, cell_column = np.divmod(day.cells, len(day.hours))
    cell_hour = day.hours[cell_column]
    frame = pd.DataFrame({
        "gpu_id": day.gpu_ids[cell_gpu], "node": np.array([g[1] for g in day.gpus], dtype=object)[cell_gpu],
        "label": np.array([f"{g[1]}/{g[2]}" for g in day.gpus], dtype=object)[cell_gpu],
        "hour": pd.to_datetime(cell_hour, unit="s", utc=True),
        **{key: series[:, n] for n, key in enumerate(SERIES)},
        "util": day.cell_util,
    })
    frame["partial"] = _partial(cell_hour, scope, done)
    held = np.isin(code, [*_ALLOCATED_CODES, _OTHER]) & (team > 0)
    frame["teams"] = _teams(day.cell_of[held], team[held], len(day.cells))
    frame["holders"] = _holders(scope, user, day.gpu_ids, day.hours, day.cells)
    return frame[HOUR_COLUMNS]


def _seen_codes(day: DayRows, scope: BoardScope) -> np.ndarray:
    """Each row's series code as the board shows it: under a team filter, another team's allocated ticks
    are "other teams"."""
    if scope.team_id is None:
        return day.code
    return np.where(np.isin(day.code, _ALLOCATED_CODES) & (day.team != scope.team_id), _OTHER, day.code)


def _partial(hour_s: np.ndarray, scope: BoardScope, done: datetime | None) -> np.ndarray:
    """Whether each hour (epoch seconds) ends after ``done`` (default :func:`computed_to`): still filling."""
    hour_end = np.minimum((hour_s // HOUR_S + 1) * HOUR_S, int(scope.bounds[1].timestamp()))
    return hour_end > (done or computed_to(scope)).timestamp()


def group_hours(scope: BoardScope, *, by: str, done: datetime | None = None, day: DayRows | None = None) -> pd.DataFrame:
    """One row per node-hour (``by`` ``"node"``) or pool-hour (``"pool"``) of the day in scope
    (:data:`GROUP_COLUMNS`), ordered by the node's or pool's name and the hour: ``gpus`` how many of its GPUs
    have usage that day; ticks per series summed over its GPUs (their shares of the sum are the shares of
    the group's GPU-time in each state, as :func:`day_hours` counts them); ``util`` the mean utilization of
    its GPU-hours weighted by their busy and idle ticks, over those with a utilization (``util_ticks``; NaN:
    none measured); ``teams`` the teams holding any of its GPUs in the hour; ``partial`` as :func:`day_hours`.
    No holders: a node's or pool's row names no job or user, whoever reads it. From ``day`` (:func:`read_day`),
    then one query (the teams' names)."""
    day = read_day(scope) if day is None else day
    if day.empty:
        return pd.DataFrame(columns=GROUP_COLUMNS)
    code, team = _seen_codes(day, scope), day.team
    column = 1 if by == NODE_ROWS else 3  # hostname or pool in ``day.gpus``
    groups, group_of_gpu = np.unique(np.array([g[column] for g in day.gpus], dtype=object), return_inverse=True)
    hours = len(day.hours)
    cell_gpu, cell_column = np.divmod(day.cells, hours)
    row_cell = group_of_gpu[cell_gpu[day.cell_of]] * hours + cell_column[day.cell_of]
    size = len(groups) * hours
    # bincount's float64 sums are exact here: a pool-hour of 10,000 GPUs is 3·10¹³ ticks, under 2⁵³
    series = np.rint(np.bincount(row_cell * len(SERIES) + code, weights=day.ticks, minlength=size * len(SERIES))
                     ).astype(np.int64).reshape(size, len(SERIES))
    util = day.cell_util[day.cell_of]
    measured = np.isin(code, [_SERIES_CODE[BUSY], _SERIES_CODE[IDLE]]) & ~np.isnan(util)
    util_ticks = np.bincount(row_cell[measured], weights=day.ticks[measured], minlength=size)
    util_sum = np.bincount(row_cell[measured], weights=day.ticks[measured] * util[measured], minlength=size)
    present = np.bincount(row_cell, minlength=size) > 0
    at = np.flatnonzero(present)
    compact = np.cumsum(present) - 1  # a group-hour's place among those present
    group_at, column_at = np.divmod(at, hours)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(util_ticks[at] > 0, util_sum[at] / util_ticks[at], np.nan)
    frame = pd.DataFrame({
        "group": groups[group_at], "gpus": np.bincount(group_of_gpu, minlength=len(groups))[group_at],
        "hour": pd.to_datetime(day.hours[column_at], unit="s", utc=True),
        **{key: series[at, n] for n, key in enumerate(SERIES)},
        "util_ticks": np.rint(util_ticks[at]).astype(np.int64), "util": mean,
    })
    frame["partial"] = _partial(day.hours[column_at], scope, done)
    held = np.isin(code, [*_ALLOCATED_CODES, _OTHER]) & (team > 0)
    frame["teams"] = _teams(compact[row_cell[held]], team[held], len(at))
    return frame[GROUP_COLUMNS]


def _utilization(scope: BoardScope, where: str, params: dict, cell_gpu: np.ndarray, cell_hour: np.ndarray) -> np.ndarray:
    """The hour rollup's mean utilization of each GPU-hour (its UTC hour's), NaN where none was measured."""
    util = _fetch(_UTIL_SQL.format(in_scope=_in_scope("r.gpu_id", where), **_tables()), params, "iif")
    out = np.full(len(cell_gpu), np.nan)
    if not len(util):
        return out
    keys = _pair(util[:, 0].astype(np.int64), util[:, 1].astype(np.int64) // HOUR_S)
    order = np.argsort(keys)
    keys, values = keys[order], util[order, 2]
    wanted = _pair(cell_gpu, cell_hour // HOUR_S)
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = keys[at] == wanted
    out[found] = values[at[found]]
    return out


def _grouped(cell_of: np.ndarray, value: np.ndarray, cells: int, name, *, in_row_order: bool) -> list[list]:
    """Per cell (``0 … cells - 1``), the list of ``name(v)`` for the distinct values ``v`` paired with it
    (``cell_of``, ``value``: one pair per row; listed by value, or ``in_row_order`` as first met), as shared
    lists: most GPU-hours have one team and one holder, and their cells share a list."""
    out: list[list] = [[]] * cells
    if not len(cell_of):
        return out
    pairs, first = np.unique(_pair(cell_of, value), return_index=True)  # by cell, then value
    if in_row_order:
        pairs = pairs[np.lexsort((first, pairs // 2**32))]
    of_cell, values = np.divmod(pairs, 2**32)
    starts = np.flatnonzero(np.r_[True, of_cell[1:] != of_cell[:-1]])
    sizes = np.diff(np.r_[starts, len(pairs)])
    single = starts[sizes == 1]  # most cells: one value, one list per value
    alone = {v: [name(v)] for v in np.unique(values[single]).tolist()}
    for cell, value in zip(of_cell[single].tolist(), values[single].tolist(), strict=True):
        out[cell] = alone[value]
    lists: dict[tuple, list] = {}
    for lo, size in zip(starts[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
        key = tuple(values[lo:lo + size].tolist())
        out[int(of_cell[lo])] = lists.get(key) or lists.setdefault(key, [name(v) for v in key])
    return out


def _teams(cell_of: np.ndarray, team: np.ndarray, cells: int) -> list[list[str]]:
    """The names, sorted, of the teams holding each GPU-hour (``cell_of``, ``team``: one pair per row)."""
    ids = np.unique(team)
    names = dict(Team.objects.filter(pk__in=ids.tolist()).values_list("pk", "name"))
    by_name = sorted(ids.tolist(), key=lambda pk: names.get(pk, ""))
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.searchsorted(ids, by_name)] = np.arange(len(ids))
    return _grouped(cell_of, rank[np.searchsorted(ids, team)], cells, lambda r: names.get(by_name[r], ""),
                    in_row_order=False)


def _holders(scope: BoardScope, user, gpu_ids: np.ndarray, hours: np.ndarray, cells: np.ndarray) -> list[list[str]]:
    """The visible jobs and bookings of each GPU-hour (``cells``: the rank of its GPU in ``gpu_ids`` × the
    number of ``hours`` + its column): each holding spread over the hours it overlaps (those whose
    [start, next start) meets it), listed in the order the holdings are read (by start)."""
    start, end = scope.bounds
    rank_of = {gpu_id: n for n, gpu_id in enumerate(gpu_ids.tolist())}
    labels: dict[str, int] = {}
    rank, lo, hi, label = [], [], [], []
    for gpu_id, span_start, span_end, span_label in visible_spans_between(user, list(rank_of), start=start, end=end,
                                                                          now=scope.now):
        rank.append(rank_of[gpu_id])
        lo.append(span_start)
        hi.append(span_end)
        label.append(labels.setdefault(span_label, len(labels)))
    if not rank:
        return [[]] * len(cells)
    first = np.maximum(np.searchsorted(hours, np.array(lo), side="right") - 1, 0)
    count = np.maximum(np.searchsorted(hours, np.array(hi), side="left") - first, 0)
    span_of = np.repeat(np.arange(len(rank)), count)
    column = first[span_of] + np.arange(len(span_of)) - np.repeat(np.cumsum(count) - count, count)
    cell = np.array(rank, dtype=np.int64)[span_of] * len(hours) + column
    at = np.minimum(np.searchsorted(cells, cell), len(cells) - 1)
    kept = cells[at] == cell  # the GPU-hours that have a row
    names = list(labels)
    return _grouped(at[kept], np.array(label, dtype=np.int64)[span_of[kept]], len(cells), names.__getitem__,
                    in_row_order=True)


def timeline(hours: pd.DataFrame, scope: BoardScope) -> pd.DataFrame:
    """Ticks per series and hour (:data:`TIMELINE_COLUMNS`); ``capacity`` is their sum, so every bucket adds
    up to it; an hour with no row (none yet) is left out, and ``partial`` marks an hour still filling."""
    if hours.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    grouped = hours.groupby("hour", sort=True).agg({**{s: "sum" for s in SERIES}, "partial": "max"}).reset_index()
    grouped["capacity"] = grouped[list(SERIES)].sum(axis=1)
    return grouped[TIMELINE_COLUMNS]


def utilization_bands(scope: BoardScope, *, day: DayRows | None = None) -> dict[int | None, list[int]]:
    """Team id → busy + idle ticks per band of :data:`boards.maths.BANDS`, pooled by GPU-hours (each
    GPU-hour's ticks in the band of its mean utilization; a GPU-hour with none measured is in no band);
    under a team filter, that team's only. From ``day`` (:func:`read_day`, read here when not given)."""
    day = read_day(scope) if day is None else day
    rows = np.isin(day.code, [_SERIES_CODE[BUSY], _SERIES_CODE[IDLE]])
    if scope.team_id is not None:
        rows &= day.team == scope.team_id
    util = day.cell_util[day.cell_of[rows]] if rows.any() else np.array([])
    measured = ~np.isnan(util)
    band = np.searchsorted(np.array([hi for _lo, hi in BANDS[:-1]], dtype=float), util[measured], side="right")
    teams, position = np.unique(day.team[rows][measured], return_inverse=True)
    sums = np.zeros((len(teams), len(BANDS)), dtype=np.int64)
    np.add.at(sums, (position, band), day.ticks[rows][measured])
    return {team_id or None: row for team_id, row in zip(teams.tolist(), sums.tolist(), strict=True)}
