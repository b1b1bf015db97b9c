"""Priced days (issue 18): the hand-priced November of test_close priced once per day and read back; the rows
dropped with the day's aggregates (late data, through the aggregation's own marks) and with a rate card or the
charge policy, and priced again; the team page's month-to-date cost and the close book the same figure; and,
with no ORM, priced rows plus overflow give exactly the entries the close's pricing gives."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounting.models import ChargePolicy, PricedDay, PricedDayDone, RateCard
from accounting.money.close import close_period
from accounting.money.priced_days import priced_read
from accounting.money.pricing import (
    Policy,
    Rate,
    entries_of,
    price_energy,
    price_usage,
    priced_rows,
    unpriced_of,
)
from accounting.money.statements import TOTAL_KIND, statement_rows
from accounting.usage.services import usage_process
from tests.accounting.money import test_close
from tests.accounting.money.test_close import AFTER, NOVEMBER
from tests.accounting.usage.usage_day import job, rollups

month = test_close.month  # the hand-priced November (a fixture)
DECEMBER = date(2026, 12, 1)
CARD_HOUR = 840_000 * 3600
END_OF_MONTH = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


def busy_ticks(day: date) -> int:
    return sum(PricedDay.objects.filter(day=day, kind="busy").values_list("ticks", flat=True))


def test_the_aggregation_prices_the_days_it_redoes_and_a_read_is_one_query(month, django_assert_num_queries):
    usage_process(now=AFTER)  # redoes the marked days, the 2nd and the 20th, and today, and prices them
    assert set(PricedDayDone.objects.values_list("day", flat=True)) == {date(2026, 11, 2), date(2026, 11, 20), DECEMBER}
    priced_read(NOVEMBER, DECEMBER)  # prices the other 28 (no usage: no rows)
    assert PricedDayDone.objects.filter(day__gte=NOVEMBER, day__lt=DECEMBER).count() == 30
    late = PricedDay.objects.get(day=date(2026, 11, 20), kind="busy")  # team B's 2 h on the 20th, after the change
    assert (late.ticks, late.price, late.rate, late.rate_valid_from, late.amount) == (
        2 * CARD_HOUR, Decimal("18"), Decimal("18"), date(2026, 11, 15), Decimal("36.00"))
    with django_assert_num_queries(1):
        read = priced_read(NOVEMBER, DECEMBER)
    assert {(row.day, row.kind, row.ticks) for row in read.rows} == set(
        PricedDay.objects.values_list("day", "kind", "ticks"))


def test_late_data_drops_the_day_and_the_aggregation_prices_it_again(month, day, team_b):
    usage_process(now=AFTER)
    the_20th = date(2026, 11, 20)
    before = busy_ticks(the_20th)
    job(team_b, day["g0"], 18 * 24 + 12, 18 * 24 + 13, name="b-late-data")  # an hour more, sent late
    rollups(day["g0"], 18 * 24 + 12, 18 * 24 + 13, 70.0)
    assert PricedDayDone.objects.filter(day=the_20th).exists()  # the aggregates are not redone yet: nor is this
    usage_process(now=AFTER + timedelta(minutes=5))  # the marks redo the 20th: its rows go, and come back priced
    assert busy_ticks(the_20th) == before + CARD_HOUR
    assert PricedDayDone.objects.get(day=the_20th).priced_at == AFTER + timedelta(minutes=5)
    assert PricedDayDone.objects.get(day=date(2026, 11, 2)).priced_at == AFTER  # other days kept


def test_a_rate_card_change_drops_the_days_it_covers_and_the_next_read_prices_them(month):
    usage_process(now=AFTER)
    card = RateCard.objects.get(valid_from=date(2026, 11, 15))
    card.price_per_card_hour = Decimal("16")
    card.save()
    assert not PricedDayDone.objects.filter(day__gte=date(2026, 11, 15), day__lt=DECEMBER).exists()
    assert list(PricedDayDone.objects.values_list("day", flat=True)) == [date(2026, 11, 2)]  # before the 15th: kept
    rows = [row for row in priced_read(NOVEMBER, DECEMBER).rows if row.day == date(2026, 11, 20)]
    assert [(row.kind, row.rate, row.amount) for row in rows] == [("busy", Decimal("16"), Decimal("32.00"))]
    assert PricedDayDone.objects.filter(day__gte=NOVEMBER, day__lt=DECEMBER).count() == 30


def test_the_charge_policy_drops_every_day(month):
    usage_process(now=AFTER)
    ChargePolicy.objects.filter(id=1).update(idle_charge_factor=Decimal("0.25"))
    assert not PricedDayDone.objects.exists() and not PricedDay.objects.exists()
    idle = [row for row in priced_read(NOVEMBER, DECEMBER).rows if row.kind == "idle"]
    assert idle and all(row.rate == row.price * Decimal("0.25") for row in idle)


def test_the_team_page_cost_is_what_the_close_books(month, client, lead_a, team_a):
    usage_process(now=END_OF_MONTH)
    client.force_login(lead_a)
    with time_machine.travel(END_OF_MONTH, tick=False):
        response = client.get(reverse("accounting:team-detail", args=[team_a.slug]))
    assert response.status_code == 200
    page_cost = response.context["cost"].amount
    statement = close_period(period=NOVEMBER, now=AFTER)
    booked = [row["amount"] for row in statement_rows(statement) if row["kind"] == TOTAL_KIND and row["team"] == team_a.name]
    assert page_cost == booked[0] == Decimal("155.09")  # as test_close prices team A's November, by hand


# ---- pure: priced rows, then overflow, are the close's pricing ---------------------------------------------------

DAYS = [date(2026, 11, d) for d in (1, 14, 15, 30)]
RATES = [Rate(1, date(2026, 11, 1), date(2026, 11, 15), Decimal("20")), Rate(1, date(2026, 11, 15), None, Decimal("18.5"))]
TARIFFS = [Rate(0, date(2026, 11, 10), None, Decimal("0.8"))]
keys = st.tuples(st.sampled_from(DAYS), st.sampled_from([1, 2]), st.sampled_from([None, 7]), st.sampled_from([1, 2, None]),
                 st.sampled_from(["busy", "idle", "unmeasured"]))


@hypothesis_settings(max_examples=60, deadline=None)
@given(usage=st.dictionaries(keys, st.integers(1, 10 * CARD_HOUR), max_size=12),
       over=st.dictionaries(keys, st.integers(1, 10 * CARD_HOUR), max_size=6),
       energy=st.dictionaries(st.tuples(st.sampled_from(DAYS), st.sampled_from([1, 2]), st.just(None), st.just(1)),
                              st.integers(0, 10**9), max_size=4),
       idle_factor=st.sampled_from([Decimal("0.5"), Decimal("1"), Decimal("0")]))
def test_priced_rows_with_overflow_are_the_close_pricing(usage, over, energy, idle_factor):
    policy = Policy(idle_factor, Decimal("1.5"))
    rows = priced_rows(usage=usage, energy=energy, rates=RATES, tariffs=TARIFFS, policy=policy, currency="CNY")
    wanted, unpriced = price_usage(usage=usage, rates=RATES, policy=policy, overflow=over)
    got = entries_of([row for row in rows if row.kind != "energy"], overflow=over, policy=policy)
    assert sorted(got, key=repr) == sorted(wanted, key=repr)
    assert entries_of([row for row in rows if row.kind == "energy"]) == price_energy(energy=energy, tariffs=TARIFFS)
    assert unpriced_of(rows) == unpriced
