"""A usage worker killed in the middle of its aggregation (issue 17): the task's one transaction (its
advisory lock's) goes as a whole, so nothing half-done stays, and the redelivered task leaves the rows an
uninterrupted run leaves."""

import pytest
import time_machine
from django.db import transaction

from accounting import tasks
from accounting.models import (
    DailyEnergy,
    DailyHolderUsage,
    DailyModelCapacity,
    DailyModelUsage,
    DailyUnplacedUsage,
    DailyUsage,
    HourlyModelCapacity,
    HourlyModelUsage,
    HourlyUsage,
    UsageAggregateState,
    UsageDirty,
)
from accounting.usage import services
from tests.accounting.usage.usage_day import NOW
from tests.crash import WorkerKilled, crash_after_call, rows

pytestmark = pytest.mark.django_db

WRITTEN = (DailyUsage, DailyUnplacedUsage, DailyEnergy, HourlyUsage, DailyHolderUsage, HourlyModelUsage,
           HourlyModelCapacity, DailyModelUsage, DailyModelCapacity, UsageDirty, UsageAggregateState)


def snapshot() -> dict:
    return {model.__name__: rows(model) for model in WRITTEN}


@time_machine.travel(NOW, tick=False)  # the task reads the clock
def test_a_killed_aggregation_is_redone_and_equals_an_uninterrupted_run(day, monkeypatch):
    before = snapshot()
    assert before["UsageDirty"], "the day's writes marked it for recount"
    with transaction.atomic():
        tasks.usage_aggregate()
        uninterrupted = snapshot()
        transaction.set_rollback(True)
    assert snapshot() == before
    assert uninterrupted["DailyUsage"] and not uninterrupted["UsageDirty"]

    # Killed after the first day's rows were written, inside the task's transaction.
    calls = crash_after_call(monkeypatch, services, "write_model_sums", call=2)
    with pytest.raises(WorkerKilled):
        tasks.usage_aggregate()
    assert len(calls) == 2
    assert snapshot() == before  # nothing half-done: the marks are still there to redo
    monkeypatch.undo()

    tasks.usage_aggregate()  # redelivered (acks late)
    assert snapshot() == uninterrupted
