"""Benchmark of a month close (``accounting.money.close.close_period``) from daily aggregates: 1,000 GPUs, 20
teams, 30 days (the same month of aggregates as the usage report's benchmark), H200 priced with a change
on the 15th, and five teams with quotas they cross mid-month (overflow found hour by hour on the crossing
days). Baseline in the same run: one ``GROUP BY`` over the month's rows. Everything is rolled back."""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from decimal import Decimal

from django.db import connection, transaction

from accounting.models import LedgerEntry, Quota, RateCard
from accounting.money.close import close_period
from bench.usage import _MONTH_UNPLACED, _MONTH_USAGE, DAILY_USAGE, MONTH, _cluster, _group_once
from cluster.models import CollectionState, GpuModel, Node
from core.timeutils import business_day_bounds

RUNS = 3


def bench_close() -> dict:
    first, days = MONTH
    last = first + timedelta(days=days - 1)
    following = last + timedelta(days=1)
    now = business_day_bounds(following)[0] + timedelta(hours=2)
    close_s, entries = [], 0
    for _run in range(RUNS):
        with transaction.atomic():
            gpu_ids, _nodes, teams, projects = _cluster()
            model = GpuModel.objects.get(name="NVIDIA H200")
            params = {"first": first, "last": last, "gpus": gpu_ids, "teams": [t.pk for t in teams],
                      "projects": [p.pk for p in projects], "model": model.pk}
            with connection.cursor() as cursor:
                cursor.execute(_MONTH_USAGE, params)
                daily_rows = cursor.rowcount
                cursor.execute(_MONTH_UNPLACED, params)
                cursor.execute(f"ANALYZE {DAILY_USAGE}")
            RateCard.objects.filter(gpu_model=model).delete()
            RateCard.objects.create(gpu_model=model, valid_from=first, valid_until=first.replace(day=15),
                                    price_per_card_hour=Decimal("28"), currency="CNY")
            RateCard.objects.create(gpu_model=model, valid_from=first.replace(day=15), price_per_card_hour=Decimal("26"),
                                    currency="CNY")
            for team in teams[:5]:
                Quota.objects.create(team=team, period_start=first, expires=following, card_hours=Decimal("9000"))
            for node in Node.objects.filter(collection__isnull=True):
                CollectionState.objects.create(node=node, data_complete_to=now)
            started = time.perf_counter()
            statement = close_period(period=first, now=now)
            close_s.append(time.perf_counter() - started)
            entries = LedgerEntry.objects.filter(statement=statement).count()
            overflow = LedgerEntry.objects.filter(statement=statement, kind="overflow").count()
            baseline = []
            for _ in range(RUNS):
                started = time.perf_counter()
                _group_once("team_id", first, last)
                baseline.append(time.perf_counter() - started)
            transaction.set_rollback(True)
    close, group = statistics.median(close_s), statistics.median(baseline)
    return {"gpus": len(gpu_ids), "teams": len(teams), "days": days, "daily_rows": daily_rows, "entries": entries,
            "overflow_entries": overflow, "close_s": close, "group_by_s": group, "close_vs_group_by": close / group}
