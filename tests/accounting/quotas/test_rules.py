"""Quota maths with no database: the burn forecast, the warning thresholds and the overflow rule, with
hand-made cases and Hypothesis properties (DESIGN.md §5, §6)."""

import random
from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.quotas.rules import (
    TICKS_PER_CARD_HOUR,
    OverflowPart,
    QuotaLimit,
    UsageEvent,
    burn_forecast,
    card_hours_from_ticks,
    crossing_days,
    event_order,
    expiry_warning_due,
    fit_to_totals,
    overflow_split,
    overflow_totals,
    quota_split,
    thresholds_crossed,
    ticks_from_card_hours,
)

CH = TICKS_PER_CARD_HOUR
TODAY = date(2026, 11, 20)
D0 = date(2026, 11, 2)
H200, L40S = 1, 2


def ev(moment, ticks, *, team=1, model=H200, project=None, state="busy", day=D0):
    return UsageEvent(moment, team, model, project, state, ticks, day)


# ---- units and thresholds ------------------------------------------------------------------------------

def test_it_converts_card_hours_exactly():
    assert ticks_from_card_hours(Decimal("1.000")) == CH
    assert ticks_from_card_hours(Decimal("0.001")) == CH // 1000
    assert card_hours_from_ticks(CH * 3 // 2) == Decimal("1.500")
    assert card_hours_from_ticks(-CH // 2000) == Decimal("-0.001")  # half away from zero
    assert card_hours_from_ticks(CH // 2000 - 1) == Decimal("0.000")


def test_it_names_the_thresholds_reached():
    assert thresholds_crossed(Fraction(49, 100)) == []
    assert thresholds_crossed(Fraction(1, 2)) == [50]
    assert thresholds_crossed(Fraction(899, 1000)) == [50, 75]
    assert thresholds_crossed(Decimal("0.9")) == [50, 75, 90]
    assert thresholds_crossed(Fraction(3, 2)) == [50, 75, 90, 100]


def test_it_warns_fifteen_days_before_expiry():
    expires = date(2026, 12, 1)
    assert not expiry_warning_due(today=date(2026, 11, 15), expires=expires)
    assert expiry_warning_due(today=date(2026, 11, 16), expires=expires)
    assert expiry_warning_due(today=date(2026, 11, 30), expires=expires)
    assert not expiry_warning_due(today=expires, expires=expires)


# ---- forecast ------------------------------------------------------------------------------------------

def test_it_forecasts_from_the_trailing_seven_full_days():
    daily = {TODAY - timedelta(days=n): 10 * CH for n in range(1, 8)}
    daily[TODAY] = 500 * CH  # today is partial: not in the burn
    daily[TODAY - timedelta(days=8)] = 500 * CH  # before the window
    forecast = burn_forecast(daily_ticks=daily, quota_ticks=200 * CH, used_ticks=125 * CH, today=TODAY,
                             expires=date(2026, 12, 1))
    assert forecast.burn_ticks_per_day == 10 * CH and forecast.burn_days == 7
    assert forecast.remaining_ticks == 75 * CH
    assert forecast.run_out == TODAY + timedelta(days=8)  # ceil(7.5)
    assert forecast.runs_out_before_expiry
    assert forecast.used_fraction == Fraction(5, 8) and forecast.thresholds == [50]


def test_days_without_usage_count_as_zero():
    daily = {TODAY - timedelta(days=1): 7 * CH}
    forecast = burn_forecast(daily_ticks=daily, quota_ticks=100 * CH, used_ticks=0, today=TODAY,
                             expires=date(2027, 1, 1))
    assert forecast.burn_ticks_per_day == CH
    assert forecast.run_out == TODAY + timedelta(days=100)
    assert not forecast.runs_out_before_expiry  # 2027-02-28 is after the expiry


def test_a_young_quota_is_averaged_over_its_own_days():
    start = TODAY - timedelta(days=2)
    daily = {start - timedelta(days=1): 99 * CH, start: 4 * CH, start + timedelta(days=1): 2 * CH}
    forecast = burn_forecast(daily_ticks=daily, quota_ticks=30 * CH, used_ticks=6 * CH, today=TODAY,
                             expires=TODAY + timedelta(days=30), period_start=start)
    assert forecast.burn_days == 2 and forecast.burn_ticks_per_day == 3 * CH
    assert forecast.run_out == TODAY + timedelta(days=8)


def test_a_quota_that_began_today_divides_by_one():
    forecast = burn_forecast(daily_ticks={TODAY: 5 * CH}, quota_ticks=10 * CH, used_ticks=5 * CH, today=TODAY,
                             expires=TODAY + timedelta(days=5), period_start=TODAY)
    assert forecast.burn_days == 1 and forecast.burn_ticks_per_day == 0 and forecast.run_out is None
    assert not forecast.runs_out_before_expiry


def test_a_used_up_quota_ran_out_on_the_day_its_usage_reached_it():
    daily = {TODAY - timedelta(days=2): 6 * CH, TODAY - timedelta(days=1): 4 * CH, TODAY: 2 * CH}
    forecast = burn_forecast(daily_ticks=daily, quota_ticks=10 * CH, used_ticks=12 * CH, today=TODAY,
                             expires=TODAY + timedelta(days=5))
    assert forecast.remaining_ticks == -2 * CH and forecast.exhausted
    assert forecast.exhausted_on == forecast.run_out == TODAY - timedelta(days=1) and forecast.runs_out_before_expiry
    assert forecast.thresholds == [50, 75, 90, 100]
    without_days = burn_forecast(daily_ticks={}, quota_ticks=10 * CH, used_ticks=12 * CH, today=TODAY,
                                 expires=TODAY + timedelta(days=5))
    assert without_days.exhausted_on == TODAY


def test_what_is_left_runs_out_today_when_the_rest_of_today_burns_it():
    """Seen in the demo: 2.92 card-hours left at ~640 a day read "runs out tomorrow"."""
    daily = {TODAY - timedelta(days=n): 640 * CH for n in range(1, 8)}
    left = {"used_ticks": 744 * CH - 292 * CH // 100, "quota_ticks": 744 * CH}
    for day_left in (Fraction(1), Fraction(1, 2), Fraction(1, 100)):
        forecast = burn_forecast(daily_ticks=daily, today=TODAY, expires=TODAY + timedelta(days=20),
                                 day_left=day_left, **left)
        assert forecast.run_out == TODAY and not forecast.exhausted, day_left
    # the day is over (a past day's figures): it runs out on the next
    over = burn_forecast(daily_ticks=daily, today=TODAY, expires=TODAY + timedelta(days=20), **left)
    assert over.run_out == TODAY + timedelta(days=1)
    # exactly the rest of today's burn: today; a tick more: tomorrow
    half = {"quota_ticks": 1000 * CH, "today": TODAY, "expires": TODAY + timedelta(days=20), "day_left": Fraction(1, 2)}
    assert burn_forecast(daily_ticks=daily, used_ticks=680 * CH, **half).run_out == TODAY
    assert burn_forecast(daily_ticks=daily, used_ticks=680 * CH - 1, **half).run_out == TODAY + timedelta(days=1)
    with pytest.raises(ValueError, match="day_left"):
        burn_forecast(daily_ticks=daily, used_ticks=0, quota_ticks=CH, today=TODAY, expires=TODAY, day_left=Fraction(2))


def test_a_zero_quota_is_used_up():
    forecast = burn_forecast(daily_ticks={}, quota_ticks=0, used_ticks=0, today=TODAY, expires=TODAY + timedelta(days=1))
    assert forecast.used_fraction == 1 and forecast.run_out == TODAY


def test_a_burn_too_slow_for_the_calendar_never_runs_out():
    forecast = burn_forecast(daily_ticks={TODAY - timedelta(days=1): 1}, quota_ticks=10**30, used_ticks=0,
                             today=TODAY, expires=TODAY + timedelta(days=5))
    assert forecast.run_out is None


@given(
    daily=st.lists(st.integers(0, 50 * CH), min_size=10, max_size=10),
    quota=st.integers(0, 500 * CH), used=st.integers(0, 600 * CH), started=st.integers(0, 10),
    day_left=st.fractions(min_value=0, max_value=1, max_denominator=86_400),
)
def test_the_run_out_day_is_the_first_day_the_burn_uses_up_the_rest(daily, quota, used, started, day_left):
    per_day = {TODAY - timedelta(days=n + 1): ticks for n, ticks in enumerate(daily)}
    forecast = burn_forecast(daily_ticks=per_day, quota_ticks=quota, used_ticks=used, today=TODAY,
                             expires=TODAY + timedelta(days=30), period_start=TODAY - timedelta(days=started),
                             day_left=day_left)
    burn = forecast.burn_ticks_per_day
    assert forecast.burn_days == max(1, min(7, started))
    assert burn == Fraction(sum(daily[:min(7, started)]), forecast.burn_days)
    if quota - used <= 0:
        assert forecast.exhausted and forecast.run_out == forecast.exhausted_on <= TODAY
    elif burn == 0:
        assert forecast.run_out is None
    elif forecast.run_out is None:  # beyond the calendar
        assert (quota - used) / burn > (date.max - TODAY).days
    else:  # the rest of today burns day_left × burn, each later day burn
        days = (forecast.run_out - TODAY).days
        assert (day_left + days) * burn >= quota - used
        assert days == 0 or quota - used > (day_left + days - 1) * burn
    assert forecast.runs_out_before_expiry == (forecast.run_out is not None and forecast.run_out < forecast.expires)


# ---- the overflow rule: cases ---------------------------------------------------------------------------

def limit(id_, ticks, *, team=1, model=None, start=D0, expires=D0 + timedelta(days=30)):
    return QuotaLimit(id=id_, team_id=team, gpu_model_id=model, period_start=start, expires=expires, quota_ticks=ticks)


def test_usage_fills_the_model_quota_then_the_team_wide_one_then_overflows():
    quotas = [limit(1, 10), limit(2, 5, model=H200)]
    events = [ev(0, 8), ev(60, 4, model=L40S), ev(120, 2), ev(180, 3, model=L40S)]
    split = quota_split(quotas=quotas, usage_events=events)
    # H200 8 → 5 model + 3 team; L40S 4 → team (3 left); H200 2 → team (1 left); L40S 3 → 1 team + 2 overflow.
    assert split.consumed == {1: 10, 2: 5}
    assert split.overflow == [OverflowPart(180, 1, L40S, None, "busy", 2, D0)]
    assert split.exhausted == {2: (0, D0), 1: (180, D0)}


def test_usage_no_quota_matches_never_overflows():
    quotas = [limit(1, 5, model=H200), limit(2, 5, team=2)]
    events = [ev(0, 50, model=L40S), ev(60, 50, model=None), ev(0, 50, team=3), ev(0, 9, day=D0 + timedelta(days=30))]
    split = quota_split(quotas=quotas, usage_events=events)
    assert split.overflow == [] and split.covered == []
    assert sum(event.ticks for event in split.unlimited) == 159


def test_an_unknown_model_only_matches_the_team_wide_quota():
    quotas = [limit(1, 5, model=H200), limit(2, 4)]
    assert overflow_split(quotas=quotas, usage_events=[ev(0, 6, model=None)]) == [
        OverflowPart(0, 1, None, None, "busy", 2, D0)]


def test_a_zero_quota_overflows_everything_it_matches():
    parts = overflow_split(quotas=[limit(1, 0, model=H200)], usage_events=[ev(0, 7), ev(0, 3, model=L40S)])
    assert parts == [OverflowPart(0, 1, H200, None, "busy", 7, D0)]


def test_quota_periods_follow_the_business_day():
    old = limit(1, 5, expires=D0 + timedelta(days=1))
    new = limit(2, 5, start=D0 + timedelta(days=1))
    events = [ev(0, 8), ev(86400, 3, day=D0 + timedelta(days=1))]
    split = quota_split(quotas=[old, new], usage_events=events)
    assert split.consumed == {1: 5, 2: 3} and [p.ticks for p in split.overflow] == [3]


def test_within_a_moment_projects_then_states_are_taken_in_a_fixed_order():
    events = [ev(0, 5, project=7, state="busy"), ev(0, 5, project=None, state="unmeasured"),
              ev(0, 5, project=None, state="busy"), ev(0, 5, project=3, state="idle")]
    parts = overflow_split(quotas=[limit(1, 12)], usage_events=events)
    assert [(p.project_id, p.state, p.ticks) for p in parts] == [(3, "idle", 3), (7, "busy", 5)]


def test_equal_events_are_merged_and_empty_ones_dropped():
    parts = overflow_split(quotas=[limit(1, 3)], usage_events=[ev(0, 2), ev(0, 2), ev(0, 0)])
    assert parts == [OverflowPart(0, 1, H200, None, "busy", 1, D0)]


def test_it_refuses_negative_usage_and_duplicate_quotas():
    with pytest.raises(ValueError):
        overflow_split(quotas=[limit(1, 3)], usage_events=[ev(0, -1)])
    with pytest.raises(ValueError):
        overflow_split(quotas=[limit(1, 3), limit(1, 4, model=H200)], usage_events=[])


def test_detail_is_fitted_to_the_day_rows():
    events = [ev(0, 5), ev(60, 5), ev(60, 4, model=L40S)]
    totals = {(1, H200, None, "busy"): 7, (1, None, None, "unmeasured"): 3}
    fitted = fit_to_totals(events, totals, day=D0, last_moment=120)
    assert fitted == [ev(0, 5), ev(60, 2), ev(120, 3, model=None, state="unmeasured")]
    assert fit_to_totals(events, {(1, H200, None, "busy"): 10, (1, L40S, None, "busy"): 4}, day=D0,
                         last_moment=120) == sorted(events, key=event_order)
    with pytest.raises(ValueError):
        fit_to_totals([ev(0, 1, day=D0 + timedelta(days=1))], {}, day=D0, last_moment=0)


@given(
    ticks=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([H200, L40S]), st.integers(0, 20)), max_size=12),
    totals=st.dictionaries(st.sampled_from([H200, L40S, None]), st.integers(0, 60)),
)
def test_fitted_detail_adds_up_to_the_rows_and_keeps_its_order(ticks, totals):
    events = [ev(moment, amount, model=model) for moment, model, amount in ticks]
    wanted = {(1, model, None, "busy"): total for model, total in totals.items()}
    fitted = fit_to_totals(events, wanted, day=D0, last_moment=3)
    sums = defaultdict(int)
    for event in fitted:
        sums[(event.team_id, event.gpu_model_id, event.project_id, event.state)] += event.ticks
    assert dict(sums) == {key: total for key, total in wanted.items() if total}
    assert fitted == sorted(fitted, key=event_order) and all(event.ticks > 0 for event in fitted)


def test_overflow_totals_are_keyed_like_the_ledger():
    parts = [OverflowPart(0, 1, H200, 4, "busy", 2, D0), OverflowPart(60, 1, H200, 4, "busy", 3, D0)]
    assert overflow_totals(parts) == {(D0, 1, 4, H200, "busy"): 5}


# ---- the overflow rule: properties ---------------------------------------------------------------------

DAYS = [D0 + timedelta(days=n) for n in range(3)]
events_strategy = st.lists(
    st.builds(
        lambda day, hour, team, model, project, state, ticks: UsageEvent(
            day * 24 + hour, team, model, project, state, ticks, DAYS[day]),
        st.integers(0, 2), st.integers(0, 3), st.integers(1, 2), st.sampled_from([None, H200, L40S]),
        st.sampled_from([None, 1, 2]), st.sampled_from(["busy", "idle", "unmeasured"]), st.integers(0, 40),
    ),
    max_size=30,
)
quotas_strategy = st.lists(
    st.tuples(st.integers(1, 2), st.sampled_from([None, H200, L40S]), st.integers(0, 2), st.integers(1, 3),
              st.integers(0, 120)),
    max_size=5,
).map(lambda rows: _distinct_quotas(rows))


def _distinct_quotas(rows):
    """At most one quota per (team, model) — the database's exclusion constraint, simplified."""
    seen, out = set(), []
    for team, model, first, length, ticks in rows:
        if (team, model) in seen:
            continue
        seen.add((team, model))
        out.append(QuotaLimit(len(out) + 1, team, model, DAYS[first], DAYS[first] + timedelta(days=length), ticks))
    return out


def _key(event):
    return (event.moment, event.team_id, event.gpu_model_id, event.project_id, event.state, event.day)


@settings(max_examples=300)
@given(quotas=quotas_strategy, events=events_strategy)
def test_the_split_conserves_usage_and_respects_every_quota(quotas, events):
    split = quota_split(quotas=quotas, usage_events=events)
    usage = defaultdict(int)
    for event in events:
        usage[_key(event)] += event.ticks
    parts = defaultdict(int)
    for part in [*split.covered, *split.overflow, *split.unlimited]:
        parts[_key(part)] += part.ticks
    assert {k: v for k, v in usage.items() if v} == dict(parts)  # covered + overflow + unlimited = usage
    assert sum(p.ticks for p in split.overflow) <= sum(e.ticks for e in events)
    for quota in quotas:
        taken = sum(p.ticks for p in split.covered if p.quota_id == quota.id)
        assert taken == split.consumed[quota.id] <= quota.quota_ticks
        assert all(quota.applies_to(team_id=p.team_id, gpu_model_id=p.gpu_model_id, day=p.day)
                   for p in split.covered if p.quota_id == quota.id)
    for part in split.overflow:  # rooms only shrink: a quota with room at the end had room at the time
        matching = [q for q in quotas if q.applies_to(team_id=part.team_id, gpu_model_id=part.gpu_model_id, day=part.day)]
        assert matching and all(split.consumed[q.id] == q.quota_ticks for q in matching)
    for event in split.unlimited:
        assert not any(q.applies_to(team_id=event.team_id, gpu_model_id=event.gpu_model_id, day=event.day) for q in quotas)


@settings(max_examples=200)
@given(quotas=quotas_strategy, events=events_strategy)
def test_the_split_matches_a_tick_by_tick_simulation(quotas, events):
    room = {q.id: q.quota_ticks for q in quotas}
    expected = defaultdict(int)
    for event in sorted(events, key=event_order):
        matching = sorted((q for q in quotas if q.applies_to(team_id=event.team_id, gpu_model_id=event.gpu_model_id,
                                                             day=event.day)),
                          key=lambda q: q.gpu_model_id is None)
        for _tick in range(event.ticks):
            home = next((q for q in matching if room[q.id] > 0), None)
            if home is not None:
                room[home.id] -= 1
            elif matching:
                expected[_key(event)] += 1
    got = defaultdict(int)
    for part in overflow_split(quotas=quotas, usage_events=events):
        got[_key(part)] += part.ticks
    assert dict(got) == dict(expected)


@settings(max_examples=200)
@given(quotas=quotas_strategy, events=events_strategy, seed=st.integers(0, 2**32))
def test_the_order_of_events_given_does_not_matter(quotas, events, seed):
    shuffled = list(events)
    random.Random(seed).shuffle(shuffled)
    assert quota_split(quotas=quotas, usage_events=shuffled) == quota_split(quotas=quotas, usage_events=events)


@settings(max_examples=300)
@given(quotas=quotas_strategy, events=events_strategy)
def test_whole_days_suffice_except_where_a_quota_runs_out(quotas, events):
    """Usage of the days no quota runs out on, summed per key into one event at the day's start, splits into
    the same overflow per day and key as the detailed events (what team_usage_events relies on)."""
    daily = defaultdict(int)
    for event in events:
        daily[event._replace(moment=(event.moment // 24) * 24, ticks=0)] += event.ticks
    coarse = [key._replace(ticks=ticks) for key, ticks in daily.items()]
    detailed_days = crossing_days(quotas=quotas, usage_events=coarse)
    mixed = [e for e in events if e.day in detailed_days] + [e for e in coarse if e.day not in detailed_days]
    fine = overflow_totals(overflow_split(quotas=quotas, usage_events=events))
    assert overflow_totals(overflow_split(quotas=quotas, usage_events=mixed)) == fine
    assert crossing_days(quotas=quotas, usage_events=mixed) == detailed_days
