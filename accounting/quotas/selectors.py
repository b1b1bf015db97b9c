"""Reads for quotas (DESIGN.md §5, §6): how much of a quota is used and when it runs out, which quotas a
user may see, and a team's usage in time order for the overflow rule.

**Used** is the allocated ticks (busy, idle, unmeasured, and unplaced usage) of the quota's team over its
business days ``[period_start, min(expires, today + 1))``: of its GPU model when it has one, of every
model (unplaced usage of an unknown model included) when it is team-wide. Today's partial usage is in the
daily rows the aggregation keeps current.

**Usage events for overflow** (:func:`team_usage_events`): overflow is found in time order. A business
day on which no quota runs out splits the same whatever the order of its usage, so it comes as one event
per (team, GPU model, project, state) at the day's start. A day on which a quota runs out (found from
those day events) comes hour by hour: from the stored hourly usage (``HourlyUsage``, which the aggregation
writes in the same pass as the daily rows) where it settles the project, else computed live with
:func:`accounting.usage.services.usage_of_window` over those GPUs (the same figures, minute for minute; issue
18 measured the live way at 7.7 s of a 9.5 s close). Overflow on such a day is found at hour granularity,
exact in ticks, an hour's usage taken in the fixed (project, state) order. Unplaced jobs have no GPU but a
known time range: each hour gets what their allocations held in it
(:func:`accounting.usage.services.unplaced_of_windows`).
The hourly detail is then fitted to the day's aggregate rows, so the day's events
always add up to the rows a period close books.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db import connection
from django.db.models import QuerySet, Sum
from django.utils import timezone

from accounting.models import DailyUnplacedUsage, DailyUsage, HourlyUsage, Quota
from accounting.quotas.rules import (
    Forecast,
    OverflowPart,
    QuotaLimit,
    UsageEvent,
    burn_forecast,
    card_hours_from_ticks,
    crossing_days,
    event_order,
    expiry_warning_due,
    fit_to_totals,
    overflow_split,
    ticks_from_card_hours,
)
from accounting.usage.services import unplaced_of_windows, usage_of_window
from accounting.usage.states import ALLOCATED_STATES, UNMEASURED
from cluster.bookings.slots import epoch
from cluster.models import Gpu
from core.timeutils import business_day_bounds, business_days, business_today
from core.timewindow import clamp_date_to_window
from teams.models import Team

HOUR = timedelta(hours=1)


# ---- quota status ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuotaStatus:
    """One quota as of ``today``: its allocated ticks per day so far, what is used and left, the forecast."""

    quota: Quota
    today: date
    daily_ticks: dict[date, int]
    forecast: Forecast

    @property
    def quota_ticks(self) -> int:
        return self.forecast.quota_ticks

    @property
    def used_ticks(self) -> int:
        return self.forecast.used_ticks

    @property
    def remaining_ticks(self) -> int:
        return self.forecast.remaining_ticks

    @property
    def used_card_hours(self) -> Decimal:
        return card_hours_from_ticks(self.used_ticks)

    @property
    def remaining_card_hours(self) -> Decimal:
        return card_hours_from_ticks(self.remaining_ticks)

    @property
    def burn_card_hours(self) -> Decimal:
        """The forecast's burn, card-hours a day."""
        return card_hours_from_ticks(round(self.forecast.burn_ticks_per_day))

    @property
    def used_percent(self) -> Decimal:
        """Percent used, one decimal, half up."""
        scaled = self.forecast.used_fraction * 1000
        return Decimal(int(scaled + Fraction(1, 2))).scaleb(-1)

    @property
    def thresholds(self) -> list[int]:
        return self.forecast.thresholds

    @property
    def active(self) -> bool:
        return self.quota.period_start <= self.today < self.quota.expires

    @property
    def expiry_warning(self) -> bool:
        return expiry_warning_due(today=self.today, expires=self.quota.expires)


