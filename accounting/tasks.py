"""Celery tasks of the accounting app: thin, locked, rerunnable (DESIGN.md §7)."""

from __future__ import annotations

from celery import shared_task

from config.locks import advisory_lock


@shared_task(name="accounting.tasks.usage_aggregate", ignore_result=True)
def usage_aggregate() -> dict:
    """Recompute the daily usage aggregates that changed and the open days (accounting/usage.py)."""
    from accounting.usage import usage_process

    with advisory_lock("accounting.usage_aggregate") as locked:
        if not locked:
            return {}
        return usage_process()
