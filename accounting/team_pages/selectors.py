"""Reads for the team page (issue 8): its open warnings, this month's card-hours by project and GPU model,
the daily efficiency trend, its active quotas' status, the month-to-date cost and its jobs ranked by idle
card-hours. The charts are drawn from these by the pure functions of ``accounting/team_pages/charts.py``.

Every read is a fixed number of queries whatever the number of days, projects, quotas or jobs.

**Jobs by idle card-hours.** Idle needs minute rollups (DESIGN.md §4), so only the team's
:data:`JOBS_CONSIDERED` most recently started jobs that ran this month are considered, and only their
allocations' part inside the month (up to now) counts. Only the rollups below the idle threshold are
fetched (a busy minute adds nothing to idle), in one query for all of them, and split per job by
:func:`cluster.jobs.kpis.job_usage`; allocated card-hours come from the allocations alone.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pandas as pd
from django.conf import settings
from django.db.models import Case, F, IntegerField, Q, Sum, Value, When
from django.utils.translation import gettext

from accounting.models import DailyUnplacedUsage, DailyUsage, Quota
from accounting.money.statements import TOTAL_KIND, cost_team_ids, priced_usage
from accounting.quotas.selectors import QuotaStatus, quota_statuses
from accounting.usage.figures import row_figures
from accounting.usage.report import usage_report
from accounting.usage.states import ALLOCATED_STATES, BUSY, UNMEASURED
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.jobs.kpis import AllocationSpan, MinuteUsage, job_usage, percent
from cluster.jobs.kpis import card_hours as kpi_card_hours
from cluster.jobs.selectors import spans_of
from cluster.models import Alert, Allocation, Job, MinuteRollup
from core.money import MINOR_UNITS
from core.timeutils import business_day_bounds, business_today, month_days
from teams.models import Team

TREND_DAYS = 30
JOBS_CONSIDERED = 50
JOBS_SHOWN = 10
SPLIT_COLUMNS = ["label", "busy", "idle", "unmeasured", "allocated"]
TREND_COLUMNS = ["day", "busy_ticks", "allocated_ticks", "efficiency", "partial"]
_TIER_RANK = Case(
    *(When(tier=tier, then=Value(rank)) for rank, tier in enumerate(AlertTier.values)),
    default=Value(len(AlertTier.values)), output_field=IntegerField(),
)


@dataclass(frozen=True)
class MonthWindow:
    """The business month to date: days ``[first, today]``, as instants ``[start, end)`` (end: today's end)."""

    first: date
    today: date
    start: datetime
    end: datetime


def month_window(*, now: datetime) -> MonthWindow:
    today = business_today(now=now)
    first, _following = month_days(today)
    return MonthWindow(first=first, today=today, start=business_day_bounds(first)[0], end=business_day_bounds(today)[1])


# ---- warnings -----------------------------------------------------------------------------------------------

QUOTA_LEVELS = (AlertKind.QUOTA_100, AlertKind.QUOTA_90, AlertKind.QUOTA_75, AlertKind.QUOTA_50)


def team_alerts(team: Team) -> list[Alert]:
    """Open alerts about the team and its quotas, highest tier first, then newest first (one query). Of a
    quota's open threshold alerts (50, 75, 90, 100 %) only the highest is shown: it says all the others do."""
    quota_ids = Quota.objects.filter(team=team).values("pk")
    alerts = list(
        Alert.objects.open()
        .filter(Q(subject_type=AlertSubject.QUOTA, subject_id__in=quota_ids)
                | Q(subject_type=AlertSubject.TEAM, subject_id=team.pk))
        .annotate(tier_rank=_TIER_RANK)
        .order_by("tier_rank", "-opened_at", "-pk")
    )
    highest: dict[int, int] = {}
    for alert in alerts:
        if alert.subject_type == AlertSubject.QUOTA and alert.kind in QUOTA_LEVELS:
            level = QUOTA_LEVELS.index(alert.kind)
            highest[alert.subject_id] = min(level, highest.get(alert.subject_id, level))
    return [
        alert for alert in alerts
        if not (alert.subject_type == AlertSubject.QUOTA and alert.kind in QUOTA_LEVELS
                and QUOTA_LEVELS.index(alert.kind) != highest[alert.subject_id])
    ]


# ---- card-hours this month ------------------------------------------------------------------------------------

def _split_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=SPLIT_COLUMNS)


def _split_row(label: str, figures: dict) -> dict:
    return {
        "label": label, "busy": figures["card_hours_busy"], "idle": figures["card_hours_idle"],
        "unmeasured": figures["card_hours_unmeasured"], "allocated": figures["card_hours_allocated"],
    }


