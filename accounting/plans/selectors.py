"""A team's plan against actual for one month (issue 19): one read, :func:`team_plan`, that the plan page and
its API both show, so the two always agree.

- **Queued and running** jobs (now, whatever the month): by priority (highest first; none last), then
  submitted first; each with its estimate, the card-hours it has held so far and their ratio.
- **Finished** jobs of the month: those that ended in it, with what they held ÷ their estimate.
- **Weeks** of the month (Monday to Sunday, clipped to it): planned card-hours (the estimates of the team's
  started jobs spread over their planned windows: :mod:`accounting.plans.rules`) against the team's held
  card-hours from the daily usage (``DailyUsage`` in the allocated states and ``DailyUnplacedUsage``: what the
  team page's card-hours read), a week in the future having no actual yet.
- **Waited for data**: jobs that held GPUs before their data was ready, and the card-hours held meanwhile.

A job's card-hours are its allocations' (the ones that count its usage, once: ``spans_of``) held time × share,
to its end or ``now``: the job page's allocated card-hours (``cluster.jobs.kpis.job_usage``), not recomputed.

Seven queries whatever the number of jobs, weeks or allocations.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.conf import settings
from django.db.models import DateTimeField, F, Q, Sum
from django.db.models.expressions import RawSQL

from accounting.models import DailyUnplacedUsage, DailyUsage
from accounting.plans import rules
from accounting.usage.report import pending_buckets
from accounting.usage.selectors import data_complete_to
from accounting.usage.states import ALLOCATED_STATES
from cluster.jobs.kpis import AllocationSpan, card_hours, job_usage, percent
from cluster.jobs.selectors import spans_of
from cluster.models import Allocation, Job, JobState
from core.timeutils import business_day_bounds, business_today, month_days
from core.units import TICKS_PER_CARD_HOUR
from teams.models import Team

OPEN_STATES = (JobState.PENDING, JobState.RUNNING)
_JOBS = Job._meta.db_table
# The end of a job's planned window (rules.planned_window): start + estimate ÷ GPUs hours; with no GPU count, its start.
_PLANNED_END = RawSQL(  # noqa: S611 (table and column names only, from the model; no input)
    f'COALESCE("{_JOBS}"."start_time" + "{_JOBS}"."estimated_card_hours" / NULLIF("{_JOBS}"."gpu_count", 0)'
    f' * interval \'1 hour\', "{_JOBS}"."start_time")', (), output_field=DateTimeField())


class _Deviates:
    """What a row with a ``ratio`` (Fraction or None) and a ``deviation`` shows: the ratio in percent, and
    whether it is highlighted (over or under its estimate beyond the setting)."""

    ratio: Fraction | None
    deviation: str

    @property
    def ratio_pct(self) -> Decimal | None:
        return percent(self.ratio)

    @property
    def highlighted(self) -> bool:
        return self.deviation in (rules.OVER, rules.UNDER)


@dataclass(frozen=True)
class PlanJob(_Deviates):
    """A job of the plan: ``used`` card-hours held (so far, for a running one), its ``estimate`` (None: none),
    ``ratio`` = used ÷ estimate (exact; None without an estimate) and its ``deviation``."""

    job: Job
    used: Fraction
    estimate: Decimal | None
    ratio: Fraction | None
    deviation: str

    @property
    def used_card_hours(self) -> Decimal:
        return card_hours(self.used)



@dataclass(frozen=True)
class PlanWeek(_Deviates):
    """A week of the month, days ``[first, following)``: ``planned`` and ``actual`` card-hours (``actual`` None
    for a week that has not begun), their ratio and deviation; ``partial``: it holds today."""

    first: date
    following: date
    planned: Fraction
    actual: Fraction | None
    ratio: Fraction | None
    deviation: str
    partial: bool

    @property
    def last(self) -> date:
        return self.following - timedelta(days=1)

    @property
    def planned_card_hours(self) -> Decimal:
        return card_hours(self.planned)

    @property
    def actual_card_hours(self) -> Decimal | None:
        return None if self.actual is None else card_hours(self.actual)



@dataclass(frozen=True)
class WaitRow:
    """A job that held GPUs before its data was ready: ``[waited_from, waited_to)`` and the card-hours held
    meanwhile; ``still_waiting``: it runs and its data is not ready yet."""

    job: Job
    waited_from: datetime
    waited_to: datetime
    held: Fraction
    still_waiting: bool

    @property
    def held_card_hours(self) -> Decimal:
        return card_hours(self.held)


@dataclass(frozen=True)
class TeamPlan:
    """Everything the plan page and its API show for ``team`` and the month of ``first``."""

    team: Team
    first: date
    following: date
    now: datetime
    deviation_pct: int
    open_jobs: list[PlanJob]
    finished_jobs: list[PlanJob]
    weeks: list[PlanWeek]
    waited: list[WaitRow]
    data_complete_to: datetime | None
    pending_buckets: int
    pending_from: datetime | None

    @property
    def queued_estimate_card_hours(self) -> Decimal:
        """The estimates of the queued jobs: planned work not placed in any week yet."""
        return sum((row.estimate or Decimal(0) for row in self.open_jobs if row.job.start_time is None),
                   Decimal("0.000"))

    @property
    def planned_total(self) -> Decimal:
        return card_hours(sum((week.planned for week in self.weeks), Fraction(0)))

    @property
    def actual_total(self) -> Decimal:
        return card_hours(sum((week.actual for week in self.weeks if week.actual is not None), Fraction(0)))

    @property
    def waited_total(self) -> Decimal:
        return card_hours(sum((row.held for row in self.waited), Fraction(0)))

    def count(self, rows: list, deviation: str) -> int:
        return sum(1 for row in rows if row.deviation == deviation)

    @property
    def open_over(self) -> int:
        return self.count(self.open_jobs, rules.OVER)

    @property
    def finished_over(self) -> int:
        return self.count(self.finished_jobs, rules.OVER)

    @property
    def finished_under(self) -> int:
        return self.count(self.finished_jobs, rules.UNDER)


def default_period(*, now: datetime) -> date:
    """This month, by the business calendar."""
    return business_today(now=now).replace(day=1)


def _priority_key(row: PlanJob):
    job = row.job
    return (job.priority is None, -(job.priority or 0), job.submit_time is None, job.submit_time or job.created_at,
            job.pk)


def team_plan(team: Team, *, period: date, now: datetime, deviation_pct: int | None = None) -> TeamPlan:
    """The plan of ``team`` for the month holding ``period`` as of ``now`` (see the module)."""
    pct = settings.CARDHOUR_PLAN_DEVIATION_PCT if deviation_pct is None else deviation_pct
    first, following = month_days(period)
    start, end = business_day_bounds(first)[0], business_day_bounds(following)[0]
    jobs = _jobs(team, start=start, end=end)
    spans = _spans(jobs)
    open_jobs, finished = [], []
    for job in jobs:
        if job.state in OPEN_STATES:
            open_jobs.append(_plan_job(job, spans[job.pk], now=now, pct=pct, final=False))
        elif job.end_time is not None and start <= job.end_time < end:
            finished.append(_plan_job(job, spans[job.pk], now=now, pct=pct, final=True))
    open_jobs.sort(key=_priority_key)
    finished.sort(key=lambda row: (-row.job.end_time.timestamp(), -row.job.pk))
    weeks = _weeks(team, jobs, first=first, following=following, now=now, pct=pct)
    complete_to, _nodes = data_complete_to(now=now)
    pending, pending_from = pending_buckets(start=start, end=min(end, max(now, start + timedelta(minutes=1))))
    return TeamPlan(
        team=team, first=first, following=following, now=now, deviation_pct=pct, open_jobs=open_jobs,
        finished_jobs=finished, weeks=weeks, waited=_waited(jobs, spans, start=start, end=end, now=now),
        data_complete_to=complete_to, pending_buckets=pending, pending_from=pending_from,
    )


def _jobs(team: Team, *, start: datetime, end: datetime) -> list[Job]:
    """The team's jobs the plan may show (one query): queued and running ones, those that ended in the month,
    those that started before its end with an estimate (their planned window may reach into it), and those
    that held GPUs before their data was ready."""
    wanted = (
        Q(state__in=OPEN_STATES)
        | Q(end_time__gte=start, end_time__lt=end)
        | Q(start_time__lt=end, estimated_card_hours__gt=0, planned_end__gte=start)
        | (Q(start_time__lt=end, data_ready_at__gt=start) & Q(data_ready_at__gt=F("start_time")))
    )
    return list(Job.objects.alias(planned_end=_PLANNED_END).filter(wanted, team=team)
                .select_related("project").order_by("pk"))


def _spans(jobs: list[Job]) -> dict[int, list[AllocationSpan]]:
    """Each job's counting spans (``spans_of``), from one query."""
    by_job: dict[int, list[Allocation]] = defaultdict(list)
    ids = [job.pk for job in jobs]
    rows = Allocation.objects.filter(job_id__in=ids).only("job_id", "gpu_id", "share", "start", "end", "origin")
    for allocation in rows.order_by("job_id", "start", "pk"):
        by_job[allocation.job_id].append(allocation)
    return {job.pk: spans_of(by_job[job.pk]) for job in jobs}