def quota_status(*, quota: Quota, today: date | None = None, now: datetime | None = None) -> QuotaStatus:
    """The status of ``quota`` on business day ``today`` (default: the day of ``now``, default now)."""
    return quota_statuses(quotas=[quota], today=today, now=now)[0]


def quota_statuses(*, quotas: Sequence[Quota], today: date | None = None,
                   now: datetime | None = None) -> list[QuotaStatus]:
    """The status of each of ``quotas``, in order, in two queries: on business day ``today`` (default: the
    day of ``now``, default the clock's now). The forecast burns the rest of ``today`` as of ``now``;
    given ``today`` without ``now``, the day counts as over (a past day's figures)."""
    quotas = list(quotas)
    if not quotas:
        return []
    if today is None:
        now = now or timezone.now()
        today = business_today(now=now)
    left = day_left(today, now) if now is not None else Fraction(0)
    first = min(quota.period_start for quota in quotas)
    following = max(_counted_until(quota, today) for quota in quotas)
    per_day = _allocated_per_day({quota.team_id for quota in quotas}, first, following)
    statuses = []
    for quota in quotas:
        daily: dict[date, int] = defaultdict(int)
        until = _counted_until(quota, today)
        for (day, team_id, model_id), ticks in per_day.items():
            if (team_id == quota.team_id and quota.period_start <= day < until
                    and (quota.gpu_model_id is None or model_id == quota.gpu_model_id)):
                daily[day] += ticks
        daily = dict(sorted(daily.items()))
        forecast = burn_forecast(
            daily_ticks=daily, quota_ticks=ticks_from_card_hours(quota.card_hours), used_ticks=sum(daily.values()),
            today=today, expires=quota.expires, period_start=quota.period_start, day_left=left,
        )
        statuses.append(QuotaStatus(quota=quota, today=today, daily_ticks=daily, forecast=forecast))
    return statuses


def tightest_quotas(day: date, team_ids: Iterable[int], *, now: datetime | None = None) -> dict[int, QuotaStatus]:
    """Each team's quota in force on ``day`` that is used the most (team-wide or per model), as of ``now``
    (see :func:`quota_statuses`). Three queries, whatever the number of teams."""
    team_ids = list(team_ids)
    if not team_ids:
        return {}
    quotas = Quota.objects.filter(team_id__in=team_ids, period_start__lte=day, expires__gt=day).select_related("gpu_model")
    best: dict[int, QuotaStatus] = {}
    for status in quota_statuses(quotas=quotas, today=day, now=now):
        team_id = status.quota.team_id
        if team_id not in best or status.forecast.used_fraction > best[team_id].forecast.used_fraction:
            best[team_id] = status
    return best


def day_left(day: date, now: datetime) -> Fraction:
    """The share of business day ``day`` still to come at ``now`` (0 once it is over, 1 before it starts)."""
    start, end = business_day_bounds(day)
    left = Fraction(int((end - max(start, min(now, end))).total_seconds()), int((end - start).total_seconds()))
    return min(left, Fraction(1))


def _counted_until(quota: Quota, today: date) -> date:
    return min(quota.expires, today + timedelta(days=1))


def _allocated_per_day(team_ids: Iterable[int], first: date, following: date) -> dict[tuple, int]:
    """Allocated ticks per (day, team, GPU model) over ``[first, following)``, unplaced usage included."""
    out: dict[tuple, int] = defaultdict(int)
    if following <= first:
        return out
    team_ids = list(team_ids)
    placed = (
        DailyUsage.objects.filter(day__gte=first, day__lt=following, team_id__in=team_ids, state__in=ALLOCATED_STATES)
        .values_list("day", "team_id", "gpu__model_id").annotate(total=Sum("ticks")).order_by()
    )
    unplaced = (
        DailyUnplacedUsage.objects.filter(day__gte=first, day__lt=following, team_id__in=team_ids)
        .values_list("day", "team_id", "gpu_model_id").annotate(total=Sum("ticks")).order_by()
    )
    for rows in (placed, unplaced):
        for day, team_id, model_id, total in rows:
            out[(day, team_id, model_id)] += total
    return out


