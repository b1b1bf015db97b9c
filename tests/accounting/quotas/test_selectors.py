"""Quota reads on a hand-made pair of days: team A's H200 job (busy, in a project), its L40S job
(unmeasured), an unplaced H200 job and a short job the next day; team B's L40S job, under no quota.
Overflow is checked hour by hour in exact card-hours (DESIGN.md §5, §6)."""

from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from accounting.models import DailyUnplacedUsage, DailyUsage, Quota
from accounting.quotas.rules import overflow_totals
from accounting.quotas.selectors import (
    day_left,
    quota_status,
    quota_statuses,
    quotas_for,
    team_overflow,
    team_usage_events,
)
from accounting.usage.services import aggregate_day
from cluster.bookings.slots import epoch
from cluster.models import Allocation, Gpu, GpuModel, Job, MinuteRollup, Node
from core.timeutils import business_day_bounds
from tests.conftest import T0

DAY = date(2026, 11, 2)
NEXT = DAY + timedelta(days=1)
NOW = T0 + timedelta(days=1, hours=3)  # the next day, 03:00
GPU = 840_000
CH = GPU * 3600
pytestmark = pytest.mark.django_db


def at(hours: float):
    return T0 + timedelta(hours=hours)


def job(team, gpu, start_h, end_h, *, share=GPU, model=None, project=None, name="j"):
    run = Job.objects.create(source="api", external_id=f"{name}-{start_h}", team=team, project=project,
                             state="completed", start_time=at(start_h), end_time=at(end_h))
    Allocation.objects.create(job=run, gpu=gpu, gpu_model=model, share=share, start=at(start_h), end=at(end_h))
    return run


def busy(gpu, start_h, end_h):
    minutes = round((end_h - start_h) * 60)
    MinuteRollup.objects.bulk_create([
        MinuteRollup(gpu=gpu, bucket=at(start_h) + timedelta(minutes=m), util_mean=50.0, util_max=50.0,
                     covered_s=60, util_covered_s=60, sample_count=6)
        for m in range(minutes)
    ])


def card_hours(ticks) -> Fraction:
    return Fraction(ticks, CH)


@pytest.fixture
def cast(team_a, team_b):
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    node = Node.objects.create(hostname="n1")
    g0 = Gpu.objects.create(node=node, index=0, uuid="G0", model=h200, memory_mib=1)
    g1 = Gpu.objects.create(node=node, index=1, uuid="G1", model=l40s, memory_mib=1)
    project = team_a.projects.get()
    job(team_a, g0, 0, 10, project=project, name="a-train")  # 10 card-hours busy, H200
    busy(g0, 0, 10)
    job(team_a, g1, 2, 6, name="a-eval")  # 4 card-hours unmeasured, L40S
    job(team_a, None, 4, 7, share=2 * GPU, model=h200, name="a-unplaced")  # 6 card-hours unplaced, H200
    job(team_b, g1, 8, 9, name="b-eval")  # team B: no quota, never overflow
    job(team_a, g0, 24, 26, project=project, name="a-next")  # the next day: 2 card-hours unmeasured, H200
    aggregate_day(day=DAY, now=NOW)
    aggregate_day(day=NEXT, now=NOW)
    return {"h200": h200, "l40s": l40s, "g0": g0, "g1": g1, "project": project}


def quota(team, card_hours_, *, model=None, start=DAY, days=30):
    return Quota.objects.create(team=team, gpu_model=model, period_start=start, expires=start + timedelta(days=days),
                                card_hours=Decimal(card_hours_))


# ---- status ---------------------------------------------------------------------------------------------

def test_the_share_of_a_business_day_still_to_come():
    start, end = business_day_bounds(DAY)
    assert day_left(DAY, start - timedelta(hours=1)) == 1 and day_left(DAY, start) == 1
    assert day_left(DAY, start + (end - start) / 4) == Fraction(3, 4)
    assert day_left(DAY, end) == 0 and day_left(DAY, end + timedelta(days=3)) == 0


def test_the_forecast_burns_the_rest_of_today_as_of_now(cast, team_a):
    """Team-wide 100 card-hours, 22 used, 20 a day: from the start of the next day 78 last 3.9 days."""
    team_wide = quota(team_a, "100")
    start, _end = business_day_bounds(NEXT)
    at_start = quota_statuses(quotas=[team_wide], today=NEXT, now=start)[0].forecast
    assert at_start.run_out == NEXT + timedelta(days=3)  # 20 today, then 58 over 2.9 days
    over = quota_statuses(quotas=[team_wide], today=NEXT)[0].forecast  # without now: the day counts as over
    assert over.run_out == NEXT + timedelta(days=4)



