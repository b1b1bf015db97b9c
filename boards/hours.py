"""The daily board's hours (issue 14): every GPU-hour of the day with its ticks per state and its mean
utilization, read in one query from the hourly usage (``HourlyUsage``) joined to the hour rollups; from
it the timeline (the sum per hour) and the heatmap (one row per GPU). The utilization bands pool the
allocated measured ticks of every GPU-hour by its mean utilization, summed by PostgreSQL.

Never raw samples: the hour rollup's ``util_mean`` is the mean of the hour's minutes weighted by the
seconds they were measured (``cluster/telemetry/rollup_math.py``). An hour the aggregation has not
reached yet (the rest of today, or a day still being recomputed) is marked ``partial``."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from datetime import datetime

import pandas as pd
from django.db import connection

from accounting.models import HourlyUsage, UsageAggregateState
from accounting.usage.states import ALLOCATED_STATES, DOWN, UNALLOCATED
from boards.maths import BANDS, SERIES
from boards.scope import BoardScope
from cluster.inventory.holders import holdings_between
from cluster.models import Gpu, HourRollup, Node
from teams.models import Team

HOUR_COLUMNS = ["gpu_id", "node", "label", "hour", *SERIES, "util", "teams", "holders", "partial"]
TIMELINE_COLUMNS = ["hour", *SERIES, "capacity", "partial"]

_HOURS_SQL = """
    SELECT h.gpu_id, n.hostname, g.index, h.hour,
           {sums},
           array_agg(DISTINCT h.team_id) FILTER (WHERE h.team_id IS NOT NULL AND h.state IN ('busy', 'idle', 'unmeasured')),
           max(r.util_mean)
    FROM {hourly} h
    JOIN {gpu} g ON g.id = h.gpu_id
    JOIN {node} n ON n.id = g.node_id
    LEFT JOIN {rollup} r ON r.gpu_id = h.gpu_id AND r.bucket = date_trunc('hour', h.hour) AND r.util_covered_s > 0
        AND r.bucket >= date_trunc('hour', %(start)s::timestamptz) AND r.bucket < %(end)s  -- the day's rollups only
    WHERE h.day = %(day)s AND {scope}
    GROUP BY h.gpu_id, n.hostname, g.index, h.hour
    ORDER BY n.hostname, g.index, h.gpu_id, h.hour
"""

_BANDS_SQL = """
    SELECT h.team_id, CASE {cases} END AS band, sum(h.ticks)::bigint
    FROM {hourly} h
    JOIN {gpu} g ON g.id = h.gpu_id
    JOIN {node} n ON n.id = g.node_id
    JOIN {rollup} r ON r.gpu_id = h.gpu_id AND r.bucket = date_trunc('hour', h.hour) AND r.util_covered_s > 0
        AND r.bucket >= date_trunc('hour', %(start)s::timestamptz) AND r.bucket < %(end)s
    WHERE h.day = %(day)s AND h.state IN ('busy', 'idle') AND {scope} {team}
    GROUP BY 1, 2