def usage_by_project(team: Team, *, window: MonthWindow, user, now: datetime) -> pd.DataFrame:
    """The team's card-hours this month per project (:data:`SPLIT_COLUMNS`, ``Decimal`` card-hours), from
    the usage report as ``user`` may see it; usage without a project is labelled so."""
    report = usage_report(start=window.start, end=window.end, by="project", user=user, now=now)
    rows = [
        {"label": row["project"] or gettext("No project"), "busy": row["card_hours_busy"],
         "idle": row["card_hours_idle"], "unmeasured": row["card_hours_unmeasured"],
         "allocated": row["card_hours_allocated"]}
        for row in report.rows if row["team"] == team.name
    ]
    return _split_frame(rows)


def usage_by_model(team: Team, *, window: MonthWindow) -> pd.DataFrame:
    """The team's card-hours this month per GPU model (:data:`SPLIT_COLUMNS`), from the daily rows; its
    unplaced usage counts under its model as unmeasured (DESIGN.md §4). Two queries."""
    ticks: dict[str | None, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    days = {"day__gte": window.first, "day__lte": window.today, "team": team}
    placed = (DailyUsage.objects.filter(state__in=ALLOCATED_STATES, **days)
              .values_list("gpu__model__short_name", "state").annotate(total=Sum("ticks")).order_by())
    for model, state, total in placed:
        ticks[model][state] += total
    unplaced = (DailyUnplacedUsage.objects.filter(**days)
                .values_list("gpu_model__short_name").annotate(total=Sum("ticks")).order_by())
    for model, total in unplaced:
        ticks[model][UNMEASURED] += total
    ordered = sorted(ticks, key=lambda name: (name is None, name or ""))
    return _split_frame([
        _split_row(model or gettext("Unknown model"), row_figures(ticks[model], gpu_level=False))
        for model in ordered
    ])


def split_totals(frame: pd.DataFrame) -> dict[str, Decimal]:
    """Column sums of a split frame (the table's footer)."""
    return {column: sum(frame[column], Decimal("0.0000")) for column in SPLIT_COLUMNS[1:]}


# ---- efficiency trend ----------------------------------------------------------------------------------------

def efficiency_trend(team: Team, *, today: date, days: int = TREND_DAYS) -> pd.DataFrame:
    """Busy ÷ allocated per business day over the ``days`` days up to today (:data:`TREND_COLUMNS`); a day
    with nothing allocated has no efficiency (None); today's row is ``partial``. Unplaced usage counts as
    allocated and unmeasured, against efficiency. Two queries."""
    first = today - timedelta(days=days - 1)
    busy: dict[date, int] = defaultdict(int)
    allocated: dict[date, int] = defaultdict(int)
    rows = (DailyUsage.objects.filter(team=team, day__gte=first, day__lte=today, state__in=ALLOCATED_STATES)
            .values_list("day", "state").annotate(total=Sum("ticks")).order_by())
    for day, state, total in rows:
        allocated[day] += total
        if state == BUSY:
            busy[day] += total
    unplaced = (DailyUnplacedUsage.objects.filter(team=team, day__gte=first, day__lte=today)
                .values_list("day").annotate(total=Sum("ticks")).order_by())
    for day, total in unplaced:
        allocated[day] += total
    out = []
    for n in range(days):
        day = first + timedelta(days=n)
        efficiency = busy[day] / allocated[day] if allocated[day] else None
        out.append({"day": day, "busy_ticks": busy[day], "allocated_ticks": allocated[day],
                    "efficiency": efficiency, "partial": day == today})
    return pd.DataFrame(out, columns=TREND_COLUMNS)


# ---- quotas ----------------------------------------------------------------------------------------------------

def active_quota_statuses(team: Team, *, today: date) -> list[QuotaStatus]:
    """The status of each of the team's quotas in force today (team-wide first, then by model). Three queries."""
    quotas = (Quota.objects.filter(team=team, period_start__lte=today, expires__gt=today)
              .select_related("gpu_model").order_by(F("gpu_model__short_name").asc(nulls_first=True), "pk"))
    return quota_statuses(quotas=quotas, today=today)


def burndown_frame(status: QuotaStatus) -> pd.DataFrame:
    """Remaining ticks after each business day from the quota's start to today (today: so far)."""
    days, remaining = [], []
    left = status.quota_ticks
    day = status.quota.period_start
    while day <= status.today and day < status.quota.expires:
        left -= status.daily_ticks.get(day, 0)
        days.append(day)
        remaining.append(left)
        day += timedelta(days=1)
    return pd.DataFrame({"day": days, "remaining_ticks": remaining})


# ---- cost ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MonthCost:
    """The team's priced usage this month so far; ``unpriced``: usage with no price (left out of ``amount``)."""

    amount: Decimal
    currency: str
    unpriced: list[str]


def sees_team_costs(user, team: Team) -> bool:
    """Admin, finance and the team's leads see its costs; engineers do not (DESIGN.md §2)."""
    teams = cost_team_ids(user)
    return teams is None or team.pk in teams


def month_to_date_cost(team: Team, *, window: MonthWindow, user, now: datetime) -> MonthCost:
    """What closing the month would book for the team now, for the days ``[first, today]``."""
    report = priced_usage(start=window.first, end=window.today + timedelta(days=1), user=user, now=now)
    currency = settings.CARDHOUR_CURRENCY
    amount = sum(
        (row["amount"] for row in report.rows if row["kind"] == TOTAL_KIND and row["team"] == team.name),
        Decimal(0).scaleb(-MINOR_UNITS[currency]),
    )
    return MonthCost(amount=amount, currency=currency, unpriced=report.unpriced)


# ---- jobs by idle card-hours ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class IdleJob:
    """One job's idle and allocated card-hours inside the month (2 places) and idle share of allocated (%)."""

    job: Job
    idle_card_hours: Decimal
    allocated_card_hours: Decimal
    idle_percent: Decimal | None
    idle_ticks: Fraction


def _clipped(spans: list[AllocationSpan], lo: datetime, hi: datetime) -> list[AllocationSpan]:
    out = []
    for span in spans:
        start, end = max(span.start, lo), min(span.end or hi, hi)
        if start < end:
            out.append(AllocationSpan(gpu_id=span.gpu_id, share=span.share, start=start, end=end))
    return out


def jobs_by_idle(team: Team, *, window: MonthWindow, now: datetime, limit: int = JOBS_CONSIDERED,
                 top: int = JOBS_SHOWN) -> list[IdleJob]:
    """The team's jobs ranked by idle card-hours this month (see the module docstring), at most ``top``
    of the ``limit`` most recently started ones that ran this month. Three queries."""
    start = window.start
    jobs = list(
        Job.objects.filter(team=team, start_time__isnull=False, start_time__lt=now)
        .filter(Q(end_time__isnull=True) | Q(end_time__gt=start))
        .select_related("project").order_by("-start_time", "-pk")[:limit]
    )
    if not jobs:
        return []
    allocations: dict[int, list[Allocation]] = defaultdict(list)
    for allocation in Allocation.objects.filter(job__in=[job.pk for job in jobs]).order_by("start", "pk"):
        allocations[allocation.job_id].append(allocation)
    spans = {job.pk: _clipped(spans_of(allocations[job.pk]), start, now) for job in jobs}
    gpu_ids = sorted({span.gpu_id for job_spans in spans.values() for span in job_spans if span.gpu_id is not None})
    threshold = settings.CARDHOUR_IDLE_THRESHOLD_PCT
    minutes: dict[int, list[MinuteUsage]] = defaultdict(list)
    if gpu_ids:
        first = min(span.start for job_spans in spans.values() for span in job_spans).astimezone(UTC)
        rows = (MinuteRollup.objects.filter(gpu_id__in=gpu_ids, bucket__gte=first.replace(second=0, microsecond=0),
                                            bucket__lt=now, util_mean__lt=threshold, util_covered_s__gt=0)
                .order_by("gpu_id", "bucket").values_list("gpu_id", "bucket", "util_mean", "util_covered_s"))
        for gpu_id, bucket, util_mean, covered in rows:
            minutes[gpu_id].append(MinuteUsage(gpu_id=gpu_id, minute=bucket, util_mean=util_mean,
                                               util_covered_s=covered))
    ranked = []
    for job in jobs:
        job_minutes = [row for gpu_id, (lo, hi) in _gpu_ranges(spans[job.pk]).items()
                       for row in _minutes_in(minutes[gpu_id], lo, hi)]
        usage = job_usage(spans[job.pk], job_minutes, now=now, idle_threshold_pct=threshold)
        if not usage.allocated_ticks:
            continue
        ranked.append(IdleJob(
            job=job, idle_card_hours=kpi_card_hours(usage.idle_card_hours),
            allocated_card_hours=kpi_card_hours(usage.allocated_card_hours),
            idle_percent=percent(usage.idle_ticks / usage.allocated_ticks), idle_ticks=usage.idle_ticks,
        ))
    ranked.sort(key=lambda row: (-row.idle_ticks, -row.job.start_time.timestamp(), -row.job.pk))
    return ranked[:top]


def _gpu_ranges(spans: list[AllocationSpan]) -> dict[int, tuple[datetime, datetime]]:
    """Each placed GPU's first start and last end over the spans (so each minute is passed once)."""
    ranges: dict[int, tuple[datetime, datetime]] = {}
    for span in spans:
        if span.gpu_id is not None:
            lo, hi = ranges.get(span.gpu_id, (span.start, span.end))
            ranges[span.gpu_id] = (min(lo, span.start), max(hi, span.end))
    return ranges


def _minutes_in(rows: list[MinuteUsage], lo: datetime, hi: datetime) -> list[MinuteUsage]:
    """The rows (sorted by minute) of the minutes that ``[lo, hi)`` overlaps."""
    first = lo.astimezone(UTC).replace(second=0, microsecond=0)
    return rows[bisect_left(rows, first, key=lambda row: row.minute):bisect_left(rows, hi, key=lambda row: row.minute)]
