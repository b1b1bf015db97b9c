"""The daily board's tables (issue 14) after aggregate_day on the hand-made day: the hourly rows and the
holders' rows add up exactly to the daily usage, a recompute replaces them, and the idle ranking equals a
brute-force sum over the minute rollups."""

from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
from django.conf import settings

from accounting.models import (
    DailyHolderUsage,
    DailyModelCapacity,
    DailyModelUsage,
    DailyUnplacedUsage,
    DailyUsage,
    HourlyModelCapacity,
    HourlyModelUsage,
    HourlyUsage,
)
from accounting.usage.services import aggregate_day, usage_recompute
from cluster.models import Allocation, GpuHold, Job, MinuteRollup
from tests.accounting.usage.usage_day import DAY, GPU, NOW, at, job
from tests.conftest import T0

pytestmark = pytest.mark.django_db
ALLOCATED = ("busy", "idle", "unmeasured")


def daily_by_team(day=DAY) -> Counter:
    out = Counter()
    for gpu_id, state, team_id, ticks in DailyUsage.objects.filter(day=day).values_list("gpu", "state", "team", "ticks"):
        out[(gpu_id, state, team_id)] += ticks
    return out


def hourly_by_team(day=DAY) -> Counter:
    out = Counter()
    for gpu_id, state, team_id, ticks in HourlyUsage.objects.filter(day=day).values_list("gpu", "state", "team", "ticks"):
        out[(gpu_id, state, team_id)] += ticks
    return out


def check_holders_add_up(day=DAY) -> None:
    holders = Counter()
    unplaced = Counter()
    for row in DailyHolderUsage.objects.filter(day=day):
        assert (row.job_id is None) != (row.booking_id is None) and row.state in ALLOCATED
        if row.gpu_id is None:
            assert row.state == "unmeasured" and row.job_id
            models = set(Allocation.objects.filter(job_id=row.job_id, gpu__isnull=True).values_list("gpu_model", flat=True))
            (model,) = models
            unplaced[(row.team_id, row.project_id, model)] += row.ticks
        else:
            holders[(row.gpu_id, row.state, row.team_id, row.project_id)] += row.ticks
    allocated = Counter({(r.gpu_id, r.state, r.team_id, r.project_id): r.ticks
                         for r in DailyUsage.objects.filter(day=day, state__in=ALLOCATED)})
    assert holders == allocated
    assert unplaced == Counter({(r.team_id, r.project_id, r.gpu_model_id): r.ticks
                                for r in DailyUnplacedUsage.objects.filter(day=day)})


def test_the_hours_add_up_to_the_day(day):
    aggregate_day(day=DAY, now=NOW)
    assert hourly_by_team() == daily_by_team()
    hours = set(HourlyUsage.objects.filter(day=DAY).values_list("hour", flat=True))
    assert hours == {T0 + timedelta(hours=h) for h in range(24)}
    g0_busy = dict(HourlyUsage.objects.filter(day=DAY, gpu=day["g0"], state="busy").values_list("hour", "ticks"))
    assert g0_busy == {at(1): GPU * 3600}


def test_the_holders_add_up_to_the_allocated_day_and_the_unplaced(day):
    aggregate_day(day=DAY, now=NOW)
    check_holders_add_up()
    in_booking = Job.objects.get(external_id__startswith="a-in-booking")
    assert not DailyHolderUsage.objects.filter(job=in_booking).exists()  # the booking holds the GPU: counted once
    booking_id = GpuHold.objects.get(gpu=day["g1"]).booking_id
    assert set(DailyHolderUsage.objects.filter(booking_id=booking_id).values_list("state", "ticks")) == {
        ("busy", GPU * 3600), ("unmeasured", GPU * 3600)}


def stored_rows() -> tuple[Counter, Counter]:
    return (Counter(HourlyUsage.objects.values_list("hour", "gpu", "state", "team", "ticks")),
            Counter(DailyHolderUsage.objects.values_list("gpu", "job", "booking", "state", "ticks")))


