"""A month of Team Alpha's plan (November 2026, as of Friday the 20th, 12:00 UTC), figures by hand:

- running ``over``: 2 GPUs for 10 h, estimate 10 → 20 used, 200 % (over); priority 100;
- running ``waiting``: 1 GPU (unplaced) for 2 h, estimate 4 → 2 used, 50 % (on plan: still running); data not
  ready: 2 card-hours held waiting, still waiting; priority 500;
- queued ``queued-high`` (priority 900, estimate 8) and ``queued-none`` (no priority, no estimate);
- finished ``under`` (11-10 00:00–05:00, 1 GPU, estimate 10 → 50 %, under; data ready at 01:00: 1 card-hour
  waited), ``close`` (11-17 00:00–04:00, estimate 4.4 → 90.9 %), ``unestimated`` (11-18, 2 h) and ``across``
  (11-08 20:00–11-09 04:00, estimate 8 → 100 %: planned 4 in the week of 11-02 and 4 in the week of 11-09);
- ``october`` ended in October, and Team Beta's ``beta`` job: on no list.

Weekly planned: 11-02: 4; 11-09: 14; 11-16: 18.4 (4.4 + 10 + 4). Actual from the daily usage: 11-02: 4 (100 %);
11-09: 9 (64.3 %, under); 11-16 so far: 29 (157.6 %, over); 11-23 and 11-30 not begun.
"""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from accounting.models import DailyUnplacedUsage, DailyUsage
from cluster.models import Allocation, Gpu, Job

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
NOVEMBER = date(2026, 11, 1)
CARD_HOUR = 840_000 * 3600  # ticks
WHOLE = 840_000  # a whole GPU's share


def make_job(team, name, *, state, gpus=(), unplaced=0, start=None, end=None, estimate=None, priority=None,
             data_ready=None, data_ready_at=None, gpu_count=None, model=None):
    job = Job.objects.create(
        source="slurm", external_id=name, name=name, user="ed", team=team, state=state, priority=priority,
        gpu_count=gpu_count if gpu_count is not None else (len(gpus) or unplaced),
        estimated_card_hours=None if estimate is None else Decimal(estimate), data_ready=data_ready,
        data_ready_at=data_ready_at, submit_time=(start or NOW) - timedelta(minutes=5), start_time=start,
        end_time=end,
    )
    for gpu in gpus:
        Allocation.objects.create(job=job, gpu=gpu, share=WHOLE, start=start, end=end)
    if unplaced:
        Allocation.objects.create(job=job, gpu=None, gpu_model=model, share=WHOLE * unplaced, start=start, end=end)
    return job


def at(month_day: int, hour: int = 0) -> datetime:
    return datetime(2026, 11, month_day, hour, tzinfo=UTC)


@pytest.fixture
def plan_month(team_a, team_b, small_cluster):
    h200 = list(Gpu.objects.filter(model=small_cluster["h200"]).order_by("pk"))
    jobs = {
        "over": make_job(team_a, "over", state="running", gpus=h200[:2], start=NOW - timedelta(hours=10),
                         estimate="10", priority=100),
        "waiting": make_job(team_a, "waiting", state="running", unplaced=1, model=small_cluster["h200"],
                            start=NOW - timedelta(hours=2), estimate="4", priority=500, data_ready=False),
        "queued-high": make_job(team_a, "queued-high", state="pending", estimate="8", priority=900),
        "queued-none": make_job(team_a, "queued-none", state="pending", gpu_count=1),
        "under": make_job(team_a, "under", state="completed", gpus=h200[2:3], start=at(10), end=at(10, 5),
                          estimate="10", data_ready=True, data_ready_at=at(10, 1)),
        "close": make_job(team_a, "close", state="completed", gpus=h200[2:3], start=at(17), end=at(17, 4),
                          estimate="4.4"),
        "unestimated": make_job(team_a, "unestimated", state="failed", gpus=h200[2:3], start=at(18), end=at(18, 2)),
        "across": make_job(team_a, "across", state="completed", gpus=h200[3:4], start=at(8, 20), end=at(9, 4),
                           estimate="8"),
        "october": make_job(team_a, "october", state="completed", gpus=h200[3:4],
                            start=datetime(2026, 10, 30, tzinfo=UTC), end=datetime(2026, 10, 31, tzinfo=UTC),
                            estimate="1"),
        "beta": make_job(team_b, "beta", state="completed", gpus=h200[3:4], start=at(12), end=at(12, 3),
                         estimate="1", data_ready_at=at(12, 2)),
    }
    gpu = h200[0]
    for day, state, hours in [(8, "busy", 4), (9, "busy", 4), (10, "busy", 3), (10, "idle", 2), (17, "busy", 4),
                              (18, "unmeasured", 2), (20, "idle", 20)]:
        DailyUsage.objects.create(day=date(2026, 11, day), gpu=gpu, state=state, team=team_a, ticks=hours * CARD_HOUR)
    DailyUnplacedUsage.objects.create(day=date(2026, 11, 19), team=team_a, gpu_model=small_cluster["h200"],
                                      ticks=3 * CARD_HOUR)
    DailyUsage.objects.create(day=date(2026, 11, 17), gpu=gpu, state="busy", team=team_b, ticks=50 * CARD_HOUR)
    DailyUsage.objects.create(day=date(2026, 11, 17), gpu=h200[1], state="unallocated", ticks=24 * CARD_HOUR)
    return jobs