"""


def _tables() -> dict:
    return {"hourly": HourlyUsage._meta.db_table, "gpu": Gpu._meta.db_table, "node": Node._meta.db_table,
            "rollup": HourRollup._meta.db_table}


def _sums(team_id: int | None) -> str:
    mine = "TRUE" if team_id is None else "coalesce(h.team_id = %(team)s, FALSE)"
    # ::bigint: PostgreSQL sums bigints as numeric, which would arrive as 144,000 Decimals at 1,000 GPUs
    parts = [f"coalesce(sum(h.ticks) FILTER (WHERE h.state = '{state}' AND {mine}), 0)::bigint" for state in ALLOCATED_STATES]
    parts.append(f"coalesce(sum(h.ticks) FILTER (WHERE h.state IN ('busy', 'idle', 'unmeasured') AND NOT {mine}), 0)::bigint")
    parts += [f"coalesce(sum(h.ticks) FILTER (WHERE h.state = '{state}'), 0)::bigint" for state in (UNALLOCATED, DOWN)]
    return ",\n           ".join(parts)


def computed_to(scope: BoardScope) -> datetime:
    """Up to where the day's hourly usage is computed: the last aggregation's now (and never past now)."""
    aggregated = UsageAggregateState.objects.filter(id=1).values_list("aggregated_to", flat=True).first()
    return min(aggregated or scope.bounds[0], scope.now)


def day_hours(scope: BoardScope, *, user, done: datetime | None = None) -> pd.DataFrame:
    """One row per GPU-hour of the day in scope (:data:`HOUR_COLUMNS`; ticks per series, ``util`` the hour's
    mean utilization or NaN, ``teams`` the names of the teams holding it, ``holders`` what the viewer may
    see of the jobs and bookings in the hour; ``partial`` after ``done``, default :func:`computed_to`).
    Under a team filter, busy, idle and unmeasured are the team's and the other teams' allocated ticks
    are ``other_teams``. Four queries; the rows become columns at once (a day of 1,000 GPUs is 24,000
    rows)."""
    where, params = scope.gpu_sql("g", "n")
    start, end = scope.bounds
    params.update(day=scope.day, team=scope.team_id, start=start, end=end)
    sql = _HOURS_SQL.format(sums=_sums(scope.team_id), scope=where, **_tables())
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return pd.DataFrame(columns=HOUR_COLUMNS)
    frame = pd.DataFrame.from_records(rows, columns=["gpu_id", "node", "index", "hour", *SERIES, "team_ids", "util"])
    frame["label"] = frame["node"] + "/" + frame["index"].astype(str)
    frame["hour"] = pd.to_datetime(frame["hour"], utc=True)
    frame["util"] = frame["util"].astype(float)
    hour_end = (frame["hour"].dt.floor("h") + pd.Timedelta(hours=1)).clip(upper=pd.Timestamp(end))
    frame["partial"] = hour_end > pd.Timestamp(done or computed_to(scope))
    names = dict(Team.objects.filter(pk__in={t for ids in frame["team_ids"] if ids for t in ids}).values_list("pk", "name"))
    teams_of: dict[tuple, list[str]] = {(): []}  # GPU-hours share a few sets of teams: each named once
    frame["teams"] = [teams_of.get(key) or teams_of.setdefault(key, sorted(names.get(t, "") for t in key))
                      for key in (tuple(ids) if ids else () for ids in frame["team_ids"])]
    frame["holders"] = _holders(scope, user, frame)
    return frame[HOUR_COLUMNS]


def _holders(scope: BoardScope, user, frame: pd.DataFrame) -> list[list[str]]:
    """The visible jobs and bookings of each GPU-hour row of ``frame``: each holding put in the hours it
    overlaps (found by bisection among the day's hour starts), then looked up per row by hour index."""
    start, end = scope.bounds
    hours = sorted(pd.unique(frame["hour"]))
    starts = [pd.Timestamp(h).to_pydatetime() for h in hours]
    held: dict[tuple[int, int], list[str]] = defaultdict(list)
    for gpu_id, spans in holdings_between(user, frame["gpu_id"].unique().tolist(), start=start, end=end,
                                          now=scope.now).items():
        for span in spans:
            if not span.holding.visible:
                continue
            # the hours whose [start, next start) meets [span.start, span.end)
            first = max(0, bisect_right(starts, span.start) - 1)
            for column in range(first, bisect_left(starts, span.end)):
                labels = held[(gpu_id, column)]
                if span.holding.label not in labels:
                    labels.append(span.holding.label)
    if not held:
        return [[] for _ in range(len(frame))]
    columns = pd.Categorical(frame["hour"], categories=hours).codes.tolist()
    return [held.get(key, []) for key in zip(frame["gpu_id"].tolist(), columns, strict=True)]


def timeline(hours: pd.DataFrame, scope: BoardScope) -> pd.DataFrame:
    """Ticks per series and hour (:data:`TIMELINE_COLUMNS`); ``capacity`` is their sum, so every bucket adds
    up to it; an hour with no row (none yet) is left out, and ``partial`` marks an hour still filling."""
    if hours.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    grouped = hours.groupby("hour", sort=True).agg({**{s: "sum" for s in SERIES}, "partial": "max"}).reset_index()
    grouped["capacity"] = grouped[list(SERIES)].sum(axis=1)
    return grouped[TIMELINE_COLUMNS]


def utilization_bands(scope: BoardScope) -> dict[int | None, list[int]]:
    """Team id → busy + idle ticks per band of :data:`boards.maths.BANDS`, pooled by GPU-hours (each
    GPU-hour's ticks in the band of its mean utilization). One query."""
    cases = " ".join(f"WHEN r.util_mean < {hi} THEN {n}" for n, (_lo, hi) in enumerate(BANDS[:-1]))
    cases += f" ELSE {len(BANDS) - 1}"
    where, params = scope.gpu_sql("g", "n")
    params.update(day=scope.day, team=scope.team_id)
    team = "" if scope.team_id is None else "AND h.team_id = %(team)s"
    params.update(start=scope.bounds[0], end=scope.bounds[1])
    sql = _BANDS_SQL.format(cases=cases, scope=where, team=team, **_tables())
    out: dict[int | None, list[int]] = defaultdict(lambda: [0] * len(BANDS))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for team_id, band, ticks in cursor.fetchall():
            out[team_id][band] += int(ticks)
    return dict(out)
