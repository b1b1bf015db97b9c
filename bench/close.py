"""Benchmark of a month close (``accounting.money.close.close_period``) from daily aggregates: 1,000 GPUs and
10,000 GPUs (``--close-gpus``), 20 teams, 30 days (the same month of aggregates as the usage report's
benchmark), H200 priced with a change on the 15th, and five teams with quotas they cross mid-month (overflow
found hour by hour on the crossing days). Baseline in the same run: one ``GROUP BY`` over the month's rows.
Everything is rolled back.

The daily rows are generated in SQL. The hourly usage (which the aggregation writes beside them, and which
the close reads on the days a quota runs out) is generated for those days only, each daily row spread evenly
over the day's 24 hours: the close reads no other day's hours, and a day's hours are found by the index
that leads with the day, so the other days' rows would only take time and disk to make."""

from __future__ import annotations

import statistics
import time
from datetime import date, timedelta
from decimal import Decimal

from django.db import connection, transaction

from accounting.models import HourlyUsage, LedgerEntry, Quota, RateCard
from accounting.money.close import close_period
from accounting.quotas.rules import crossing_days
from accounting.quotas.selectors import quota_limits, team_usage_events
from bench.usage import _MONTH_UNPLACED, _MONTH_USAGE, DAILY_USAGE, MONTH, TEAMS, _cluster, _group_once
from cluster.models import CollectionState, GpuModel, Node
from core.timeutils import business_day_bounds

RUNS = 3
GPUS_PER_NODE = 8
QUOTA_TEAMS = 5
QUOTA_CARD_HOURS_PER_GPU = 9  # each of the five teams' quota: crossed about halfway through the month
HOURLY_USAGE = HourlyUsage._meta.db_table

# A crossing day's hourly usage: each (GPU, state, team) of the day's rows, a 24th in each hour.
_CROSSING_HOURS = f"""
INSERT INTO {HOURLY_USAGE} (day, hour, gpu_id, state, team_id, ticks)
SELECT d.day, %(start)s::timestamptz + h * interval '1 hour', d.gpu_id, d.state, d.team_id, sum(d.ticks) / 24
FROM {DAILY_USAGE} d CROSS JOIN generate_series(0, 23) h
WHERE d.day = %(day)s
GROUP BY d.day, h, d.gpu_id, d.state, d.team_id
"""  # noqa: S608 (table names from model metadata; values are bound)


def bench_close(*, gpus: int = 1000, runs: int = RUNS) -> dict:
    """Time ``close_period`` over a month of ``gpus`` GPUs' aggregates (median of ``runs``) against one
    ``GROUP BY`` of the same rows (median of three, in the same transaction)."""
    first, days = MONTH
    last = first + timedelta(days=days - 1)
    following = last + timedelta(days=1)
    now = business_day_bounds(following)[0] + timedelta(hours=2)
    close_s, baseline = [], []
    for _run in range(runs):
        with transaction.atomic():
            gpu_ids, _nodes, team_rows, projects = _cluster(nodes=gpus // GPUS_PER_NODE, gpus_per_node=GPUS_PER_NODE,
                                                            teams=TEAMS)
            model = GpuModel.objects.get(name="NVIDIA H200")
            params = {"first": first, "last": last, "gpus": gpu_ids, "teams": [t.pk for t in team_rows],
                      "projects": [p.pk for p in projects], "model": model.pk}
            with connection.cursor() as cursor:
                cursor.execute(_MONTH_USAGE, params)
                daily_rows = cursor.rowcount
                cursor.execute(_MONTH_UNPLACED, params)
            RateCard.objects.filter(gpu_model=model).delete()
            RateCard.objects.create(gpu_model=model, valid_from=first, valid_until=first.replace(day=15),
                                    price_per_card_hour=Decimal("28"), currency="CNY")
            RateCard.objects.create(gpu_model=model, valid_from=first.replace(day=15), price_per_card_hour=Decimal("26"),
                                    currency="CNY")
            for team in team_rows[:QUOTA_TEAMS]:
                Quota.objects.create(team=team, period_start=first, expires=following,
                                     card_hours=Decimal(QUOTA_CARD_HOURS_PER_GPU * len(gpu_ids)))
            crossing = _hours_of_crossing_days([t.pk for t in team_rows[:QUOTA_TEAMS]], first, following, now)
            with connection.cursor() as cursor:
                cursor.execute(f"ANALYZE {DAILY_USAGE}")
                cursor.execute(f"ANALYZE {HOURLY_USAGE}")
            for node in Node.objects.filter(collection__isnull=True):
                CollectionState.objects.create(node=node, data_complete_to=now)
            started = time.perf_counter()
            statement = close_period(period=first, now=now)
            close_s.append(time.perf_counter() - started)
            entries = LedgerEntry.objects.filter(statement=statement).count()
            overflow = LedgerEntry.objects.filter(statement=statement, kind="overflow").count()
            for _ in range(RUNS):
                started = time.perf_counter()
                _group_once("team_id", first, last)
                baseline.append(time.perf_counter() - started)
            transaction.set_rollback(True)
    close, group = statistics.median(close_s), statistics.median(baseline)
    return {"gpus": len(gpu_ids), "teams": len(team_rows), "days": days, "daily_rows": daily_rows, "entries": entries,
            "overflow_entries": overflow, "crossing_days": crossing, "close_s": close, "group_by_s": group,
            "close_vs_group_by": close / group, "runs": runs}


def _hours_of_crossing_days(team_ids: list[int], first: date, following: date, now) -> int:
    """Write the hourly usage of the days on which a quota runs out (found as the close finds them); how many."""
    start, end = business_day_bounds(first)[0], business_day_bounds(following)[0]
    coarse = team_usage_events(team_ids=team_ids, start=start, end=end, now=now, quotas=[])
    days = crossing_days(quotas=quota_limits(team_ids=team_ids, first=first, following=following),
                         usage_events=coarse)
    with connection.cursor() as cursor:
        for day in sorted(days):
            day_start, day_end = business_day_bounds(day)
            if day_end - day_start != timedelta(hours=24):
                raise ValueError("the bench's month has no daylight-saving change")
            cursor.execute(_CROSSING_HOURS, {"day": day, "start": day_start})
    return len(days)


def print_close(results: list[dict]) -> None:
    for r in results:
        print(f"\nmonth close from daily aggregates ({r['daily_rows']:,} rows: {r['gpus']:,} GPUs, {r['teams']} teams, "
              f"{r['days']} days, {QUOTA_TEAMS} teams over quota, {r['crossing_days']} crossing day(s); "
              f"median of {r['runs']})")
        print(f"  close_period {r['gpus']:>6,} GPUs {r['close_s']:8.2f} s  ({r['entries']:,} ledger entries, "
              f"{r['overflow_entries']:,} overflow)")
        print(f"  one GROUP BY over it     {r['group_by_s'] * 1000:8.1f} ms  close / it = {r['close_vs_group_by']:.0f}")
