"""Move-the-load lists of the daily board (issue 14): GPUs that rested (idle or unallocated) for days in
a row, GPUs at or above :setting:`CARDHOUR_ALWAYS_FULL_PCT` in every measured minute of the day, and
(issue 16) GPUs busy by their duty cycle at idle power.

**Long idle** reads the daily aggregates: the GPUs resting on the day itself first (one GROUP BY over the
day), then only those GPUs' days back to :data:`LOOKBACK_DAYS` (a second one); a run is counted in whole
business days by :func:`boards.maths.idle_since`, so it crosses month boundaries like any other day. A
run that reaches the lookback says "at least".

**Always full** is the duty cycle (a kernel was running), not saturation. Candidates are the GPUs whose
every measured hour of the day has a mean at or over the threshold (necessary for every minute to be),
from the hour rollups the board's hours already read; each measured minute is then checked from the same
hours' lowest minute (``HourRollup.util_min_minute``, issue 18: a day of 10,000 GPUs' minutes took most of
the board's second), or from the minute rollups where an hour predates that column."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, Q, Sum

from accounting.models import DailyHolderUsage, DailyUsage
from accounting.money.pricing import card_hours
from accounting.usage.states import BUSY, IDLE, UNALLOCATED
from boards.hours import HOUR_S, read_day
from boards.maths import DayOfGpu, idle_since, run_length
from boards.scope import BoardScope
from cluster.inventory.holders import booking_label, job_label
from cluster.models import Gpu, HourRollup, MinuteRollup
from teams.selectors import visible_team_ids

LOOKBACK_DAYS = 92
# The candidates' days back to the lookback: busy, resting (idle + unallocated) and all ticks per GPU-day.
_HISTORY_SQL = f"""
    SELECT gpu_id, day, coalesce(sum(ticks) FILTER (WHERE state = %(busy)s), 0),
           coalesce(sum(ticks) FILTER (WHERE state = ANY(%(resting)s)), 0), sum(ticks)
    FROM {DailyUsage._meta.db_table}
    WHERE gpu_id = ANY(%(gpus)s) AND day >= %(first)s AND day <= %(last)s
    GROUP BY gpu_id, day
"""  # noqa: S608 (the table name from model metadata; values are bound)


@dataclass(frozen=True)
class GpuHolders:
    """Who held a GPU on the day: team names (every viewer), and the jobs and bookings the viewer may see."""

    teams: list[str]
    labels: list[tuple[str, int, str]]  # (kind, id, label)


@dataclass(frozen=True)
class LongIdle:
    gpu_id: int
    label: str
    model: str
    since: date
    days: int
    at_least: bool
    holders: GpuHolders


@dataclass(frozen=True)
class AlwaysFull:
    gpu_id: int
    label: str
    model: str
    measured_minutes: int
    min_util: float
    holders: GpuHolders


@dataclass(frozen=True)
class IdlePower:
    """A GPU busy by its duty cycle while it drew less than its model's idle power (issue 16)."""

    gpu_id: int
    label: str
    model: str
    card_hours: Decimal  # the busy card-hours under the floor
    busy_card_hours: Decimal
    floor_w: int | None
    holders: GpuHolders


def _resting_sums():
    return {
        "busy": Sum("ticks", filter=Q(state=BUSY), default=0),
        "resting": Sum("ticks", filter=Q(state__in=(IDLE, UNALLOCATED)), default=0),
        "total": Sum("ticks"),
    }


def long_idle(scope: BoardScope, *, user, min_days: int | None = None) -> list[LongIdle]:
    """GPUs in scope resting for at least ``min_days`` (:setting:`CARDHOUR_LONG_IDLE_DAYS`) days in a row
    up to the day, longest first. Five queries at most."""
    return long_idle_top(scope, user=user, min_days=min_days)[0]


