"""Celery tasks of the accounting app: thin, locked, rerunnable (DESIGN.md §7)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task

from config.locks import advisory_lock

_ONE_DAY = timedelta(days=1)


@shared_task(name="accounting.tasks.usage_aggregate", ignore_result=True)
def usage_aggregate() -> dict:
    """Recompute the daily usage aggregates that changed and the open days (accounting/usage.py)."""
    from accounting.usage import usage_process

    with advisory_lock("accounting.usage_aggregate") as locked:
        if not locked:
            return {}
        return usage_process()


@shared_task(name="accounting.tasks.close_period", ignore_result=True)
def close_period(period: str | None = None) -> dict:
    """Close ``period`` ("2026-11"; default: last month) once its data is complete. Beat runs it daily: a
    refusal (data still arriving, a price missing) is logged with its reasons and tried again tomorrow;
    a closed period is left as it is."""
    import logging

    from django.utils import timezone

    from accounting.close import CloseRefused, month_days, parse_period
    from accounting.close import close_period as close
    from accounting.usage import business_day_of

    now = timezone.now()
    first = parse_period(period) if period else month_days(business_day_of(now).replace(day=1) - _ONE_DAY)[0]
    with advisory_lock("accounting.close_period") as locked:
        if not locked:
            return {}
        try:
            statement = close(period=first, now=now)
        except CloseRefused as refused:
            logging.getLogger(__name__).warning("closing %s refused: %s", first.strftime("%Y-%m"), refused)
            return {"period": first.isoformat(), "refused": refused.problems}
        return {"period": first.isoformat(), "statement": statement.pk, "revision": statement.revision}
