"""The daily board's arithmetic with no ORM (issue 14): headline figures from ticks per state, their
change against the previous days, the hourly timeline's buckets, the heatmap's cell kinds, long-idle
runs of days and the utilization bands. Usage stays in integer ticks until the figure is shown
(DESIGN.md §4); ratios are ``Fraction``s until they are rounded for display."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction

import numpy as np

from accounting.usage.figures import apportion
from accounting.usage.states import ALLOCATED_STATES, BUSY, DOWN, IDLE, STATES, UNALLOCATED, UNMEASURED

# ---- headline tiles ------------------------------------------------------------------------------------------

# Allocated ticks of other teams than the one a board is filtered to: part of capacity, in none of its states.
OTHER_TEAMS = "other_teams"
def allocation_rate(ticks: Mapping[str, int]) -> Fraction | None:
    """Allocated ÷ (capacity − down) (DESIGN.md §4), where capacity is every tick given (other teams' too,
under a team filter); None when every tick was down or there is none."""
    allocated = sum(ticks.get(state, 0) for state in ALLOCATED_STATES)
    available = sum(ticks.values()) - ticks.get(DOWN, 0)
    return Fraction(allocated, available) if available > 0 else None


def efficiency(ticks: Mapping[str, int]) -> Fraction | None:
    """Busy ÷ allocated; None when nothing was allocated."""
    allocated = sum(ticks.get(state, 0) for state in ALLOCATED_STATES)
    return Fraction(ticks.get(BUSY, 0), allocated) if allocated > 0 else None


def card_hours_by_state(ticks: Mapping[str, int]) -> dict[str, Decimal]:
    """Each state's card-hours (4 places, :data:`OTHER_TEAMS` too when present), adding up exactly to the
    rounded capacity."""
    parts = {state: ticks.get(state, 0) for state in STATES}
    if ticks.get(OTHER_TEAMS):
        parts[OTHER_TEAMS] = ticks[OTHER_TEAMS]
    return apportion(parts)


@dataclass(frozen=True)
class Change:
    """A figure against the mean of the days before it: ``mean`` None when no earlier day has the figure."""

    mean: Decimal | None
    delta: Decimal | None

    @property
    def direction(self) -> str:
        if self.delta is None or self.delta == 0:
            return "flat"
        return "up" if self.delta > 0 else "down"


def change_against(value: Decimal | None, earlier: Iterable[Decimal | None]) -> Change:
    """``value`` against the mean of the ``earlier`` values that exist (the days with data), both to the
    places of ``value``; no change when either side is missing."""
    values = [v for v in earlier if v is not None]
    if value is None or not values:
        return Change(mean=None, delta=None)
    exponent = value.as_tuple().exponent if isinstance(value.as_tuple().exponent, int) else -2
    mean = (sum(values, Decimal(0)) / len(values)).quantize(Decimal(1).scaleb(exponent))
    return Change(mean=mean, delta=value - mean)


# ---- timeline ------------------------------------------------------------------------------------------------

SERIES = (BUSY, IDLE, UNMEASURED, OTHER_TEAMS, UNALLOCATED, DOWN)  # the timeline's, in stacking order


# ---- heatmap cells -------------------------------------------------------------------------------------------

MEASURED = "measured"
CELL_KINDS = (MEASURED, UNMEASURED, OTHER_TEAMS, UNALLOCATED, DOWN)  # also the order that breaks a tie


def cell_kind(ticks: Mapping[str, int], *, has_util: bool) -> str:
    """What a GPU-hour cell shows: its mean utilization (``measured``) when busy and idle ticks are the
    largest part of the hour and a utilization was recorded; else the largest of unmeasured, another
    team's allocation (under a team filter), unallocated and down, ties in :data:`CELL_KINDS` order
    (unmeasured is never painted as a utilization of 0 %). The reference for :func:`cell_kinds`."""
    measured = ticks.get(BUSY, 0) + ticks.get(IDLE, 0)
    parts = {
        MEASURED: measured if has_util and measured > 0 else -1,
        UNMEASURED: ticks.get(UNMEASURED, 0) + (0 if has_util else measured),
        OTHER_TEAMS: ticks.get(OTHER_TEAMS, 0),
        UNALLOCATED: ticks.get(UNALLOCATED, 0),
        DOWN: ticks.get(DOWN, 0),
    }
    best = max(parts.values())
    return next(kind for kind in CELL_KINDS if parts[kind] == best)


def cell_kinds(busy, idle, unmeasured, other, unallocated, down, has_util) -> np.ndarray:
    """:func:`cell_kind` for whole columns at once (numpy arrays of ticks and of ``has_util``): the index
    of each cell's kind in :data:`CELL_KINDS` (``argmax`` takes the first of equal parts, the tie order)."""
    measured = np.asarray(busy, dtype=np.int64) + np.asarray(idle, dtype=np.int64)
    has_util = np.asarray(has_util, dtype=bool)
    parts = np.stack([
        np.where(has_util & (measured > 0), measured, -1),
        np.asarray(unmeasured, dtype=np.int64) + np.where(has_util, 0, measured),
        np.asarray(other, dtype=np.int64), np.asarray(unallocated, dtype=np.int64), np.asarray(down, dtype=np.int64),
    ])
    return parts.argmax(axis=0)