def long_idle_top(scope: BoardScope, *, user, min_days: int | None = None,
                  limit: int | None = None) -> tuple[list[LongIdle], int]:
    """:func:`long_idle`'s first ``limit`` rows (all: None) and how many there are in all: the page shows the
    first (at 10,000 GPUs there are hundreds), the API all; holders are read for the rows shown only."""
    min_days = min_days or settings.CARDHOUR_LONG_IDLE_DAYS
    today = (DailyUsage.objects.filter(scope.gpu_q(), day=scope.day).values_list("gpu_id")
             .annotate(**_resting_sums()).order_by())
    candidates = [gpu for gpu, busy, resting, total in today
                  if busy == 0 and 2 * resting >= total and total > 0]
    if not candidates:
        return [], 0
    first = scope.day - timedelta(days=LOOKBACK_DAYS - 1)
    history: dict[int, dict[date, DayOfGpu]] = defaultdict(dict)
    with connection.cursor() as cursor:  # plain tuples: thousands of GPU-days, no ORM converters per row
        cursor.execute(_HISTORY_SQL, {"gpus": candidates, "first": first, "last": scope.day, "busy": BUSY,
                                      "resting": [IDLE, UNALLOCATED]})
        rows = cursor.fetchall()
    for gpu, day, busy, resting, total in rows:
        history[gpu][day] = DayOfGpu(busy=busy, resting=resting, other=total - busy - resting)
    runs = {}
    for gpu in candidates:
        since = idle_since(history[gpu], last=scope.day)
        if since is not None and run_length(since, scope.day) >= min_days:
            runs[gpu] = since
    if not runs:
        return [], 0
    info = _gpu_info(runs)
    order = sorted(runs, key=lambda gpu: (-run_length(runs[gpu], scope.day), info[gpu][0]))
    shown = order if limit is None else order[:limit]
    holders = holders_on(scope, user, shown)
    return [LongIdle(gpu_id=gpu, label=info[gpu][0], model=info[gpu][1], since=runs[gpu],
                     days=run_length(runs[gpu], scope.day), at_least=runs[gpu] == first,
                     holders=holders.get(gpu, GpuHolders([], [])))
            for gpu in shown], len(order)


def always_full(scope: BoardScope, *, user, threshold: float | None = None, day=None) -> list[AlwaysFull]:
    """GPUs in scope at or above ``threshold`` % (:setting:`CARDHOUR_ALWAYS_FULL_PCT`) in every measured
    minute of the day (at least one), the most measured minutes first. Candidates come from the hour rollups
    of ``day`` (:func:`boards.hours.read_day`, read here when not given); four queries more at most."""
    return always_full_top(scope, user=user, threshold=threshold, day=day)[0]


def always_full_top(scope: BoardScope, *, user, threshold: float | None = None, day=None,
                    limit: int | None = None) -> tuple[list[AlwaysFull], int]:
    """:func:`always_full`'s first ``limit`` rows (all: None) and how many there are in all (as
    :func:`long_idle_top`)."""
    threshold = settings.CARDHOUR_ALWAYS_FULL_PCT if threshold is None else threshold
    start, end = scope.bounds
    candidates = full_hours(read_day(scope) if day is None else day, threshold=threshold, start=start, end=end)
    if not candidates:
        return [], 0
    full = {gpu: (low, n) for gpu, (low, n) in lowest_minutes(candidates, start, end).items()
            if low is not None and low >= threshold and n > 0}
    if not full:
        return [], 0
    info = _gpu_info(full)
    order = sorted(full, key=lambda gpu: (-full[gpu][1], info[gpu][0]))
    shown = order if limit is None else order[:limit]
    holders = holders_on(scope, user, shown)
    return [AlwaysFull(gpu_id=gpu, label=info[gpu][0], model=info[gpu][1], measured_minutes=full[gpu][1],
                       min_util=full[gpu][0], holders=holders.get(gpu, GpuHolders([], [])))
            for gpu in shown], len(order)


def lowest_minutes(gpu_ids: list[int], start, end) -> dict[int, tuple[float | None, int]]:
    """Each GPU's lowest minute utilization in ``[start, end)`` and its minutes with one. From the hour
    rollups' ``util_min_minute`` and ``util_minutes`` (one row per GPU-hour) where the day is whole UTC hours
    and its measured hours carry them; from the minute rollups for the GPUs with an hour rolled up before
    those columns existed, and for a day that starts inside an hour (a zone off UTC by half an hour)."""
    whole_hours = start.timestamp() % HOUR_S == 0 and end.timestamp() % HOUR_S == 0
    out: dict[int, tuple[float | None, int]] = {}
    if whole_hours:
        hours = (HourRollup.objects.filter(gpu_id__in=gpu_ids, bucket__gte=start, bucket__lt=end, util_covered_s__gt=0)
                 .values_list("gpu_id")
                 .annotate(low=Min("util_min_minute"), n=Sum("util_minutes"),
                           older=Count("bucket", filter=Q(util_minutes__isnull=True)))
                 .order_by())
        out = {gpu: (low, n or 0) for gpu, low, n, older in hours if not older}
    rest = [gpu for gpu in gpu_ids if gpu not in out]
    if rest:
        minutes = (MinuteRollup.objects.filter(gpu_id__in=rest, bucket__gte=start, bucket__lt=end, util_covered_s__gt=0)
                   .values_list("gpu_id").annotate(low=Min("util_mean"), n=Count("bucket")).order_by())
        out.update({gpu: (low, n) for gpu, low, n in minutes})
    return out


