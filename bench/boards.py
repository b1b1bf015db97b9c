"""Benchmark of the daily board (issue 14) for ``make bench`` (bench/__main__.py): the server time of the
board page (``GET /?date=``) and of its JSON (``GET /api/v1/boards/daily/?date=``) for the last full
business day, as an admin, at 1,000 GPUs (125 nodes × 8, 20 teams) with 30 days of history; the median
of 10 requests through Django's test client (middleware, session and template rendering included),
after one warm-up request whose queries are counted (``CaptureQueriesContext``). Baseline in the same
run: one plain ``GROUP BY`` of the same day's daily aggregates by state.

What the board reads is filled as the workers leave it:

- the board's day is real: minute rollups of every GPU (a daily rhythm; one GPU in fifty always full,
  one unallocated all day, one held idle all day by a notebook; a few unmeasured hours; a node down
  for two hours), its hour rollups computed from them, ~3,000 job allocations of 20 teams, two node
  bookings and a few unplaced jobs, then ``aggregate_day`` writes its daily, hourly and holders' usage;
- the 29 days before it are **copies**, not aggregations: the day's ``DailyUsage``, ``HourlyUsage``,
  ``DailyHolderUsage``, ``DailyUnplacedUsage`` and the four sums by GPU model (``HourlyModelUsage``, …) are
  copied with ``INSERT … SELECT`` shifting ``day`` (and ``hour``, by whole days), because aggregating 30 days of 1,000 GPUs would take most of
  the run. Their hour rollups are generated directly (a rhythm per GPU-hour); minute rollups exist for
  the board's day only (the board reads no other day's minutes);
- a rate card for the GPU model, quotas for five teams, each node's collection state, and the
  aggregation's watermark (``UsageAggregateState``) at now, so no hour of the day is "still filling".

The day is yesterday in the business zone (the board refuses a future date), so the history ends there.
Everything is made in one transaction that is rolled back, so the database is left as it was.

**At 10,000 GPUs** (issue 18, :func:`bench_boards_at_scale`): 1,250 nodes × 8 in 10 pools of 125, 20 teams,
30 days. The board's day is made as above (minute rollups of every GPU, ~30,000 jobs, ``aggregate_day``); the
29 days before hold copies of the *daily* aggregates only (usage, holders, unplaced, sums by model), which is
all the daily board reads of them: no hour rollups, hourly usage or hourly sums for those days, which the
week, month and profile views read (not timed at this size). The page (a row per pool), its JSON, a pool's
board (a row per node) and a node's board (a row per GPU) are timed, median of 5, against the same baseline.

Long because one data set serves the board at two sizes, and each size prints its own lines.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, reset_queries, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounting.models import (
    DailyHolderUsage,
    DailyModelCapacity,
    DailyModelUsage,
    DailyUnplacedUsage,
    DailyUsage,
    HourlyModelCapacity,
    HourlyModelUsage,
    HourlyUsage,
    Quota,
    RateCard,
    UsageAggregateState,
)
from accounting.usage.services import aggregate_day
from bench.usage import DAILY_USAGE, GPUS_PER_NODE, MINUTE_ROLLUP, NODES, TEAMS, _cluster
from cluster.models import (
    Allocation,
    Booking,
    CollectionState,
    Gpu,
    GpuHold,
    GpuModel,
    HoldKind,
    HourRollup,
    Job,
    Node,
    NodeStatusPeriod,
)
from cluster.telemetry.rollups import HOUR_ONLY_COLUMNS, HOUR_ONLY_SOURCES
from core.timeutils import business_day_bounds, business_today, month_days
from core.units import WHOLE_GPU_SHARE

DAYS = 30
RUNS = 10
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
HOUR_ROLLUP = HourRollup._meta.db_table
HOURLY_USAGE = HourlyUsage._meta.db_table
DAILY_HOLDER_USAGE = DailyHolderUsage._meta.db_table
DAILY_UNPLACED_USAGE = DailyUnplacedUsage._meta.db_table
API_PATH = "/api/v1/boards/daily/"

# Profiles by a GPU's position k (0, 1, …) in the cluster: k % 50 = 0 always full (pretraining), 1 never
# allocated, 2 held idle all day (a notebook); the rest follow a daily rhythm, busier from 08:00 to 20:00
# of the day. GPUs with k % 97 = 5 have no rollups from 02:00 to 06:00 (unmeasured); the down node none
# while it is down.
_PROFILE = """
    CASE WHEN k %% 50 = 0 THEN 96 + (h %% 4)
         WHEN k %% 50 IN (1, 2) THEN h %% 3
         WHEN hod BETWEEN 8 AND 19 THEN 35 + h %% 65
         ELSE h %% 30 END