def quotas_for(user, *, active_on: date | None = None) -> QuerySet[Quota]:
    """The quotas of the teams ``user`` may see (all for admin and finance); with ``active_on``, only
    those whose period holds that business day."""
    quotas = Quota.objects.filter(team__in=Team.objects.visible_to(user)).select_related("team", "gpu_model")
    if active_on is not None:
        quotas = quotas.filter(period_start__lte=active_on, expires__gt=active_on)
    return quotas


# ---- usage in time order, and overflow --------------------------------------------------------------------

def quota_limits(*, team_ids: Iterable[int], first: date, following: date) -> list[QuotaLimit]:
    """The quotas of ``team_ids`` whose periods overlap business days ``[first, following)``, as plain data."""
    rows = Quota.objects.filter(team_id__in=list(team_ids), period_start__lt=following, expires__gt=first)
    return [
        # A stored period outside the supported window is clamped to it: no usage lies beyond it.
        QuotaLimit(id=quota.pk, team_id=quota.team_id, gpu_model_id=quota.gpu_model_id,
                   period_start=clamp_date_to_window(quota.period_start), expires=clamp_date_to_window(quota.expires),
                   quota_ticks=ticks_from_card_hours(quota.card_hours))
        for quota in rows.order_by("pk")
    ]


def team_usage_events(*, team_ids: Iterable[int], start: datetime, end: datetime, now: datetime,
                      quotas: Sequence[QuotaLimit] | None = None, totals: UsageTotals | None = None) -> list[UsageEvent]:
    """The allocated usage of ``team_ids`` on the business days ``[start, end)`` touches, up to ``now``, as
    usage events in the order usage is taken (see the module docstring). ``quotas`` (default: the teams'
    quotas over those days) decide which days come hour by hour; the days are found from these events
    alone, so for overflow begin at or before the start of every quota in force (:func:`team_overflow`)."""
    team_ids = sorted(set(team_ids))
    days = _days(start, end, now)
    if not days or not team_ids:
        return []
    following = days[-1] + timedelta(days=1)
    if quotas is None:
        quotas = quota_limits(team_ids=team_ids, first=days[0], following=following)
    totals = (totals or _day_totals)(team_ids, days[0], following)
    coarse = [
        UsageEvent(epoch(business_day_bounds(day)[0]), team_id, model_id, project_id, state, ticks, day)
        for (day, team_id, model_id, project_id, state), ticks in totals.items()
    ]
    detailed = crossing_days(quotas=quotas, usage_events=coarse) if quotas else set()
    events = [event for event in coarse if event.day not in detailed]
    for day in sorted(detailed):
        day_totals = {key[1:]: ticks for key, ticks in totals.items() if key[0] == day}
        events.extend(_hourly_events(team_ids=team_ids, day=day, now=now, day_totals=day_totals))
    return sorted(events, key=event_order)


def team_overflow(*, team_ids: Iterable[int], start: datetime, end: datetime, now: datetime,
                  totals: UsageTotals | None = None) -> list[OverflowPart]:
    """The overflow of ``team_ids`` on the business days ``[start, end)`` touches, in time order. Usage is
    read from the start of the earliest quota in force then, since what was used before ``start`` decides
    what overflows after it. ``totals`` reads the days' usage (default :func:`_day_totals`; the close passes
    the priced days, which hold the same figures)."""
    team_ids = sorted(set(team_ids))
    days = _days(start, end, now)
    if not days or not team_ids:
        return []
    limits = quota_limits(team_ids=team_ids, first=days[0], following=days[-1] + timedelta(days=1))
    if not limits:
        return []
    first = min(days[0], *(limit.period_start for limit in limits))
    events = team_usage_events(team_ids=team_ids, start=business_day_bounds(first)[0], end=end, now=now,
                               quotas=limits, totals=totals)
    wanted = set(days)
    return [part for part in overflow_split(quotas=limits, usage_events=events) if part.day in wanted]