def test_it_counts_a_model_quota_and_a_team_wide_one(cast, team_a, django_assert_num_queries):
    h200 = quota(team_a, "5", model=cast["h200"])
    team_wide = quota(team_a, "100")
    with django_assert_num_queries(2):
        model_status, team_status = quota_statuses(quotas=[h200, team_wide], today=NEXT)
    # H200: 10 busy + 6 unplaced on the day, 2 today (partial days count).
    assert model_status.used_card_hours == Decimal("18.000") and model_status.daily_ticks == {DAY: 16 * CH, NEXT: 2 * CH}
    assert model_status.remaining_card_hours == Decimal("-13.000")
    assert model_status.used_percent == Decimal("360.0") and model_status.thresholds == [50, 75, 90, 100]
    # used up on the first day (16 of 5 card-hours): it ran out then, not "today"
    assert model_status.forecast.exhausted and model_status.forecast.exhausted_on == DAY
    assert model_status.forecast.run_out == DAY
    # Team-wide: every model, team B's job not.
    assert team_status.used_card_hours == Decimal("22.000") and team_status.used_percent == Decimal("22.0")
    forecast = team_status.forecast
    assert forecast.burn_days == 1 and forecast.burn_ticks_per_day == 20 * CH  # the quota is one full day old
    assert forecast.run_out == NEXT + timedelta(days=4)  # ceil(78 / 20)
    assert forecast.runs_out_before_expiry and team_status.active and not team_status.expiry_warning


def test_it_counts_only_the_quota_period(cast, team_a):
    later = quota(team_a, "10", start=NEXT, days=5)
    status = quota_status(quota=later, now=NOW)
    assert status.today == NEXT and status.used_card_hours == Decimal("2.000")
    assert status.forecast.burn_ticks_per_day == 0 and status.forecast.run_out is None
    assert quota_status(quota=later, today=DAY).used_ticks == 0
    assert quota_status(quota=later, today=NEXT + timedelta(days=9)).expiry_warning is False


def test_it_sees_the_quotas_of_its_teams(cast, team_a, team_b, lead_a, engineer_b, finance_user):
    mine = quota(team_a, "5")
    theirs = quota(team_b, "5", start=DAY + timedelta(days=40))
    assert list(quotas_for(lead_a)) == [mine]
    assert list(quotas_for(engineer_b)) == [theirs]
    assert set(quotas_for(finance_user)) == {mine, theirs}
    assert list(quotas_for(finance_user, active_on=DAY)) == [mine]


# ---- usage in time order and overflow ----------------------------------------------------------------------

def rows_of(day, team) -> dict:
    totals = defaultdict(int)
    for row in DailyUsage.objects.filter(day=day, team=team, state__in=["busy", "idle", "unmeasured"]):
        totals[(row.gpu.model_id, row.project_id, row.state)] += row.ticks
    for row in DailyUnplacedUsage.objects.filter(day=day, team=team):
        totals[(row.gpu_model_id, row.project_id, "unmeasured")] += row.ticks
    return dict(totals)


def sums_of(events, day) -> dict:
    totals = defaultdict(int)
    for event in events:
        if event.day == day:
            totals[(event.gpu_model_id, event.project_id, event.state)] += event.ticks
    return dict(totals)


def test_only_the_day_a_quota_runs_out_comes_hour_by_hour(cast, team_a):
    quota(team_a, "5", model=cast["h200"])
    quota(team_a, "6")
    events = team_usage_events(team_ids=[team_a.pk], start=T0, end=T0 + timedelta(days=2), now=NOW)
    moments = defaultdict(set)
    for event in events:
        moments[event.day].add(event.moment)
    assert moments[DAY] == {epoch(at(h)) for h in range(10)}  # the hours that have usage
    assert moments[NEXT] == {epoch(at(24))}
    assert sums_of(events, DAY) == rows_of(DAY, team_a) and sums_of(events, NEXT) == rows_of(NEXT, team_a)
    unplaced = [e.ticks for e in events if e.day == DAY and e.project_id is None and e.gpu_model_id == cast["h200"].pk]
    assert unplaced == [2 * CH] * 3  # the unplaced job's 2 GPUs, 04:00–07:00, in the hours they held


