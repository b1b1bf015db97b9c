"""A month's resource profile and next month's need (issue 15): the reads, a fixed handful of GROUP BY
queries whatever the size of the cluster (1,000 GPUs × 720 hours is 720,000 GPU-hours a month; no row per
GPU ever reaches Python).

**GPUs held.** In an hour, the GPUs held are the hour's allocated (busy + idle + unmeasured) ticks ÷ the
ticks of a full GPU-hour (840,000 × 3,600), so a MIG slice or a fractional share holds its part of a GPU.
Hours are UTC hours: where the business day begins inside an hour, its two parts are one hour here. The
*peak* is the busiest hour's figure; the *mean* is the allocated card-hours ÷ the hours of the month that
have passed (to ``now``; an hour with no usage rows holds 0), so a month in progress is ``partial`` and
counts its hours so far. *Capacity* in an hour is the whole GPUs with usage rows in that hour (the five
states add up to it); its mean is every state's card-hours ÷ the same hours.

**Unplaced usage** (jobs whose GPUs are not known, ``DailyUnplacedUsage``) has no hours: it is in the
card-hours (allocated and unmeasured) of its team and GPU model, and in no concurrency figure, which
counts placed GPUs only. Usage held by no team is in the model and cluster figures, not the team table.

**Next month's need** is projected (:mod:`boards.periods.projection`) for the month after the last full
month before today (so: the current month), from the mean GPUs held of the up to three full months before
it that have usage, consecutive and ending with the last full month: per team, per GPU model (the months
it was in service) and for the cluster, beside the cluster's mean capacity of the last full month.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pandas as pd
from django.db.models import Max, Q, Sum
from django.db.models.functions import TruncHour, TruncMonth
from django.utils import timezone

from accounting.models import DailyUnplacedUsage, HourlyModelCapacity, HourlyModelUsage
from accounting.usage.figures import row_figures
from accounting.usage.states import ALLOCATED_STATES, BUSY, UNMEASURED
from boards.periods.projection import MONTHS_NEEDED, Projection, project_next_month, to_decimal
from cluster.jobs.kpis import percent_of
from cluster.models import GpuModel
from core.timeutils import business_day_bounds, business_today, month_days, previous_month
from core.units import TICKS_PER_CARD_HOUR, TICKS_PER_GPU_SECOND
from teams.models import Team

ALLOCATED = Q(state__in=ALLOCATED_STATES)
SERIES_COLUMNS = ["hour", "model", "held", "capacity", "partial"]


@dataclass(frozen=True)
class ProfileRow:
    """A GPU model's, a team's or the cluster's month: GPUs held in the peak hour and on average (2 places),
    card-hours (4 places), efficiency (busy ÷ allocated, %, None: nothing allocated) and the mean GPUs in
    service (None for a team). ``key``: the model's or team's id (None: the cluster, or an unknown model)."""

    key: int | None
    name: str
    peak: Decimal
    mean: Decimal | None
    allocated: Decimal
    busy: Decimal
    idle: Decimal
    unmeasured: Decimal
    efficiency: Decimal | None
    capacity: Decimal | None = None


@dataclass(frozen=True)
class MonthProfile:
    """The month of ``month`` (its first day) at ``now``: ``[start, end)`` its UTC bounds, ``partial`` while
    it has not ended, ``series`` one row per (UTC hour, model short name): GPUs ``held`` (float, for the
    chart), ``capacity`` (whole GPUs in service) and ``partial`` (the hour is still running)."""

    month: date
    start: datetime
    end: datetime
    partial: bool
    hours: Decimal  # the hours the means are over (to ``now`` in a month in progress), 2 places
    models: list[ProfileRow]
    teams: list[ProfileRow]
    total: ProfileRow
    series: pd.DataFrame
    unplaced_card_hours: Decimal


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """``[start, end)`` of the business month holding ``month``, as UTC instants."""
    first, following = month_days(month)
    return business_day_bounds(first)[0], business_day_bounds(following)[0]


def _held(ticks: int, seconds: Fraction | int) -> Fraction | None:
    """GPUs held on average: ``ticks`` over ``seconds`` of wall time (None over no time)."""
    return Fraction(ticks, TICKS_PER_GPU_SECOND) / seconds if seconds else None


def _row(key, name: str, *, peak_ticks: int, ticks: Counter, seconds: Fraction, capacity_ticks: int | None) -> ProfileRow:
    """One table row from its busiest hour's allocated ticks, its ticks per state (unplaced included) and,
    for models and the total, every state's placed ticks."""
    figures = row_figures(ticks, gpu_level=False)
    allocated = sum(ticks.get(state, 0) for state in ALLOCATED_STATES)
    mean = _held(ticks.get("placed", 0), seconds)
    capacity = None if capacity_ticks is None else _held(capacity_ticks, seconds)
    return ProfileRow(
        key=key, name=name, peak=to_decimal(Fraction(peak_ticks, TICKS_PER_CARD_HOUR)),
        mean=None if mean is None else to_decimal(mean), allocated=figures["card_hours_allocated"],
        busy=figures["card_hours_busy"], idle=figures["card_hours_idle"], unmeasured=figures["card_hours_unmeasured"],
        efficiency=percent_of(ticks.get(BUSY, 0), allocated),
        capacity=None if capacity is None else to_decimal(capacity),
    )