"""

_DAY_ROLLUPS = f"""
INSERT INTO {MINUTE_ROLLUP} (gpu_id, bucket, util_mean, util_max, util_mem_mean, mem_used_max_mib, power_mean_w,
                             energy_j, temp_max_c, xid_count, ecc_dbe_count, covered_s, util_covered_s, sample_count)
SELECT id, m, u, least(100, u + 4), u / 2, 50000, 100 + 5 * u, (100 + 5 * u) * 60, 50, 0, 0, 60, 60, 6
FROM (
    SELECT g.id, m, ({_PROFILE})::float8 AS u, k, hod
    FROM unnest(%(gpus)s::bigint[]) WITH ORDINALITY AS g(id, n)
    CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 minute', interval '1 minute') m
    CROSS JOIN LATERAL (SELECT n - 1 AS k, floor(extract(epoch FROM m - %(start)s::timestamptz) / 3600)::int AS hod,
                               (g.id * 7919 + (extract(epoch FROM m)::bigint / 60) * 104729) %% 100 AS h) p
) r
WHERE NOT (k %% 97 = 5 AND hod BETWEEN 2 AND 5)
  AND NOT (id = ANY(%(down_gpus)s) AND m >= %(down_from)s AND m < %(down_to)s)
"""  # noqa: S608 (table names from model metadata; values are bound)

_DAY_HOURS = f"""
INSERT INTO {HOUR_ROLLUP} (gpu_id, bucket, util_mean, util_max, util_mem_mean, mem_used_max_mib, power_mean_w,
                           energy_j, temp_max_c, xid_count, ecc_dbe_count, covered_s, util_covered_s, sample_count,
                           {", ".join(HOUR_ONLY_COLUMNS)})
SELECT gpu_id, date_bin('1 hour', bucket, timestamptz '2000-01-01 00:00:00+00'),
       sum(util_mean * util_covered_s) / sum(util_covered_s), max(util_max), avg(util_mem_mean),
       max(mem_used_max_mib), avg(power_mean_w), sum(energy_j), max(temp_max_c), sum(xid_count),
       sum(ecc_dbe_count), sum(covered_s), sum(util_covered_s), sum(sample_count), {HOUR_ONLY_SOURCES}
FROM {MINUTE_ROLLUP}
WHERE gpu_id = ANY(%(gpus)s) AND bucket >= %(start)s AND bucket < %(end)s
GROUP BY 1, 2
"""  # noqa: S608 (table names from model metadata; values are bound)

_HISTORY_HOURS = f"""
INSERT INTO {HOUR_ROLLUP} (gpu_id, bucket, util_mean, util_max, util_mem_mean, mem_used_max_mib, power_mean_w,
                           energy_j, temp_max_c, xid_count, ecc_dbe_count, covered_s, util_covered_s, sample_count)
