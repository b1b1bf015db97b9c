"""Writing jobs and their allocations: one service every way in uses (API, CSV, sacct, observed).

``job_upsert`` is idempotent on the job key (source, external id, start time): the same facts twice
change nothing, newer facts (an end time, a state) update the row and its allocations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

from django.db import IntegrityError, transaction

from cluster.models import Allocation, AllocationOrigin, Gpu, GpuModel, Job, JobState
from core.timewindow import WINDOW_TEXT, OutsideWindow, check_job_time, in_window
from core.units import TICKS_PER_GPU_SECOND

JOB_FIELDS = (
    "name", "user", "team", "project", "account", "partition", "priority", "gpu_count", "gpu_model",
    "estimated_card_hours", "data_ready", "data_ready_at", "state", "submit_time", "end_time", "node_list",
)


JOB_STATES = tuple(JobState.values)  # built once: problems() runs for every row of a 100k-row import
JOB_TIME_FIELDS = ("submit_time", "start_time", "end_time")


def job_time_errors(times: Mapping[str, datetime | None], *, now: datetime) -> dict[str, OutsideWindow]:
    """The job times among ``times`` (keyed by :data:`JOB_TIME_FIELDS`) that break the rule: in the supported
    window and at most a day after ``now``, the application's clock (core.timewindow). The API and the
    admin site show these; imports check the same rule cell by cell as they parse."""
    errors = {}
    for name in JOB_TIME_FIELDS:
        try:
            check_job_time(times.get(name), field=name, now=now)
        except OutsideWindow as error:
            errors[name] = error
    return errors


class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass
class JobInput:
    """A job's facts as a way in has read and checked them (teams and models already resolved)."""

    source: str
    external_id: str
    start_time: datetime | None
    team: object | None  # accounting.Team
    project: object | None = None  # accounting.Project
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    priority: int | None = None
    gpu_count: Decimal = Decimal(0)
    gpu_model: GpuModel | None = None
    estimated_card_hours: Decimal | None = None
    data_ready: bool | None = None
    data_ready_at: datetime | None = None  # when its input data is (or was) ready; may lie ahead of now
    state: str = JobState.PENDING
    submit_time: datetime | None = None
    end_time: datetime | None = None
    node_list: str = ""
    gpus: list[Gpu] | None = field(default=None)  # the GPUs it ran on, when the source knows them

    def problems(self) -> dict[str, str]:
        """Rule violations by field (empty when the job may be stored)."""
        problems = {}
        if not self.external_id:
            problems["job_id"] = "is required"
        if self.gpu_count < 0:
            problems["gpu_count"] = "must not be negative"
        elif self.gpu_count != self.gpu_count.quantize(Decimal("0.001")):
            problems["gpu_count"] = "has at most 3 decimals"
        if self.start_time and self.end_time and self.end_time < self.start_time:
            problems["end_time"] = "is before start_time"
        if self.estimated_card_hours is not None and self.estimated_card_hours < 0:
            problems["estimated_card_hours"] = "must not be negative"
        if self.team is None and self.source != "observed":
            problems["team"] = "is required"
        if self.project is not None and self.team is not None and self.project.team_id != self.team.pk:
            problems["project"] = "belongs to another team"
        for name in (*JOB_TIME_FIELDS, "data_ready_at"):
            moment = getattr(self, name)
            if moment is not None and not in_window(moment):
                problems[name] = f"is outside the supported window {WINDOW_TEXT}"
        if self.state not in JOB_STATES:
            problems["state"] = f"must be one of {', '.join(JOB_STATES)}"
        return problems


def scheduler_team(account: str, user: str, *, by_account, by_slug, by_user):
    """The (team, project) of a scheduler's run that names no team, in the one order every way in
    uses (the jobs API for the Slurm hooks, ``import_sacct``): the account's Slurm-account identity,
    else the team whose slug is the account, else the unix user's identity. Each ``by_*`` maps a name
    to (team, project) or None; None when nothing matches."""
    if account:
        found = by_account(account) or by_slug(account)
        if found:
            return found
    return by_user(user) if user else None


