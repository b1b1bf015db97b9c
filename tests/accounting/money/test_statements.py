"""Statement rows (accounting.money.statements): property tests of the pure row builder on pricing.lines_of, then the
hand-priced November of test_close as rows, a period's net after a reopen, the priced usage report and the
role scoping of the selectors."""

from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.models import ChargePolicy, EnergyTariff, Quota, RateCard
from accounting.money.close import close_period, reopen_period
from accounting.money.pricing import TICKS_PER_CARD_HOUR, Entry, lines_of, team_totals
from accounting.money.statements import (
    COLUMNS,
    TOTAL_KIND,
    Names,
    merge_lines,
    period_rows,
    priced_usage,
    priced_usage_rows,
    rows_from_lines,
    statement_rows,
    statement_totals,
    statements_visible_to,
)
from accounting.usage.figures import apportion
from accounting.usage.services import usage_process, usage_recompute
from cluster.models import MinuteRollup
from core.money import MINOR_UNITS
from tests.accounting.money import test_close
from tests.accounting.money.test_close import AFTER, NOVEMBER
from tests.accounting.usage.usage_day import rollups
from tests.conftest import T0

month = test_close.month  # the hand-priced November (a fixture)

# ---- pure: the row builder on lines_of ----------------------------------------------------------------------

TEAMS = {1: ("Team Alpha", "CC-A1"), 2: ("=cmd|' /C calc'!A0", "CC-X"), 3: ("beta", "CC-B2")}
NAMES = Names(teams=TEAMS, projects={10: "pre", 11: "vision"}, models={20: "H200", 21: "L40S"})
KINDS = ("busy", "idle", "unmeasured", "overflow", "energy", "unallocated")
UNITS = {"energy": 3_600_000 * 1000}  # millijoules per kWh; every other kind: ticks per card-hour

rates = st.decimals(min_value=0, max_value=1000, places=12, allow_nan=False, allow_infinity=False)
entries = st.builds(
    Entry,
    day=st.dates(min_value=date(2026, 11, 1), max_value=date(2026, 11, 30)),
    team_id=st.sampled_from(list(TEAMS)),
    project_id=st.sampled_from([None, 10, 11]),
    gpu_model_id=st.sampled_from([None, 20, 21]),
    kind=st.sampled_from(KINDS),
    rate=rates,
    rate_valid_from=st.sampled_from([date(2026, 11, 1), date(2026, 11, 15)]),
    ticks=st.integers(min_value=-10 * TICKS_PER_CARD_HOUR, max_value=10 * TICKS_PER_CARD_HOUR).filter(bool),
)
currencies = st.sampled_from(sorted(MINOR_UNITS))