SELECT id, hr, u, least(100, u + 10), u / 2, 50000, 100 + 5 * u, (100 + 5 * u) * 3600, 50, 0, 0, 3600, 3600, 360
FROM (
    SELECT g.id, hr, ({_PROFILE})::float8 AS u
    FROM unnest(%(gpus)s::bigint[]) WITH ORDINALITY AS g(id, n)
    CROSS JOIN generate_series(%(first)s::timestamptz, %(start)s::timestamptz - interval '1 hour', interval '1 hour') hr
    CROSS JOIN LATERAL (SELECT n - 1 AS k,
                               mod(mod(floor(extract(epoch FROM hr - %(start)s::timestamptz) / 3600)::int, 24) + 24, 24) AS hod,
                               (g.id * 7919 + (extract(epoch FROM hr)::bigint / 3600) * 104729) %% 100 AS h) p
) r
"""  # noqa: S608 (table names from model metadata; values are bound)

# The day's aggregates copied to the ``back`` days before it, ``day`` (and ``hour``) shifted by whole days.
_SHIFTED = {"day": "day - s.k", "hour": "hour - make_interval(days => s.k)"}


def _copy_sql(model) -> str:
    columns = [f.column for f in model._meta.concrete_fields if not f.primary_key]
    table, shifted = model._meta.db_table, ", ".join(_SHIFTED.get(c, c) for c in columns)
    return (f"INSERT INTO {table} ({', '.join(columns)}) SELECT {shifted} FROM {table} "  # noqa: S608 (names from model metadata; values are bound)
            "CROSS JOIN generate_series(1, %(back)s) s(k) WHERE day = %(day)s")


_BASELINE = f"SELECT state, sum(ticks) FROM {DAILY_USAGE} WHERE day = %s GROUP BY state"  # noqa: S608 (a constant table)
_MONTH_BASELINE = (f"SELECT state, sum(ticks) FROM {HOURLY_USAGE} WHERE day >= %s AND day < %s "  # noqa: S608
                   "GROUP BY state")
_SPAN_BASELINE = (f"SELECT state, sum(ticks) FROM {DAILY_USAGE} WHERE day >= %s AND day < %s "  # noqa: S608
                  "GROUP BY state")
PROFILE_DAYS = 90  # the profile reads three full months back


def _allocations(day: date, gpu_ids: list[int], node_ids: list[int], teams, projects, model) -> dict:
    """The day's jobs (one allocation per GPU each, unplaced ones without), two node bookings and an outage."""
    start, end = business_day_bounds(day)
    rng = random.Random(14)
    jobs, spans = [], []  # spans: (job index, gpu id or None, start, end, share)

    def job(name: str, t: int, lo, hi, gpus, unplaced: bool = False) -> int:
        jobs.append(Job(source="api", external_id=f"bench-board-{len(jobs)}", name=name, user=f"user{rng.randrange(60)}",
                        team=teams[t], project=projects[t], state="completed", gpu_count=gpus, start_time=lo,
                        end_time=hi, gpu_model=model if unplaced else None))
        return len(jobs) - 1

    pretraining = job("pretrain-llm", 0, start - 20 * HOUR, end + 20 * HOUR, sum(1 for k in range(len(gpu_ids)) if k % 50 == 0))
    for k, gpu_id in enumerate(gpu_ids):
        if k % 50 == 0:
            spans.append((pretraining, gpu_id, start - 20 * HOUR, end + 20 * HOUR, WHOLE_GPU_SHARE))
        elif k % 50 == 1:
            continue
        elif k % 50 == 2:
            t = rng.randrange(len(teams))
            spans.append((job("notebook", t, start - 5 * HOUR, end + 5 * HOUR, 1), gpu_id, start - 5 * HOUR, end + 5 * HOUR,
                          WHOLE_GPU_SHARE))
        else:
            moment = start + rng.randrange(0, 120) * MINUTE
            for n in range(3):
                finish = moment + rng.randrange(60, 420) * MINUTE
                t = rng.randrange(len(teams))
                spans.append((job(f"train-{k}-{n}", t, moment, finish, 1), gpu_id, moment, finish, WHOLE_GPU_SHARE))
                moment = finish + rng.randrange(0, 180) * MINUTE
    for u in range(min(10, len(teams))):
        lo = start + (2 + u) * HOUR
        spans.append((job(f"unplaced-{u}", u, lo, lo + 6 * HOUR, 2, unplaced=True), None, lo, lo + 6 * HOUR,
                      2 * WHOLE_GPU_SHARE))
    Job.objects.bulk_create(jobs, batch_size=2000)
    Allocation.objects.bulk_create([
        Allocation(job=jobs[j], gpu_id=gpu_id, gpu_model=None if gpu_id else model, share=share, start=lo, end=hi)
        for j, gpu_id, lo, hi, share in spans
    ], batch_size=5000)
    booker, _ = get_user_model().objects.get_or_create(username="bench-board-booker")
    for b, node_id in enumerate(node_ids[:2]):
        lo, hi = start + (8 + 4 * b) * HOUR, start + (14 + 4 * b) * HOUR
        booking = Booking.objects.create(team=teams[b], project=projects[b], booker=booker, created_by=booker,
                                         mode="node", node_id=node_id, gpu_count=GPUS_PER_NODE, start=lo, end=hi,
                                         booked_end=hi, created_at=start, note="bench board booking")
        GpuHold.objects.bulk_create([
            GpuHold(gpu_id=gpu_id, during=DateTimeTZRange(lo, hi), kind=HoldKind.BOOKING, booking=booking,
                    team=teams[b], project=projects[b], booker=booker)
            for gpu_id in Gpu.objects.filter(node_id=node_id).values_list("pk", flat=True)
        ])
    return {"jobs": len(jobs), "allocations": len(spans), "bookings": min(2, len(node_ids))}


