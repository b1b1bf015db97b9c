"""Benchmarks of usage accounting (issue 6) for ``make bench`` (bench/__main__.py), each beside a baseline
measured in the same run:

- :func:`bench_usage_day`: ``aggregate_day`` over one business day of 1,000 GPUs (125 nodes × 8): 1.44 M
  minute rollups, ~3,000 job allocations of 20 teams, two bookings and a node outage. Baseline: one SQL
  query that reads the same rollups once, grouped by GPU.
- :func:`bench_usage_report`: ``usage_report`` over a month of daily aggregates for the same 1,000 GPUs and
  20 teams (~180 k rows, and unplaced usage), by team and by GPU. Baseline: the plain ``GROUP BY`` of the
  same rows.

Everything is generated set-based in SQL (or bulk-created) inside one transaction that is rolled back,
so the database is left as it was; each timing is the median of a few runs.
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import date, timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange

from accounting.models import DailyUnplacedUsage, DailyUsage
from accounting.usage.report import usage_report
from accounting.usage.services import aggregate_day
from cluster.models import (
    Allocation,
    Booking,
    Gpu,
    GpuHold,
    GpuModel,
    HoldKind,
    Job,
    MinuteRollup,
    Node,
    NodeStatusPeriod,
)
from core.timeutils import business_day_bounds
from core.units import WHOLE_GPU_SHARE
from teams.models import Project, Team

DAY = date(2026, 11, 2)
MONTH = (date(2026, 11, 1), 30)  # first day, days
NODES, GPUS_PER_NODE, TEAMS = 125, 8, 20
ALLOCATIONS_PER_GPU = 3
RUNS = 3
HOUR = timedelta(hours=1)
MINUTE_ROLLUP = MinuteRollup._meta.db_table
DAILY_USAGE = DailyUsage._meta.db_table
DAILY_UNPLACED_USAGE = DailyUnplacedUsage._meta.db_table


def _cluster(*, nodes: int = NODES, gpus_per_node: int = GPUS_PER_NODE,
             teams: int = TEAMS) -> tuple[list[int], list[int], list[Team], list[Project]]:
    """(GPU ids, node ids, teams, their first projects): 125 nodes ``bench-usage-NNN`` of 8 GPUs, 20 teams
    (or the sizes given: the tests run the benchmarks small)."""
    model, _ = GpuModel.objects.get_or_create(name="NVIDIA H200", defaults={"short_name": "H200", "memory_mib": 143771})
    node_count, team_count = nodes, teams
    nodes = [Node.objects.get_or_create(hostname=f"bench-usage-{n:03d}", defaults={"pool": "bench"})[0]
             for n in range(node_count)]
    Gpu.objects.bulk_create([
        Gpu(node=node, index=i, uuid=f"GPU-bench-usage-{n:03d}-{i}", model=model, memory_mib=model.memory_mib)
        for n, node in enumerate(nodes) for i in range(gpus_per_node)
    ], ignore_conflicts=True)
    gpu_ids = list(Gpu.objects.filter(node__in=nodes).order_by("node__hostname", "index").values_list("pk", flat=True))
    teams, projects = [], []
    for t in range(team_count):
        team, _ = Team.objects.get_or_create(slug=f"bench-usage-{t:02d}",
                                             defaults={"name": f"Bench usage {t:02d}", "cost_centre": f"BU{t:02d}"})
        for p in range(2):
            Project.objects.get_or_create(team=team, slug=f"p{p}", defaults={"name": f"Project {p}"})
        teams.append(team)
        projects.append(team.projects.order_by("slug").first())
    return gpu_ids, [node.pk for node in nodes], teams, projects


def _median_seconds(call) -> float:
    times = []
    for _run in range(RUNS):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# --- One day of minute rollups → daily aggregates ---------------------------------------------------------

_DAY_ROLLUPS = f"""
INSERT INTO {MINUTE_ROLLUP} (gpu_id, bucket, util_mean, util_max, util_mem_mean, mem_used_max_mib, power_mean_w,
                                  energy_j, temp_max_c, xid_count, ecc_dbe_count, covered_s, util_covered_s, sample_count)