def test_overflow_is_taken_in_time_order(cast, team_a, team_b):
    quota(team_a, "5", model=cast["h200"])
    quota(team_a, "6")
    parts = team_overflow(team_ids=[team_a.pk, team_b.pk], start=T0, end=T0 + timedelta(days=2), now=NOW)
    # Each hour, no project first: the unplaced H200s (2 an hour, 04–07), the L40S (1, 02–06), then the
    # project's H200 (1, 00–10). The H200 quota fills in hour 04 (its 5th card-hour is half the unplaced
    # pair; the other half goes to the team-wide quota, which also takes the L40S and hour 04's project
    # hour); the team-wide quota fills with the first unplaced card-hour of hour 05, and from then on all
    # of A's usage overflows.
    h200, l40s, project = cast["h200"].pk, cast["l40s"].pk, cast["project"].pk
    assert {key: card_hours(ticks) for key, ticks in overflow_totals(parts).items()} == {
        (DAY, team_a.pk, project, h200, "busy"): 5,
        (DAY, team_a.pk, None, h200, "unmeasured"): 3,
        (DAY, team_a.pk, None, l40s, "unmeasured"): 1,
        (NEXT, team_a.pk, project, h200, "unmeasured"): 2,
    }
    first = parts[0]
    assert (first.moment, first.project_id, card_hours(first.ticks)) == (epoch(at(5)), None, 1)
    assert all(part.team_id == team_a.pk for part in parts)


def test_usage_before_the_range_counts_against_the_quota(cast, team_a):
    quota(team_a, "5", model=cast["h200"])
    quota(team_a, "6")
    parts = team_overflow(team_ids=[team_a.pk], start=at(24), end=at(48), now=NOW)
    assert overflow_totals(parts) == {(NEXT, team_a.pk, cast["project"].pk, cast["h200"].pk, "unmeasured"): 2 * CH}


def test_usage_under_no_quota_never_overflows(cast, team_a, team_b):
    quota(team_a, "1", start=NEXT + timedelta(days=1))
    assert team_overflow(team_ids=[team_a.pk, team_b.pk], start=T0, end=T0 + timedelta(days=2), now=NOW) == []


def test_the_hourly_detail_adds_up_to_the_daily_rows_even_when_they_lag(cast, team_a):
    quota(team_a, "5", model=cast["h200"])
    quota(team_a, "6")
    job(team_a, cast["g0"], 12, 13, project=cast["project"], name="a-late")  # not aggregated yet
    events = team_usage_events(team_ids=[team_a.pk], start=T0, end=T0 + timedelta(days=1), now=NOW)
    assert sums_of(events, DAY) == rows_of(DAY, team_a)


def test_a_day_with_a_clock_change_has_its_own_number_of_hours(settings):
    from accounting.quotas.selectors import _hours

    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Europe/Berlin"
    autumn = _hours(date(2026, 10, 25))
    assert len(autumn) == 25 and all(hi - lo == timedelta(hours=1) for lo, hi in autumn)
    assert len(_hours(date(2026, 3, 29))) == 23
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Kolkata"  # a half-hour offset: hours start at :30 UTC
    assert [lo.minute for lo, _hi in _hours(DAY)] == [30] * 24


@pytest.mark.parametrize("two_projects", [False, True])
def test_the_crossing_day_from_the_stored_hours_is_the_live_computation(cast, team_a, monkeypatch, two_projects):
    """Issue 18: a crossing day's hours come from the stored hourly usage; a GPU that a team held for two
    projects in one state (the hourly rows have no project) is computed live. Both give the live figures."""
    from accounting.models import HourlyUsage
    from accounting.quotas import selectors

    quota(team_a, "5", model=cast["h200"])
    quota(team_a, "6")
    if two_projects:  # team A busy on g0 with no project too: g0 is computed live, g1 still read
        job(team_a, cast["g0"], 12, 13, name="a-no-project")
        busy(cast["g0"], 12, 13)
        aggregate_day(day=DAY, now=NOW)
    live_gpus = []
    real = selectors.usage_of_window
    monkeypatch.setattr(selectors, "usage_of_window",
                        lambda **kw: live_gpus.append(tuple(kw["gpu_ids"])) or real(**kw))
    stored = team_usage_events(team_ids=[team_a.pk], start=T0, end=T0 + timedelta(days=2), now=NOW)
    assert set(live_gpus) == ({(cast["g0"].pk,)} if two_projects else set())
    HourlyUsage.objects.filter(day=DAY).delete()  # no stored hours: every GPU computed live, hour by hour
    live_gpus.clear()
    live = team_usage_events(team_ids=[team_a.pk], start=T0, end=T0 + timedelta(days=2), now=NOW)
    assert set(live_gpus) == {(cast["g0"].pk, cast["g1"].pk)}
    assert stored == live
    assert sums_of(stored, DAY) == rows_of(DAY, team_a)
