"""GPU-minute states (DESIGN.md §4) with no ORM: every tick of a GPU's capacity in exactly one of
``down``, ``unallocated``, ``busy``, ``idle``, ``unmeasured``, per team and project.

Times are integer epoch seconds on whole minutes; usage is integer ticks (1/840,000 GPU-second), so
every sum is exact. Two steps:

1. :func:`settle_claims` turns the allocations on one physical GPU (bookings, jobs, MIG slices) into
   pieces that never exceed its capacity: in each stretch the claims are served in priority order
   (bookings before jobs, then earlier first). A job inside its own team's booking therefore adds
   nothing (the booking already holds the GPU: counted once), and a job on another team's booking is
   the booking's (the conflict is flagged by the booking watch).
2. :func:`split_states` splits each minute of a window: of a holder's ticks in the minute, the share
   covered by utilization readings (``covered`` seconds of 60) is busy or idle by the minute's mean
   utilization, the share recorded down without readings is ``down`` (no team), the rest is
   ``unmeasured`` (allocated) or ``unallocated``. Covered seconds are taken to fall outside the down
   stretch first (samples arrive while a node is up), so down-and-uncovered = min(down, 60 − covered).
   Each part is floored; the remainder stays unmeasured/unallocated, so the parts add up exactly.
   :func:`split_detail` also sums the same per-minute parts by hourly bucket and by holder (the job or
   booking a claim came from), so the hourly and holder figures add up to the daily ones exactly.
3. In the same pass, the refinements of busy and idle (:data:`REFINES`): of each part's busy ticks, those
   of minutes with an SM activity, of minutes under the shallow threshold, and of minutes under the
   model's idle power; of its idle ticks, those of minutes whose GPU holds memory. A minute's code carries
   these as flags (:func:`minute_code`); they split no state and never change the five.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

BUSY, IDLE, UNMEASURED, UNALLOCATED, DOWN = "busy", "idle", "unmeasured", "unallocated", "down"
STATES = (BUSY, IDLE, UNMEASURED, UNALLOCATED, DOWN)
ALLOCATED_STATES = (BUSY, IDLE, UNMEASURED)
MINUTE = 60
HOUR = 3600
# A minute code: the seconds covered by utilization readings (0–60), plus these flags.
COVERED_MASK = 63
BUSY_FLAG = 64  # the mean utilization is at or over the idle threshold
SM_FLAG = 128  # the minute has an SM activity (NVML GPM)
SHALLOW_FLAG = 256  # its SM activity is under the shallow threshold (set with SM_FLAG only)
MEMORY_FLAG = 512  # the GPU's memory used is over the memory-held threshold
LOW_POWER_FLAG = 1024  # its mean power is under the GPU model's idle-power floor
# Refinements of busy and idle ticks (DESIGN.md §4, "Beyond the duty cycle"): parts of a state's ticks,
# never a state of their own. Busy ticks with an SM activity, those of them under the threshold (shallow
# busy), busy ticks drawing idle power; idle ticks whose GPU holds memory (a forgotten notebook).
SM_MEASURED, SHALLOW, LOW_POWER, MEMORY_HELD = "sm_measured", "shallow", "low_power", "memory_held"
REFINES = {SM_MEASURED: BUSY, SHALLOW: BUSY, LOW_POWER: BUSY, MEMORY_HELD: IDLE}

Key = tuple[str, int | None, int | None]  # (state, team id, project id)
Holder = tuple[str, int]  # ("job", job id) or ("booking", booking id)
HourKey = tuple[int, str, int | None]  # (bucket start, epoch seconds; state; team id)
HolderKey = tuple[Holder, str, int | None, int | None]  # (holder, state, team id, project id)


@dataclass(frozen=True)
class Claim:
    """An allocation on one physical GPU over ``[start, end)``: ``share`` ticks per second."""

    start: int
    end: int
    share: int
    team_id: int | None
    project_id: int | None
    priority: tuple = ()
    holder: Holder | None = None


@dataclass(frozen=True)
class Piece:
    """A stretch over which one holder has a constant share of the GPU."""

    start: int
    end: int
    share: int
    team_id: int | None
    project_id: int | None
    holder: Holder | None = None


def settle_claims(claims: Iterable[Claim], capacity: int) -> list[Piece]:
    """Pieces of ``claims`` that never hold more than ``capacity`` at once (see the module docstring)."""
    claims = sorted((c for c in claims if c.end > c.start and c.share > 0), key=lambda c: c.priority)
    if not claims:
        return []
    bounds = sorted({c.start for c in claims} | {c.end for c in claims})
    pieces: list[Piece] = []
    for lo, hi in itertools.pairwise(bounds):
        left = capacity
        for claim in claims:
            if left == 0:
                break
            if claim.start <= lo and claim.end >= hi:
                share = min(claim.share, left)
                left -= share
                _append(pieces, Piece(lo, hi, share, claim.team_id, claim.project_id, claim.holder))
    return pieces


def _append(pieces: list[Piece], piece: Piece) -> None:
    """Add ``piece``, merged into an earlier piece of the same holder and share that ends where it starts."""
    for i in range(len(pieces) - 1, -1, -1):
        last = pieces[i]
        if last.end < piece.start:
            break
        if (last.end == piece.start and (last.share, last.team_id, last.project_id, last.holder)
                == (piece.share, piece.team_id, piece.project_id, piece.holder)):
            pieces[i] = Piece(last.start, piece.end, last.share, last.team_id, last.project_id, last.holder)
            return
    pieces.append(piece)


@dataclass(frozen=True)
class Refinement:
    """The thresholds of the refinements: SM activity under ``shallow_sm_pct`` is shallow busy, memory used
    over ``memory_held_mib`` makes idle "memory held", power under ``power_floor_w`` (None: the model has
    no floor) makes busy "idle power"."""

    shallow_sm_pct: float = 25.0
    memory_held_mib: int = 1024
    power_floor_w: float | None = None


def minute_code(util: float | None, covered: int, threshold: float, *, sm: float | None = None,
                memory_mib: int | None = None, power_w: float | None = None,
                refine: Refinement = Refinement()) -> int:
    """One minute's code (the reference :mod:`accounting.usage.inputs` computes in SQL): 0 without
    utilization readings, else the covered seconds and the flags."""
    if not covered:
        return 0
    code = min(int(covered), MINUTE) + (BUSY_FLAG if util is not None and util >= threshold else 0)
    if sm is not None:
        code += SM_FLAG + (SHALLOW_FLAG if sm < refine.shallow_sm_pct else 0)
    if memory_mib is not None and memory_mib > refine.memory_held_mib:
        code += MEMORY_FLAG
    if power_w is not None and refine.power_floor_w is not None and power_w < refine.power_floor_w:
        code += LOW_POWER_FLAG
    return code


def minute_codes(start: int, minutes: int, readings: Mapping[int, tuple], threshold: float,
                 refine: Refinement = Refinement()):
    """The per-minute code array from ``{minute start: (util mean, covered s[, sm activity, memory used MiB,
    power W])}`` (:func:`minute_code` of each)."""
    codes = np.zeros(minutes, dtype=np.int64)
    for moment, (util, covered, *extra) in readings.items():
        index = (moment - start) // MINUTE
        if 0 <= index < minutes and covered:
            sm, memory_mib, power_w = (*extra, None, None, None)[:3]
            codes[index] = minute_code(util, covered, threshold, sm=sm, memory_mib=memory_mib, power_w=power_w,
                                       refine=refine)
    return codes


def _overlap_seconds(starts: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.minimum(starts + MINUTE, hi) - np.maximum(starts, lo), 0, MINUTE)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


@dataclass
class Split:
    """One GPU's window split by state (``states``), and the same minute parts summed by hourly bucket
    (``hours``) and by holder (``holders``): each adds up exactly to ``states``. ``refined`` holds the
    refinements (:data:`REFINES`) keyed like ``states`` with the refinement in place of the state, and
    ``refined_holders`` the same per holder; each is part of its state's ticks, never more."""

    states: Counter[Key] = field(default_factory=Counter)
    hours: Counter[HourKey] = field(default_factory=Counter)
    holders: Counter[HolderKey] = field(default_factory=Counter)
    refined: Counter[Key] = field(default_factory=Counter)
    refined_holders: Counter[HolderKey] = field(default_factory=Counter)


