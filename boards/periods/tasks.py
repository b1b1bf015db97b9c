"""Celery tasks of the week and month views: thin and rerunnable (DESIGN.md §7)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="boards.periods.tasks.weekly_reports", ignore_result=True, time_limit=600, soft_time_limit=570)
def weekly_reports() -> int:
    """E-mail last week's report once Monday's digest time has passed, once per person (boards/periods/weekly.py).
    Not under an advisory lock on purpose: that lock's transaction would hold every person's mark until the end of
    the run, so a crash halfway would roll back the marks of e-mails already sent. Each person's mark commits with
    their e-mail instead, and its unique constraint keeps two runs at the same time from sending it twice."""
    from django.utils import timezone

    from boards.periods.weekly import send_weekly_reports

    return send_weekly_reports(now=timezone.now())