def _held(spans: list[AllocationSpan], *, now: datetime) -> Fraction:
    return job_usage(spans, (), now=now).allocated_card_hours


def _plan_job(job: Job, spans: list[AllocationSpan], *, now: datetime, pct: int, final: bool) -> PlanJob:
    used = _held(spans, now=now)
    value = rules.ratio(used, job.estimated_card_hours)
    deviation = rules.deviation(value, pct=pct, final=final)
    if job.start_time is None:  # queued: nothing used yet is no ratio of 0 %, and no deviation
        value = None
    return PlanJob(job=job, used=used, estimate=job.estimated_card_hours, ratio=value, deviation=deviation)


def _weeks(team: Team, jobs: list[Job], *, first: date, following: date, now: datetime, pct: int) -> list[PlanWeek]:
    today = business_today(now=now)
    weeks = rules.week_days(first, following)
    bounds = [(business_day_bounds(lo)[0], business_day_bounds(hi)[0]) for lo, hi in weeks]
    windows = [window for job in jobs if (window := rules.planned_window(
        start=job.start_time, estimate=job.estimated_card_hours, gpu_count=job.gpu_count)) is not None]
    planned = rules.spread(windows, bounds)
    ticks = _held_ticks_by_day(team, first=first, following=following)
    out = []
    for (lo, hi), plan in zip(weeks, planned, strict=True):
        begun = lo <= today
        actual = Fraction(sum(t for day, t in ticks.items() if lo <= day < hi), TICKS_PER_CARD_HOUR) if begun else None
        value = rules.ratio(actual, plan) if actual is not None else None
        final = hi <= today
        out.append(PlanWeek(
            first=lo, following=hi, planned=plan, actual=actual, ratio=value,
            deviation=rules.deviation(value, pct=pct, final=final) if begun else rules.NO_ESTIMATE,
            partial=lo <= today < hi,
        ))
    return out


