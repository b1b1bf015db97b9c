"""What stops the usage aggregation for some, reported without stopping it for the others (issue 12).

Two kinds, both ``AlertKind.USAGE_FAILED``, tier critical (a period with either cannot be closed):
- a **bad job**: a stored allocation outside the supported time window (a job "started" in year 1,
  written before the window was enforced, or by raw SQL). It is not counted; the alert's subject is the
  job, and it closes when an admin corrects or deletes the job.
- a **GPU-day that fails** to aggregate (any error): its old rows stay, the alert's subject is the GPU
  (subject id 0 of kind job: the day's unplaced usage, which has no GPU), with the failing days in its
  details; it is marked again, and the alert closes once every one of its days aggregates.

A close reads :func:`usage_problems` and names them in its refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from django.db.models import Q
from django.utils.translation import gettext as _

from accounting.models import UsageDirty
from accounting.usage.inputs import allocations_in_window
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.models import Alert, Allocation, Gpu, Job
from cluster.status.services import alert_close, alert_raise
from core.languages import in_every_language
from core.timeutils import business_day_bounds
from core.timewindow import WINDOW_TEXT, rfc3339_utc

UNPLACED_SUBJECT = (AlertSubject.JOB, 0)  # the day's unplaced usage: it has no GPU
ERROR_LENGTH = 500


def bad_allocations():
    """Counted allocations outside the supported window: their usage is not counted."""
    return Allocation.objects.counted().exclude(allocations_in_window())


class UsageFailures:
    """The failure alerts of one ``usage_process`` run: raised, refreshed and closed as units fail or pass."""

    def __init__(self, *, now: datetime):
        self.now = now
        self.count = 0
        self._retry: list[tuple[int | None, date]] = []
        self._open = {
            (alert.subject_type, alert.subject_id): alert
            for alert in Alert.objects.open().filter(kind=AlertKind.USAGE_FAILED)
            if alert.subject_type == AlertSubject.GPU or (alert.subject_type, alert.subject_id) == UNPLACED_SUBJECT
        }

    def failed(self, *, day: date, gpu_id: int | None, error: Exception) -> None:
        """One GPU's day (None: the day's unplaced usage) failed with ``error``."""
        self.count += 1
        self._retry.append((gpu_id, day))
        if gpu_id is None:
            subject, label = UNPLACED_SUBJECT, _("unplaced usage")
        else:
            gpu = Gpu.objects.select_related("node").get(pk=gpu_id)
            subject, label = (AlertSubject.GPU, gpu_id), f"{gpu.node.hostname}/{gpu.index}"
        text = f"{type(error).__name__}: {error}"[:ERROR_LENGTH]
        known = self._open.get(subject)
        days = sorted({*(known.details.get("days", []) if known else []), day.isoformat()})
        alert, _opened = alert_raise(
            subject_type=subject[0], subject_id=subject[1], subject_label=label, kind=AlertKind.USAGE_FAILED,
            tier=AlertTier.CRITICAL, at=self.now, details={"days": days, "error": text},
            message=in_every_language(lambda: _(
                "The usage of %(subject)s on %(day)s could not be aggregated (%(error)s); its earlier figures stay "
                "until it aggregates again.") % {"subject": label if gpu_id is not None else _("unplaced usage"),
                                                 "day": day.isoformat(), "error": text}),
        )
        self._open[subject] = alert

    def succeeded(self, *, day: date, gpu_ids: Sequence[int] | None, unplaced: bool) -> None:
        """``day`` aggregated for ``gpu_ids`` (None: every GPU) and, with ``unplaced``, its unplaced usage."""
        for subject, alert in list(self._open.items()):
            if subject == UNPLACED_SUBJECT:
                if not unplaced:
                    continue
            elif gpu_ids is not None and subject[1] not in gpu_ids:
                continue
            days = [text for text in alert.details.get("days", []) if text != day.isoformat()]
            if days == alert.details.get("days", []):
                continue
            if days:
                alert.details = {**alert.details, "days": days}
                alert.save(update_fields=["details"])
            else:
                alert_close(subject_type=subject[0], subject_id=subject[1], kind=AlertKind.USAGE_FAILED, at=self.now)
                del self._open[subject]

    def mark_again(self) -> None:
        """Mark the failed units, so the next run tries them again."""
        marks = []
        for gpu_id, day in self._retry:
            lo, hi = business_day_bounds(day)
            marks.append(UsageDirty(gpu_id=gpu_id, node_id=None, lo=lo, hi=hi))
        UsageDirty.objects.bulk_create(marks)

    def report_bad_jobs(self) -> int:
        """Raise an alert on each job with a bad allocation; close those of jobs corrected or deleted."""
        bad_ids = set(bad_allocations().values_list("job_id", flat=True))
        for job in Job.objects.filter(pk__in=bad_ids).select_related("team"):
            alert_raise(
                subject_type=AlertSubject.JOB, subject_id=job.pk, subject_label=job_label(job)[:200],
                kind=AlertKind.USAGE_FAILED, tier=AlertTier.CRITICAL, at=self.now,
                details={"job": job.pk, "start": _text(job.start_time), "end": _text(job.end_time)},
                message=in_every_language(lambda job=job: bad_job_message(job)),
            )
        stale = (Alert.objects.open().filter(kind=AlertKind.USAGE_FAILED, subject_type=AlertSubject.JOB)
                 .exclude(subject_id__in=[*bad_ids, UNPLACED_SUBJECT[1]]).values_list("subject_id", flat=True))
        for job_id in list(stale):
            alert_close(subject_type=AlertSubject.JOB, subject_id=job_id, kind=AlertKind.USAGE_FAILED, at=self.now)
        return len(bad_ids)


def job_label(job: Job) -> str:
    team = job.team.slug if job.team_id else "-"
    return f"{job.source} job {job.external_id} (id {job.pk}, team {team})"


def bad_job_message(job: Job) -> str:
    return _("Job %(job)s has times outside the supported window %(window)s (start %(start)s, end %(end)s): its "
             "usage is not counted. Correct or delete it (admin site, or PATCH/DELETE /api/v1/jobs/%(id)s/).") % {
        "job": job_label(job), "window": WINDOW_TEXT, "start": _text(job.start_time), "end": _text(job.end_time),
        "id": job.pk}


def _text(moment: datetime | None) -> str:
    return rfc3339_utc(moment) if moment is not None else "-"


def usage_problems(first: date, following: date) -> list[str]:
    """Why the usage of the business days ``[first, following)`` is not what it should be: bad jobs whose
    range meets them, GPU-days that failed to aggregate (from the open alerts). Empty when none."""
    start, end = business_day_bounds(first)[0], business_day_bounds(following)[0]
    problems = []
    bad_ids = (bad_allocations().filter(start__lt=end).filter(Q(end__isnull=True) | Q(end__gt=start))
               .values_list("job_id", flat=True))
    for job in Job.objects.filter(pk__in=set(bad_ids)).select_related("team").order_by("pk"):
        problems.append(bad_job_message(job))
    failing = Alert.objects.open().filter(kind=AlertKind.USAGE_FAILED).order_by("subject_type", "subject_id")
    for alert in failing:
        days = [text for text in alert.details.get("days", []) if first.isoformat() <= text < following.isoformat()]
        if days:
            problems.append(_("the usage of %(subject)s could not be aggregated on %(days)s (%(error)s).") % {
                "subject": alert.subject_label, "days": ", ".join(days), "error": alert.details.get("error", "")})
    return problems