def month_profile(month: date, *, now: datetime | None = None) -> MonthProfile:
    """The profile of the business month holding ``month`` (see the module docstring). Seven queries, over
    the hourly usage summed by GPU model (``HourlyModelUsage``: rows per hour, model, state and team, not
    per GPU)."""
    now = now or timezone.now()
    first, following = month_days(month)
    start, end = month_bounds(first)
    seconds = Fraction(int((min(max(now, start), end) - start).total_seconds()))
    days = Q(day__gte=first, day__lt=following)

    # 1. per UTC hour and model: allocated ticks, every state's ticks; 2. whole GPUs in service (the hour's
    # two parts where a business day begins inside it: the larger); from the hourly usage summed by model.
    by_hour = (HourlyModelUsage.objects.filter(days).annotate(utc_hour=TruncHour("hour", tzinfo=UTC))
               .values_list("utc_hour", "gpu_model_id")
               .annotate(held=Sum("ticks", filter=ALLOCATED, default=0), total=Sum("ticks"))
               .order_by("utc_hour", "gpu_model_id"))
    in_service = dict(
        ((hour, model_id), gpus) for hour, model_id, gpus in
        HourlyModelCapacity.objects.filter(days).annotate(utc_hour=TruncHour("hour", tzinfo=UTC))
        .values_list("utc_hour", "gpu_model_id").annotate(most=Max("gpus")).order_by()
    )
    by_hour_model = [(hour, model_id, held, total, in_service.get((hour, model_id), 0))
                     for hour, model_id, held, total in by_hour]
    # 3. per UTC hour and team: allocated ticks
    by_hour_team = (
        HourlyModelUsage.objects.filter(days, ALLOCATED, team__isnull=False)
        .annotate(utc_hour=TruncHour("hour", tzinfo=UTC))
        .values_list("utc_hour", "team_id").annotate(held=Sum("ticks")).order_by()
    )
    # 4. and 5. card-hours per model, team and state, placed (the hours add up to the days) and unplaced
    placed = (HourlyModelUsage.objects.filter(days, ALLOCATED).values_list("gpu_model_id", "team_id", "state")
              .annotate(ticks=Sum("ticks")).order_by())
    unplaced = (DailyUnplacedUsage.objects.filter(days).values_list("gpu_model_id", "team_id")
                .annotate(ticks=Sum("ticks")).order_by())

    model_ticks: dict[int | None, Counter] = defaultdict(Counter)
    team_ticks: dict[int, Counter] = defaultdict(Counter)
    total_ticks: Counter = Counter()
    for model_id, team_id, state, ticks in placed:
        for counter in (model_ticks[model_id], total_ticks, *([team_ticks[team_id]] if team_id else [])):
            counter[state] += ticks
            counter["placed"] += ticks
    unplaced_ticks = 0
    for model_id, team_id, ticks in unplaced:
        unplaced_ticks += ticks
        for counter in (model_ticks[model_id], total_ticks, team_ticks[team_id]):
            counter[UNMEASURED] += ticks

    model_peak: Counter = Counter()
    model_capacity: Counter = Counter()
    cluster_by_hour: Counter = Counter()
    for hour, model_id, held, total, _gpus in by_hour_model:
        model_peak[model_id] = max(model_peak[model_id], held)
        model_capacity[model_id] += total
        cluster_by_hour[hour] += held
    team_peak: Counter = Counter()
    for _hour, team_id, held in by_hour_team:
        team_peak[team_id] = max(team_peak[team_id], held)

    model_ids = set(model_ticks) | set(model_peak)
    names = dict(GpuModel.objects.filter(pk__in=[m for m in model_ids if m]).values_list("pk", "short_name"))
    teams = dict(Team.objects.filter(pk__in=list(team_ticks)).values_list("pk", "name"))
    models = [
        _row(model_id, names.get(model_id, ""), peak_ticks=model_peak[model_id], ticks=model_ticks[model_id],
             seconds=seconds, capacity_ticks=model_capacity[model_id])
        for model_id in sorted(model_ids, key=lambda m: (m is None, names.get(m, "")))
    ]
    team_rows = [
        _row(team_id, teams.get(team_id, ""), peak_ticks=team_peak[team_id], ticks=team_ticks[team_id],
             seconds=seconds, capacity_ticks=None)
        for team_id in team_ticks
    ]
    team_rows.sort(key=lambda r: (-r.allocated, r.name.casefold()))
    total = _row(None, "", peak_ticks=max(cluster_by_hour.values(), default=0), ticks=total_ticks, seconds=seconds,
                 capacity_ticks=sum(model_capacity.values()))
    series = pd.DataFrame(
        [(hour, names.get(model_id, ""), held / TICKS_PER_CARD_HOUR, gpus, hour + timedelta(hours=1) > now)
         for hour, model_id, held, _total, gpus in by_hour_model],
        columns=SERIES_COLUMNS,
    )
    return MonthProfile(
        month=first, start=start, end=end, partial=now < end, hours=to_decimal(seconds / 3600), models=models,
        teams=team_rows, total=total, series=series,
        unplaced_card_hours=row_figures({UNMEASURED: unplaced_ticks}, gpu_level=False)["card_hours_unmeasured"],
    )


