"""The threshold backtest's replay (boards/backtest/simulate.py): a hand-computed week (a step up and down, the
cooldown honoured, a bound hit, a rule that flaps and one whose headroom keeps it from cutting jobs), and
property tests (the GPUs stay within their bounds; loose thresholds never hold fewer GPUs than the demand)."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boards.backtest.simulate import (
    MEMORY,
    UTILIZATION,
    RuleSet,
    Series,
    actual_outcome,
    metric_pct,
    simulate,
)

DAY = 1440


def week() -> Series:
    """Two days of 8 GPUs at 50 % memory used; a day of 24 at 90 %; four days of 4 at 10 % (nothing queued)."""
    spans = [(2 * DAY, 8, 50.0), (DAY, 24, 90.0), (4 * DAY, 4, 10.0)]
    held, load = [], []
    for minutes, gpus, pct in spans:
        held += [gpus] * minutes
        load += [gpus * pct] * minutes
    return Series(held=held, in_use=list(held), queued=[0] * len(held), load=load)


def test_the_hand_computed_week_with_a_bound_hit():
    """Groups of 8 between 8 and 16 GPUs: the step to 24 GPUs is met with 16 (the maximum: the day is
    under-provisioned and its jobs cut), the step down goes back to the minimum at once."""
    out = simulate(week(), RuleSet("bounded", up_pct=80, down_pct=20, group=8, minimum=8, maximum=16,
                                   cooldown_minutes=30))
    assert out.gpus[:2 * DAY] == [8] * (2 * DAY)
    assert out.gpus[2 * DAY:3 * DAY] == [16] * DAY  # one event of two groups (the demand needs 16 more), capped
    assert out.gpus[3 * DAY:] == [8] * (4 * DAY)
    assert (out.scale_ups, out.scale_downs, out.scale_events) == (1, 1, 2)
    assert out.under_minutes == DAY and out.cut_minutes == DAY and out.longest_cut_minutes == DAY
    assert out.cuts == 0  # the cut came from the maximum, not from a scale-down
    # at 16 wanting more for the rest of day 2 (1,439 minutes), at 8 wanting less for the rest of the week
    assert out.bound_minutes == (DAY - 1) + (4 * DAY - 1)
    assert out.gpu_minutes == 8 * 2 * DAY + 16 * DAY + 8 * 4 * DAY  # 1,536 card-hours
    actual = actual_outcome(week())
    assert actual.gpu_minutes == 8 * 2 * DAY + 24 * DAY + 4 * 4 * DAY  # 1,344 card-hours: the rule saves −192
    assert (actual.scale_ups, actual.scale_downs, actual.under_minutes, actual.cut_minutes) == (1, 1, 0, 0)


def test_the_cooldown_is_honoured_and_a_rule_without_headroom_flaps():
    """A two-hour cooldown, no minimum: one more group two hours after the step up (90 % on 24 GPUs), then one
    group back every two hours, down to none under 4 running GPUs: they are cut for the two hours the cooldown
    holds the next scale-up back, and it flaps every two hours until the week ends."""
    out = simulate(week(), RuleSet("eager", up_pct=80, down_pct=20, group=8, minimum=0, maximum=64,
                                   cooldown_minutes=120))
    g = out.gpus
    assert g[2 * DAY] == 24 and g[2 * DAY + 119] == 24 and g[2 * DAY + 120] == 32  # 3000: cooldown over
    assert g[3 * DAY - 1] == 32
    assert (g[4320], g[4439], g[4440], g[4560], g[4679], g[4680]) == (24, 24, 16, 8, 8, 0)
    assert (g[4799], g[4800], g[4919], g[4920]) == (0, 8, 8, 0)
    downs_to_zero = len(range(4680, 7 * DAY, 240))  # 23, the last at 9960
    assert out.scale_ups == 2 + len(range(4800, 7 * DAY, 240))  # 22 back up from zero
    assert out.scale_downs == 3 + downs_to_zero
    assert out.cuts == downs_to_zero
    assert out.cut_minutes == downs_to_zero * 120 and out.longest_cut_minutes == 120
    assert out.under_minutes == out.cut_minutes  # nothing queued: demand is what runs
    assert all(b - a >= 120 for a, b in zip(changes(g), changes(g)[1:], strict=False))


def test_headroom_keeps_the_reclaim_from_cutting_running_jobs():
    out = simulate(week(), RuleSet("kept", up_pct=80, down_pct=20, group=8, minimum=0, maximum=64,
                                   cooldown_minutes=120, headroom=0))
    assert out.gpus[-1] == 8 and min(out.gpus[3 * DAY:]) == 8  # 0 would leave fewer than the 4 in use
    assert (out.scale_ups, out.scale_downs, out.cuts, out.cut_minutes, out.under_minutes) == (2, 3, 0, 0, 0)


def test_a_reclaim_buffer_waits_for_the_metric_to_stay_low():
    """Reclaiming only after four hours below the threshold: the first step down comes at 4320 + 239."""
    out = simulate(week(), RuleSet("patient", up_pct=80, down_pct=20, group=8, minimum=0, maximum=64,
                                   cooldown_minutes=120, buffer_minutes=240, headroom=0))
    assert out.gpus[4320 + 238] == 32 and out.gpus[4320 + 239] == 24
    assert out.gpus[4320 + 239 + 239] == 24 and out.gpus[4320 + 239 + 240] == 16


def test_queued_demand_scales_up_by_as_many_groups_as_it_needs():
    series = Series(held=[8, 8], in_use=[8, 8], queued=[0, 20], load=[400.0, 400.0])
    out = simulate(series, RuleSet("r", group=8, minimum=0, maximum=64, cooldown_minutes=0))
    assert out.gpus == [8, 32] and out.under_minutes == 0


def test_the_metric_spreads_the_load_and_reads_full_when_demand_waits():
    assert metric_pct(400.0, 8, 8) == 50.0
    assert metric_pct(400.0, 8, 16) == 25.0
    assert metric_pct(400.0, 9, 8) == 100.0
    assert metric_pct(0.0, 0, 0) == 0.0
    assert metric_pct(2000.0, 8, 8) == 100.0


@pytest.mark.parametrize("rule, field", [
    (RuleSet("x", up_pct=20, down_pct=20), "down_pct"),
    (RuleSet("x", up_pct=120, down_pct=20), "down_pct"),
    (RuleSet("x", group=0), "group"),
    (RuleSet("x", minimum=9, maximum=8), "maximum"),
    (RuleSet("x", cooldown_minutes=-1), "cooldown_minutes"),
    (RuleSet("x", metric="power"), "metric"),
])
def test_a_broken_rule_set_is_refused(rule, field):
    assert field in [f for f, _rule in rule.problems()]
    with pytest.raises(ValueError):
        simulate(week(), rule)


def changes(gpus: list[int]) -> list[int]:
    return [t for t in range(1, len(gpus)) if gpus[t] != gpus[t - 1]]


@st.composite
def series_and_rule(draw, *, loose: bool = False):
    n = draw(st.integers(1, 200))
    in_use = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    queued = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    held = [max(u, h) for u, h in zip(in_use, draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)), strict=True)]
    load = [u * draw(st.floats(0, 100)) for u in in_use]
    down = 0.0 if loose else draw(st.floats(0, 99))
    up = draw(st.floats(min_value=down, max_value=100, exclude_min=True))
    low = draw(st.integers(0, 30))
    high = draw(st.integers(max(low, max(in_use[t] + queued[t] for t in range(n))) if loose else low, 100))
    rule = RuleSet("p", metric=draw(st.sampled_from([MEMORY, UTILIZATION])), up_pct=up, down_pct=down,
                   group=draw(st.integers(1, 16)), minimum=low, maximum=high,
                   cooldown_minutes=0 if loose else draw(st.integers(0, 60)), buffer_minutes=draw(st.integers(0, 30)),
                   headroom=draw(st.none() | st.integers(0, 8)))
    return Series(held=held, in_use=in_use, queued=queued, load=load), rule


@given(series_and_rule())
def test_the_gpus_stay_within_the_bounds_and_the_figures_add_up(case):
    series, rule = case
    out = simulate(series, rule)
    assert len(out.gpus) == len(series)
    assert all(rule.minimum <= g <= rule.maximum for g in out.gpus)
    steps = [b - a for a, b in zip([min(rule.maximum, max(rule.minimum, series.held[0])), *out.gpus], out.gpus,
                                   strict=False)]
    assert out.scale_ups == sum(s > 0 for s in steps) and out.scale_downs == sum(s < 0 for s in steps)
    assert out.gpu_minutes == sum(out.gpus)
    assert out.under_minutes == sum(series.in_use[t] + series.queued[t] > g for t, g in enumerate(out.gpus))
    assert out.longest_cut_minutes <= out.cut_minutes <= out.under_minutes
    moments = changes(out.gpus)
    assert all(b - a >= rule.cooldown_minutes for a, b in itertools.pairwise(moments))


@given(series_and_rule(loose=True))
def test_loose_thresholds_never_hold_fewer_gpus_than_the_demand(case):
    """Never scaling down (threshold 0), no cooldown, a maximum above the peak demand: every minute the rule holds
    at least what runs and waits, whatever its scale-up threshold, group size and reclaim buffer."""
    series, rule = case
    out = simulate(series, rule)
    assert all(g >= series.in_use[t] + series.queued[t] for t, g in enumerate(out.gpus))
    assert out.under_minutes == out.cut_minutes == out.cuts == 0


@given(series_and_rule(), st.integers(0, 8))
def test_with_headroom_and_no_cooldown_no_running_job_is_ever_cut(case, headroom):
    series, rule = case
    peak = max(u + q for u, q in zip(series.in_use, series.queued, strict=True))
    rule = RuleSet(rule.name, metric=rule.metric, up_pct=rule.up_pct, down_pct=rule.down_pct, group=rule.group,
                   minimum=min(rule.minimum, peak), maximum=max(rule.maximum, peak), cooldown_minutes=0,
                   buffer_minutes=rule.buffer_minutes, headroom=headroom)
    out = simulate(series, rule)
    assert out.cuts == 0 and out.cut_minutes == 0