def exact_amount(ticks: int, rate: Decimal, places: int, kind: str) -> Decimal:
    """ticks × rate per card-hour (energy: mJ × rate per kWh), rounded half away from zero to ``places``:
    integer arithmetic only."""
    value = Fraction(ticks) * Fraction(rate) / UNITS.get(kind, TICKS_PER_CARD_HOUR) * 10**places
    whole, rest = divmod(abs(value.numerator), value.denominator)
    whole += 2 * rest >= value.denominator
    return Decimal(whole if value >= 0 else -whole).scaleb(-places)


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, max_size=40), currencies)
def test_lines_add_up_to_team_totals_and_the_statement_total(entry_list, currency):
    lines = lines_of(entry_list, currency)
    rows = rows_from_lines(lines, names=NAMES, period=NOVEMBER, currency=currency)
    assert all(list(row) == COLUMNS for row in rows)
    by_team, totals_rows = defaultdict(list), {}
    for row in rows:
        if row["kind"] == TOTAL_KIND:
            assert row["team"] not in totals_rows  # one totals row per team, after its lines
            totals_rows[row["team"]] = row
        else:
            assert row["team"] not in totals_rows
            by_team[row["team"]].append(row)
    expected = {TEAMS[team][0]: total for team, total in team_totals(lines).items()}
    assert {team: row["amount"] for team, row in totals_rows.items()} == expected
    for team, team_rows in by_team.items():
        assert sum(row["amount"] for row in team_rows) == totals_rows[team]["amount"]
        # card-hours of a total: its ticks (Σ the lines', energy's millijoules left out) converted once, as
        # the usage report converts a team's ticks; the lines' rounded card-hours may sum a little apart
        ticks = sum(r["ticks"] for r in team_rows if r["kind"] != "energy")
        assert totals_rows[team]["ticks"] == ticks
        assert totals_rows[team]["card_hours"] == exact_amount(ticks, Decimal(1), 4, "busy")
        if ticks >= 0:
            assert totals_rows[team]["card_hours"] == apportion({"team": ticks})["team"]
        shown = sum(r["card_hours"] for r in team_rows if r["kind"] != "energy")
        assert abs(shown - totals_rows[team]["card_hours"]) <= Decimal("0.00005") * len(team_rows)
    assert sum(row["amount"] for row in totals_rows.values()) == sum(line.amount for line in lines)
    assert sum(1 for row in rows if row["kind"] != TOTAL_KIND) == len(lines)


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, max_size=40), currencies)
def test_each_amount_is_ticks_times_rate_rounded_once(entry_list, currency):
    grouped = defaultdict(int)
    for entry in entry_list:
        grouped[(entry.team_id, entry.project_id, entry.gpu_model_id, entry.kind, entry.rate, entry.rate_valid_from,
                 entry.ticks < 0)] += entry.ticks
    lines = lines_of(entry_list, currency)
    assert {(ln.team_id, ln.project_id, ln.gpu_model_id, ln.kind, ln.rate, ln.rate_valid_from, ln.reversal): ln.ticks
            for ln in lines} == grouped
    for line in lines:
        assert line.amount == exact_amount(line.ticks, line.rate, MINOR_UNITS[currency], line.kind)
        assert line.amount.as_tuple().exponent == -MINOR_UNITS[currency]
    rows = [row for row in rows_from_lines(lines, names=NAMES, period=NOVEMBER, currency=currency)
            if row["kind"] != TOTAL_KIND]
    assert sorted((row["amount"], row["card_hours"]) for row in rows) == sorted(
        (line.amount, line.card_hours) for line in lines)
    for row in rows:
        assert row["rate"].as_tuple().exponent == -4 and row["currency"] == currency and row["period"] == "2026-11"
        if row["amount"] < 0:
            assert row["card_hours"] <= 0  # a reversal is a negative row of its own


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(entries, max_size=15), min_size=1, max_size=4))
def test_a_period_net_is_the_sum_of_its_statements(statements):
    per_statement = [lines_of(entry_list, "CNY") for entry_list in statements]
    merged = merge_lines(line for lines in per_statement for line in lines)
    booked = defaultdict(Decimal)
    for lines in per_statement:
        for team, total in team_totals(lines).items():
            booked[team] += total
    assert team_totals(merged) == {team: total for team, total in booked.items()}
    assert sum(ln.ticks for ln in merged) == sum(e.ticks for entry_list in statements for e in entry_list)


