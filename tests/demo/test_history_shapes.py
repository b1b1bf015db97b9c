"""What a lead sees in the demo's history (demo/history.py, issue 14), read back from the stored jobs,
rollups, status periods and daily aggregates of a week: the daily rhythm, pretraining near 95 %,
notebooks idle through their sessions, inference at 10–30 %, one GPU always full and one idle for days,
1–3 % of the capacity down, unmeasured stretches, and nodes in maintenance that run nothing and whose
status history says so.

The week is loaded once for the module (it takes seconds) in a transaction rolled back after it."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.test import override_settings

from accounting.models import DailyUsage
from cluster.bookings.calendar import GROUP_BY_NODE, BlockKind, calendar_for_week, week_bounds
from cluster.choices import NodeStatus
from cluster.models import Allocation, Gpu, Job, MaintenanceWindow, MinuteRollup, NodeStatusPeriod
from core.timeutils import business_day_bounds, business_today
from core.units import TICKS_PER_CARD_HOUR
from demo.bookings import MAINTENANCE_NODE, week_start
from demo.cluster import load_demo
from demo.history import history_incidents, history_window, load_demo_history, long_idle_start
from demo.workloads import ALWAYS_FULL, LONG_IDLE

DAYS = 7
NOW = datetime(2026, 11, 3, 4, 0, tzinfo=UTC)  # Tuesday noon in Shanghai
ZONE = "Asia/Shanghai"  # as `make demo` runs: the business and the display zone
TICKS_PER_GPU_DAY = 24 * TICKS_PER_CARD_HOUR
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def week(django_db_setup, django_db_blocker):
    """A week of history as of :data:`NOW` (load_demo reads the clock), rolled back after the module."""
    with django_db_blocker.unblock(), override_settings(CARDHOUR_BUSINESS_TIME_ZONE=ZONE, TIME_ZONE=ZONE), \
            time_machine.travel(NOW, tick=False):
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            load_demo(history_days=0)
            load_demo_history(days=DAYS, now=NOW)
            with connection.cursor() as cursor:  # statistics for the new rows, so the reads below plan well
                for model in (MinuteRollup, Allocation, Job, DailyUsage):
                    cursor.execute(f"ANALYZE {model._meta.db_table}")
            yield history_window(days=DAYS, now=NOW)
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture(autouse=True)
def frozen_clock():
    with time_machine.travel(NOW, tick=False):
        yield


def whole_days(count: int = DAYS):
    today = business_today(now=NOW)
    return [today - timedelta(days=n) for n in range(count, 0, -1)]


def gpu(host: str, index: int) -> Gpu:
    return Gpu.objects.get(node__hostname=host, index=index, mig_parent__isnull=True)


def fetch(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def mean_util(jobs) -> float:
    """Utilization of ``jobs``' whole GPUs over their measured seconds, pooled (Σ util × seconds / Σ seconds)."""
    [(mean,)] = fetch("""
        SELECT sum(m.util_mean * m.util_covered_s) / sum(m.util_covered_s)
        FROM cluster_allocation a JOIN cluster_minuterollup m
          ON m.gpu_id = a.gpu_id AND m.bucket >= a.start AND m.bucket < a."end"
        WHERE a.job_id = ANY(%(jobs)s) AND m.util_mean IS NOT NULL""", {"jobs": list(jobs.values_list("pk", flat=True))})
    return float(mean)


def test_the_always_full_gpu_is_at_95_percent_or_more_in_every_measured_minute_of_every_day(week):
    host, index, team, _names = ALWAYS_FULL
    full = gpu(host, index)
    for day in whole_days():
        lo, hi = business_day_bounds(day)
        minutes = MinuteRollup.objects.filter(gpu=full, bucket__gte=lo, bucket__lt=hi, util_covered_s__gt=0)
        assert minutes.count() >= 1440 - 180, f"measured on {day}, but for a sample gap"
        assert not minutes.filter(util_mean__lt=95).exists(), day
    assert set(Allocation.objects.filter(gpu=full).values_list("job__team__slug", flat=True)) == {team}


