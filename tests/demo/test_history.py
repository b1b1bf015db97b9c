"""The demo's month of usage history (demo/history.py), over two days so it runs fast: a minute
rollup for every physical GPU and minute but the known holes (outages, sample gaps, maintenance
windows), scheduler-like jobs, a status history that starts with the window and agrees with the
maintenance windows, every state in the daily aggregates, GPU days that add up to capacity, a usage
report that adds up, and a second load that adds nothing. The shapes of a longer history (the daily
rhythm, the always-full and long-idle GPUs, …) are tests/demo/test_history_shapes.py's."""

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, Max, Sum
from django.db.models.functions import TruncHour

from accounting.models import DailyUnplacedUsage, DailyUsage
from accounting.usage.report import usage_report
from accounting.usage.states import STATES
from cluster.models import Allocation, Gpu, GpuHold, HoldKind, HourRollup, Job, MinuteRollup, NodeStatusPeriod
from core.timeutils import business_day_bounds, business_day_of, business_today
from demo.cluster import UNIX_USERS, load_demo
from demo.history import HISTORY_LAG, history_incidents, history_window, load_demo_history

DAYS = 2
TICKS_PER_GPU_DAY = 24 * 3600 * 840_000
NOW = datetime(2026, 11, 3, 4, 0, tzinfo=UTC)  # Tuesday noon in Shanghai
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock():
    """The history is dated by the clock (``load_demo`` reads it): one fixed moment for every test, so a
    second load cannot fall in another minute or day."""
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def shanghai(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = settings.TIME_ZONE = "Asia/Shanghai"  # as `make demo` runs


@pytest.fixture
def history(shanghai):
    load_demo(history_days=0)
    return NOW, load_demo_history(days=DAYS, now=NOW)


def minutes(lo, hi) -> int:
    return max(0, int((hi - lo) / timedelta(minutes=1)))


def test_every_physical_gpu_has_a_rollup_every_minute_but_the_outages_the_gaps_and_maintenance(history):
    now, result = history
    start, end = history_window(days=DAYS, now=now)
    physical = Gpu.objects.filter(mig_parent__isnull=True)
    holes: dict[int, list] = defaultdict(list)
    outages, gaps = history_incidents(days=DAYS, now=now)
    assert len(outages) >= DAYS and len(gaps) >= DAYS, "an outage and a sample gap every day"
    for host, lo, hi in outages + gaps:
        for gpu_id in physical.filter(node__hostname=host).values_list("pk", flat=True):
            holes[gpu_id].append((lo, hi))
    for gpu_id, during in GpuHold.objects.filter(kind=HoldKind.MAINTENANCE, during__overlap=(start, end)).values_list(
            "gpu_id", "during"):
        holes[gpu_id].append((max(start, during.lower), min(end, during.upper)))
    expected = {gpu_id: minutes(start, end) - sum(minutes(lo, hi) for lo, hi in holes[gpu_id])
                for gpu_id in physical.values_list("pk", flat=True)}
    counts = dict(MinuteRollup.objects.filter(bucket__gte=start, bucket__lt=end).values_list("gpu").annotate(Count("bucket")))
    assert counts == expected
    assert len(expected) == 64 and result["minute_rollups"] == sum(expected.values()) == MinuteRollup.objects.count()
    assert MinuteRollup.objects.aggregate(last=Max("bucket"))["last"] < now - HISTORY_LAG  # clear of the agents' backfill
    hours = MinuteRollup.objects.annotate(hour=TruncHour("bucket")).values("gpu", "hour").distinct().count()
    assert HourRollup.objects.count() == result["hour_rollups"] == hours


def test_the_jobs_are_the_demo_users_on_named_gpus_that_never_overlap(history):
    jobs = Job.objects.all()
    assert jobs.count() > 30 and all(job.external_id.startswith("demo-") and job.source == "slurm" for job in jobs)
    for job in jobs.select_related("team", "project"):
        team, project = UNIX_USERS[job.user]
        assert (job.team.slug, job.project.name) == (team, project)
    placed = Allocation.objects.filter(gpu__isnull=False)
    assert all(a.gpu.node.hostname == a.job.node_list for a in placed.select_related("gpu__node", "job"))
    assert placed.filter(gpu__mig_parent__isnull=False).exists(), "jobs on the MIG slices"
    assert Allocation.objects.filter(gpu__isnull=True, gpu_model__isnull=False).exists(), "unplaced (sacct-like) jobs"
    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT count(*) FROM cluster_allocation a JOIN cluster_allocation b
              ON a.gpu_id = b.gpu_id AND a.id < b.id AND tstzrange(a.start, a."end") && tstzrange(b.start, b."end")""")
        assert cursor.fetchone()[0] == 0


def test_the_status_history_starts_with_the_window_and_keeps_one_open_period(history):
    now, _result = history
    start, _end = history_window(days=DAYS, now=now)
    outages, _gaps = history_incidents(days=DAYS, now=now)
    for node_id in NodeStatusPeriod.objects.values_list("node", flat=True).distinct():
        periods = list(NodeStatusPeriod.objects.filter(node=node_id).order_by("started_at"))
        assert periods[0].started_at == start
        assert [p.ended_at for p in periods[:-1]] == [p.started_at for p in periods[1:]]
        assert periods[-1].ended_at is None and all(p.ended_at for p in periods[:-1])
    unreachable = NodeStatusPeriod.objects.filter(status="unreachable").order_by("started_at")
    assert [(p.node.hostname, p.started_at, p.ended_at) for p in unreachable] == sorted(outages, key=lambda o: o[1])
    # the firmware update (Tuesday 02:00–06:00) and the node in maintenance since Monday 00:00
    maintenance = NodeStatusPeriod.objects.filter(status="maintenance").order_by("started_at")
    monday = datetime(2026, 11, 1, 16, 0, tzinfo=UTC)
    assert [(p.node.hostname, p.started_at, p.ended_at) for p in maintenance] == [
        ("gpu-l40s-02", monday, None),
        ("gpu-h200-04", monday + timedelta(hours=26), monday + timedelta(hours=30)),
    ]


def test_every_state_appears_and_each_gpu_day_adds_up_to_capacity(history):
    now, _result = history
    assert set(DailyUsage.objects.values_list("state", flat=True)) == set(STATES)
    assert DailyUnplacedUsage.objects.exists()
    today = business_today(now=now)
    whole_days = [today - timedelta(days=n) for n in range(DAYS, 0, -1)]
    per_gpu_day = Counter({(gpu, day): ticks for gpu, day, ticks in DailyUsage.objects.filter(day__in=whole_days)
                           .values_list("gpu", "day").annotate(Sum("ticks"))})
    physical = Gpu.objects.filter(mig_parent__isnull=True).values_list("pk", flat=True)
    assert per_gpu_day == Counter({(gpu, day): TICKS_PER_GPU_DAY for gpu in physical for day in whole_days})


def test_the_usage_report_adds_up(history):
    now, _result = history
    today = business_today(now=now)
    start, end = business_day_bounds(today - timedelta(days=DAYS))[0], business_day_bounds(today)[0]
    report = usage_report(start=start, end=end, by="gpu_model", now=now)
    gpus_of_model = Counter(Gpu.objects.filter(mig_parent__isnull=True).values_list("model__short_name", flat=True))
    assert {row["gpu_model"] for row in report.rows} == set(gpus_of_model)
    for row in report.rows:
        assert row["card_hours_busy"] + row["card_hours_idle"] + row["card_hours_unmeasured"] == row["card_hours_allocated"]
        assert (row["card_hours_allocated"] + row["card_hours_unallocated"] + row["card_hours_down"]
                == row["capacity_card_hours"] == Decimal(24 * DAYS * gpus_of_model[row["gpu_model"]]))
        assert row["card_hours_busy"] > row["card_hours_idle"] > 0 and row["card_hours_unallocated"] > 0
    assert sum(row["card_hours_down"] for row in report.rows) > 0, "an outage a day, and the node in maintenance"
    teams = usage_report(start=start, end=end, by="team", now=now)
    assert {row["team"] for row in teams.rows} == {"LLM Training", "Vision Research", "Inference Platform"}
    for row in teams.rows:
        assert row["card_hours_busy"] + row["card_hours_idle"] + row["card_hours_unmeasured"] == row["card_hours_allocated"]


def test_loading_twice_adds_nothing(shanghai):
    load_demo(history_days=DAYS)
    tables = (Job, Allocation, MinuteRollup, HourRollup, NodeStatusPeriod, DailyUsage, DailyUnplacedUsage)
    counts = [model.objects.count() for model in tables]
    assert all(counts)
    load_demo(history_days=DAYS)
    assert [model.objects.count() for model in tables] == counts
    assert load_demo_history(days=DAYS)["skipped"]


def test_make_demo_loads_the_last_days_first_and_the_older_ones_after_saying_so(shanghai, monkeypatch, client):
    """`make demo` serves after the last days are in (``recent_only``); the boards say the rest is loading
    until ``load_demo_older`` has loaded it (jobs ``demo-h<n>``, all before the recent part begins)."""
    from accounting.usage.selectors import backfill_in_progress
    from demo.cluster import load_demo_older

    monkeypatch.setattr("demo.cluster.RECENT_DAYS", 1)
    load_demo(history_days=3, recent_only=True)
    start, _end = history_window(days=3, now=NOW)
    recent_start = history_window(days=1, now=NOW)[0]
    loading = backfill_in_progress()
    assert (loading.first, loading.last) == (business_day_of(start), business_day_of(recent_start) - timedelta(days=1))
    assert not DailyUsage.objects.filter(day__lt=loading.last).exists()
    assert not Job.objects.filter(external_id__startswith="demo-h").exists()
    client.force_login(get_user_model().objects.get(username="admin"))
    page = client.get("/", {"date": str(loading.last)})
    assert page.status_code == 200
    assert "Older history is still loading" in page.content.decode()

    result = load_demo_older(history_days=3, now=NOW)
    assert not result["skipped"] and result["jobs"] > 0
    assert backfill_in_progress() is None
    older = Job.objects.filter(external_id__startswith="demo-h")
    assert older.count() == result["jobs"]
    assert all(start <= job.start_time and job.end_time <= recent_start for job in older)
    recent = Job.objects.filter(external_id__regex=r"^demo-[0-9]+$")
    assert recent.exists() and all(job.start_time >= recent_start for job in recent)
    days = set(DailyUsage.objects.values_list("day", flat=True))
    assert days == {business_today(now=NOW) - timedelta(days=n) for n in range(4)}
    assert "Older history is still loading" not in client.get("/", {"date": str(loading.last)}).content.decode()
    counts = [model.objects.count() for model in (Job, MinuteRollup, DailyUsage)]
    assert load_demo_older(history_days=3, now=NOW)["skipped"]
    assert [model.objects.count() for model in (Job, MinuteRollup, DailyUsage)] == counts