def test_rows_are_ordered_and_totals_keep_the_team():
    lines = lines_of([
        Entry(date(2026, 11, 3), 1, None, 20, "idle", Decimal("10.123456"), date(2026, 11, 1), TICKS_PER_CARD_HOUR),
        Entry(date(2026, 11, 3), 1, 10, 20, "busy", Decimal(20), date(2026, 11, 1), TICKS_PER_CARD_HOUR),
        Entry(date(2026, 11, 3), 3, 11, 21, "busy", Decimal(20), date(2026, 11, 1), TICKS_PER_CARD_HOUR // 2),
        Entry(date(2026, 11, 4), 3, 11, 21, "busy", Decimal(20), date(2026, 11, 1), -TICKS_PER_CARD_HOUR),
    ], "CNY")
    rows = rows_from_lines(lines, names=NAMES, period=date(2026, 11, 1), currency="CNY")
    assert [(r["team"], r["project"], r["kind"], r["rate"], r["card_hours"], r["amount"]) for r in rows] == [
        ("beta", "vision", "busy", Decimal("20.0000"), Decimal("-1.0000"), Decimal("-20.00")),  # reversal first
        ("beta", "vision", "busy", Decimal("20.0000"), Decimal("0.5000"), Decimal("10.00")),
        ("beta", None, "total", None, Decimal("-0.5000"), Decimal("-10.00")),
        ("Team Alpha", "pre", "busy", Decimal("20.0000"), Decimal("1.0000"), Decimal("20.00")),
        ("Team Alpha", None, "idle", Decimal("10.1235"), Decimal("1.0000"), Decimal("10.12")),  # no project last
        ("Team Alpha", None, "total", None, Decimal("2.0000"), Decimal("30.12")),
    ]
    assert rows[5]["cost_centre"] == "CC-A1" and rows[5]["gpu_model"] is None and rows[5]["rate_valid_from"] is None


# ---- the hand-priced month ------------------------------------------------------------------------------------

S = 840_000  # ticks per GPU-second
ALPHA = [  # (project, kind, rate_valid_from, card_hours, ticks, rate, amount)
    ("Alpha pretraining", "busy", date(2026, 11, 1), "1.0000", 3600 * S, "20.0000", "20.00"),
    ("Alpha pretraining", "unmeasured", date(2026, 11, 1), "1.0000", 3600 * S, "20.0000", "20.00"),
    (None, "busy", date(2026, 11, 1), "1.0000", 3600 * S, "20.0000", "20.00"),
    (None, "idle", date(2026, 11, 1), "0.4917", 1770 * S, "10.0000", "4.92"),
    (None, "unmeasured", date(2026, 11, 1), "4.5083", (1830 + 4 * 3600) * S, "20.0000", "90.17"),
    (None, "total", None, "8.0000", 8 * 3600 * S, None, "155.09"),
]
BETA = [
    (None, "busy", date(2026, 11, 1), "0.5000", 1800 * S, "20.0000", "10.00"),
    (None, "busy", date(2026, 11, 15), "2.0000", 7200 * S, "18.0000", "36.00"),
    (None, "unmeasured", date(2026, 11, 1), "0.8571", 6 * 3600 * S // 7, "20.0000", "17.14"),  # a 1g MIG slice
    (None, "total", None, "3.3571", 9000 * S + 6 * 3600 * S // 7, None, "63.14"),
]


def expected_rows(team: str, cost_centre: str, lines) -> list[dict]:
    return [{
        "period": "2026-11", "team": team, "cost_centre": cost_centre, "project": project,
        "gpu_model": None if kind == "total" else "H200", "kind": kind, "rate_valid_from": valid_from,
        "card_hours": Decimal(hours), "ticks": ticks, "rate": rate and Decimal(rate),
        "exact_rate": rate and Decimal(rate), "amount": Decimal(amount), "currency": "CNY",
    } for project, kind, valid_from, hours, ticks, rate, amount in lines]


ALL_ROWS = expected_rows("Team Alpha", "CC-A1", ALPHA) + expected_rows("Team Beta", "CC-B2", BETA)


@pytest.mark.django_db
def test_the_hand_priced_month_as_rows(month, django_assert_num_queries):
    statement = close_period(period=NOVEMBER, now=AFTER)
    with django_assert_num_queries(4):  # the entries, then team, project and model names
        rows = statement_rows(statement)
    assert rows == ALL_ROWS
    assert all(type(row[c]) is Decimal for row in rows for c in ("card_hours", "amount"))
    assert statement_totals([statement]) == {statement.pk: Decimal("218.23")}


@pytest.mark.django_db
def test_leads_see_their_teams_lines_and_engineers_none(month, lead_a, lead_b, engineer_a, finance_user, admin_user):
    statement = close_period(period=NOVEMBER, now=AFTER)
    assert statement_rows(statement, user=lead_a) == ALL_ROWS[:6]
    assert statement_rows(statement, user=lead_b) == ALL_ROWS[6:]
    assert statement_rows(statement, user=engineer_a) == []
    assert statement_rows(statement, user=finance_user) == statement_rows(statement, user=admin_user) == ALL_ROWS
    assert statement_totals([statement], user=lead_b) == {statement.pk: Decimal("63.14")}
    assert list(statements_visible_to(lead_a)) == [statement] == list(statements_visible_to(finance_user))
    assert list(statements_visible_to(engineer_a)) == []


@pytest.mark.django_db
def test_a_reopened_period_nets_reversals_and_new_entries(month, finance_user, lead_a, lead_b):
    first = close_period(period=NOVEMBER, now=AFTER)
    reopen_period(period=NOVEMBER, user=finance_user, reason="late samples", now=AFTER + timedelta(hours=1))
    rollups(month["g0"], 2.5, 3, 60.0)  # as in test_close: 30 min unmeasured → busy
    second = close_period(period=NOVEMBER, user=finance_user, now=AFTER + timedelta(hours=2))
    rows = statement_rows(second)
    assert [(r["team"], r["project"], r["kind"], r["card_hours"], r["amount"]) for r in rows] == [
        ("Team Alpha", None, "busy", Decimal("-1.0000"), Decimal("-20.00")),
        ("Team Alpha", None, "busy", Decimal("1.5000"), Decimal("30.00")),
        ("Team Alpha", None, "unmeasured", Decimal("-4.5083"), Decimal("-90.17")),
        ("Team Alpha", None, "unmeasured", Decimal("4.0083"), Decimal("80.17")),
        ("Team Alpha", None, "total", Decimal("0.0000"), Decimal("0.00")),
    ]
    assert list(statements_visible_to(lead_b)) == [first]  # the second revision has no line of team B
    assert list(statements_visible_to(lead_a).order_by("revision")) == [first, second]
    net = period_rows(NOVEMBER)
    totals = {r["team"]: r["amount"] for r in net if r["kind"] == TOTAL_KIND}
    assert totals == {"Team Alpha": Decimal("155.09"), "Team Beta": Decimal("63.14")}  # Σ of both statements
    no_project_busy = [r for r in net if r["team"] == "Team Alpha" and r["project"] is None and r["kind"] == "busy"]
    assert [(r["card_hours"], r["amount"]) for r in no_project_busy] == [
        (Decimal("-1.0000"), Decimal("-20.00")), (Decimal("2.5000"), Decimal("50.00"))]
    assert [r["team"] for r in period_rows(NOVEMBER, user=lead_b)] == ["Team Beta"] * 4
    assert period_rows(date(2026, 10, 1)) == []


@pytest.mark.django_db
def test_priced_usage_is_what_closing_would_book(month, lead_a, engineer_a):
    usage_process(now=AFTER)  # the aggregates, as the periodic task keeps them
    report = priced_usage(period=NOVEMBER)
    assert report.rows == ALL_ROWS and report.unpriced == []
    assert (report.start, report.end) == (NOVEMBER, date(2026, 12, 1))
    assert priced_usage_rows(period=NOVEMBER, user=lead_a) == ALL_ROWS[:6]
    assert priced_usage_rows(period=NOVEMBER, user=engineer_a) == []
    statement = close_period(period=NOVEMBER, now=AFTER)
    assert statement_rows(statement) == report.rows


@pytest.mark.django_db
def test_priced_usage_of_part_of_a_month_and_unpriced_usage(month):
    usage_process(now=AFTER)
    RateCard.objects.filter(valid_from=date(2026, 11, 15)).delete()
    report = priced_usage(start=NOVEMBER, end=date(2026, 11, 21))
    assert report.unpriced == ["H200 has no rate card for 1 day(s) with usage (2026-11-20 – 2026-11-20)."]
    beta = [r for r in report.rows if r["team"] == "Team Beta"]
    assert beta[-1]["amount"] == Decimal("27.14")  # the 20th has no price and no row
    first_week = priced_usage_rows(start=NOVEMBER, end=date(2026, 11, 8))
    assert [r["amount"] for r in first_week if r["kind"] == TOTAL_KIND] == [Decimal("155.09"), Decimal("27.14")]
    with pytest.raises(ValueError, match="end after start"):
        priced_usage(start=NOVEMBER, end=NOVEMBER)


@pytest.mark.django_db
def test_priced_usage_prices_as_the_close_does(month, team_a, lead_b):
    """Overflow beyond a quota, energy at a tariff and shared unallocated capacity (test_close's setups at once):
    the priced usage report equals the statement the close then writes; a lead's share of the unallocated
    capacity is the same as in the full report (it is split by every team's cost before scoping)."""
    ChargePolicy.objects.filter(id=1).update(unallocated="shared")
    Quota.objects.create(team=team_a, period_start=NOVEMBER, expires=date(2026, 12, 1), card_hours=Decimal("5"))
    EnergyTariff.objects.create(valid_from=NOVEMBER, price_per_kwh=Decimal("1.2"), currency="CNY")
    MinuteRollup.objects.filter(gpu=month["g0"], bucket__lt=T0 + timedelta(hours=2)).update(energy_j=42_000)
    usage_recompute(start=T0 - timedelta(days=1), end=AFTER, now=AFTER)
    report = priced_usage(period=NOVEMBER, now=AFTER)
    kinds = {row["kind"] for row in report.rows}
    assert {"overflow", "energy", "unallocated", "total"} <= kinds
    assert statement_rows(close_period(period=NOVEMBER, now=AFTER)) == report.rows
    assert priced_usage_rows(period=NOVEMBER, user=lead_b, now=AFTER) == [
        row for row in report.rows if row["team"] == "Team Beta"]
