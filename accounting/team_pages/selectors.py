"""Reads for the team page (issue 8): its open warnings, this month's card-hours by project and GPU model,
the daily efficiency trend, its active quotas' status, the month-to-date cost and its jobs ranked by idle
card-hours. The charts are drawn from these by the pure functions of ``accounting/team_pages/charts.py``.

Every read is a fixed number of queries whatever the number of days, projects, quotas or jobs.

**Allocations by idle card-hours** are the daily board's ranking over the month so far, for the team:
from the holders' daily usage, every job and booking, priced where the viewer sees costs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

import pandas as pd
from django.conf import settings
from django.db.models import Case, Count, F, IntegerField, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils.translation import gettext

from accounting.models import DailyUnplacedUsage, DailyUsage, Quota
from accounting.money.idle_ranking import IdleRow, rank_idle
from accounting.money.statements import TOTAL_KIND, cost_team_ids, priced_usage
from accounting.quotas.selectors import QuotaStatus, quota_statuses, tightest_quotas
from accounting.usage.figures import row_figures
from accounting.usage.refined import Refined, refined_totals
from accounting.usage.report import usage_report
from accounting.usage.states import ALLOCATED_STATES, BUSY, UNMEASURED
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.jobs.kpis import percent_of
from cluster.models import Alert
from core.money import MINOR_UNITS
from core.timeutils import business_day_bounds, business_today, month_days
from teams.models import Membership, Project, Team

TREND_DAYS = 30
ALLOCATIONS_SHOWN = 10
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


@dataclass(frozen=True)
class BannerRow:
    """A warning on the team page: the alert (its figures as of its crossing) and, for a quota's alert,
    that quota's status now: the same object the Quotas block shows, so the two always agree."""

    alert: Alert
    status: QuotaStatus | None


def team_banner(team: Team, statuses: list[QuotaStatus]) -> list[BannerRow]:
    """:func:`team_alerts`, each quota alert beside its quota's current status from ``statuses``."""
    by_quota = {status.quota.pk: status for status in statuses}
    return [
        BannerRow(alert, by_quota.get(alert.subject_id) if alert.subject_type == AlertSubject.QUOTA else None)
        for alert in team_alerts(team)
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

def active_quota_statuses(team: Team, *, today: date, now: datetime) -> list[QuotaStatus]:
    """The status of each of the team's quotas in force today as of ``now`` (team-wide first, then by
    model). Three queries."""
    quotas = (Quota.objects.filter(team=team, period_start__lte=today, expires__gt=today)
              .select_related("gpu_model").order_by(F("gpu_model__short_name").asc(nulls_first=True), "pk"))
    return quota_statuses(quotas=quotas, today=today, now=now)


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


# ---- allocations by idle card-hours ---------------------------------------------------------------------------

def allocations_by_idle(team: Team, *, window: MonthWindow, user, top: int = ALLOCATIONS_SHOWN) -> tuple[list[IdleRow], int]:
    """The team's allocations this month so far (jobs, bookings, unplaced jobs: every one, not a sample)
    ranked by idle card-hours through the daily board's ranking (:func:`accounting.money.idle_ranking.rank_idle`):
    the first ``top`` and how many there are in all. Five queries."""
    return rank_idle(window.first, window.today, user=user, team_id=team.pk, limit=top)


def beyond_duty_cycle(team: Team, *, window: MonthWindow) -> Refined:
    """The team's busy and idle card-hours this month so far refined by SM activity, memory and power
    (issue 16): from its daily usage, one query."""
    return refined_totals(DailyUsage.objects.filter(team=team, day__gte=window.first, day__lte=window.today))


# ---- the team list -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TeamListRow:
    """A row of the team list: every member and project of the team (whoever looks), its efficiency this
    month to date (busy ÷ allocated, %, one decimal; None when nothing is allocated) and the used percent of
    its tightest quota in force today (None when it has none)."""

    team: Team
    member_count: int
    project_count: int
    efficiency_percent: Decimal | None
    quota_used_percent: Decimal | None


def _rows_per_team(model) -> Coalesce:
    # A subquery, not Count() over a join: visible_to() joins the viewer's own memberships, so a join
    # would count the viewer alone.
    rows = model.objects.filter(team=OuterRef("pk")).order_by().values("team_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(rows), 0)


def team_list_rows(user, *, now: datetime) -> list[TeamListRow]:
    """The teams ``user`` may see, by name, each with its counts, efficiency and tightest quota. Six queries
    whatever the number of teams."""
    window = month_window(now=now)
    teams = list(
        Team.objects.visible_to(user)
        .annotate(member_count=_rows_per_team(Membership), project_count=_rows_per_team(Project))
        .order_by("name")
    )
    if not teams:
        return []
    ids = [team.pk for team in teams]
    days = {"team_id__in": ids, "day__gte": window.first, "day__lte": window.today}
    busy: dict[int, int] = defaultdict(int)
    allocated: dict[int, int] = defaultdict(int)
    placed = (DailyUsage.objects.filter(state__in=ALLOCATED_STATES, **days)
              .values_list("team_id", "state").annotate(total=Sum("ticks")).order_by())
    for team_id, state, total in placed:
        allocated[team_id] += total
        if state == BUSY:
            busy[team_id] += total
    # Unplaced usage is allocated and unmeasured (as in efficiency_trend): it counts against efficiency.
    unplaced = DailyUnplacedUsage.objects.filter(**days).values_list("team_id").annotate(total=Sum("ticks")).order_by()
    for team_id, total in unplaced:
        allocated[team_id] += total
    tightest = tightest_quotas(window.today, ids, now=now)  # as the board's team table reads it
    return [
        TeamListRow(
            team=team, member_count=team.member_count, project_count=team.project_count,
            efficiency_percent=percent_of(busy[team.pk], allocated[team.pk]),
            quota_used_percent=tightest[team.pk].used_percent if team.pk in tightest else None,
        )
        for team in teams
    ]