def _history(day: date, days: int, gpu_ids, node_ids, teams, projects, now, *, aggregate_days: int | None = None,
             daily_only: bool = False) -> dict:
    """Fill what the board reads for ``day`` and the ``days - 1`` before it (the daily aggregates for
    ``aggregate_days``, default ``days``: the profile reads three months of them); returns counts and
    stage times. ``daily_only``: the days before hold the daily aggregates alone (no hour rollups, no hourly
    usage or hourly sums by model), which is all the daily board reads of them (the 10,000-GPU size)."""
    aggregate_days = aggregate_days or days
    stages: dict[str, float] = {}
    clock = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal clock
        stages[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    start, end = business_day_bounds(day)
    first = business_day_bounds(day - timedelta(days=days - 1))[0]
    model = GpuModel.objects.get(name="NVIDIA H200")
    down_node = node_ids[min(7, len(node_ids) - 1)]
    down_from = start + 10 * HOUR
    down_gpus = list(Gpu.objects.filter(node_id=down_node).values_list("pk", flat=True))
    NodeStatusPeriod.objects.create(node_id=down_node, status="unreachable", started_at=down_from,
                                    ended_at=down_from + 2 * HOUR, reason="bench")
    params = {"gpus": gpu_ids, "start": start, "end": end, "first": first, "down_gpus": down_gpus,
              "down_from": down_from, "down_to": down_from + 2 * HOUR}
    with connection.cursor() as cursor:
        cursor.execute(_DAY_ROLLUPS, params)
        minute_rollups = cursor.rowcount
        stage("minute rollups")
        cursor.execute(_DAY_HOURS, params)
        if not daily_only:
            cursor.execute(_HISTORY_HOURS, params)
        stage("hour rollups")
    made = _allocations(day, gpu_ids, node_ids, teams, projects, model)
    stage("jobs and bookings")
    aggregate_day(day=day, now=now)
    stage("aggregate_day")
    with connection.cursor() as cursor:
        for aggregate in (DailyUsage, HourlyUsage, DailyHolderUsage, DailyUnplacedUsage, HourlyModelUsage, DailyModelUsage,
                          HourlyModelCapacity, DailyModelCapacity):
            if daily_only and aggregate in (HourlyUsage, HourlyModelUsage, HourlyModelCapacity):
                continue
            cursor.execute(_copy_sql(aggregate), {"day": day, "back": aggregate_days - 1})
        stage(f"copies to {aggregate_days - 1} days")
    RateCard.objects.filter(gpu_model=model).delete()
    RateCard.objects.create(gpu_model=model, valid_from=day - timedelta(days=aggregate_days + 30),
                            price_per_card_hour=Decimal("26.00"), currency=settings.CARDHOUR_CURRENCY)
    for team in teams[:5]:
        Quota.objects.create(team=team, period_start=day.replace(day=1), expires=day + timedelta(days=40),
                             card_hours=Decimal("20000"))
    CollectionState.objects.bulk_create(
        [CollectionState(node_id=node_id, data_complete_to=now, last_success_at=now, lag_s=12.0) for node_id in node_ids],
        ignore_conflicts=True)
    UsageAggregateState.objects.update_or_create(id=1, defaults={"aggregated_to": now})
    with connection.cursor() as cursor:
        for table in (MINUTE_ROLLUP, HOUR_ROLLUP, DAILY_USAGE, HOURLY_USAGE, DAILY_HOLDER_USAGE, DAILY_UNPLACED_USAGE,
                      HourlyModelUsage._meta.db_table, HourlyModelCapacity._meta.db_table,
                      DailyModelUsage._meta.db_table, DailyModelCapacity._meta.db_table):
            cursor.execute(f"ANALYZE {table}")
    stage("rates, quotas, ANALYZE")
    return {**made, "minute_rollups": minute_rollups, "stages_s": stages,
            "daily_rows": DailyUsage.objects.count(), "hourly_rows": HourlyUsage.objects.count(),
            "holder_rows": DailyHolderUsage.objects.count(), "hour_rollups": HourRollup.objects.count()}


def _serve(client: Client, path: str, day: date, runs: int, accept: str, query: dict | None = None) -> dict:
    """One warm-up request with its queries counted, then the median of ``runs`` timed requests."""
    query = query or {"date": day.isoformat()}
    reset_queries()  # a full log (DEBUG) would count nothing: it holds 9,000 queries at most
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, query, headers={"accept": accept})
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}")
    body, count = response.content, len(queries)  # now: the next request empties the log
    times = []
    for _run in range(runs):
        started = time.perf_counter()
        client.get(path, query, headers={"accept": accept})
        times.append(time.perf_counter() - started)
    return {"ms": statistics.median(times) * 1000, "queries": count, "bytes": len(body), "body": body}