def _days(start: datetime, end: datetime, now: datetime) -> list[date]:
    today = business_today(now=now)
    return [day for day in business_days(start, end) if day <= today]


# Allocated ticks per (day, team, GPU model, project, state) of (team ids, first day, following day).
UsageTotals = Callable[[list[int], date, date], dict[tuple, int]]


def _day_totals(team_ids: list[int], first: date, following: date) -> dict[tuple, int]:
    """Allocated ticks per (day, team, GPU model, project, state) from the daily rows; unplaced usage is
    unmeasured (DESIGN.md §4)."""
    out: dict[tuple, int] = defaultdict(int)
    placed = (
        DailyUsage.objects.filter(day__gte=first, day__lt=following, team_id__in=team_ids, state__in=ALLOCATED_STATES)
        .values_list("day", "team_id", "gpu__model_id", "project_id", "state").annotate(total=Sum("ticks")).order_by()
    )
    for day, team_id, model_id, project_id, state, total in placed:
        out[(day, team_id, model_id, project_id, state)] += total
    unplaced = (
        DailyUnplacedUsage.objects.filter(day__gte=first, day__lt=following, team_id__in=team_ids)
        .values_list("day", "team_id", "gpu_model_id", "project_id").annotate(total=Sum("ticks")).order_by()
    )
    for day, team_id, model_id, project_id, total in unplaced:
        out[(day, team_id, model_id, project_id, UNMEASURED)] += total
    return dict(out)


def _hours(day: date) -> list[tuple[datetime, datetime]]:
    """The hour windows of a business day (23 or 25 of them on a daylight-saving change)."""
    start, end = business_day_bounds(day)
    hours = []
    while start < end:
        hours.append((start, min(start + HOUR, end)))
        start += HOUR
    return hours


def _hourly_events(*, team_ids: list[int], day: date, now: datetime, day_totals: dict[tuple, int]) -> list[UsageEvent]:
    """One business day's allocated usage of ``team_ids`` hour by hour, fitted to ``day_totals``: read from the
    stored hourly usage where it settles the project (:func:`_stored_hours`), computed live for the other
    GPUs, and the unplaced jobs' hours from their allocations in one read."""
    hours = _hours(day)
    elapsed = [hour for hour in hours if hour[0] < now] or hours[:1]
    wanted = set(team_ids)
    if epoch(hours[0][0]) % 3600 == 0:
        events, live_gpus = _stored_hours(team_ids=team_ids, day=day, before=now)
    else:  # a half-hour zone: the stored buckets are UTC hours, not the day's hours
        events = []
        live_gpus = set(DailyUsage.objects.filter(day=day, team_id__in=team_ids, state__in=ALLOCATED_STATES)
                        .values_list("gpu_id", flat=True))
    gpu_ids = sorted(live_gpus)
    model_of = dict(Gpu.objects.filter(pk__in=gpu_ids).values_list("pk", "model_id")) if gpu_ids else {}
    for lo, hi in elapsed if gpu_ids else ():
        moment = epoch(lo)
        for (gpu_id, state, team_id, project_id), ticks in usage_of_window(start=lo, end=hi, now=now,
                                                                          gpu_ids=gpu_ids).items():
            if team_id in wanted and state in ALLOCATED_STATES:
                events.append(UsageEvent(moment, team_id, model_of[gpu_id], project_id, state, ticks, day))
    if DailyUnplacedUsage.objects.filter(day=day, team_id__in=team_ids).exists():
        # Unplaced jobs have no GPU but a known time range: each hour gets what their allocations held in it.
        for (lo, _hi), held in zip(elapsed, unplaced_of_windows(windows=elapsed, now=now), strict=True):
            for (team_id, project_id, model_id), ticks in held.items():
                if team_id in wanted:
                    events.append(UsageEvent(epoch(lo), team_id, model_id, project_id, UNMEASURED, ticks, day))
    return fit_to_totals(events, day_totals, day=day, last_moment=epoch(elapsed[-1][0]))


