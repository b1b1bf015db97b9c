"""Celery tasks of the accounting app: thin, locked, rerunnable (DESIGN.md §7)."""

from __future__ import annotations

from celery import shared_task

from accounting.notify.webhooks import deliver_webhook  # noqa: F401 (registered under its name: accounting.tasks.deliver_webhook)
from core.locks import advisory_lock, wait_turn


@shared_task(name="accounting.tasks.usage_aggregate", ignore_result=True)
def usage_aggregate() -> dict:
    """Recompute the daily usage aggregates that changed and the open days (accounting/usage/services.py)."""
    from accounting.usage.services import usage_process

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

    from django.db import transaction
    from django.utils import timezone

    from accounting.money.close import CloseRefused, parse_period
    from accounting.money.close import close_period as close
    from core.timeutils import business_today, previous_month

    first = parse_period(period) if period else previous_month(business_today(now=timezone.now()))
    # A close waits for the one before it rather than skipping: after a worker killed mid-close, its redo
    # may start while PostgreSQL still holds the dead session's lock (make chaos saw the redo skip, leaving
    # the month open until the next run, 6 h later). The one after a finished close finds it closed.
    with transaction.atomic():
        wait_turn("accounting.close_period")
        now = timezone.now()
        try:
            statement = close(period=first, now=now)
        except CloseRefused as refused:
            logging.getLogger(__name__).warning("closing %s refused: %s", first.strftime("%Y-%m"), refused)
            return {"period": first.isoformat(), "refused": refused.problems}
        return {"period": first.isoformat(), "statement": statement.pk, "revision": statement.revision}


@shared_task(name="accounting.tasks.quota_alerts", ignore_result=True, time_limit=300, soft_time_limit=270)
def quota_alerts() -> dict:
    """Raise and close the quota warnings (accounting/quotas/watch.py)."""
    from django.utils import timezone

    from accounting.quotas.watch import quota_alerts as watch

    with advisory_lock("accounting.quota_alerts") as locked:
        return watch(now=timezone.now()) if locked else {}


@shared_task(name="accounting.tasks.notify_fan_out", ignore_result=True, time_limit=300, soft_time_limit=270)
def notify_fan_out() -> dict:
    """Notify the recipients of new alerts; critical ones by e-mail and webhook at once (accounting/notify/services.py)."""
    from django.utils import timezone

    from accounting.notify.services import fan_out

    with advisory_lock("accounting.notify_fan_out") as locked:
        return fan_out(now=timezone.now()) if locked else {}


@shared_task(name="accounting.tasks.notify_digests", ignore_result=True, time_limit=600, soft_time_limit=570)
def notify_digests() -> int:
    """E-mail the daily warning digests once the local digest time has passed (accounting/notify/services.py)."""
    from django.utils import timezone

    from accounting.notify.services import send_digests

    with advisory_lock("accounting.notify_digests") as locked:
        return send_digests(now=timezone.now()) if locked else 0


@shared_task(name="accounting.tasks.webhook_sweep", ignore_result=True, time_limit=300, soft_time_limit=270)
def webhook_sweep() -> dict:
    """Post the webhook deliveries left pending (accounting/notify/webhooks.py). Not under an advisory lock:
    each delivery is claimed on its own, so a second sweep at the same time skips what the first is posting."""
    from django.utils import timezone

    from accounting.notify.webhooks import webhook_sweep as sweep

    return sweep(now=timezone.now())