def _baseline_ms(day: date, runs: int, sql: str = _BASELINE, params: list | None = None) -> float:
    times = []
    with connection.cursor() as cursor:
        for _run in range(runs):
            started = time.perf_counter()
            cursor.execute(sql, params or [day])
            cursor.fetchall()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def bench_boards(*, nodes: int = NODES, gpus_per_node: int = GPUS_PER_NODE, teams: int = TEAMS, days: int = DAYS,
                 runs: int = RUNS) -> dict:
    """Time the daily board page and its JSON for yesterday, as an admin, against one ``GROUP BY``; and
    the monthly profile of the last full month (90 days of daily aggregates) against one ``GROUP BY`` of
    that month's hourly usage."""
    now = timezone.now()
    day = business_today(now=now) - timedelta(days=1)
    with transaction.atomic():
        started = time.perf_counter()
        gpu_ids, node_ids, team_list, projects = _cluster(nodes=nodes, gpus_per_node=gpus_per_node, teams=teams)
        made = _history(day, days, gpu_ids, node_ids, team_list, projects, now, aggregate_days=PROFILE_DAYS)
        setup_s = time.perf_counter() - started
        admin = get_user_model().objects.create_user(username="bench-board-admin", is_superuser=True, is_staff=True)
        client = Client(HTTP_HOST="localhost")
        client.force_login(admin)
        with override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "localhost"]):
            page = _serve(client, reverse("boards:daily"), day, runs, "text/html")
            api = _serve(client, API_PATH, day, runs, "application/json")
            month, _following = month_days(day.replace(day=1) - timedelta(days=1))
            profile = _serve(client, reverse("boards:profile"), day, runs, "text/html",
                             query={"month": f"{month:%Y-%m}"})
            monday = day - timedelta(days=day.weekday() + 7)  # the last full week before the board's day
            week = _serve(client, reverse("boards:week"), day, runs, "text/html", query={"week": monday.isoformat()})
            month_view = _serve(client, reverse("boards:month"), day, runs, "text/html",
                                query={"month": f"{month:%Y-%m}"})
        baseline_ms = _baseline_ms(day, runs)
        profile_baseline_ms = _baseline_ms(day, runs, _MONTH_BASELINE, [month, _following])
        week_baseline_ms = _baseline_ms(day, runs, _SPAN_BASELINE, [monday, monday + timedelta(days=7)])
        month_baseline_ms = _baseline_ms(day, runs, _SPAN_BASELINE, [month, _following])
        for served in (profile, week, month_view):
            served.pop("body")
        figures = json.loads(api.pop("body"))
        page.pop("body")
        transaction.set_rollback(True)
    return {
        "gpus": len(gpu_ids), "nodes": len(node_ids), "teams": len(team_list), "days": days, "day": day, "runs": runs,
        **made, "setup_s": setup_s, "page": page, "json": api, "baseline_ms": baseline_ms, "profile_month": month,
        "profile": profile, "profile_baseline_ms": profile_baseline_ms, "week_start": monday, "week": week,
        "week_baseline_ms": week_baseline_ms, "month": month_view, "month_baseline_ms": month_baseline_ms,
        "heatmap_cells": sum(cell is not None for row in figures.get("heatmap", {}).get("kind", []) for cell in row),
        "idle_allocations": len(figures.get("idle_allocations", [])),
        "long_idle": len(figures.get("long_idle", [])), "always_full": len(figures.get("always_full", [])),
    }