def busy_at_idle_power(scope: BoardScope, *, user, limit: int = 20) -> list[IdlePower]:
    """GPUs in scope whose busy minutes of the day drew less than their model's idle-power floor
    (:setting:`CARDHOUR_IDLE_POWER_FLOOR_W`): a duty cycle that says busy while the power says idle (a spin
    loop, a stuck kernel). The ``limit`` with the most such card-hours, from the daily usage; two queries
    more for their names and holders."""
    rows = (DailyUsage.objects.filter(scope.gpu_q(), day=scope.day, state=BUSY, low_power_ticks__gt=0)
            .values_list("gpu_id").annotate(low=Sum("low_power_ticks"), busy=Sum("ticks")).order_by("-low", "gpu_id")[:limit])
    rows = list(rows)
    if not rows:
        return []
    info = _gpu_info(gpu for gpu, _low, _busy in rows)
    holders = holders_on(scope, user, [gpu for gpu, _low, _busy in rows])
    floors = settings.CARDHOUR_IDLE_POWER_FLOOR_W
    return [IdlePower(gpu_id=gpu, label=info[gpu][0], model=info[gpu][1], card_hours=card_hours(low),
                      busy_card_hours=card_hours(busy), floor_w=floors.get((info[gpu][1] or "").upper()),
                      holders=holders.get(gpu, GpuHolders([], [])))
            for gpu, low, busy in rows]


def full_hours(day, *, threshold: float, start, end) -> list[int]:
    """The GPUs of ``day`` (:class:`boards.hours.DayRows`) with a measured hour and every measured hour's
    mean at or over ``threshold``: necessary for every minute to be. An hour cut by the day's start or
    end (a zone whose day begins inside an hour) holds minutes of another day: it counts for neither."""
    if day.empty:
        return []
    gpu, column = np.divmod(day.cells, len(day.hours))
    hour = day.hours[column]
    whole = (hour >= start.timestamp()) & (hour + HOUR_S <= end.timestamp()) & ~np.isnan(day.cell_util)
    measured = np.zeros(len(day.gpu_ids), dtype=bool)
    measured[gpu[whole]] = True
    below = np.zeros(len(day.gpu_ids), dtype=bool)
    below[gpu[whole & (day.cell_util < threshold)]] = True
    return day.gpu_ids[measured & ~below].tolist()


def _gpu_info(gpu_ids) -> dict[int, tuple[str, str]]:
    rows = Gpu.objects.filter(pk__in=list(gpu_ids)).values_list("pk", "node__hostname", "index", "model__short_name")
    return {pk: (f"{host}/{index}", model) for pk, host, index, model in rows}


def holders_on(scope: BoardScope, user, gpu_ids: list[int]) -> dict[int, GpuHolders]:
    """Who held each of ``gpu_ids`` on the day, from the holders' daily usage (one query)."""
    visible = visible_team_ids(user)
    rows = (DailyHolderUsage.objects.filter(day=scope.day, gpu_id__in=gpu_ids)
            .values_list("gpu_id", "team_id", "team__name", "job_id", "job__external_id", "job__name", "booking_id",
                         "booking__note")
            .distinct().order_by("gpu_id", "team__name", "job_id", "booking_id"))
    teams: dict[int, list[str]] = defaultdict(list)
    labels: dict[int, list] = defaultdict(list)
    for gpu, team_id, team, job_id, external_id, name, booking_id, note in rows:
        if team and team not in teams[gpu]:
            teams[gpu].append(team)
        if visible is None or team_id in visible:
            if job_id:
                item = ("job", job_id, job_label(external_id, name))
            else:
                item = ("booking", booking_id, booking_label(booking_id, note))
            if item not in labels[gpu]:
                labels[gpu].append(item)
    return {gpu: GpuHolders(teams[gpu], labels[gpu]) for gpu in set(teams) | set(labels)}