SELECT g.id, m, u, least(100, u + 5), u / 2, 50000, 100 + 5 * u, (100 + 5 * u) * 60, 50, 0, 0, 60, 60, 6
FROM unnest(%(gpus)s::bigint[]) AS g(id)
CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 minute', interval '1 minute') m
CROSS JOIN LATERAL (SELECT ((g.id * 7919 + extract(epoch FROM m)::bigint / 60 * 104729) %% 100)::float8 AS u) r
WHERE NOT (g.id = ANY(%(down_gpus)s) AND m >= %(down_from)s AND m < %(down_to)s)
"""  # noqa: S608 (table names from model metadata; values are bound)


def _day_inputs(gpu_ids, node_ids, teams, projects) -> dict:
    """Rollups, allocations, two bookings and an outage over DAY; returns what was made."""
    start, end = business_day_bounds(DAY)
    rng = random.Random(17)
    down_node, down_from = node_ids[7], start + 10 * HOUR
    down_gpus = list(Gpu.objects.filter(node_id=down_node).values_list("pk", flat=True))
    NodeStatusPeriod.objects.create(node_id=down_node, status="unreachable", started_at=down_from,
                                    ended_at=down_from + 2 * HOUR, reason="bench")
    with connection.cursor() as cursor:
        cursor.execute(_DAY_ROLLUPS, {"gpus": gpu_ids, "start": start, "end": end, "down_gpus": down_gpus,
                                      "down_from": down_from, "down_to": down_from + 2 * HOUR})
        rollups = cursor.rowcount
    jobs, spans = [], []
    for gpu_id in gpu_ids:
        moment = start + rng.randrange(0, 120) * timedelta(minutes=1)
        for _n in range(ALLOCATIONS_PER_GPU):
            finish = moment + rng.randrange(60, 420) * timedelta(minutes=1)
            t = rng.randrange(TEAMS)
            jobs.append(Job(source="api", external_id=f"bench-usage-{len(jobs)}", team=teams[t], project=projects[t],
                            state="completed", gpu_count=1, start_time=moment, end_time=finish))
            spans.append((gpu_id, moment, finish))
            moment = finish + rng.randrange(0, 180) * timedelta(minutes=1)
    Job.objects.bulk_create(jobs, batch_size=2000)
    Allocation.objects.bulk_create([
        Allocation(job=job, gpu_id=gpu_id, share=WHOLE_GPU_SHARE, start=lo, end=hi)
        for job, (gpu_id, lo, hi) in zip(jobs, spans, strict=True)
    ], batch_size=5000)
    booker, _ = get_user_model().objects.get_or_create(username="bench-usage-booker")
    for b, node_id in enumerate(node_ids[:2]):
        lo, hi = start + (8 + 4 * b) * HOUR, start + (14 + 4 * b) * HOUR
        booking = Booking.objects.create(team=teams[b], project=projects[b], booker=booker, created_by=booker,
                                         mode="node", node_id=node_id, gpu_count=GPUS_PER_NODE, start=lo, end=hi,
                                         booked_end=hi, created_at=start)
        GpuHold.objects.bulk_create([
            GpuHold(gpu_id=gpu_id, during=DateTimeTZRange(lo, hi), kind=HoldKind.BOOKING, booking=booking,
                    team=teams[b], project=projects[b], booker=booker)
            for gpu_id in Gpu.objects.filter(node_id=node_id).values_list("pk", flat=True)
        ])
    return {"rollups": rollups, "allocations": len(spans), "bookings": 2}


def _read_rollups_once(gpu_ids, start, end) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, sum(util_covered_s), count(*) FROM {MINUTE_ROLLUP} "  # noqa: S608 (table names from model metadata; values are bound)
            "WHERE gpu_id = ANY(%s) AND bucket >= %s AND bucket < %s GROUP BY gpu_id",
            [gpu_ids, start, end],
        )
        cursor.fetchall()


def bench_usage_day() -> dict:
    """Time ``aggregate_day`` for 1,000 GPUs' day against one query reading its rollups."""
    with transaction.atomic():
        gpu_ids, node_ids, teams, projects = _cluster()
        made = _day_inputs(gpu_ids, node_ids, teams, projects)
        start, end = business_day_bounds(DAY)
        written = []
        aggregate_s = _median_seconds(
            lambda: written.append(aggregate_day(day=DAY, now=end + HOUR, gpu_ids=gpu_ids)))
        baseline_s = _median_seconds(lambda: _read_rollups_once(gpu_ids, start, end))
        transaction.set_rollback(True)
    return {
        "gpus": len(gpu_ids), **made, "rows_written": written[-1], "aggregate_s": aggregate_s,
        "rollups_per_s": made["rollups"] / aggregate_s, "baseline_s": baseline_s,
        "aggregate_vs_baseline": aggregate_s / baseline_s,
    }


# --- A month of daily aggregates → the usage report ------------------------------------------------------