def test_the_long_idle_gpu_is_held_and_idle_for_three_whole_days_and_more_up_to_yesterday(week):
    host, index, team, name, _ago, _hour = LONG_IDLE
    idle = gpu(host, index)
    since = long_idle_start(days=DAYS, now=NOW)
    days = [day for day in whole_days() if business_day_bounds(day)[0] >= since]
    assert len(days) >= 3 and days[-1] == business_today(now=NOW) - timedelta(days=1)
    for day in days:
        states = dict(DailyUsage.objects.filter(gpu=idle, day=day).values_list("state").annotate(Sum("ticks")))
        assert set(states) <= {"idle", "unmeasured"} and sum(states.values()) == TICKS_PER_GPU_DAY, day
        assert states["idle"] >= 0.99 * TICKS_PER_GPU_DAY, "a few minutes partly covered: their rest is unmeasured"
        assert not MinuteRollup.objects.filter(gpu=idle, bucket__range=business_day_bounds(day), util_mean__gte=5).exists()
    job = Allocation.objects.get(gpu=idle, start=since).job
    assert (job.team.slug, job.name, job.state) == (team, name, "cancelled")


def test_pretraining_runs_near_95_percent_and_inference_at_10_to_30(week):
    pretraining = Job.objects.filter(name__startswith="pretrain-")
    assert pretraining.exists() and all(job.gpu_count == 8 for job in pretraining if job.node_list)
    assert 93 <= mean_util(pretraining.exclude(state="cancelled")) <= 97, "but for the runs that hung"
    assert mean_util(Job.objects.filter(team__slug="llm")) >= 90
    assert 10 <= mean_util(Job.objects.filter(team__slug="inference")) <= 30


def test_notebook_sessions_sit_idle_for_about_eight_hours_but_for_short_bursts(week):
    host, index, _team, _name, _ago, _hour = LONG_IDLE
    sessions = Job.objects.filter(name="jupyter").exclude(allocations__gpu=gpu(host, index))
    _start, end = week
    whole = [job for job in sessions if job.end_time < end and job.node_list]
    assert len(whole) >= 10
    for job in whole:
        assert timedelta(hours=7, minutes=30) <= job.end_time - job.start_time <= timedelta(hours=9), job
    minutes = fetch("""
        SELECT a.job_id, count(*), count(*) FILTER (WHERE m.util_mean < 5), count(*) FILTER (WHERE m.util_mean >= 30)
        FROM cluster_allocation a JOIN cluster_minuterollup m
          ON m.gpu_id = a.gpu_id AND m.bucket >= a.start AND m.bucket < a."end"
        WHERE a.job_id = ANY(%(jobs)s) AND m.util_mean IS NOT NULL GROUP BY 1""", {"jobs": [job.pk for job in whole]})
    assert len(minutes) == len(whole)
    for job_id, measured, low, _burst in minutes:
        assert low >= 0.7 * measured, f"job {job_id} idle most of its session"
    assert sum(burst for _job, _measured, _low, burst in minutes) > 0, "short bursts"
    assert mean_util(Job.objects.filter(pk__in=[job.pk for job in whole])) < 15


def test_weekday_working_hours_are_busier_than_nights_and_weekends(week):
    start, end = week
    rows = fetch("""
        SELECT extract(isodow FROM bucket AT TIME ZONE %(zone)s) >= 6 AS weekend,
               CASE WHEN extract(hour FROM bucket AT TIME ZONE %(zone)s) BETWEEN 10 AND 17 THEN 'day'
                    WHEN extract(hour FROM bucket AT TIME ZONE %(zone)s) < 6 THEN 'night' END AS part,
               avg(util_mean)
        FROM cluster_minuterollup WHERE util_mean IS NOT NULL AND bucket >= %(start)s AND bucket < %(end)s
        GROUP BY 1, 2""", {"zone": ZONE, "start": start, "end": end})
    util = {(weekend, part): float(mean) for weekend, part, mean in rows}
    assert util[(False, "day")] > 1.15 * util[(False, "night")]
    assert util[(True, "day")] < util[(False, "day")]
    starts = dict(fetch("""
        SELECT extract(hour FROM start_time AT TIME ZONE %(zone)s) BETWEEN 8 AND 17, count(*) FROM cluster_job
        WHERE extract(isodow FROM start_time AT TIME ZONE %(zone)s) < 6 GROUP BY 1""", {"zone": ZONE}))
    assert starts[True] / 10 > 2 * starts[False] / 14, "on weekdays, jobs start twice as often per hour from 8 to 18"