def _stored_hours(*, team_ids: list[int], day: date, before: datetime) -> tuple[list[UsageEvent], set[int]]:
    """The usage events of the hours before ``before`` from the stored hourly usage (per GPU, hour, state and
    team, written by the aggregation in the same pass as the daily rows, so it is what the live computation
    gives hour by hour), summed in the database, and the GPUs it does not settle, to be computed live: those
    where a team held the GPU for two projects in one state that day (the hourly rows have no project), or
    whose hourly rows do not add up to the daily ones (rows written by other means). One query."""
    events, live = [], set()
    with connection.cursor() as cursor:
        cursor.execute(_STORED_HOURS_SQL, {"day": day, "teams": team_ids, "states": list(ALLOCATED_STATES),
                                           "before": before})
        for moment, team_id, model_id, project_id, state, ticks, live_gpu in cursor.fetchall():
            if live_gpu is not None:
                live.add(live_gpu)
            else:
                events.append(UsageEvent(int(moment), team_id, model_id, project_id, state, int(ticks), day))
    return events, live


_DAILY, _HOURLY, _GPU = DailyUsage._meta.db_table, HourlyUsage._meta.db_table, Gpu._meta.db_table
# A GPU whose (state, team) rows have one project that day and whose hours add up to its daily rows is read from
# its hours; the others are named for the live path. The hours are read once, gathered per (GPU, state, team)
# into arrays and spread again after the check (a join of the hours with the daily rows was sorted and merged:
# 12 s at 10,000 GPUs).
_STORED_HOURS_SQL = f"""
WITH daily AS (
    SELECT d.gpu_id, d.state, d.team_id, min(g.model_id) AS model_id, count(*) AS projects,
           min(d.project_id) AS project_id, sum(d.ticks) AS ticks
    FROM {_DAILY} d JOIN {_GPU} g ON g.id = d.gpu_id
    WHERE d.day = %(day)s AND d.team_id = ANY(%(teams)s) AND d.state = ANY(%(states)s)
    GROUP BY d.gpu_id, d.state, d.team_id
), hourly AS (
    SELECT gpu_id, state, team_id, sum(ticks) AS ticks,
           array_agg(hour ORDER BY hour) FILTER (WHERE hour < %(before)s) AS hours,
           array_agg(ticks ORDER BY hour) FILTER (WHERE hour < %(before)s) AS parts
    FROM {_HOURLY} WHERE day = %(day)s AND team_id = ANY(%(teams)s) AND state = ANY(%(states)s)
    GROUP BY gpu_id, state, team_id
), joined AS MATERIALIZED (
    SELECT gpu_id, state, team_id, d.model_id, d.project_id, d.projects, d.ticks AS daily_ticks,
           h.ticks AS hourly_ticks, h.hours, h.parts
    FROM daily d FULL JOIN hourly h USING (gpu_id, state, team_id)
), live AS (
    SELECT DISTINCT gpu_id FROM joined WHERE projects IS DISTINCT FROM 1 OR hourly_ticks IS DISTINCT FROM daily_ticks
)
SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::numeric, gpu_id FROM live
UNION ALL
SELECT extract(epoch FROM u.hour)::bigint, j.team_id, j.model_id, j.project_id, j.state, sum(u.ticks), NULL
FROM joined j CROSS JOIN LATERAL unnest(j.hours, j.parts) AS u(hour, ticks)
WHERE j.gpu_id NOT IN (SELECT gpu_id FROM live)
GROUP BY 1, 2, 3, 4, 5
"""  # noqa: S608 (table names from model metadata; values are bound)
