"""Closing a month: a hand-priced month (the day of test_usage plus a job after a mid-month price change),
refusals while data is incomplete or unpriced, idempotent and concurrent closes, the append-only ledger,
and a reopen whose re-close books reversals and new entries. Every amount checked to the cent."""

import threading
import time
from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import IntegrityError, connection, transaction

from accounting.models import ChargePolicy, LedgerEntry, RateCard, Statement
from accounting.money.close import CloseRefused, close_period, reopen_period
from accounting.money.pricing import Entry, lines_of, team_totals
from cluster.models import CollectionState, GpuModel, Node
from tests.accounting.usage.usage_day import at, job, rollups
from tests.conftest import T0

NOVEMBER = date(2026, 11, 1)
AFTER = T0 + timedelta(days=29, hours=2)  # 2026-12-01 02:00 UTC: November is over
pytestmark = pytest.mark.django_db


@pytest.fixture
def month(day, team_b, settings):
    """The day, a price change on the 15th (20 → 18 CNY per H200 card-hour), idle at half price, team B
    busy 2 h on the 20th, and every node collected past the month's end."""
    settings.CARDHOUR_CURRENCY = "CNY"
    h200 = GpuModel.objects.get(short_name="H200")
    RateCard.objects.create(gpu_model=h200, valid_from=NOVEMBER, valid_until=date(2026, 11, 15),
                            price_per_card_hour=Decimal("20"), currency="CNY")
    RateCard.objects.create(gpu_model=h200, valid_from=date(2026, 11, 15), price_per_card_hour=Decimal("18"),
                            currency="CNY")
    ChargePolicy.objects.create(idle_charge_factor=Decimal("0.5"), overflow_multiplier=Decimal("1.5"), unallocated="kept")
    job(team_b, day["g0"], 18 * 24 + 9, 18 * 24 + 11, name="b-late-month")
    rollups(day["g0"], 18 * 24 + 9, 18 * 24 + 11, 70.0)
    for node in Node.objects.all():
        CollectionState.objects.create(node=node, data_complete_to=AFTER)
    return day


def amounts(statement) -> dict:
    rows = LedgerEntry.objects.filter(statement=statement).select_related("team", "project", "gpu_model")
    entries = [Entry(r.day, r.team_id, r.project_id, r.gpu_model_id, r.kind, r.rate, r.rate_valid_from, r.ticks)
               for r in rows]
    lines = lines_of(entries, "CNY")
    slugs = {r.team_id: r.team.slug for r in rows}
    projects = {r.project_id: r.project.slug for r in rows if r.project}
    by_line = {(slugs[ln.team_id], projects.get(ln.project_id), ln.kind, ln.rate.normalize(), ln.reversal): ln.amount
               for ln in lines}
    return by_line, {slugs[t]: total for t, total in team_totals(lines).items()}


def test_a_hand_priced_month(month):
    statement = close_period(period=NOVEMBER, now=AFTER)
    lines, totals = amounts(statement)
    assert lines == {
        ("alpha", None, "busy", Decimal(20), False): Decimal("20.00"),  # g0 01–02
        ("alpha", "alpha-pre", "busy", Decimal(20), False): Decimal("20.00"),  # the booking's busy hour
        ("alpha", None, "idle", Decimal(10), False): Decimal("4.92"),  # 1,770 s × 10 / 3,600 = 4.9166…
        ("alpha", None, "unmeasured", Decimal(20), False): Decimal("90.17"),  # 1,830 s + 4 h unplaced = 4.50833 h
        ("alpha", "alpha-pre", "unmeasured", Decimal(20), False): Decimal("20.00"),
        ("beta", None, "busy", Decimal(20), False): Decimal("10.00"),  # 13:00–13:30
        ("beta", None, "unmeasured", Decimal(20), False): Decimal("17.14"),  # 6/7 h on a MIG slice
        ("beta", None, "busy", Decimal(18), False): Decimal("36.00"),  # the 20th, after the price change
    }
    assert totals == {"alpha": Decimal("155.09"), "beta": Decimal("63.14")}
    assert sum(totals.values()) == sum(lines.values())


def test_closing_twice_adds_nothing(month):
    first = close_period(period=NOVEMBER, now=AFTER)
    count = LedgerEntry.objects.count()
    assert close_period(period=NOVEMBER, now=AFTER + timedelta(hours=1)) == first
    assert LedgerEntry.objects.count() == count and Statement.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_closes_at_once_give_one_statement(month):
    barrier, results, errors = threading.Barrier(2), [], []

    def run():
        try:
            barrier.wait()
            results.append(close_period(period=NOVEMBER, now=AFTER).pk)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(set(results)) == 1
    assert Statement.objects.count() == 1


