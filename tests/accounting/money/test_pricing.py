"""Pure pricing: rates by day, kinds and factors, rounding once, lines that add up, corrections."""

from collections import defaultdict
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.money.pricing import (
    TICKS_PER_CARD_HOUR,
    Entry,
    Policy,
    Rate,
    corrections,
    line_amount,
    lines_of,
    price_usage,
    rate_on,
    round_half_up,
    team_totals,
    units_per_priced_unit,
)
from core.money import MINOR_UNITS

D1 = date(2026, 11, 1)
RATES = [Rate(1, D1, date(2026, 11, 15), Decimal("20")), Rate(1, date(2026, 11, 15), None, Decimal("18"))]
HOUR = TICKS_PER_CARD_HOUR


def test_the_rate_of_a_day():
    assert rate_on(RATES, 1, date(2026, 11, 14)).price == 20
    assert rate_on(RATES, 1, date(2026, 11, 15)).price == 18
    assert rate_on(RATES, 1, date(2026, 10, 31)) is None
    assert rate_on(RATES, 2, date(2026, 11, 20)) is None


def test_kinds_factors_and_unpriced_usage():
    usage = {
        (date(2026, 11, 2), 7, None, 1, "busy"): 2 * HOUR,
        (date(2026, 11, 2), 7, None, 1, "idle"): HOUR,
        (date(2026, 11, 20), 7, 3, 1, "unmeasured"): HOUR,
        (date(2026, 11, 20), 7, 3, 2, "busy"): HOUR,  # model 2 has no rate
    }
    entries, unpriced = price_usage(usage=usage, rates=RATES, policy=Policy(Decimal("0.5"), Decimal("1.5")),
                                    overflow={(date(2026, 11, 2), 7, None, 1, "busy"): HOUR // 2})
    got = {(e.day.day, e.kind, e.rate, e.ticks) for e in entries}
    assert got == {(2, "busy", Decimal(20), HOUR * 3 // 2), (2, "overflow", Decimal(30), HOUR // 2),
                   (2, "idle", Decimal(10), HOUR), (20, "unmeasured", Decimal(18), HOUR)}
    assert unpriced == [(2, date(2026, 11, 20))]


def test_rounding_is_once_half_up_and_a_reversal_is_the_exact_negative():
    assert line_amount(HOUR // 200, Decimal("1"), "CNY") == Decimal("0.01")  # 0.005 → 0.01
    assert line_amount(-(HOUR // 200), Decimal("1"), "CNY") == Decimal("-0.01")
    assert line_amount(HOUR, Decimal("1234.5"), "JPY") == Decimal("1235")
    assert line_amount(HOUR // 3, Decimal("0.1"), "KWD") == Decimal("0.033")


entries_st = st.lists(
    st.builds(
        lambda day, team, project, kind, rate, ticks: Entry(D1 + timedelta(days=day), team, project, 1, kind, rate,
                                                              D1, ticks),
        st.integers(0, 29), st.integers(1, 4), st.sampled_from([None, 10, 11]),
        st.sampled_from(["busy", "idle", "unmeasured", "overflow"]),
        st.decimals(min_value=0, max_value=100, places=4, allow_nan=False),
        st.integers(-HOUR * 50, HOUR * 50).filter(bool),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(entries=entries_st)
def test_lines_team_totals_and_the_statement_total_add_up(entries):
    lines = lines_of(entries, "CNY")
    totals = team_totals(lines)
    assert sum(totals.values(), Decimal(0)) == sum((line.amount for line in lines), Decimal(0))
    for team, total in totals.items():
        assert total == sum((line.amount for line in lines if line.team_id == team), Decimal(0))
    # Each amount is its exact ticks × rate, rounded once (an independent Decimal computation).
    exact = defaultdict(int)
    for e in entries:
        exact[(e.team_id, e.project_id, e.kind, e.rate, e.ticks < 0)] += e.ticks
    for line in lines:
        ticks = exact[(line.team_id, line.project_id, line.kind, line.rate, line.reversal)]
        assert line.ticks == ticks
        value = Fraction(ticks) * Fraction(line.rate) / HOUR
        expected = (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.01"), ROUND_HALF_UP) \
            if abs(value) * 100 % 1 != Fraction(1, 2) else line.amount
        assert line.amount == expected


@settings(max_examples=200, deadline=None)
@given(booked=entries_st, wanted=entries_st)
def test_corrections_bring_the_ledger_to_what_is_wanted(booked, wanted):
    reversals, fresh = corrections(booked=booked, wanted=wanted)
    net = defaultdict(int)
    for entry in [*booked, *reversals, *fresh]:
        net[entry.key] += entry.ticks
    want = defaultdict(int)
    for entry in wanted:
        want[entry.key] += entry.ticks
    assert {k: v for k, v in net.items() if v} == {k: v for k, v in want.items() if v}
    assert all(entry.ticks != 0 for entry in reversals + fresh)
    # Correcting again changes nothing.
    assert corrections(booked=[*booked, *reversals, *fresh], wanted=wanted) == ([], [])


@settings(max_examples=500, deadline=None)
@given(ticks=st.integers(-10**15, 10**15), cents=st.integers(-10**8, 10**8), places=st.integers(0, 4),
       kind=st.sampled_from(["busy", "energy"]), currency=st.sampled_from(sorted(MINOR_UNITS)))
def test_a_line_amount_is_the_exact_product_rounded_once_half_away_from_zero(ticks, cents, places, kind, currency):
    rate = Decimal(cents).scaleb(-places)
    exact = Fraction(ticks) * Fraction(rate) / units_per_priced_unit(kind)
    expected = round_half_up(exact, MINOR_UNITS[currency])  # the Fraction form line_amount replaced
    amount = line_amount(ticks, rate, currency, kind)
    assert amount == expected and amount.as_tuple().exponent == -MINOR_UNITS[currency]
    assert abs(amount - Decimal(exact.numerator) / Decimal(exact.denominator)) <= Decimal(1).scaleb(-MINOR_UNITS[currency]) / 2
