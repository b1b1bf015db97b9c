"""accounting 0013: days aggregated before the hourly and holders' tables existed are marked, and the next
usage_process fills those tables for them so that they add up to the daily usage, as for a new day."""

import importlib
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from accounting.models import DailyHolderUsage, DailyUsage, HourlyUsage, UsageDirty
from accounting.usage.services import aggregate_day, usage_process
from cluster.models import Node
from core.timeutils import business_day_bounds
from tests.accounting.usage.test_board_tables import check_holders_add_up, daily_by_team, hourly_by_team
from tests.accounting.usage.usage_day import DAY, NOW

NAME = "0013_backfill_hourly_and_holder_usage"
backfill = importlib.import_module(f"accounting.migrations.{NAME}")


def run_backfill():
    """The migration's function on the historical models of its state, as ``migrate`` runs it."""
    apps = MigrationLoader(connection).project_state(("accounting", NAME), at_end=True).apps
    with connection.schema_editor() as editor:
        backfill.mark_days_without_detail(apps, editor)


def marks() -> set:
    return set(UsageDirty.objects.values_list("gpu_id", "node_id", "lo", "hi"))


def holders_snapshot() -> list:
    return sorted(DailyHolderUsage.objects.values_list("day", "gpu_id", "job_id", "booking_id", "state", "team_id",
                                                       "project_id", "ticks"), key=str)


def aggregated_before_0012(days) -> None:
    """``days`` aggregated as before 0012: daily usage, no hourly or holders' rows, no marks left."""
    for day in days:
        aggregate_day(day=day, now=NOW)
    HourlyUsage.objects.filter(day__in=days).delete()
    DailyHolderUsage.objects.filter(day__in=days).delete()
    UsageDirty.objects.all().delete()


@pytest.mark.django_db
def test_it_marks_each_node_and_the_unplaced_usage_once_and_usage_process_fills_the_day(day):
    aggregate_day(day=DAY, now=NOW)
    hourly_before, holders_before = hourly_by_team(), holders_snapshot()
    assert hourly_before and holders_before
    aggregated_before_0012([DAY])

    run_backfill()

    lo, hi = business_day_bounds(DAY)
    assert marks() == {(None, node_id, lo, hi) for node_id in Node.objects.values_list("pk", flat=True)} | {
        (None, None, lo, hi)}
    result = usage_process(now=NOW)
    assert result["days_redone"] == 1 and not UsageDirty.objects.exists()
    assert hourly_by_team() == daily_by_team() == hourly_before
    assert holders_snapshot() == holders_before
    check_holders_add_up()


@pytest.mark.django_db
def test_it_marks_only_the_days_without_hourly_rows_one_range_per_run(day):
    days = [DAY - timedelta(days=n) for n in (4, 3, 2, 1)] + [DAY]
    for one in days:
        aggregate_day(day=one, now=NOW)
    aggregated_before_0012(days[:2] + days[3:4])  # DAY-4 and DAY-3 (a run), DAY-1; DAY-2 and DAY keep theirs

    run_backfill()

    ranges = Counter((lo, hi) for _gpu, _node, lo, hi in marks())
    first, last = business_day_bounds(days[0]), business_day_bounds(days[1])
    assert ranges == Counter({(first[0], last[1]): 3, business_day_bounds(days[3]): 3})  # 2 nodes + unplaced
    usage_process(now=NOW)
    for one in days:
        assert hourly_by_team(one) == daily_by_team(one)
        check_holders_add_up(one)


@pytest.mark.django_db
def test_it_marks_nothing_before_any_aggregation_or_where_the_hours_are_there(day):
    UsageDirty.objects.all().delete()  # the triggers' marks of the day's jobs and samples
    run_backfill()
    assert not marks()
    aggregate_day(day=DAY, now=NOW)
    UsageDirty.objects.all().delete()
    run_backfill()
    assert not marks()


def test_runs_of_days():
    d = DAY
    assert backfill.day_runs([]) == []
    assert backfill.day_runs([d]) == [(d, d)]
    days = [d, d + timedelta(days=1), d + timedelta(days=3), d + timedelta(days=5), d + timedelta(days=6)]
    assert backfill.day_runs(days) == [(d, d + timedelta(days=1)), (d + timedelta(days=3),) * 2,
                                       (d + timedelta(days=5), d + timedelta(days=6))]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_migrating_an_old_database_forward_marks_its_days(day):
    aggregate_day(day=DAY, now=NOW)
    aggregated_before_0012([DAY])
    try:
        migrate([("accounting", "0012_hourly_and_holder_usage")])  # its reverse does nothing
        assert not marks() and DailyUsage.objects.filter(day=DAY).exists()
        migrate([("accounting", NAME)])
        assert {(node_id, hi - lo) for _gpu, node_id, lo, hi in marks()} == {
            (node_id, timedelta(days=1)) for node_id in [*Node.objects.values_list("pk", flat=True), None]}
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())  # on to today's schema, then the worker runs
        usage_process(now=NOW)
        assert hourly_by_team() == daily_by_team()
        check_holders_add_up()
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
