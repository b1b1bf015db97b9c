"""Job KPIs on hand-made timelines: every figure below is worked out by hand in its comment."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.jobs.kpis import (
    INTERRUPTED_STATES,
    TICKS_PER_CARD_HOUR,
    AllocationSpan,
    MinuteUsage,
    RunRecord,
    card_hours,
    interruptions,
    job_kpis,
    job_times,
    job_usage,
    percent,
    percent_of,
)
from cluster.models import JobState

T0 = datetime(2026, 11, 2, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
GPU = 840_000  # ticks per second of a whole GPU
HALF = GPU // 2


def minute(gpu_id, m, util, covered_s=60):
    return MinuteUsage(gpu_id=gpu_id, minute=T0 + m * MIN, util_mean=util, util_covered_s=covered_s)


def gpu_s(seconds) -> Fraction:
    """GPU-seconds in ticks."""
    return Fraction(seconds) * GPU


# --- queue wait, run time, turnaround


def test_it_measures_a_finished_run():
    times = job_times(submit=T0, start=T0 + 10 * MIN, end=T0 + 70 * MIN, running=False, now=T0 + 5 * 60 * MIN)
    assert times.queue_wait == timedelta(minutes=10)  # 00:10 − 00:00
    assert times.run_time == timedelta(hours=1)  # 01:10 − 00:10
    assert times.turnaround == timedelta(minutes=70)  # 01:10 − 00:00
    assert not times.running


def test_a_running_job_runs_until_now_and_has_no_turnaround_yet():
    times = job_times(submit=T0, start=T0 + 10 * MIN, end=None, running=True, now=T0 + 40 * MIN)
    assert times.queue_wait == timedelta(minutes=10)
    assert times.run_time == timedelta(minutes=30)  # now 00:40 − start 00:10
    assert times.turnaround is None
    assert times.running


def test_a_pending_job_has_no_figures():
    times = job_times(submit=T0, start=None, end=None, running=False, now=T0 + MIN)
    assert (times.queue_wait, times.run_time, times.turnaround, times.running) == (None, None, None, False)


def test_a_finished_job_without_an_end_time_has_no_run_time():
    times = job_times(submit=None, start=T0, end=None, running=False, now=T0 + 60 * MIN)
    assert (times.queue_wait, times.run_time, times.turnaround) == (None, None, None)


def test_a_job_cancelled_before_it_started_has_a_turnaround_only():
    times = job_times(submit=T0, start=None, end=T0 + 3 * MIN, running=False, now=T0 + 60 * MIN)
    assert (times.queue_wait, times.run_time, times.turnaround) == (None, None, timedelta(minutes=3))


# --- allocated, busy, idle, unmeasured


def test_each_minute_is_busy_idle_or_unmeasured_by_its_mean_and_coverage():
    # One whole GPU for five minutes = 300 GPU-s.
    allocation = AllocationSpan(gpu_id=1, share=GPU, start=T0, end=T0 + 5 * MIN)
    minutes = [
        minute(1, 0, 50.0),  # busy 60 s
        minute(1, 1, 2.0),  # idle 60 s (below 5 %)
        minute(1, 2, 80.0, covered_s=30),  # busy 30 s, unmeasured 30 s
        # minute 3: no rollup → unmeasured 60 s
        minute(1, 4, None, covered_s=0),  # no utilization (a MIG instance) → unmeasured 60 s
        minute(1, 5, 99.0),  # after the allocation ended: nothing
        minute(2, 0, 99.0),  # another GPU: nothing
    ]
    usage = job_usage([allocation], minutes, now=T0 + 60 * MIN)
    assert usage.allocated_ticks == gpu_s(300)
    assert usage.busy_ticks == gpu_s(90)  # 60 + 30
    assert usage.idle_ticks == gpu_s(60)
    assert usage.unmeasured_ticks == gpu_s(150)  # 30 + 60 + 60
    assert usage.efficiency == Fraction(90, 300)
    assert usage.allocated_card_hours == Fraction(300, 3600)
    assert usage.idle_card_hours == Fraction(60, 3600)


def test_a_half_gpu_holding_part_of_two_minutes_splits_each_part_by_that_minutes_coverage():
    # Half a GPU from 00:00:30 to 00:01:30: 30 s of minute 0 and 30 s of minute 1 = 0.5 × 60 = 30 GPU-s.
    allocation = AllocationSpan(gpu_id=7, share=HALF, start=T0 + 30 * SEC, end=T0 + 90 * SEC)
    minutes = [
        minute(7, 0, 40.0),  # fully covered, busy: 0.5 × 30 s × 60/60 = 15 GPU-s busy
        minute(7, 1, 3.0, covered_s=30),  # half covered, idle: 0.5 × 30 s × 30/60 = 7.5 idle, 7.5 unmeasured
    ]
    usage = job_usage([allocation], minutes, now=T0 + 60 * MIN)
    assert usage.allocated_ticks == gpu_s(30) == 25_200_000
    assert usage.busy_ticks == gpu_s(15) == 12_600_000
    assert usage.idle_ticks == gpu_s(Fraction(15, 2)) == 6_300_000
    assert usage.unmeasured_ticks == 6_300_000
    assert usage.efficiency == Fraction(1, 2)


def test_an_unplaced_allocation_is_allocated_and_unmeasured():
    # Four GPUs, place unknown, for one hour: 4 card-hours, all unmeasured; other GPUs' minutes do not count.
    allocation = AllocationSpan(gpu_id=None, share=4 * GPU, start=T0, end=T0 + 60 * MIN)
    usage = job_usage([allocation], [minute(1, 0, 90.0)], now=T0 + 120 * MIN)
    assert usage.allocated_card_hours == 4
    assert usage.unmeasured_card_hours == 4
    assert usage.busy_ticks == usage.idle_ticks == 0
    assert usage.efficiency == 0


def test_a_running_allocation_counts_until_now():
    # Held from 00:00 and still running at 00:01:30: 90 GPU-s. Minute 0 busy 60 s; minute 1 has 30 s of
    # records so far and the job held 30 s of it: 30 × 30/60 = 15 s busy, 15 s unmeasured.
    allocation = AllocationSpan(gpu_id=1, share=GPU, start=T0, end=None)
    minutes = [minute(1, 0, 10.0), minute(1, 1, 10.0, covered_s=30)]
    usage = job_usage([allocation], minutes, now=T0 + 90 * SEC)
    assert usage.allocated_ticks == gpu_s(90)
    assert usage.busy_ticks == gpu_s(75)
    assert usage.unmeasured_ticks == gpu_s(15)


def test_the_idle_threshold_is_inclusive_for_busy_and_can_be_set():
    allocation = AllocationSpan(gpu_id=1, share=GPU, start=T0, end=T0 + 2 * MIN)
    minutes = [minute(1, 0, 5.0), minute(1, 1, 4.99)]
    default = job_usage([allocation], minutes, now=T0 + 60 * MIN)
    assert (default.busy_ticks, default.idle_ticks) == (gpu_s(60), gpu_s(60))  # 5.0 busy, 4.99 idle
    stricter = job_usage([allocation], minutes, now=T0 + 60 * MIN, idle_threshold_pct=10)
    assert (stricter.busy_ticks, stricter.idle_ticks) == (0, gpu_s(120))


def test_a_seventh_of_a_gpu_is_counted_exactly():
    # A 1g slice of a 7-slice GPU (120,000 ticks/s) for 7 minutes = 60 GPU-s, one GPU-minute, whole ticks.
    # MIG instances report no utilization: all unmeasured.
    allocation = AllocationSpan(gpu_id=3, share=120_000, start=T0, end=T0 + 7 * MIN)
    minutes = [minute(3, m, None, covered_s=0) for m in range(7)]
    usage = job_usage([allocation], minutes, now=T0 + 60 * MIN)
    assert usage.allocated_ticks == 50_400_000 == gpu_s(60)
    assert usage.unmeasured_ticks == usage.allocated_ticks
    assert usage.efficiency == 0


def test_two_gpus_add_up_and_sub_second_times_stay_exact():
    # GPU 1 from 00:00:00.5 to 00:01:00 (59.5 s), busy minute 0 fully covered → 59.5 busy.
    # GPU 2 from 00:00 to 00:02 (120 s), minute 0 idle, minute 1 busy with 45 s covered → 60 idle, 45 busy.
    allocations = [
        AllocationSpan(gpu_id=1, share=GPU, start=T0 + timedelta(milliseconds=500), end=T0 + MIN),
        AllocationSpan(gpu_id=2, share=GPU, start=T0, end=T0 + 2 * MIN),
    ]
    minutes = [minute(1, 0, 70.0), minute(2, 0, 1.0), minute(2, 1, 55.0, covered_s=45)]
    usage = job_usage(allocations, minutes, now=T0 + 60 * MIN)
    assert usage.allocated_ticks == gpu_s(Fraction(359, 2))  # 59.5 + 120
    assert usage.busy_ticks == gpu_s(Fraction(209, 2))  # 59.5 + 45
    assert usage.idle_ticks == gpu_s(60)
    assert usage.unmeasured_ticks == gpu_s(15)
    assert usage.busy_ticks + usage.idle_ticks + usage.unmeasured_ticks == usage.allocated_ticks


def test_nothing_allocated_has_no_efficiency():
    usage = job_usage([], [minute(1, 0, 50.0)], now=T0)
    assert usage.allocated_ticks == 0
    assert usage.efficiency is None


def test_job_kpis_gathers_the_times_the_usage_and_the_interruptions():
    kpis = job_kpis(
        submit=T0 - 5 * MIN, start=T0, end=T0 + 2 * MIN, running=False,
        allocations=[AllocationSpan(gpu_id=1, share=GPU, start=T0, end=T0 + 2 * MIN)],
        minutes=[minute(1, 0, 30.0), minute(1, 1, 0.0)],
        runs=[RunRecord(T0 - 60 * MIN, T0 - 10 * MIN, JobState.PREEMPTED), RunRecord(T0, T0 + 2 * MIN, "completed")],
        now=T0 + 60 * MIN,
    )
    assert kpis.times.queue_wait == 5 * MIN
    assert kpis.usage.efficiency == Fraction(1, 2)  # 60 busy of 120
    assert kpis.usage.idle_card_hours == Fraction(60, 3600)
    assert kpis.interruptions.count == 1
    assert kpis.interruptions.recoveries == (10 * MIN,)  # resumed at 00:00, preempted at −00:10


# --- interruptions


def test_failed_and_preempted_runs_that_resumed_are_interruptions_with_their_recovery_time():
    runs = [
        RunRecord(T0 + 200 * MIN, T0 + 300 * MIN, "completed"),  # given out of order on purpose
        RunRecord(T0, T0 + 60 * MIN, "preempted"),  # resumed at 01:10: 10 min
        RunRecord(T0 + 70 * MIN, T0 + 170 * MIN, "failed"),  # resumed at 03:20: 30 min
    ]
    result = interruptions(runs)
    assert result.count == 2
    assert result.recoveries == (10 * MIN, 30 * MIN)
    assert result.total_recovery == 40 * MIN
    assert not result.awaiting_recovery


def test_a_requeued_run_waiting_to_start_is_not_yet_recovered():
    runs = [RunRecord(T0, T0 + 60 * MIN, "requeued"), RunRecord(None, None, "pending")]
    result = interruptions(runs)
    assert result.count == 0
    assert result.total_recovery is None
    assert result.awaiting_recovery


def test_cancelled_and_completed_runs_are_not_interruptions():
    runs = [
        RunRecord(T0, T0 + MIN, "cancelled"),
        RunRecord(T0 + 2 * MIN, T0 + 3 * MIN, "completed"),
        RunRecord(T0 + 4 * MIN, None, "running"),
    ]
    assert interruptions(runs) == interruptions([])
    assert interruptions(runs).count == 0


def test_an_interrupted_run_without_an_end_time_counts_with_an_unknown_recovery():
    runs = [RunRecord(T0, None, "failed"), RunRecord(T0 + 5 * MIN, T0 + 6 * MIN, "completed")]
    result = interruptions(runs)
    assert result.count == 1
    assert result.recoveries == (None,)
    assert result.total_recovery is None


def test_the_interrupted_states_are_the_models():
    assert set(JobState.interrupted()) == INTERRUPTED_STATES


# --- display rounding


def test_figures_round_once_half_up_for_display():
    assert card_hours(Fraction(1, 12)) == Decimal("0.08")  # 0.0833…
    assert card_hours(Fraction(1, 8)) == Decimal("0.13")  # 0.125 → half up
    assert card_hours(Fraction(4)) == Decimal("4.00")
    assert card_hours(Fraction(5, 1000), places=2) == Decimal("0.01")
    assert card_hours(Fraction(-1, 8)) == Decimal("-0.13")
    assert percent(Fraction(3, 10)) == Decimal("30.0")
    assert percent(Fraction(2, 3)) == Decimal("66.7")
    assert percent(None) is None
    assert TICKS_PER_CARD_HOUR == 3_024_000_000


@settings(max_examples=500, deadline=None)
@given(part=st.integers(-10**15, 10**15), whole=st.integers(-10**15, 10**15), places=st.integers(0, 3))
def test_a_share_of_integers_is_the_percent_of_their_fraction(part, whole, places):
    if whole == 0:
        assert percent_of(part, whole, places) is None
        return
    expected = percent(Fraction(part, whole), places)
    assert percent_of(part, whole, places) == expected
    assert str(percent_of(part, whole, places)) == str(expected)  # the same places: 12.0, not 12