# ---- next month's need ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NeedRow:
    """A team's, a GPU model's or the cluster's projection with the monthly means it rests on ((month,
    GPUs), oldest first) and, for models and the cluster, the mean GPUs in service of the last full month."""

    key: int | None
    name: str
    history: list[tuple[date, Decimal]]
    projection: Projection
    capacity: Decimal | None = None

    @property
    def headroom(self) -> Decimal | None:
        """Capacity − the projected need (negative: short of GPUs); None without both."""
        if self.capacity is None or self.projection.value is None:
            return None
        return self.capacity - self.projection.value


@dataclass(frozen=True)
class Need:
    """Next month's need: ``month`` the month projected, ``months`` the full months with usage it rests on."""

    month: date
    months: list[date]
    models: list[NeedRow]
    teams: list[NeedRow]
    total: NeedRow


def _run_ending(months: list[date], has_data) -> list[date]:
    """The consecutive months ending with the last of ``months`` that have data (oldest first)."""
    run: list[date] = []
    for month in reversed(months):
        if not has_data(month):
            break
        run.insert(0, month)
    return run


def next_month_need(*, now: datetime | None = None) -> Need:
    """The projection of the month after the last full month before today (see the module docstring).
    Four queries."""
    now = now or timezone.now()
    projected = month_days(business_today(now=now))[0]
    candidates = [projected]
    for _ in range(MONTHS_NEEDED):
        candidates.insert(0, previous_month(candidates[0]))
    candidates.pop()
    seconds = {m: Fraction(int((month_bounds(m)[1] - month_bounds(m)[0]).total_seconds())) for m in candidates}
    days = Q(day__gte=candidates[0], day__lt=projected)
    summed = HourlyModelUsage.objects.filter(days).annotate(month=TruncMonth("day"))  # the days' hours, by model
    by_model = (summed.values_list("month", "gpu_model_id")
                .annotate(held=Sum("ticks", filter=ALLOCATED, default=0), total=Sum("ticks")).order_by())
    by_team = (summed.filter(ALLOCATED, team__isnull=False).values_list("month", "team_id")
               .annotate(held=Sum("ticks")).order_by())
    model_held: dict[int, Counter] = defaultdict(Counter)
    model_total: dict[int, Counter] = defaultdict(Counter)
    for month, model_id, held, total in by_model:
        model_held[model_id][month] += held
        model_total[model_id][month] += total
    team_held: dict[int, Counter] = defaultdict(Counter)
    for month, team_id, held in by_team:
        team_held[team_id][month] += held
    cluster_total = sum(model_total.values(), Counter())
    cluster_held = sum(model_held.values(), Counter())
    months = _run_ending(candidates, lambda m: cluster_total[m] > 0)
    last = candidates[-1]

    def need_row(key, name, held: Counter, run: list[date], capacity_ticks: int | None) -> NeedRow:
        history = [(m, _held(held[m], seconds[m])) for m in run]
        capacity = None if capacity_ticks is None else to_decimal(_held(capacity_ticks, seconds[last]))
        return NeedRow(key=key, name=name, history=[(m, to_decimal(v)) for m, v in history],
                       projection=project_next_month(history), capacity=capacity)

    names = dict(GpuModel.objects.filter(pk__in=list(model_total)).values_list("pk", "short_name"))
    teams = dict(Team.objects.filter(pk__in=list(team_held)).values_list("pk", "name"))
    models = [
        need_row(model_id, names.get(model_id, ""), model_held[model_id],
                 _run_ending(candidates, lambda m, t=model_total[model_id]: t[m] > 0), model_total[model_id][last])
        for model_id in sorted(model_total, key=lambda m: names.get(m, ""))
    ]
    team_rows = [need_row(team_id, teams.get(team_id, ""), team_held[team_id], months, None) for team_id in team_held]
    team_rows.sort(key=lambda r: (-(r.projection.value or r.projection.last_mean or 0), r.name.casefold()))
    total = need_row(None, "", cluster_held, months, cluster_total[last])
    return Need(month=projected, months=months, models=models, teams=team_rows, total=total)
