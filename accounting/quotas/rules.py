"""Quota maths with no ORM (DESIGN.md §5, §6): the burn forecast, the warning thresholds, and the
overflow rule.

Usage is integer ticks (1/840,000 GPU-second; a card-hour is 3,024,000,000 ticks), so every split
below is exact.

**Overflow rule** (:func:`quota_split`): usage is taken in time order. Each event is matched to the
quotas that apply to it — same team, the quota's period ``[period_start, expires)`` holding the event's
business day, and either the quota's GPU model or no model (team-wide) — most specific first (the
model's quota, then the team-wide one), and fills the first that still has room, then the next. What is
left once every matching quota is full is *overflow*; usage that no quota matches has no limit and never
overflows. An event is split exactly, in ticks, where a quota runs out inside it. Events of one moment are
taken in a fixed order — project (none first), state, GPU model (none first), team — so the result does
not depend on the order they are given in.

Totals per quota do not depend on the order of the events, only on which ones there are: a day on which
no quota runs out therefore splits the same whether its usage comes as one event per key or minute by
minute (:func:`crossing_days` names the days that need the finer detail).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import NamedTuple

from core.units import TICKS_PER_CARD_HOUR

CARD_HOUR_PLACES = 3  # as Quota.card_hours stores them
WARNING_THRESHOLDS = (50, 75, 90, 100)  # percent used
EXPIRY_WARNING_DAYS = 15
BURN_WINDOW_DAYS = 7


# ---- units ----------------------------------------------------------------------------------------------

def ticks_from_card_hours(card_hours: Decimal | int | str) -> int:
    """Card-hours (a quota's ``Decimal``) in ticks; exact for up to 6 decimals, floored beyond."""
    return math.floor(Fraction(card_hours) * TICKS_PER_CARD_HOUR)


def card_hours_from_ticks(ticks: int, places: int = CARD_HOUR_PLACES) -> Decimal:
    """Ticks in card-hours to ``places`` decimals, rounded half away from zero (``remaining`` may be negative)."""
    scaled = Fraction(abs(ticks) * 10**places, TICKS_PER_CARD_HOUR)
    units = math.floor(scaled + Fraction(1, 2))
    return Decimal(-units if ticks < 0 else units).scaleb(-places)


# ---- forecast and warnings ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Forecast:
    """Where a quota stands and when, at the trailing burn, it runs out.

    ``burn_ticks_per_day`` is the exact mean allocated ticks per day over ``burn_days`` full days before
    ``today``; ``run_out`` is the first day on which the quota is expected to be used up: today when the
    rest of today at that burn uses it up; None when nothing is burning, or not within the calendar. A quota
    already used up has ``exhausted_on``, the day its usage reached it (``run_out`` is that day too)."""

    quota_ticks: int
    used_ticks: int
    remaining_ticks: int
    used_fraction: Fraction
    burn_ticks_per_day: Fraction
    burn_days: int
    today: date
    expires: date
    run_out: date | None
    runs_out_before_expiry: bool
    exhausted_on: date | None = None

    @property
    def exhausted(self) -> bool:
        return self.remaining_ticks <= 0

    @property
    def thresholds(self) -> list[int]:
        return thresholds_crossed(self.used_fraction)


def used_fraction_of(*, used_ticks: int, quota_ticks: int) -> Fraction:
    """``used / quota``; a zero quota counts as fully used (nothing may be used under it)."""
    if quota_ticks <= 0:
        return Fraction(1)
    return Fraction(used_ticks, quota_ticks)


def burn_forecast(
    *, daily_ticks: Mapping[date, int], quota_ticks: int, used_ticks: int, today: date, expires: date,
    period_start: date | None = None, window_days: int = BURN_WINDOW_DAYS, day_left: Fraction = Fraction(0),
) -> Forecast:
    """The forecast of a quota from its allocated ticks per business day (``daily_ticks``; days missing
    are 0) and what it has used so far (``used_ticks``, today's partial usage included).

    The burn is the mean over the ``window_days`` full days before ``today``; a quota that began
    (``period_start``) less than that ago is averaged over its own days so far, at least one. ``day_left``
    is the share of today still to come (0 to 1; 0: today is over, as for a past day): the rest burns
    ``burn × day_left`` today, then ``burn`` a day. The run-out day is today when that rest of today
    uses up what remains, else the first later day by which it is used up. A quota already used up ran
    out on the first day its usage reached it."""
    if window_days < 1:
        raise ValueError("window_days must be at least 1")
    if not 0 <= day_left <= 1:
        raise ValueError("day_left must be between 0 and 1")
    window_start = today - timedelta(days=window_days)
    if period_start is not None and period_start > window_start:
        window_start = period_start
    burn_days = max(1, (today - window_start).days)
    burned = sum(ticks for day, ticks in daily_ticks.items() if window_start <= day < today)
    burn = Fraction(burned, burn_days)
    remaining = quota_ticks - used_ticks
    exhausted_on = _exhausted_on(daily_ticks, quota_ticks, today) if remaining <= 0 else None
    run_out = exhausted_on if remaining <= 0 else _run_out(remaining=remaining, burn=burn, today=today,
                                                            day_left=Fraction(day_left))
    return Forecast(
        quota_ticks=quota_ticks, used_ticks=used_ticks, remaining_ticks=remaining,
        used_fraction=used_fraction_of(used_ticks=used_ticks, quota_ticks=quota_ticks),
        burn_ticks_per_day=burn, burn_days=burn_days, today=today, expires=expires, run_out=run_out,
        runs_out_before_expiry=run_out is not None and run_out < expires, exhausted_on=exhausted_on,
    )


def _exhausted_on(daily_ticks: Mapping[date, int], quota_ticks: int, today: date) -> date:
    """The first day the running total of ``daily_ticks`` reached ``quota_ticks`` (today if it never
    did: the usage was given without its days)."""
    total = 0
    for day in sorted(daily_ticks):
        total += daily_ticks[day]
        if total >= quota_ticks:
            return min(day, today)
    return today


def _run_out(*, remaining: int, burn: Fraction, today: date, day_left: Fraction) -> date | None:
    if burn <= 0:
        return None
    if remaining <= burn * day_left:
        return today
    days = math.ceil((remaining - burn * day_left) / burn)
    if days > (date.max - today).days:
        return None  # never, at this rate
    return today + timedelta(days=days)


def thresholds_crossed(used_fraction: Fraction | Decimal | int | float) -> list[int]:
    """The warning thresholds (percent used, of 50, 75, 90, 100) that ``used_fraction`` has reached."""
    percent = Fraction(used_fraction) * 100
    return [threshold for threshold in WARNING_THRESHOLDS if percent >= threshold]


def expiry_warning_due(*, today: date, expires: date, days: int = EXPIRY_WARNING_DAYS) -> bool:
    """Whether ``today`` falls in the ``days`` days before the quota expires (``expires`` is not counted).
    Counted as a difference, so a stored expiry near year 1 cannot overflow."""
    return 0 < (expires - today).days <= days


# ---- the overflow rule ----------------------------------------------------------------------------------

class UsageEvent(NamedTuple):
    """Allocated ticks of one team, GPU model, project and state at one moment (any sortable key: an
    epoch second of the minute, hour or day the ticks belong to) on one business day."""

    moment: int
    team_id: int
    gpu_model_id: int | None
    project_id: int | None
    state: str
    ticks: int
    day: date


class OverflowPart(NamedTuple):
    """The part of a usage event beyond every quota that matches it."""

    moment: int
    team_id: int
    gpu_model_id: int | None
    project_id: int | None
    state: str
    ticks: int
    day: date


class CoveredPart(NamedTuple):
    """The part of a usage event that one quota took."""

    quota_id: int
    moment: int
    team_id: int
    gpu_model_id: int | None
    project_id: int | None
    state: str
    ticks: int
    day: date


@dataclass(frozen=True)
class QuotaLimit:
    """A quota as the overflow rule sees it: ``quota_ticks`` for ``[period_start, expires)`` business days."""

    id: int
    team_id: int
    gpu_model_id: int | None
    period_start: date
    expires: date
    quota_ticks: int

    def applies_to(self, *, team_id: int, gpu_model_id: int | None, day: date) -> bool:
        return (self.team_id == team_id and self.period_start <= day < self.expires
                and (self.gpu_model_id is None or self.gpu_model_id == gpu_model_id))


@dataclass(frozen=True)
class QuotaSplit:
    """Every event's ticks in exactly one of: ``covered`` (by a quota), ``overflow`` or ``unlimited`` (no
    quota matched). ``consumed``: ticks each quota took; ``exhausted``: for each quota that ran out of
    room during the events, the (moment, day) of the event that filled it."""

    covered: list[CoveredPart] = field(default_factory=list)
    overflow: list[OverflowPart] = field(default_factory=list)
    unlimited: list[UsageEvent] = field(default_factory=list)
    consumed: dict[int, int] = field(default_factory=dict)
    exhausted: dict[int, tuple[int, date]] = field(default_factory=dict)


def event_order(event: UsageEvent) -> tuple:
    """The order usage is taken in: time, then (within a moment) project, state, GPU model and team."""
    return (event.moment, event.project_id is not None, event.project_id or 0, event.state,
            event.gpu_model_id is not None, event.gpu_model_id or 0, event.team_id, event.day)


def ordered_events(usage_events: Iterable[Sequence]) -> list[UsageEvent]:
    """``usage_events`` (tuples in :class:`UsageEvent`'s field order) with equal keys merged, zero events
    dropped, in :func:`event_order`."""
    merged: dict[tuple, int] = defaultdict(int)
    for raw in usage_events:
        event = UsageEvent(*raw)
        if event.ticks < 0:
            raise ValueError(f"usage ticks must not be negative: {event}")
        merged[event._replace(ticks=0)] += event.ticks
    return sorted((key._replace(ticks=ticks) for key, ticks in merged.items() if ticks), key=event_order)


def _specific_first(quota: QuotaLimit) -> tuple:
    return (quota.gpu_model_id is None, quota.period_start, quota.id)


def quota_split(*, quotas: Iterable[QuotaLimit], usage_events: Iterable[Sequence]) -> QuotaSplit:
    """Split ``usage_events`` by the overflow rule (see the module docstring)."""
    quotas = list(quotas)
    if len({quota.id for quota in quotas}) != len(quotas):
        raise ValueError("quota ids must be unique")
    if any(quota.quota_ticks < 0 for quota in quotas):
        raise ValueError("a quota must not be negative")
    by_team: dict[int, list[QuotaLimit]] = defaultdict(list)
    for quota in sorted(quotas, key=_specific_first):
        by_team[quota.team_id].append(quota)
    room = {quota.id: quota.quota_ticks for quota in quotas}
    split = QuotaSplit(consumed={quota.id: 0 for quota in quotas})
    for event in ordered_events(usage_events):
        matching = [q for q in by_team.get(event.team_id, ())
                    if q.applies_to(team_id=event.team_id, gpu_model_id=event.gpu_model_id, day=event.day)]
        left = event.ticks
        for quota in matching:
            take = min(room[quota.id], left)
            if take == 0:
                continue
            room[quota.id] -= take
            left -= take
            split.consumed[quota.id] += take
            split.covered.append(CoveredPart(quota.id, *event._replace(ticks=take)))
            if room[quota.id] == 0:
                split.exhausted[quota.id] = (event.moment, event.day)
            if left == 0:
                break
        if left and matching:
            split.overflow.append(OverflowPart(*event._replace(ticks=left)))
        elif left:
            split.unlimited.append(event._replace(ticks=left))
    return split


def overflow_split(*, quotas: Iterable[QuotaLimit], usage_events: Iterable[Sequence]) -> list[OverflowPart]:
    """The parts of ``usage_events`` that are overflow, in the order usage is taken."""
    return quota_split(quotas=quotas, usage_events=usage_events).overflow


def crossing_days(*, quotas: Iterable[QuotaLimit], usage_events: Iterable[Sequence]) -> set[date]:
    """The business days on which some quota runs out of room. On every other day each quota is either
    full all day or never full, so the day's split does not depend on the order of its usage, and one
    event per key of the day gives the same overflow as finer detail."""
    return {day for _moment, day in quota_split(quotas=quotas, usage_events=usage_events).exhausted.values()}


def fit_to_totals(
    events: Iterable[Sequence], totals: Mapping[tuple, int], *, day: date, last_moment: int,
) -> list[UsageEvent]:
    """One business day's detailed ``events`` made to add up, per (team, GPU model, project, state), to
    ``totals`` (the day's aggregate rows): a shortfall is added at ``last_moment``, an excess is taken off
    the latest events first. Where the detail and the rows agree (aggregates up to date), nothing changes."""
    out = ordered_events(events)
    if any(event.day != day for event in out):
        raise ValueError("fit_to_totals takes one day's events")
    sums: dict[tuple, int] = defaultdict(int)
    for event in out:
        sums[_holder(event)] += event.ticks
    for key in sorted(set(sums) | set(totals), key=_holder_order):
        excess = sums.get(key, 0) - totals.get(key, 0)
        for index in range(len(out) - 1, -1, -1):
            if excess <= 0:
                break
            if _holder(out[index]) == key:
                take = min(excess, out[index].ticks)
                out[index] = out[index]._replace(ticks=out[index].ticks - take)
                excess -= take
        if excess < 0:
            team_id, gpu_model_id, project_id, state = key
            out.append(UsageEvent(last_moment, team_id, gpu_model_id, project_id, state, -excess, day))
    return ordered_events(out)


def _holder(event: UsageEvent) -> tuple:
    return (event.team_id, event.gpu_model_id, event.project_id, event.state)


def _holder_order(key: tuple) -> tuple:
    team_id, gpu_model_id, project_id, state = key
    return (team_id, gpu_model_id is not None, gpu_model_id or 0, project_id is not None, project_id or 0, state)


def overflow_totals(parts: Iterable[OverflowPart]) -> dict[tuple, int]:
    """Overflow ticks per (day, team, project, GPU model, state): the keys a period close books by."""
    totals: dict[tuple, int] = defaultdict(int)
    for part in parts:
        totals[(part.day, part.team_id, part.project_id, part.gpu_model_id, part.state)] += part.ticks
    return dict(totals)