def print_boards(r: dict) -> None:
    """The lines ``make bench`` prints: a heading, the set-up, then one line per page starting "daily board"."""
    print(f"\nthe daily board of {r['day']} at {r['gpus']:,} GPUs ({r['nodes']} nodes), {r['teams']} teams, "
          f"{r['days']} days of telemetry and {PROFILE_DAYS} of aggregates ({r['daily_rows']:,} daily, {r['hourly_rows']:,} hourly, "
          f"{r['holder_rows']:,} holder rows; {r['minute_rollups']:,} minute and {r['hour_rollups']:,} hour rollups; "
          f"{r['allocations']:,} allocations); as an admin, median of {r['runs']}")
    stages = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in r["stages_s"].items())
    print(f"  set-up {r['setup_s']:.1f} s ({stages})")
    print(f"  the JSON holds {r['heatmap_cells']:,} heatmap cells, {r['idle_allocations']:,} idle allocations, "
          f"{r['long_idle']} long-idle and {r['always_full']} always-full GPUs")
    for name, key in (("page", "page"), ("JSON", "json")):
        row = r[key]
        print(f"daily board {name:<6} {row['ms']:8.1f} ms  (queries {row['queries']}, {row['bytes'] / 1e6:.2f} MB)   "
              f"baseline GROUP BY {r['baseline_ms']:.1f} ms  board / it = {row['ms'] / r['baseline_ms']:.0f}  (aim < 300 ms)")
    for name, key, baseline in ((f"week view ({r['week_start']})", "week", "week_baseline_ms"),
                                (f"month view ({r['profile_month']:%Y-%m})", "month", "month_baseline_ms"),
                                (f"profile ({r['profile_month']:%Y-%m})", "profile", "profile_baseline_ms")):
        row = r[key]
        print(f"{name} {row['ms']:8.1f} ms  (queries {row['queries']}, {row['bytes'] / 1e6:.2f} MB)   "
              f"baseline GROUP BY {r[baseline]:.1f} ms  page / it = {row['ms'] / r[baseline]:.0f}  (aim < 300 ms)")


SCALE_NODES, SCALE_POOLS, SCALE_RUNS = 1250, 10, 5


