"""Booking maths with no ORM (DESIGN.md §6): the time grid, the window rules, the earliest slot in which
enough GPUs are free, which GPUs to take, and the idle clock. Property-tested in tests/cluster."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Limits:
    """The booking rules for one team: settings, overridden by the team's TeamBookingPolicy."""

    grid_minutes: int = 30
    min_minutes: int = 30
    max_hours: int = 168
    max_days_ahead: int = 28
    max_gpus_per_booking: int = 64
    max_gpus_held: int = 0  # 0: no limit
    idle_warn_minutes: int = 30  # 0: never
    idle_release_minutes: int = 60  # 0: never

    @property
    def grid(self) -> timedelta:
        return timedelta(minutes=self.grid_minutes)


def floor_to_grid(moment: datetime, grid_minutes: int) -> datetime:
    step = grid_minutes * 60
    seconds = math.floor((moment - _EPOCH).total_seconds())
    return _EPOCH + timedelta(seconds=seconds - seconds % step)


def ceil_to_grid(moment: datetime, grid_minutes: int) -> datetime:
    floored = floor_to_grid(moment, grid_minutes)
    return floored if floored == moment else floored + timedelta(minutes=grid_minutes)


def on_grid(moment: datetime, grid_minutes: int) -> bool:
    return floor_to_grid(moment, grid_minutes) == moment


def window_problems(
    *, start: datetime, end: datetime, now: datetime, limits: Limits, new: bool = True,
) -> list[tuple[str, str]]:
    """(field, rule) for each rule ``[start, end)`` breaks. ``new=False`` checks a change of end only
    (the booking may have started: its start is not checked against now)."""
    problems = []
    grid = limits.grid_minutes
    if new and not on_grid(start, grid):
        problems.append(("start", _("must be on the %(grid)d-minute grid (a whole number of %(grid)d-minute steps past midnight).") % {"grid": grid}))
    if not on_grid(end, grid) and not (not new and end <= now):
        problems.append(("end", _("must be on the %(grid)d-minute grid (a whole number of %(grid)d-minute steps past midnight).") % {"grid": grid}))
    if end <= start:
        problems.append(("end", _("must be after the start.")))
        return problems
    if new and start < floor_to_grid(now, grid):
        problems.append(("start", _("is in the past.")))
    if not new and end <= now:
        problems.append(("end", _("is in the past.")))
    length = end - start
    if length < timedelta(minutes=limits.min_minutes):
        problems.append(("end", ngettext(
            "a booking lasts at least %(n)d minute.", "a booking lasts at least %(n)d minutes.", limits.min_minutes,
        ) % {"n": limits.min_minutes}))
    if length > timedelta(hours=limits.max_hours):
        problems.append(("end", ngettext(
            "a booking lasts at most %(n)d hour.", "a booking lasts at most %(n)d hours.", limits.max_hours,
        ) % {"n": limits.max_hours}))
    if start > now + timedelta(days=limits.max_days_ahead):
        problems.append(("start", ngettext(
            "may be at most %(n)d day ahead.", "may be at most %(n)d days ahead.", limits.max_days_ahead,
        ) % {"n": limits.max_days_ahead}))
    return problems


@dataclass(frozen=True)
class Candidate:
    """A bookable GPU as the slot search sees it."""

    gpu_id: int
    node_id: int
    node_name: str
    index: int


@dataclass(frozen=True)
class Slot:
    start: datetime
    end: datetime
    free: tuple[Candidate, ...]


def epoch(moment: datetime) -> int:
    """Whole seconds since the Unix epoch: the search works in these (booking times are whole seconds)."""
    return math.floor((moment - _EPOCH).total_seconds())