def unplaced_share(gpu_count: Decimal) -> int:
    """Ticks per second of an unplaced allocation: all the job's GPUs (exact: 3 decimals × 840,000)."""
    return int(gpu_count * TICKS_PER_GPU_SECOND)


def job_upsert(data: JobInput) -> tuple[Job, Outcome]:
    """Create or update the run keyed by (source, external id, start time), and its allocations.

    Two first reports of one run at once (a prolog retried, two hooks) meet at the unique key: the
    loser retries and finds the winner's row."""
    problems = data.problems()
    if problems:
        raise ValueError("; ".join(f"{name}: {rule}" for name, rule in problems.items()))
    for attempt in range(2):
        try:
            with transaction.atomic():
                return _upsert(data)
        except IntegrityError as error:
            if attempt or "job_one_row_per_run" not in str(error):
                raise
    raise AssertionError("unreachable")


@transaction.atomic
def job_delete(*, job: Job) -> None:
    """Delete a run and its allocations (an admin's correction of a bad record). The usage triggers mark
    the ranges the allocations held, so the next aggregation takes the usage away."""
    Allocation.objects.filter(job=job).delete()
    Job.objects.filter(pk=job.pk).delete()


def job_allocations_follow(job: Job) -> bool:
    """After an edit of a stored run's facts (the admin site), bring its scheduler allocations in line:
    the same GPUs it was placed on, its new times, count and model. Returns whether anything changed."""
    placed = [a.gpu for a in job.allocations.filter(origin=AllocationOrigin.SCHEDULER, gpu__isnull=False)
              .select_related("gpu")]
    return _sync_allocations(job, placed or None)


def _upsert(data: JobInput) -> tuple[Job, Outcome]:
    runs = Job.objects.select_for_update().filter(source=data.source, external_id=data.external_id)
    job = runs.filter(start_time=data.start_time).first()
    outcome = Outcome.UNCHANGED
    if job is None and data.start_time is not None:
        # A run first reported pending (no start) that has now started: the same run, not a new one.
        job = runs.filter(start_time__isnull=True, state=JobState.PENDING).first()
        if job is not None:
            job.start_time = data.start_time
            outcome = Outcome.UPDATED
    if job is None:
        job = Job(source=data.source, external_id=data.external_id, start_time=data.start_time)
        outcome = Outcome.CREATED
    for name in JOB_FIELDS:
        value = getattr(data, name)
        if getattr(job, name) != value:
            setattr(job, name, value)
            outcome = outcome if outcome == Outcome.CREATED else Outcome.UPDATED
    if outcome != Outcome.UNCHANGED:
        job.save()
    if _sync_allocations(job, data.gpus) and outcome == Outcome.UNCHANGED:
        outcome = Outcome.UPDATED
    return job, outcome


def _sync_allocations(job: Job, gpus: list[Gpu] | None) -> bool:
    """Make the job's scheduler allocations match its facts; returns whether anything changed."""
    if job.start_time is None:
        wanted = []
    elif gpus:
        wanted = [(gpu.pk, None, gpu.share) for gpu in gpus]
    elif job.gpu_count > 0:
        wanted = [(None, job.gpu_model_id, unplaced_share(job.gpu_count))]
    else:
        wanted = []
    existing = list(job.allocations.filter(origin=AllocationOrigin.SCHEDULER))
    have = {(a.gpu_id, a.gpu_model_id if a.gpu_id is None else None, a.share): a for a in existing}
    changed = False
    for key in wanted:
        allocation = have.pop(key, None)
        if allocation is None:
            gpu_id, model_id, share = key
            Allocation.objects.create(
                job=job, gpu_id=gpu_id, gpu_model_id=model_id, share=share, start=job.start_time, end=job.end_time
            )
            changed = True
        elif (allocation.start, allocation.end) != (job.start_time, job.end_time):
            allocation.start, allocation.end = job.start_time, job.end_time
            allocation.save(update_fields=["start", "end"])
            changed = True
    if have:
        Allocation.objects.filter(pk__in=[a.pk for a in have.values()]).delete()
        changed = True
    return changed