def bench_boards_at_scale(*, nodes: int = SCALE_NODES, gpus_per_node: int = GPUS_PER_NODE, pools: int = SCALE_POOLS,
                          teams: int = TEAMS, days: int = DAYS, runs: int = SCALE_RUNS) -> dict:
    """Time the daily board at 10,000 GPUs (``nodes`` × ``gpus_per_node`` in ``pools`` pools): the page and its
    JSON, a pool's board and a node's board (the drill-down), as an admin, against one ``GROUP BY``."""
    now = timezone.now()
    day = business_today(now=now) - timedelta(days=1)
    with transaction.atomic():
        started = time.perf_counter()
        gpu_ids, node_ids, team_list, projects = _cluster(nodes=nodes, gpus_per_node=gpus_per_node, teams=teams)
        per_pool = -(-len(node_ids) // pools)
        placed = list(Node.objects.filter(pk__in=node_ids).order_by("hostname"))
        for n, node in enumerate(placed):
            node.pool = f"bench-pool-{n // per_pool:02d}"
        Node.objects.bulk_update(placed, ["pool"], batch_size=2000)
        made = _history(day, days, gpu_ids, node_ids, team_list, projects, now, daily_only=True)
        setup_s = time.perf_counter() - started
        admin = get_user_model().objects.create_user(username="bench-board-admin", is_superuser=True, is_staff=True)
        client = Client(HTTP_HOST="localhost")
        client.force_login(admin)
        query = {"date": day.isoformat()}
        with override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "localhost"]):
            page = _serve(client, reverse("boards:daily"), day, runs, "text/html")
            api = _serve(client, API_PATH, day, runs, "application/json")
            pool = _serve(client, reverse("boards:daily"), day, runs, "text/html", query={**query, "pool": placed[0].pool})
            node = _serve(client, reverse("boards:daily"), day, runs, "text/html",
                          query={**query, "node": placed[0].hostname})
        baseline_ms = _baseline_ms(day, runs)
        figures = json.loads(api.pop("body"))
        levels = {name: _level_of(served.pop("body")) for name, served in (("page", page), ("pool", pool), ("node", node))}
        transaction.set_rollback(True)
    heatmap = figures.get("heatmap", {})
    return {
        "gpus": len(gpu_ids), "nodes": len(node_ids), "pools": pools, "teams": len(team_list), "days": days, "day": day,
        "runs": runs, **made, "setup_s": setup_s, "page": page, "json": api, "pool": pool, "node": node,
        "pool_name": placed[0].pool, "node_name": placed[0].hostname, "baseline_ms": baseline_ms, "levels": levels,
        "json_level": heatmap.get("level"), "json_rows": len(heatmap.get("kind", [])),
        "idle_allocations": len(figures.get("idle_allocations", [])),
    }


def _level_of(html: bytes) -> str:
    """What the page's heatmap rows are (its ``data-level``)."""
    marker = b'data-testid="heatmap-card" data-level="'
    at = html.find(marker)
    return html[at + len(marker):html.index(b'"', at + len(marker))].decode() if at >= 0 else "?"


def print_boards_at_scale(r: dict) -> None:
    """The lines ``make bench`` prints for the board at 10,000 GPUs, each beside the same run's baseline."""
    print(f"\nthe daily board of {r['day']} at {r['gpus']:,} GPUs ({r['nodes']:,} nodes in {r['pools']} pools), "
          f"{r['teams']} teams, {r['days']} days of daily aggregates ({r['daily_rows']:,} daily, {r['holder_rows']:,} "
          f"holder rows; the day's {r['hourly_rows']:,} hourly rows, {r['minute_rollups']:,} minute and "
          f"{r['hour_rollups']:,} hour rollups; {r['allocations']:,} allocations); as an admin, median of {r['runs']}")
    stages = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in r["stages_s"].items())
    print(f"  set-up {r['setup_s']:.1f} s ({stages})")
    print(f"  the JSON's heatmap: a row per {r['json_level']} ({r['json_rows']} rows); "
          f"{r['idle_allocations']:,} idle allocations")
    rows = (("page", "page", r["levels"]["page"]), ("JSON", "json", r["json_level"]),
            (f"pool {r['pool_name']}", "pool", r["levels"]["pool"]), (f"node {r['node_name']}", "node", r["levels"]["node"]))
    for name, key, level in rows:
        row = r[key]
        print(f"daily board 10k {name:<22} {row['ms']:8.1f} ms  (rows: {level}; queries {row['queries']}, "
              f"{row['bytes'] / 1e6:.2f} MB)   baseline GROUP BY {r['baseline_ms']:.1f} ms  "
              f"board / it = {row['ms'] / r['baseline_ms']:.0f}  (aim < 1,000 ms)")
