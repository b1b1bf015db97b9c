"""A worker killed in the middle of closing a period (issue 17): the statement, its audit row and the usage
brought up to date go with the task's transaction, and the redelivered task closes the period as an
uninterrupted run does: one statement, the same ledger entries."""

import pytest
import time_machine
from django.db import transaction

from accounting import tasks
from accounting.models import DailyUsage, LedgerEntry, Statement
from accounting.money import close
from teams.audit.models import AuditEntry
from tests.accounting.money.test_close import AFTER, month  # noqa: F401 (the closed month's fixture)
from tests.crash import WorkerKilled, crash_after_call, rows

pytestmark = pytest.mark.django_db


def snapshot() -> dict:
    return {
        "statements": rows(Statement),
        "ledger": rows(LedgerEntry, exclude=("statement_id", "reverses_id")),
        "audit": rows(AuditEntry, exclude=("object_id",)),
        "usage": rows(DailyUsage),
    }


@time_machine.travel(AFTER, tick=False)  # the task reads the clock
def test_a_killed_close_is_redone_and_equals_an_uninterrupted_run(month, monkeypatch):  # noqa: F811
    before = snapshot()
    with transaction.atomic():
        result = tasks.close_period(period="2026-11")
        uninterrupted = snapshot()
        transaction.set_rollback(True)
    assert "statement" in result, result
    assert len(uninterrupted["statements"]) == 1 and uninterrupted["ledger"] and uninterrupted["audit"]
    assert snapshot() == before

    # Killed with the statement and its audit row written, while its ledger entries were being made.
    calls = crash_after_call(monkeypatch, close, "_row", call=1)
    with pytest.raises(WorkerKilled):
        tasks.close_period(period="2026-11")
    assert len(calls) == 1
    assert snapshot() == before
    monkeypatch.undo()

    redone = tasks.close_period(period="2026-11")  # redelivered (acks late)
    assert redone["revision"] == 1
    assert snapshot() == uninterrupted
    assert tasks.close_period(period="2026-11")["statement"] == redone["statement"]  # and only once
    assert Statement.objects.count() == 1