def hour_starts(start: int, end: int) -> list[int]:
    """Starts of the hourly buckets of ``[start, end)`` (epoch seconds): ``start``, then every UTC hour
    strictly inside, so a window that begins inside an hour (a half-hour zone) opens with a short bucket."""
    if end <= start:
        return []
    return [start, *range((start // HOUR + 1) * HOUR, end, HOUR)]


def split_states(
    *, start: int, end: int, capacity: int, pieces: Sequence[Piece], codes: np.ndarray,
    down: Iterable[tuple[int, int]] = (),
) -> Counter[Key]:
    """Ticks per (state, team, project) of one GPU over ``[start, end)`` (whole minutes); ``codes`` from
    :func:`minute_codes` for the same window; ``down`` the ranges its node was recorded down."""
    return _split(start, end, capacity, pieces, codes, down, detail=False).states


def split_refined(
    *, start: int, end: int, capacity: int, pieces: Sequence[Piece], codes: np.ndarray,
    down: Iterable[tuple[int, int]] = (),
) -> Split:
    """:func:`split_states` with the refinements of busy and idle (``states`` and ``refined`` of the
    :class:`Split`; no hours, no holders)."""
    return _split(start, end, capacity, pieces, codes, down, detail=False)


def split_detail(
    *, start: int, end: int, capacity: int, pieces: Sequence[Piece], codes: np.ndarray,
    down: Iterable[tuple[int, int]] = (),
) -> Split:
    """:func:`split_states`, and in the same pass the ticks per (hourly bucket, state, team) and per
    (holder, state, team, project) of the allocated states (pieces without a holder are left out of
    ``holders``). Buckets are :func:`hour_starts` of the window."""
    return _split(start, end, capacity, pieces, codes, down, detail=True)


def _split(start, end, capacity, pieces, codes, down, *, detail: bool) -> Split:
    if start % MINUTE or end % MINUTE or end < start:
        raise ValueError("the window must be whole minutes")
    minutes = (end - start) // MINUTE
    out = Split()
    if minutes == 0:
        return out
    starts = start + MINUTE * np.arange(minutes, dtype=np.int64)
    covered = codes & COVERED_MASK
    busy = (codes & BUSY_FLAG) != 0
    flags = {kind: (codes & flag) != 0 for kind, flag in
             ((SM_MEASURED, SM_FLAG), (SHALLOW, SHALLOW_FLAG), (LOW_POWER, LOW_POWER_FLAG), (MEMORY_HELD, MEMORY_FLAG))}
    flags = {kind: mask for kind, mask in flags.items() if mask.any()}  # most GPUs have no GPM: no work
    down_s = np.zeros(minutes, dtype=np.int64)
    for lo, hi in merge_ranges(down):
        down_s += _overlap_seconds(starts, lo, hi)
    down_uncovered = np.minimum(down_s, MINUTE - covered)
    by_minute: dict[tuple[str, int | None], np.ndarray] = {}  # (state, team) → ticks per minute

    def add(state: str, team_id, project_id, holder, ticks: np.ndarray) -> None:
        total = int(ticks.sum())
        if not total:
            return
        out.states[(state, team_id, project_id)] += total
        if detail:
            if holder is not None and state != DOWN:
                out.holders[(holder, state, team_id, project_id)] += total
            if (state, team_id) in by_minute:
                by_minute[(state, team_id)] += ticks
            else:
                by_minute[(state, team_id)] = ticks.copy()

    def refine(kind: str, team_id, project_id, holder, ticks: np.ndarray) -> None:
        total = int(ticks.sum())
        if total:
            out.refined[(kind, team_id, project_id)] += total
            if detail and holder is not None:
                out.refined_holders[(holder, kind, team_id, project_id)] += total

    unallocated = np.full(minutes, capacity * MINUTE, dtype=np.int64)
    for piece in pieces:
        if piece.end <= start or piece.start >= end:
            continue
        ticks = piece.share * _overlap_seconds(starts, piece.start, piece.end)
        unallocated -= ticks
        measured = ticks * covered // MINUTE
        gone = ticks * down_uncovered // MINUTE
        busy_part = np.where(busy, measured, 0)
        team_id, project_id, holder = piece.team_id, piece.project_id, piece.holder
        add(BUSY, team_id, project_id, holder, busy_part)
        add(IDLE, team_id, project_id, holder, measured - busy_part)
        for kind, mask in flags.items():
            refine(kind, team_id, project_id, holder, np.where(mask, busy_part if REFINES[kind] == BUSY else measured - busy_part, 0))
        add(UNMEASURED, team_id, project_id, holder, ticks - measured - gone)
        add(DOWN, None, None, None, gone)
    if (unallocated < 0).any():
        raise ValueError("pieces hold more than the GPU's capacity; settle the claims first")
    gone = unallocated * down_uncovered // MINUTE
    add(DOWN, None, None, None, gone)
    add(UNALLOCATED, None, None, None, unallocated - gone)
    if by_minute:
        bounds = hour_starts(start, end)
        first = (np.asarray(bounds, dtype=np.int64) - start) // MINUTE  # each bucket's first minute
        keys = list(by_minute)
        per_hour = np.add.reduceat(np.stack([by_minute[key] for key in keys]), first, axis=1)
        for row, column in zip(*np.nonzero(per_hour), strict=True):
            out.hours[(bounds[column], *keys[row])] += int(per_hour[row, column])
    return out


def split_energy(*, start: int, end: int, capacity: int, pieces: Sequence[Piece], energy_mj: np.ndarray) -> Counter:
    """Millijoules per (team, project) of one GPU over ``[start, end)``: each minute's energy shared among
    its holders by their ticks in the minute (floored), the rest (unallocated, and the floors) to (None,
    None). The parts add up to the GPU's energy exactly."""
    minutes = (end - start) // MINUTE
    out: Counter[tuple[int | None, int | None]] = Counter()
    if minutes == 0:
        return out
    starts = start + MINUTE * np.arange(minutes, dtype=np.int64)
    left = energy_mj.astype(np.int64).copy()
    for piece in pieces:
        if piece.end <= start or piece.start >= end:
            continue
        ticks = piece.share * _overlap_seconds(starts, piece.start, piece.end)
        share = energy_mj * ticks // (capacity * MINUTE)
        left -= share
        out[(piece.team_id, piece.project_id)] += int(share.sum())
    out[(None, None)] += int(left.sum())
    return +out