def _free_over(intervals: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    return not any(lo < end and start < hi for lo, hi in intervals)


def earliest_slot(
    *, gpus: Sequence[Candidate], busy: Mapping[int, Sequence[tuple[int, int]]], count: int,
    start: datetime, end: datetime, now: datetime, latest_start: datetime, grid_minutes: int,
) -> Slot | None:
    """The earliest slot, from ``[start, end)`` on, in which ``count`` of ``gpus`` are free of ``busy``
    ([lo, hi) ranges in epoch seconds per GPU id); later candidates keep the length and step along the
    grid up to ``latest_start``. A start inside the current grid step begins at ``now``. Returns every
    GPU free in the slot (``pick_gpus`` chooses among them), or None.

    One sweep: each free gap of a GPU admits a run of grid starts; the first start covered by ``count``
    runs wins. O((GPUs + busy ranges) · log) whatever the horizon."""
    first_start = max(start, now)
    lo0, hi0 = epoch(first_start), epoch(end)
    free_now = tuple(g for g in gpus if _free_over(busy.get(g.gpu_id, ()), lo0, hi0))
    if len(free_now) >= count:
        return Slot(first_start, end, free_now)
    length = epoch(end) - epoch(start)
    step = grid_minutes * 60
    base_dt = floor_to_grid(start, grid_minutes)
    base = epoch(base_dt)
    last_k = (epoch(latest_start) - base) // step
    if last_k < 1:
        return None
    runs: dict[int, list[tuple[int, int]]] = {}
    deltas: dict[int, int] = defaultdict(int)
    for gpu in gpus:
        gap_start: int | None = None
        gaps = []
        for lo, hi in sorted(busy.get(gpu.gpu_id, ())):
            gaps.append((gap_start, lo))
            gap_start = hi if gap_start is None else max(gap_start, hi)
        gaps.append((gap_start, None))
        admitted = []
        for gap_lo, gap_hi in gaps:
            k_lo = 1 if gap_lo is None else max(1, -((base - gap_lo) // step))  # ceil division
            k_hi = last_k if gap_hi is None else min(last_k, (gap_hi - length - base) // step)
            if k_lo <= k_hi:
                admitted.append((k_lo, k_hi))
                deltas[k_lo] += 1
                deltas[k_hi + 1] -= 1
        runs[gpu.gpu_id] = admitted
    free = 0
    for k in sorted(deltas):
        free += deltas[k]
        if free >= count and k <= last_k:
            slot_start = base_dt + timedelta(seconds=k * step)
            chosen = tuple(g for g in gpus if any(lo <= k <= hi for lo, hi in runs[g.gpu_id]))
            return Slot(slot_start, slot_start + timedelta(seconds=length), chosen)
    return None


def pick_gpus(free: Sequence[Candidate], count: int) -> list[Candidate] | None:
    """``count`` of ``free``, packed: the fullest node that still fits them all (fewest free GPUs, so big
    holes stay open for big requests), else as few nodes as possible, most free first."""
    if count > len(free):
        return None
    by_node: dict[int, list[Candidate]] = defaultdict(list)
    for gpu in free:
        by_node[gpu.node_id].append(gpu)
    for node_gpus in by_node.values():
        node_gpus.sort(key=lambda g: g.index)
    fitting = [gpus for gpus in by_node.values() if len(gpus) >= count]
    if fitting:
        best = min(fitting, key=lambda gpus: (len(gpus), gpus[0].node_name))
        return best[:count]
    chosen: list[Candidate] = []
    for gpus in sorted(by_node.values(), key=lambda gpus: (-len(gpus), gpus[0].node_name)):
        chosen.extend(gpus[: count - len(chosen)])
        if len(chosen) == count:
            break
    return chosen


def most_held_at_once(ranges: Iterable[tuple[datetime, datetime]]) -> int:
    """The most ranges that share one instant (half-open ranges: one ending as another starts don't)."""
    events = sorted([(lo, 1) for lo, _hi in ranges] + [(hi, -1) for _lo, hi in ranges], key=lambda e: (e[0], e[1]))
    held = best = 0
    for _moment, delta in events:
        held += delta
        best = max(best, held)
    return best


# The idle clock: each minute of a running booking is busy, idle or unmeasured.
BUSY, IDLE, UNMEASURED = "busy", "idle", "unmeasured"
MEASURED_MIN_S = 30  # a GPU-minute with less utilization coverage than this tells nothing


def minute_state(readings: Sequence[tuple[float | None, int]], gpu_count: int, threshold_pct: float) -> str:
    """One minute of a booking from its GPUs' (mean utilization, utilization-covered seconds): busy if
    any GPU worked (mean ≥ threshold), idle if every GPU was measured under it, else unmeasured."""
    measured = [(util, covered) for util, covered in readings if util is not None and covered > 0]
    if any(util >= threshold_pct for util, _covered in measured):
        return BUSY
    if len(readings) == gpu_count and all(covered >= MEASURED_MIN_S for _util, covered in measured) \
            and len(measured) == gpu_count:
        return IDLE
    return UNMEASURED


def idle_clock(states: Iterable[str]) -> int:
    """Idle minutes since the last busy minute, in time order; unmeasured minutes pause the clock."""
    minutes = 0
    for state in states:
        if state == BUSY:
            minutes = 0
        elif state == IDLE:
            minutes += 1
    return minutes