# Per GPU and day: a first team 6–14 h, a second team 0–8 h, each busy / idle / unmeasured; down 2 h on one
# GPU-day in fifty; the rest unallocated. Whole seconds × 840,000 ticks, adding up to the day exactly.
_MONTH_USAGE = f"""
INSERT INTO {DAILY_USAGE} (day, gpu_id, state, team_id, project_id, ticks, sm_ticks, shallow_ticks, low_power_ticks,
                            memory_held_ticks)
SELECT p.day, p.gpu_id, s.state, s.team_id, s.project_id, s.seconds::bigint * 840000, 0, 0, 0, 0
FROM (
    SELECT d::date AS day, g.id AS gpu_id, k, n,
           (%(teams)s::bigint[])[1 + (k + n) %% 20] AS team1, (%(projects)s::bigint[])[1 + (k + n) %% 20] AS project1,
           (%(teams)s::bigint[])[1 + (k + n + 1 + k %% 19) %% 20] AS team2,
           (%(projects)s::bigint[])[1 + (k + n + 1 + k %% 19) %% 20] AS project2,
           3600 * (6 + (k * 7 + n * 3) %% 9) AS first_s, 3600 * ((k * 5 + n) %% 9) AS second_s,
           CASE WHEN (k * 31 + n * 17) %% 50 = 0 THEN 7200 ELSE 0 END AS down_s,
           60 + (k + n) %% 16 AS busy_pct, 10 + (k * 3 + n) %% 11 AS idle_pct
    FROM generate_series(%(first)s::date, %(last)s::date, interval '1 day') WITH ORDINALITY AS days(d, n)
    CROSS JOIN unnest(%(gpus)s::bigint[]) WITH ORDINALITY AS g(id, k)
) p
CROSS JOIN LATERAL (VALUES
    ('busy', team1, project1, first_s * busy_pct / 100),
    ('idle', team1, project1, first_s * idle_pct / 100),
    ('unmeasured', team1, project1, first_s - first_s * busy_pct / 100 - first_s * idle_pct / 100),
    ('busy', team2, project2, second_s * busy_pct / 100),
    ('idle', team2, project2, second_s - second_s * busy_pct / 100),
    ('down', NULL, NULL, down_s),
    ('unallocated', NULL, NULL, 86400 - first_s - second_s - down_s)
) s(state, team_id, project_id, seconds)
WHERE s.seconds > 0
"""  # noqa: S608 (table names from model metadata; values are bound)

_MONTH_UNPLACED = f"""
INSERT INTO {DAILY_UNPLACED_USAGE} (day, team_id, project_id, gpu_model_id, ticks)
SELECT d::date, t.id, NULL, %(model)s, (3600 + t.k * 600)::bigint * 840000
FROM generate_series(%(first)s::date, %(last)s::date, interval '1 day') d
CROSS JOIN unnest(%(teams)s::bigint[]) WITH ORDINALITY AS t(id, k)
"""  # noqa: S608 (table names from model metadata; values are bound)


def _group_once(column: str, first: date, last: date) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {column}, state, sum(ticks) FROM {DAILY_USAGE} "  # noqa: S608 (a constant column and table)
            "WHERE day >= %s AND day <= %s GROUP BY 1, 2",
            [first, last],
        )
        cursor.fetchall()


def bench_usage_report() -> dict:
    """Time ``usage_report`` for a month of 1,000 GPUs and 20 teams by team and by GPU against ``GROUP BY``."""
    first, days = MONTH
    last = first + timedelta(days=days - 1)
    with transaction.atomic():
        gpu_ids, _node_ids, teams, projects = _cluster()
        model_id = GpuModel.objects.get(name="NVIDIA H200").pk
        params = {"first": first, "last": last, "gpus": gpu_ids, "teams": [t.pk for t in teams],
                  "projects": [p.pk for p in projects], "model": model_id}
        with connection.cursor() as cursor:
            cursor.execute(_MONTH_USAGE, params)
            usage_rows = cursor.rowcount
            cursor.execute(_MONTH_UNPLACED, params)
            unplaced_rows = cursor.rowcount
            cursor.execute(f"ANALYZE {DAILY_USAGE}")
        start, end = business_day_bounds(first)[0], business_day_bounds(last)[1]
        now = end + timedelta(days=1)
        reports = {}
        result = {"gpus": len(gpu_ids), "teams": len(teams), "days": days, "daily_rows": usage_rows,
                  "unplaced_rows": unplaced_rows}
        for by, column in (("team", "team_id"), ("gpu", "gpu_id")):
            report_s = _median_seconds(
                lambda by=by: reports.update({by: usage_report(start=start, end=end, by=by, now=now)}))
            baseline_s = _median_seconds(lambda column=column: _group_once(column, first, last))
            result.update({f"by_{by}_s": report_s, f"by_{by}_rows": len(reports[by].rows),
                           f"by_{by}_baseline_s": baseline_s, f"by_{by}_vs_baseline": report_s / baseline_s})
        transaction.set_rollback(True)
    return result