def test_refused_while_a_node_is_behind_or_a_model_unpriced(month):
    CollectionState.objects.filter(node__hostname="n2").update(data_complete_to=AFTER - timedelta(days=2))
    RateCard.objects.filter(valid_from=date(2026, 11, 15)).delete()
    with pytest.raises(CloseRefused) as refused:
        close_period(period=NOVEMBER, now=AFTER)
    problems = " | ".join(refused.value.problems)
    assert "node n2: data complete only to" in problems
    assert "H200 has no rate card for 1 day(s) with usage (2026-11-20 – 2026-11-20)" in problems
    assert not Statement.objects.exists() and not LedgerEntry.objects.exists()


def test_a_month_not_over_is_refused(month):
    with pytest.raises(CloseRefused, match="has not ended yet"):
        close_period(period=NOVEMBER, now=T0 + timedelta(days=10))


def test_the_ledger_refuses_updates_and_deletes(month):
    close_period(period=NOVEMBER, now=AFTER)
    entry = LedgerEntry.objects.first()
    for change in (lambda: LedgerEntry.objects.filter(pk=entry.pk).update(ticks=1),
                   lambda: LedgerEntry.objects.filter(pk=entry.pk).delete()):
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
            change()


def test_reopen_and_close_again_books_reversals_and_new_entries(month, finance_user, engineer_a):
    first = close_period(period=NOVEMBER, now=AFTER)
    with pytest.raises(CloseRefused, match="only finance or an admin"):
        reopen_period(period=NOVEMBER, user=engineer_a, reason="x")
    with pytest.raises(CloseRefused, match="reason"):
        reopen_period(period=NOVEMBER, user=finance_user, reason=" ")
    reopen_period(period=NOVEMBER, user=finance_user, reason="late samples from n1", now=AFTER + timedelta(hours=1))
    rollups(month["g0"], 2.5, 3, 60.0)  # the agent's spool arrives: 30 min unmeasured → busy
    second = close_period(period=NOVEMBER, user=finance_user, now=AFTER + timedelta(hours=2))
    first.refresh_from_db()
    assert (first.status, first.reopen_reason, second.revision, second.status) == (
        "reopened", "late samples from n1", 2, "closed")
    lines, totals = amounts(second)
    assert lines == {
        ("alpha", None, "busy", Decimal(20), True): Decimal("-20.00"),
        ("alpha", None, "busy", Decimal(20), False): Decimal("30.00"),
        ("alpha", None, "unmeasured", Decimal(20), True): Decimal("-90.17"),
        ("alpha", None, "unmeasured", Decimal(20), False): Decimal("80.17"),  # 30 s + 4 h unplaced = 4.00833 h
    }
    assert totals == {"alpha": Decimal("0.00")}
    # The period's net after both closes: g0's busy hour and a half, once.
    busy = LedgerEntry.objects.filter(team__slug="alpha", project__isnull=True, kind="busy", rate=20)
    assert sum(busy.values_list("ticks", flat=True)) == 840_000 * 5400
    assert LedgerEntry.objects.filter(reverses__isnull=False).count() == 2


def test_a_quota_crossed_mid_day_moves_the_rest_to_overflow(month, team_a):
    """Alpha's 2 November in hour order (no project first): 00–03 g0 (1 an hour from 01), 04–07 nothing new
    but the unplaced pair (2 an hour 05–07), 10–12 the booking (alpha-pre). A 5 card-hour quota fills in hour
    06 (g0's 2 + 05's pair = 4, then half of 06's pair); the other half, and the booking's 2 hours, overflow
    at 1.5 × 20 = 30."""
    from accounting.models import Quota

    Quota.objects.create(team=team_a, period_start=NOVEMBER, expires=date(2026, 12, 1), card_hours=Decimal("5"))
    lines, totals = amounts(close_period(period=NOVEMBER, now=AFTER))
    alpha = {key[1:]: amount for key, amount in lines.items() if key[0] == "alpha"}
    assert alpha == {
        (None, "busy", Decimal(20), False): Decimal("20.00"),
        (None, "idle", Decimal(10), False): Decimal("4.92"),
        (None, "unmeasured", Decimal(20), False): Decimal("70.17"),  # 1,830 s + 3 h of the pair
        (None, "overflow", Decimal(30), False): Decimal("30.00"),  # the pair's last card-hour
        ("alpha-pre", "overflow", Decimal(30), False): Decimal("60.00"),  # the booking's busy and unmeasured hours
    }
    assert totals["alpha"] == Decimal("185.09")  # 155.09 + ½ × 20 × 3 h of overflow