def test_a_recompute_replaces_the_rows(day):
    aggregate_day(day=DAY, now=NOW)
    first = stored_rows()
    aggregate_day(day=DAY, now=NOW)
    usage_recompute(start=T0, end=T0 + timedelta(days=1), now=NOW)
    aggregate_day(day=DAY, now=NOW, gpu_ids=[day["g0"].pk], unplaced=False)
    aggregate_day(day=DAY, now=NOW, gpu_ids=[], unplaced=True)
    again = stored_rows()
    assert len(again[0]) == HourlyUsage.objects.count() and len(again[1]) == DailyHolderUsage.objects.count()
    assert again == first


def test_a_moved_job_moves_its_holder_rows(day, team_a):
    aggregate_day(day=DAY, now=NOW)
    extra = job(team_a, day["g2"], 8, 9, name="a-late")
    aggregate_day(day=DAY, now=NOW, gpu_ids=[day["g2"].pk], unplaced=False)
    assert DailyHolderUsage.objects.get(job=extra).ticks == GPU * 3600
    check_holders_add_up()
    assert hourly_by_team() == daily_by_team()


def brute_force_idle() -> Counter:
    """Idle ticks per holder, minute by minute: the GPU's booking if one covers the minute, else its jobs'
    allocations in start order up to the GPU's capacity; idle where the rollup's mean is under the threshold."""
    start, end = T0, T0 + timedelta(days=1)
    out = Counter()
    rollups = {(r.gpu_id, r.bucket): r for r in MinuteRollup.objects.filter(bucket__gte=start, bucket__lt=end)}
    holds = list(GpuHold.objects.filter(kind="booking", active=True))
    allocations = list(Allocation.objects.filter(gpu__isnull=False).select_related("gpu").order_by("start", "pk"))
    for gpu_id in {a.gpu.mig_parent_id or a.gpu_id for a in allocations} | {h.gpu_id for h in holds}:
        minute = start
        while minute < end:
            rollup = rollups.get((gpu_id, minute))
            idle_s = rollup.util_covered_s if rollup and rollup.util_mean < settings.CARDHOUR_IDLE_THRESHOLD_PCT else 0
            booked = [h for h in holds if h.gpu_id == gpu_id and h.during.lower <= minute < h.during.upper]
            if booked:
                out[("booking", booked[0].booking_id)] += GPU * idle_s
            else:
                left = GPU
                for a in allocations:
                    if (a.gpu.mig_parent_id or a.gpu_id) == gpu_id and a.start <= minute < a.end and left:
                        share = min(a.share, left)
                        left -= share
                        out[("job", a.job_id)] += share * idle_s
            minute += timedelta(minutes=1)
    return +out


def test_the_idle_ranking_equals_a_brute_force_sum(day, team_b):
    job(team_b, day["g2"], 20, 21, name="b-idle")
    rollups_at = [at(20) + timedelta(minutes=m) for m in range(30)]
    MinuteRollup.objects.bulk_create([
        MinuteRollup(gpu=day["g2"], bucket=b, util_mean=2.0, util_max=2.0, covered_s=60, util_covered_s=45,
                     sample_count=6) for b in rollups_at])
    aggregate_day(day=DAY, now=NOW)
    stored = Counter()
    for job_id, booking_id, ticks in DailyHolderUsage.objects.filter(day=DAY, state="idle").values_list(
            "job", "booking", "ticks"):
        stored[("job", job_id) if job_id else ("booking", booking_id)] += ticks
    expected = brute_force_idle()
    assert stored == expected
    ranking = [holder for holder, _ticks in stored.most_common()]
    assert ranking == [holder for holder, _ticks in expected.most_common()] and len(ranking) == 2


