"""The plan's pure rules (issue 19): ratio, deviation with the setting, planned windows spread over weeks,
the wait for data."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from accounting.plans import rules
from cluster.jobs.kpis import AllocationSpan

T = datetime(2026, 11, 2, tzinfo=UTC)


def test_ratio_is_used_over_estimate_and_none_without_an_estimate():
    assert rules.ratio(Decimal("13"), Decimal("10")) == Fraction(13, 10)
    assert rules.ratio(Fraction(1, 3), Decimal("1")) == Fraction(1, 3)
    assert rules.ratio(Decimal("5"), None) is None
    assert rules.ratio(Decimal("5"), Decimal("0")) is None  # an estimate of 0 is no estimate, not infinity


def test_deviation_beyond_the_setting_only():
    assert rules.deviation(Fraction(13, 10), pct=30, final=True) == rules.ON_PLAN  # exactly +30 %: not beyond
    assert rules.deviation(Fraction(1301, 1000), pct=30, final=True) == rules.OVER
    assert rules.deviation(Fraction(7, 10), pct=30, final=True) == rules.ON_PLAN  # exactly −30 %
    assert rules.deviation(Fraction(699, 1000), pct=30, final=True) == rules.UNDER
    assert rules.deviation(Fraction(1, 10), pct=30, final=False) == rules.ON_PLAN  # still running: may catch up
    assert rules.deviation(Fraction(2), pct=30, final=False) == rules.OVER  # running and already over
    assert rules.deviation(None, pct=30, final=True) == rules.NO_ESTIMATE
    assert rules.deviation(Fraction(6, 5), pct=10, final=True) == rules.OVER  # the setting moves the band


@given(st.fractions(min_value=0, max_value=10), st.integers(min_value=1, max_value=99), st.booleans())
def test_deviation_agrees_with_the_band(value, pct, final):
    result = rules.deviation(value, pct=pct, final=final)
    low, high = 1 - Fraction(pct, 100), 1 + Fraction(pct, 100)
    assert (result == rules.OVER) == (value > high)
    assert (result == rules.UNDER) == (final and value < low)


def test_week_days_are_monday_to_sunday_clipped_to_the_month():
    assert rules.week_days(date(2026, 11, 1), date(2026, 12, 1)) == [
        (date(2026, 11, 1), date(2026, 11, 2)), (date(2026, 11, 2), date(2026, 11, 9)),
        (date(2026, 11, 9), date(2026, 11, 16)), (date(2026, 11, 16), date(2026, 11, 23)),
        (date(2026, 11, 23), date(2026, 11, 30)), (date(2026, 11, 30), date(2026, 12, 1)),
    ]


def test_a_planned_window_lasts_estimate_over_gpus_hours():
    window = rules.planned_window(start=T, estimate=Decimal("10"), gpu_count=Decimal("4"))
    assert (window.end - window.start, window.card_hours) == (timedelta(hours=2.5), 10)
    assert rules.planned_window(start=None, estimate=Decimal("10"), gpu_count=Decimal("1")) is None
    assert rules.planned_window(start=T, estimate=None, gpu_count=Decimal("1")) is None
    point = rules.planned_window(start=T, estimate=Decimal("3"), gpu_count=Decimal("0"))
    assert point.end == point.start
    assert rules.spread([point], [(T - timedelta(days=1), T), (T, T + timedelta(days=1))]) == [0, 3]


def test_spread_splits_a_window_by_the_time_in_each_bucket():
    window = rules.planned_window(start=T - timedelta(hours=1), estimate=Decimal("8"), gpu_count=Decimal("2"))
    assert rules.spread([window], [(T - timedelta(days=7), T), (T, T + timedelta(days=7))]) == [2, 6]


@given(st.lists(st.tuples(st.integers(0, 20 * 24 * 60), st.integers(1, 10_000), st.integers(0, 16)), max_size=8),
       st.lists(st.integers(1, 10 * 24 * 60), min_size=1, max_size=6))
def test_spread_over_buckets_covering_every_window_keeps_every_card_hour(jobs, cuts):
    windows = [rules.planned_window(start=T + timedelta(minutes=m), estimate=Decimal(e) / 10, gpu_count=Decimal(g))
               for m, e, g in jobs]
    edges = [T]
    for cut in cuts:
        edges.append(edges[-1] + timedelta(minutes=cut))
    edges[-1] = max(edges[-1], *(w.end + timedelta(seconds=1) for w in windows)) if windows else edges[-1]
    buckets = list(pairwise(edges))
    assert sum(rules.spread(windows, buckets)) == sum(w.card_hours for w in windows)


def test_a_job_waits_from_its_start_until_its_data_is_ready_or_it_ends():
    now = T + timedelta(hours=10)
    kwargs = {"start": T, "data_ready": None, "now": now}
    assert rules.wait_window(end=T + timedelta(hours=5), running=False, data_ready_at=T + timedelta(hours=1),
                             **kwargs) == (T, T + timedelta(hours=1))
    assert rules.wait_window(end=T + timedelta(hours=5), running=False, data_ready_at=T + timedelta(hours=8),
                             **kwargs) == (T, T + timedelta(hours=5))  # ended before its data came
    assert rules.wait_window(end=None, running=True, data_ready_at=T + timedelta(hours=20),
                             **kwargs) == (T, now)  # still waiting: until now
    assert rules.wait_window(end=None, running=True, data_ready_at=T - timedelta(hours=1), **kwargs) is None
    assert rules.wait_window(start=T, end=None, running=True, data_ready=False, data_ready_at=None,
                             now=now) == (T, now)
    assert rules.wait_window(start=T, end=T + timedelta(hours=1), running=False, data_ready=False,
                             data_ready_at=None, now=now) is None  # finished: the flag says nothing of when
    assert rules.wait_window(start=None, end=None, running=False, data_ready=False, data_ready_at=None,
                             now=now) is None


def test_clip_spans_cuts_to_the_window_and_counts_a_running_span_to_now():
    spans = [AllocationSpan(1, 840_000, T, None), AllocationSpan(2, 420_000, T + timedelta(hours=3), T + timedelta(hours=4))]
    clipped = rules.clip_spans(spans, T, T + timedelta(hours=2), now=T + timedelta(hours=1))
    assert clipped == [AllocationSpan(1, 840_000, T, T + timedelta(hours=1))]