# ---- heatmap rows at scale (issue 18) ---------------------------------------------------------------------------

GPU_ROWS, NODE_ROWS, POOL_ROWS = "gpu", "node", "pool"  # what a heatmap row is


def heatmap_level(*, gpus: int, nodes: int, pools: int, max_gpu_rows: int, max_node_rows: int) -> str:
    """What the heatmap's rows are for a board of ``gpus`` GPUs on ``nodes`` nodes in ``pools`` pools: one
    per GPU up to ``max_gpu_rows`` GPUs; above, one per node up to ``max_node_rows`` nodes; above that, one
    per pool, unless the GPUs are all in one pool (a single row says nothing): then one per node still. A
    board of one node (a node's drill-down) has a row per GPU whatever their number."""
    if gpus <= max_gpu_rows or nodes <= 1:
        return GPU_ROWS
    if nodes <= max_node_rows or pools <= 1:
        return NODE_ROWS
    return POOL_ROWS


# ---- long idle -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DayOfGpu:
    """One GPU's business day, in ticks: busy, idle + unallocated (measured, not working) and the rest."""

    busy: int
    resting: int
    other: int


def rests(day: DayOfGpu) -> bool:
    """A day counts towards "long idle" when the GPU did no work (no busy tick) and was measured idle or
    sat unallocated for at least half of it: a day mostly down or unmeasured says nothing."""
    total = day.busy + day.resting + day.other
    return day.busy == 0 and total > 0 and 2 * day.resting >= total


def idle_since(days: Mapping[date, DayOfGpu], *, last: date) -> date | None:
    """The first day of the unbroken run of resting days ending on ``last`` (a day with no row breaks it),
    or None when ``last`` itself is not a resting day."""
    since = None
    day = last
    while day in days and rests(days[day]):
        since = day
        day -= timedelta(days=1)
    return since


def run_length(since: date, last: date) -> int:
    return (last - since).days + 1


# ---- utilization bands ---------------------------------------------------------------------------------------

BANDS = ((0, 5), (5, 25), (25, 50), (50, 75), (75, 100))


def band_label(band: tuple[int, int]) -> str:
    return f"{band[0]}–{band[1]} %"


def band_of(util_pct: float) -> int:
    """The index of the band holding ``util_pct`` (a band includes its lower edge; 100 % is in the last)."""
    for position, (_lo, hi) in enumerate(BANDS):
        if util_pct < hi:
            return position
    return len(BANDS) - 1


def band_shares(ticks: Sequence[int]) -> list[Fraction | None]:
    total = sum(ticks)
    return [Fraction(part, total) if total else None for part in ticks]


def total_bands(per_team: Mapping[int | None, Sequence[int]]) -> list[int]:
    totals = [0] * len(BANDS)
    for ticks in per_team.values():
        for position, part in enumerate(ticks):
            totals[position] += part
    return totals