def test_a_day_starting_inside_an_hour(day, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Kolkata"
    kolkata_day = date(2026, 11, 2)
    aggregate_day(day=kolkata_day, now=NOW + timedelta(days=1))
    hours = sorted(set(HourlyUsage.objects.filter(day=kolkata_day).values_list("hour", flat=True)))
    assert hours[0] == datetime(2026, 11, 1, 18, 30, tzinfo=UTC)
    assert hours[1] == datetime(2026, 11, 1, 19, tzinfo=UTC) and hours[-1] == datetime(2026, 11, 2, 18, tzinfo=UTC)
    assert len(hours) == 25
    assert hourly_by_team(kolkata_day) == daily_by_team(kolkata_day)
    check_holders_add_up(kolkata_day)


def by_model_from_gpu_hours(day=DAY) -> tuple[Counter, Counter]:
    """The day's hourly usage summed by GPU model here, and its whole GPUs with rows per hour and model."""
    usage, gpus = Counter(), {}
    for hour, model_id, state, team_id, ticks, gpu_id, parent in HourlyUsage.objects.filter(day=day).values_list(
            "hour", "gpu__model", "state", "team", "ticks", "gpu", "gpu__mig_parent"):
        usage[(hour, model_id, state, team_id)] += ticks
        if parent is None:
            gpus.setdefault((hour, model_id), set()).add(gpu_id)
    return usage, Counter({key: len(ids) for key, ids in gpus.items()})


def stored_by_model(day=DAY) -> tuple[Counter, Counter]:
    usage = Counter({(h, m, s, t): ticks for h, m, s, t, ticks in HourlyModelUsage.objects.filter(day=day).values_list(
        "hour", "gpu_model", "state", "team", "ticks")})
    gpus = Counter({(h, m): n for h, m, n in HourlyModelCapacity.objects.filter(day=day).values_list("hour", "gpu_model", "gpus")})
    return usage, gpus


def daily_by_model_from_gpus(day=DAY) -> tuple[Counter, Counter]:
    usage, gpus = Counter(), {}
    for model_id, state, team_id, project_id, ticks, gpu_id in DailyUsage.objects.filter(day=day).values_list(
            "gpu__model", "state", "team", "project", "ticks", "gpu"):
        usage[(model_id, state, team_id, project_id)] += ticks
        gpus.setdefault(model_id, set()).add(gpu_id)
    return usage, Counter({model_id: len(ids) for model_id, ids in gpus.items()})


def daily_stored_by_model(day=DAY) -> tuple[Counter, Counter]:
    usage = Counter({(m, s, t, p): ticks for m, s, t, p, ticks in DailyModelUsage.objects.filter(day=day).values_list(
        "gpu_model", "state", "team", "project", "ticks")})
    return usage, Counter(dict(DailyModelCapacity.objects.filter(day=day).values_list("gpu_model", "gpus")))


def test_the_hours_by_gpu_model_are_the_gpu_hours_summed_after_every_recompute(day, team_a):
    """What the monthly profile and the boards' tiles read (issue 15) is the day's usage summed by model, also after a
    recompute of one GPU (its rows are rewritten for the whole day, not only that GPU's share)."""
    aggregate_day(day=DAY, now=NOW)
    usage, gpus = stored_by_model()
    assert usage and usage == by_model_from_gpu_hours()[0] and gpus == by_model_from_gpu_hours()[1]
    assert sum(usage.values()) == sum(daily_by_team().values())
    job(team_a, day["g2"], 8, 9, name="a-late")
    aggregate_day(day=DAY, now=NOW, gpu_ids=[day["g2"].pk], unplaced=False)
    assert stored_by_model() == by_model_from_gpu_hours()
    assert stored_by_model()[0] != usage  # the new job moved ticks from unallocated to team A
    daily = daily_stored_by_model()
    assert daily[0] and daily == daily_by_model_from_gpus()
    assert sum(daily[1].values()) == DailyUsage.objects.filter(day=DAY).values("gpu").distinct().count()