def test_the_task_closes_a_period_once_and_reports_a_refusal(month):
    from accounting.tasks import close_period as task

    with time_machine.travel(T0 + timedelta(days=10), tick=False):  # 12 November: the month has not ended
        first = task.apply(args=["2026-10"]).get()  # over, complete, nothing to bill: an empty statement
        assert first["revision"] == 1 and task.apply(args=["2026-10"]).get()["statement"] == first["statement"]
        refused = task.apply(args=["2026-11"]).get()
    assert refused["period"] == "2026-11-01" and "statement" not in refused
    assert any("has not ended yet" in problem for problem in refused["refused"])
    assert Statement.objects.filter(period=date(2026, 10, 1)).count() == 1
    assert not Statement.objects.filter(period=NOVEMBER).exists()
    with time_machine.travel(AFTER, tick=False):  # as beat runs it on 1 December: last month, now over
        closed = task.apply().get()
    assert closed["period"] == "2026-11-01" and closed["revision"] == 1
    assert Statement.objects.get(period=NOVEMBER).pk == closed["statement"]


def test_the_task_waits_for_a_close_that_holds_the_lock_and_then_closes(month):
    """A redo after a worker killed mid-close can start while PostgreSQL still holds the dead session's
    lock: it must wait for it, not skip (which left the month open until the next run, 6 h later)."""
    from accounting.tasks import close_period as task
    from core.locks import wait_turn

    held, release = threading.Event(), threading.Event()

    def other_session():
        try:
            with transaction.atomic():
                wait_turn("accounting.close_period")
                held.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    def release_once_the_task_waits():
        # Let go only once the task's session is seen waiting for the lock (polled with time.sleep: a
        # threading.Timer never fires under the moved clock's libfaketime, see .ci/clock).
        try:
            with connection.cursor() as cursor:
                for _ in range(600):
                    cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                    if cursor.fetchone()[0]:
                        waited.set()
                        break
                    time.sleep(0.05)
        finally:
            release.set()
            connection.close()

    waited = threading.Event()
    holder = threading.Thread(target=other_session)
    holder.start()
    assert held.wait(timeout=30)
    releaser = threading.Thread(target=release_once_the_task_waits)
    releaser.start()
    with time_machine.travel(AFTER, tick=False):
        closed = task.apply(args=["2026-11"]).get()
    holder.join(timeout=30)
    releaser.join(timeout=30)
    assert waited.is_set()  # the task waited for the other session's lock instead of skipping
    assert closed["period"] == "2026-11-01" and Statement.objects.get(period=NOVEMBER).pk == closed["statement"]


def test_energy_is_billed_to_the_minutes_holders_at_the_tariff(month):
    from accounting.models import EnergyTariff
    from cluster.models import MinuteRollup

    EnergyTariff.objects.create(valid_from=NOVEMBER, price_per_kwh=Decimal("1.2"), currency="CNY")
    g0 = month["g0"]
    # 700 W on g0 from 00:30 to 02:00: alpha's job holds it from 01:00, so 60 of the 90 minutes are alpha's.
    MinuteRollup.objects.filter(gpu=g0, bucket__lt=at(2)).update(energy_j=42_000)
    rollups(g0, 0.5, 1, 0.0)
    MinuteRollup.objects.filter(gpu=g0, bucket__gte=at(0.5), bucket__lt=at(1)).update(energy_j=42_000)
    lines, totals = amounts(close_period(period=NOVEMBER, now=AFTER))
    assert lines[("alpha", None, "energy", Decimal("1.2"), False)] == Decimal("0.84")  # 0.7 kWh × 1.2
    assert totals["alpha"] == Decimal("155.93")
    assert not any(key[0] != "alpha" and key[2] == "energy" for key in lines)  # unallocated energy: the platform's


def test_shared_unallocated_capacity_goes_to_the_teams_by_their_cost(month):
    from accounting.usage.services import usage_recompute

    ChargePolicy.objects.filter(id=1).update(unallocated="shared")
    usage_recompute(start=T0 - timedelta(days=1), end=AFTER, now=AFTER)  # as the aggregation ran every day
    lines, totals = amounts(close_period(period=NOVEMBER, now=AFTER))
    shared = {(key[0], key[3]): amount for key, amount in lines.items() if key[2] == "unallocated"}
    # 2 November: 21 + 20.5 + (24 − 6/7) unallocated H200 card-hours at 20, split by that day's exact cost
    # (alpha 155.0833…, beta 27.1428…): 1,100.28 and 192.57 (the odd tick to beta's larger remainder).
    # 20 November: 70 unallocated card-hours at 18, all beta's (the only team on H200 that day). Other days
    # nobody used the GPUs: the platform keeps them.
    assert shared == {("alpha", Decimal(20)): Decimal("1100.28"), ("beta", Decimal(20)): Decimal("192.57"),
                      ("beta", Decimal(18)): Decimal("1260.00")}
    assert totals == {"alpha": Decimal("155.09") + Decimal("1100.28"),
                      "beta": Decimal("63.14") + Decimal("192.57") + Decimal("1260.00")}