def _held_ticks_by_day(team: Team, *, first: date, following: date) -> dict[date, int]:
    """The team's held ticks per business day: its daily usage in the allocated states and its unplaced usage,
    as the team page counts its card-hours (two queries)."""
    days = {"team": team, "day__gte": first, "day__lt": following}
    ticks: dict[date, int] = defaultdict(int)
    placed = (DailyUsage.objects.filter(state__in=ALLOCATED_STATES, **days)
              .values_list("day").annotate(total=Sum("ticks")).order_by())
    unplaced = DailyUnplacedUsage.objects.filter(**days).values_list("day").annotate(total=Sum("ticks")).order_by()
    for day, total in [*placed, *unplaced]:
        ticks[day] += total
    return ticks


def _waited(jobs: list[Job], spans: dict[int, list[AllocationSpan]], *, start: datetime, end: datetime,
            now: datetime) -> list[WaitRow]:
    """The jobs whose wait for data overlaps the month, the most card-hours held first; each with its whole
    wait (one episode, from the job's start)."""
    out = []
    for job in jobs:
        running = job.state == JobState.RUNNING
        window = rules.wait_window(start=job.start_time, end=job.end_time, running=running,
                                   data_ready=job.data_ready, data_ready_at=job.data_ready_at, now=now)
        if window is None or not (window[0] < end and window[1] > start):
            continue
        held = _held(rules.clip_spans(spans[job.pk], window[0], window[1], now=now), now=now)
        still = running and job.end_time is None and (
            job.data_ready is False and (job.data_ready_at is None or job.data_ready_at > now))
        out.append(WaitRow(job=job, waited_from=window[0], waited_to=window[1], held=held, still_waiting=still))
    out.sort(key=lambda row: (-row.held, row.job.pk))
    return out