def test_one_to_three_percent_of_the_capacity_is_down_and_allocated_minutes_go_unmeasured(week):
    physical = Gpu.objects.filter(mig_parent__isnull=True)
    before_maintenance = [day for day in whole_days() if business_day_bounds(day)[1] <= week_start(NOW)]
    assert len(before_maintenance) >= 5
    down = DailyUsage.objects.filter(day__in=before_maintenance, state="down").aggregate(t=Sum("ticks"))["t"]
    assert 0.01 <= down / (physical.count() * len(before_maintenance) * TICKS_PER_GPU_DAY) <= 0.03
    for day in before_maintenance:
        assert DailyUsage.objects.filter(day=day, state="down").exists(), f"an outage on {day}"
    _outages, gaps = history_incidents(days=DAYS, now=NOW)
    gap_gpus = physical.filter(node__hostname__in={host for host, _lo, _hi in gaps}, mig_instances__isnull=True)
    unmeasured = DailyUsage.objects.filter(day__in=whole_days(), state="unmeasured", gpu__in=gap_gpus)
    assert unmeasured.aggregate(t=Sum("ticks"))["t"] >= TICKS_PER_CARD_HOUR


def test_nodes_in_maintenance_run_nothing_and_their_status_history_agrees_with_the_calendar(week):
    start, _end = week
    windows = MaintenanceWindow.objects.filter(start__lt=NOW, end__gt=start).select_related("node")
    assert {w.node.hostname for w in windows} == {MAINTENANCE_NODE, "gpu-h200-04"}
    for window in windows:
        lo, hi = max(window.start, start), min(window.end, NOW)
        covering = NodeStatusPeriod.objects.filter(node=window.node, status=NodeStatus.MAINTENANCE, started_at__lte=lo)
        assert covering.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=hi)).exists(), window
        gpus = Gpu.objects.filter(Q(node=window.node) | Q(mig_parent__node=window.node))
        assert not Allocation.objects.filter(gpu__in=gpus, start__lt=window.end, end__gt=window.start).exists()
        assert not MinuteRollup.objects.filter(gpu__in=gpus, bucket__gte=window.start, bucket__lt=window.end).exists()
    # The calendar shows the node in maintenance all week, from Monday: so does its history.
    node_periods = NodeStatusPeriod.objects.filter(node__hostname=MAINTENANCE_NODE).order_by("started_at")
    current = node_periods.last()
    assert (current.status, current.ended_at) == (NodeStatus.MAINTENANCE, None)
    assert current.started_at == week_start(NOW) == MaintenanceWindow.objects.get(node__hostname=MAINTENANCE_NODE).start
    assert set(node_periods.exclude(pk=current.pk).values_list("status", flat=True)) <= {NodeStatus.UP}
    assert Allocation.objects.filter(gpu__node__hostname=MAINTENANCE_NODE, end__lte=current.started_at).exists()


def test_the_calendar_draws_each_maintenance_window_once(week):
    """A window is a maintenance hold and, in the history, a maintenance status period: one block, not two."""
    zone = ZoneInfo(ZONE)
    monday, sunday_night = week_bounds(NOW.astimezone(zone).date(), zone)
    calendar = calendar_for_week(get_user_model().objects.get(username="admin"), week_start=monday,
                                 week_end=sunday_night, group=GROUP_BY_NODE, now=NOW, zone=zone)
    lanes = {lane.name: lane for group in calendar.groups for lane in group.lanes}
    windows = MaintenanceWindow.objects.filter(start__lt=sunday_night, end__gt=monday).select_related("node")
    assert {w.node.hostname for w in windows} == {MAINTENANCE_NODE, "gpu-h200-04"}
    for window in windows:
        for index in range(8):
            lane = lanes[f"{window.node.hostname}/{index}"]
            during = [(b.kind, b.start, b.end) for b in lane.blocks if b.start < window.end and window.start < b.end]
            assert during == [(BlockKind.MAINTENANCE, window.start, window.end)], lane.name
