"""The threshold backtest's recorded minutes (issue 19): for one scope (a pool, or a team) and one GPU model over a
period, per minute, the GPUs actually held, the GPUs in use, the GPUs queued and the recorded load of both
metrics. Three reads whatever the period's length (claims, queued jobs, one SQL aggregate of the minute
rollups per minute); the per-minute counts are built with numpy from the claims' ranges, never from a row per
GPU-minute in Python.

- **Team**: held = in use = the GPUs (physical; a MIG slice or a share counts its whole GPU) the team's jobs
  (their counted allocations, as the usage counts them) or bookings held in the minute: each of them is
  someone's running work, so a rule holding fewer cuts it. Load: the metric summed over those GPUs' minute rollups.
- **Pool**: held = the pool's GPUs of the model that reported in the minute (a minute rollup with covered
  seconds: the GPUs in service); in use = those any team's jobs or bookings held. Load: the metric summed over
  every reporting GPU of the pool (free ones read near 0).
- **Queued**: the GPUs (a fraction rounded up) of the scope's jobs from their submission to their start (still
  pending: until now). A team's jobs of the model (asked for it, or placed on it); for a pool, the jobs
  whose allocations were placed in it (a job never started has no place: it counts for its team, not a pool).
- **Metrics**: utilization = the minute's mean utilization (%); memory = the minute's peak memory used as a
  percent of the GPU's memory. A GPU-minute with no reading adds 0.
Times: aware UTC in, minute indexes from the period's start out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.db import connection
from django.db.models import Q

from accounting.usage.inputs import counted_allocations, physical_gpus
from boards.backtest.simulate import MEMORY, UTILIZATION, Series
from cluster.bookings.holds import RangeBoundEpoch
from cluster.bookings.slots import epoch
from cluster.models import Gpu, GpuHold, HoldKind, Job, MinuteRollup

MINUTE_S = 60
ROLLUP, GPU = MinuteRollup._meta.db_table, Gpu._meta.db_table
_METRICS_SQL = """coalesce(sum(r.util_mean), 0)::float8,
    coalesce(sum(100.0 * r.mem_used_max_mib / nullif(g.memory_mib, 0)), 0)::float8"""


@dataclass(frozen=True)
class Scope:
    """What a backtest replays: ``[start, end)`` (aware, on whole minutes), one GPU model, and a pool or a team."""

    start: datetime
    end: datetime
    gpu_model_id: int
    pool: str | None = None
    team_id: int | None = None

    @property
    def minutes(self) -> int:
        return int((self.end - self.start).total_seconds()) // MINUTE_S


@dataclass(frozen=True)
class Recorded:
    """The recorded minutes of a scope: numpy arrays of one length (``Series`` for each metric)."""

    start: datetime
    held: np.ndarray
    in_use: np.ndarray
    queued: np.ndarray
    load: dict[str, np.ndarray]

    @property
    def minutes(self) -> int:
        return len(self.held)

    def series(self, metric: str) -> Series:
        """The simulation's inputs for ``metric`` (plain lists: the loop reads them fastest)."""
        return Series(held=self.held.tolist(), in_use=self.in_use.tolist(), queued=self.queued.tolist(),
                      load=self.load[metric].tolist())

    @property
    def demand(self) -> np.ndarray:
        return self.in_use + self.queued


def recorded(scope: Scope, *, now: datetime) -> Recorded:
    """The scope's minutes over ``[start, min(end, now))`` (a minute not yet over has nothing recorded)."""
    end = min(scope.end, now.replace(second=0, microsecond=0))
    scope = Scope(scope.start, max(scope.start, end), scope.gpu_model_id, scope.pool, scope.team_id)
    n, lo = scope.minutes, epoch(scope.start)
    gpus = physical_gpus().filter(model_id=scope.gpu_model_id)
    if scope.pool is not None:
        gpus = gpus.filter(node__pool=scope.pool)
    gpu_ids = list(gpus.values_list("pk", flat=True))
    claims = _claims(scope, gpu_ids, now=now)
    in_use = _count_gpus(claims, lo, n)
    if scope.pool is None:
        held = in_use.copy()
        load = _claimed_load(scope, claims, lo, n)
    else:
        held, load = _pool_minutes(scope, gpu_ids, lo, n)
    return Recorded(start=scope.start, held=held, in_use=in_use, queued=_queued(scope, gpu_ids, lo, n, now=now),
                    load=load)


