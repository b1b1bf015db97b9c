"""The input-bound rule (issue 19, cluster/jobs/input_bound.py) on synthetic series, and its properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.jobs.input_bound import InputBoundRule, input_bound

RULE = InputBoundRule()  # high ≥ 60 %, low ≤ 15 %, 30 minutes, 3 dips of ≤ 10 minutes, 10 % of the minutes


def alternating(high: int, low: int, cycles: int, *, busy=90.0, waiting=3.0) -> list[float]:
    return ([busy] * high + [waiting] * low) * cycles


def test_it_flags_a_job_that_alternates_every_few_minutes():
    verdict = input_bound(alternating(4, 2, 20))  # 2 hours: 4 minutes computing, 2 waiting
    assert verdict.flagged
    assert (verdict.measured_minutes, verdict.dips, verdict.dip_minutes, verdict.switches) == (120, 19, 38, 39)
    assert verdict.share_pct == pytest.approx(100 * 38 / 120)


def test_steady_high_is_not_input_bound():
    verdict = input_bound([95.0] * 600)
    assert not verdict.flagged and (verdict.dips, verdict.switches, verdict.share_pct) == (0, 0, 0.0)


def test_steady_low_is_idle_not_input_bound():
    verdict = input_bound([2.0] * 600)
    assert not verdict.flagged and (verdict.dips, verdict.low_minutes, verdict.high_minutes) == (0, 600, 0)


def test_one_long_dip_is_not_input_bound():
    verdict = input_bound([90.0] * 60 + [1.0] * 90 + [90.0] * 60)
    assert not verdict.flagged and (verdict.dips, verdict.switches) == (0, 2)  # 90 minutes: no short dip


def test_a_few_short_dips_are_not_enough():
    verdict = input_bound([90.0] * 30 + [1.0] * 5 + [90.0] * 30 + [1.0] * 5 + [90.0] * 30)
    assert (verdict.dips, verdict.dip_minutes) == (2, 10) and not verdict.flagged  # 3 dips needed


def test_rare_short_dips_are_under_the_share():
    verdict = input_bound(alternating(40, 2, 10))  # a 2-minute checkpoint every 40 minutes: 4.3 %
    assert verdict.dips == 9 and verdict.share_pct < RULE.min_share_pct and not verdict.flagged


def test_too_short_a_run_is_not_judged():
    verdict = input_bound(alternating(3, 2, 5))  # 25 minutes
    assert verdict.dips == 4 and not verdict.flagged


def test_mid_minutes_are_transitions_and_missing_ones_are_skipped():
    swing = [90.0, 40.0, 5.0, 5.0, 40.0, 90.0, 90.0, None]
    verdict = input_bound(swing * 10)
    assert (verdict.measured_minutes, verdict.dips, verdict.dip_minutes, verdict.switches) == (70, 10, 20, 20)
    assert verdict.flagged


def test_the_thresholds_come_from_the_rule():
    series = alternating(4, 2, 20, waiting=20.0)  # waiting at 20 %: above the default low of 15 %
    assert not input_bound(series).flagged
    assert input_bound(series, InputBoundRule(low_pct=25)).flagged
    assert not input_bound(alternating(4, 12, 10)).flagged  # 12-minute dips: longer than 10
    assert input_bound(alternating(4, 12, 10), InputBoundRule(max_dip_minutes=15)).flagged


@pytest.mark.parametrize("bad", [{"low_pct": 60}, {"high_pct": 101}, {"min_dips": 0}, {"min_share_pct": -1}])
def test_a_rule_with_impossible_thresholds_is_refused(bad):
    with pytest.raises(ValueError, match="input-bound rule"):
        InputBoundRule(**bad)


utilization = st.one_of(st.none(), st.floats(min_value=0, max_value=100, allow_nan=False))
series = st.lists(utilization, max_size=300)


@settings(max_examples=200, deadline=None)
@given(series)
def test_the_evidence_stays_within_its_bounds(values):
    verdict = input_bound(values)
    assert 0 <= verdict.dip_minutes <= verdict.low_minutes <= verdict.measured_minutes
    assert verdict.high_minutes + verdict.low_minutes <= verdict.measured_minutes
    assert 2 * verdict.dips <= verdict.switches
    assert 0 <= verdict.share_pct <= 100
    assert verdict.dip_minutes <= verdict.dips * RULE.max_dip_minutes
    if verdict.flagged:
        assert verdict.high_minutes and verdict.low_minutes and verdict.measured_minutes >= RULE.min_minutes


@settings(max_examples=200, deadline=None)
@given(series)
def test_it_reads_the_same_backwards_and_ignores_missing_minutes(values):
    verdict = input_bound(values)
    assert input_bound(values[::-1]) == verdict
    assert input_bound([v for v in values if v is not None]) == verdict


@settings(max_examples=200, deadline=None)
@given(series)
def test_without_high_or_without_low_minutes_nothing_is_flagged(values):
    measured = [v for v in values if v is not None]
    never_high = input_bound([min(v, RULE.high_pct - 0.5) for v in measured])
    never_low = input_bound([max(v, RULE.low_pct + 0.5) for v in measured])
    assert (never_high.flagged, never_high.dips, never_low.flagged, never_low.dips) == (False, 0, False, 0)


@settings(max_examples=200, deadline=None)
@given(series)
def test_a_flagged_series_repeated_stays_flagged(values):
    if input_bound(values).flagged:
        assert input_bound(values + values).flagged


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10), st.integers(1, 10), st.integers(6, 40))
def test_a_regular_swing_of_short_dips_is_flagged_when_the_share_is_enough(high, low, cycles):
    verdict = input_bound(alternating(high, low, cycles))
    assert verdict.dips == cycles - 1 and verdict.dip_minutes == low * (cycles - 1)
    enough = (high + low) * cycles >= RULE.min_minutes and verdict.share_pct >= RULE.min_share_pct
    assert verdict.flagged == enough