def _claims(scope: Scope, gpu_ids: list[int], *, now: datetime) -> dict[int, list[tuple[int, int]]]:
    """Physical GPU id → its claims' ``(lo, hi)`` epoch seconds overlapping the period (open ones end at now)."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    if not gpu_ids:
        return out
    start, end, now_s = scope.start, scope.end, epoch(now)
    holds = GpuHold.objects.filter(kind=HoldKind.BOOKING, active=True, gpu_id__in=gpu_ids, during__overlap=(start, end))
    allocations = (counted_allocations().filter(Q(gpu_id__in=gpu_ids) | Q(gpu__mig_parent_id__in=gpu_ids), start__lt=end)
                   .filter(Q(end__isnull=True) | Q(end__gt=start)))
    if scope.team_id is not None:
        holds = holds.filter(team_id=scope.team_id)
        allocations = allocations.filter(job__team_id=scope.team_id)
    for gpu_id, begin, finish in holds.values_list("gpu_id", RangeBoundEpoch("during", function="lower"),
                                                   RangeBoundEpoch("during", function="upper")):
        out[gpu_id].append((begin, finish))
    for gpu_id, parent_id, begin, finish in allocations.values_list("gpu_id", "gpu__mig_parent_id", "start", "end"):
        out[parent_id or gpu_id].append((epoch(begin), now_s if finish is None else epoch(finish)))
    return out


def _minute_span(begin: int, finish: int, lo: int, n: int) -> tuple[int, int]:
    """``[first, last)`` minute indexes that ``[begin, finish)`` seconds touch, clipped to ``[0, n)``."""
    first = max(0, (begin - lo) // MINUTE_S)
    last = min(n, -(-(finish - lo) // MINUTE_S))
    return first, last


def _merged_minutes(ranges: list[tuple[int, int]], lo: int, n: int) -> list[tuple[int, int]]:
    """One GPU's claims as disjoint minute spans (two claims on one GPU at once hold it once)."""
    spans = sorted(s for s in (_minute_span(b, f, lo, n) for b, f in ranges) if s[0] < s[1])
    merged: list[tuple[int, int]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _count_gpus(claims: dict[int, list[tuple[int, int]]], lo: int, n: int) -> np.ndarray:
    steps = np.zeros(n + 1, dtype=np.int64)
    for ranges in claims.values():
        for first, last in _merged_minutes(ranges, lo, n):
            steps[first] += 1
            steps[last] -= 1
    return np.cumsum(steps[:-1]) if n else np.zeros(0, dtype=np.int64)


def _metric_arrays(rows, n: int) -> dict[str, np.ndarray]:
    util, memory = np.zeros(n), np.zeros(n)
    for index, util_sum, memory_sum in rows:
        if 0 <= index < n:
            util[index], memory[index] = util_sum, memory_sum
    return {UTILIZATION: util, MEMORY: memory}


def _claimed_load(scope: Scope, claims, lo: int, n: int) -> dict[str, np.ndarray]:
    """Both metrics summed per minute over the claimed GPU-minutes: one aggregate over the rollups, the claims
    passed as three arrays, each claim an index range scan of the rollups' (gpu, bucket) key (``OFFSET 0``
    keeps the planner from flattening it into a hash join over every rollup of the GPUs: 11.6 s → see the notes)."""
    ids, firsts, lasts = [], [], []
    for gpu_id, ranges in claims.items():
        for first, last in _merged_minutes(ranges, lo, n):
            ids.append(gpu_id)
            firsts.append(scope.start + timedelta(minutes=first))
            lasts.append(scope.start + timedelta(minutes=last))
    if not ids:
        return _metric_arrays([], n)
    sql = f"""
        WITH c(gpu_id, lo, hi) AS (SELECT * FROM unnest(%(ids)s::bigint[], %(los)s::timestamptz[], %(his)s::timestamptz[]))
        SELECT ((extract(epoch FROM r.bucket)::bigint - %(lo)s) / 60)::bigint, {_METRICS_SQL}
        FROM c JOIN {GPU} g ON g.id = c.gpu_id
        CROSS JOIN LATERAL (SELECT * FROM {ROLLUP} x WHERE x.gpu_id = c.gpu_id AND x.bucket >= c.lo AND x.bucket < c.hi
                            OFFSET 0) r
        GROUP BY 1"""  # noqa: S608 (table names from the models; values bound)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"ids": ids, "los": firsts, "his": lasts, "lo": lo})
        return _metric_arrays(cursor.fetchall(), n)


def _pool_minutes(scope: Scope, gpu_ids: list[int], lo: int, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(GPUs reporting, both metrics summed) per minute over the pool's GPUs of the model: one aggregate."""
    held = np.zeros(n, dtype=np.int64)
    if not gpu_ids or not n:
        return held, _metric_arrays([], n)
    sql = f"""
        SELECT ((extract(epoch FROM r.bucket)::bigint - %(lo)s) / 60)::bigint,
               count(*) FILTER (WHERE r.covered_s > 0), {_METRICS_SQL}
        FROM {ROLLUP} r JOIN {GPU} g ON g.id = r.gpu_id
        WHERE r.gpu_id = ANY(%(ids)s::bigint[]) AND r.bucket >= %(start)s AND r.bucket < %(end)s
        GROUP BY 1"""  # noqa: S608 (table names from the models; values bound)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"ids": gpu_ids, "lo": lo, "start": scope.start, "end": scope.end})
        rows = cursor.fetchall()
    for index, count, _util, _memory in rows:
        if 0 <= index < n:
            held[index] = count
    return held, _metric_arrays([(index, util, memory) for index, _count, util, memory in rows], n)


def _queued(scope: Scope, gpu_ids: list[int], lo: int, n: int, *, now: datetime) -> np.ndarray:
    """GPUs waiting per minute: each job's GPUs (rounded up) from its submission to its start."""
    steps = np.zeros(n + 1, dtype=np.int64)
    jobs = Job.objects.filter(submit_time__isnull=False, submit_time__lt=scope.end, gpu_count__gt=0).filter(
        Q(start_time__isnull=True) | Q(start_time__gt=scope.start))
    placed_here = Q(allocations__gpu_id__in=gpu_ids) | Q(allocations__gpu__mig_parent_id__in=gpu_ids)
    if scope.team_id is not None:
        jobs = jobs.filter(team_id=scope.team_id).filter(Q(gpu_model_id=scope.gpu_model_id) | placed_here)
    else:
        jobs = jobs.filter(placed_here)
    now_s = epoch(now)
    for submitted, started, count in jobs.distinct().values_list("submit_time", "start_time", "gpu_count"):
        begin, finish = epoch(submitted), now_s if started is None else epoch(started)
        if finish <= begin:
            continue
        first, last = _minute_span(begin, finish, lo, n)
        if first < last:
            gpus = math.ceil(count)
            steps[first] += gpus
            steps[last] -= gpus
    return np.cumsum(steps[:-1]) if n else np.zeros(0, dtype=np.int64)
