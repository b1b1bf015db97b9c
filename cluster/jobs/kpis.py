"""Job KPIs (DESIGN.md §4) as pure functions of a job's times, its allocations and its GPUs' minutes.

No ORM and no request here: the selectors give plain records, the view gives ``now`` and the idle
threshold, and every figure can be checked by hand on a made-up timeline.

Usage is exact. Times are taken in whole microseconds and usage in ticks (1/840,000 GPU-second,
:mod:`core.units`) held as :class:`~fractions.Fraction`: an allocation's share is whole ticks per
second, so a whole-second range gives whole ticks, and splitting a partly covered minute by its
coverage (seconds out of 60) stays exact too. Nothing becomes a float or a rounded ``Decimal`` until it
is shown (:func:`card_hours`, :func:`percent`).

The rules, per allocation (a GPU, or a share of one, held over ``[start, end)``; a running one until
``now``):

- **allocated** = share × seconds held; an *unplaced* allocation (no GPU known) is allocated and
  unmeasured, nothing else.
- For each minute of its GPU that the allocation overlaps by ``o`` seconds, the minute's rollup says how
  many of its 60 seconds had a utilization (``util_covered_s = u``) and their mean (``util_mean``). The
  overlap is split by that coverage: share × o × u/60 is **busy** when the mean is at or above the idle
  threshold (default 5 %), else **idle**; the rest is **unmeasured**. A minute with no rollup, or with
  no utilization (a MIG instance reports none), is unmeasured. Where the allocation holds only part of
  a minute, its part is assumed covered like the whole minute (rollups do not say which seconds were).
- busy + idle + unmeasured = allocated, exactly. **GPU efficiency** = busy / allocated (unmeasured time
  counts against it, as on the boards).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from itertools import pairwise

from core.units import TICKS_PER_CARD_HOUR

DEFAULT_IDLE_THRESHOLD_PCT = 5
MINUTE_S = 60
US_PER_S = 1_000_000
# JobState.interrupted(), spelled out so this module needs no Django (a test keeps them equal).
INTERRUPTED_STATES = frozenset({"failed", "preempted", "requeued"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MINUTE_US = MINUTE_S * US_PER_S


@dataclass(frozen=True)
class JobTimes:
    """A run's durations; ``None`` where the times it needs are not known (yet)."""

    queue_wait: timedelta | None  # start − submit
    run_time: timedelta | None  # end − start; for a running job, now − start so far
    turnaround: timedelta | None  # end − submit
    running: bool  # the run time counts to ``now``


def job_times(*, submit: datetime | None, start: datetime | None, end: datetime | None, running: bool,
              now: datetime) -> JobTimes:
    """Queue wait, run time and turnaround of one run. ``running``: the job's state says it still runs, so
    a missing end means "until now"; a missing end on a finished job stays unknown."""
    counts_to_now = running and start is not None and end is None
    return JobTimes(
        queue_wait=start - submit if start and submit else None,
        run_time=(end or now) - start if start and (end or counts_to_now) else None,
        turnaround=end - submit if end and submit else None,
        running=counts_to_now,
    )


@dataclass(frozen=True)
class AllocationSpan:
    """What the KPIs need of an allocation: which GPU (``None``: unplaced), its share (ticks per second,
    840,000 a whole GPU; unplaced: all the job's GPUs) and ``[start, end)`` (``end`` ``None``: running)."""

    gpu_id: int | None
    share: int
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class MinuteUsage:
    """One GPU's minute rollup: the minute's start, its mean utilization (%) and the seconds (0–60)
    covered by records with a utilization."""

    gpu_id: int
    minute: datetime
    util_mean: float | None
    util_covered_s: int


@dataclass(frozen=True)
class JobUsage:
    """A job's allocated ticks split into busy, idle and unmeasured (exact; they add up to allocated)."""

    allocated_ticks: Fraction
    busy_ticks: Fraction
    idle_ticks: Fraction
    unmeasured_ticks: Fraction

    @property
    def efficiency(self) -> Fraction | None:
        """busy / allocated, 0–1; ``None`` when nothing was allocated."""
        return self.busy_ticks / self.allocated_ticks if self.allocated_ticks else None

    @property
    def allocated_card_hours(self) -> Fraction:
        return self.allocated_ticks / TICKS_PER_CARD_HOUR

    @property
    def busy_card_hours(self) -> Fraction:
        return self.busy_ticks / TICKS_PER_CARD_HOUR

    @property
    def idle_card_hours(self) -> Fraction:
        return self.idle_ticks / TICKS_PER_CARD_HOUR

    @property
    def unmeasured_card_hours(self) -> Fraction:
        return self.unmeasured_ticks / TICKS_PER_CARD_HOUR


def job_usage(
    allocations: Iterable[AllocationSpan], minutes: Iterable[MinuteUsage], *, now: datetime,
    idle_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
) -> JobUsage:
    """Split the allocations' ticks into busy, idle and unmeasured by their GPUs' minute rollups."""
    spans_by_gpu: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    allocated_us = 0  # Σ share × µs held: ticks × 10⁶
    for allocation in allocations:
        start, end = _us(allocation.start), _us(allocation.end or now)
        if end <= start:
            continue
        allocated_us += allocation.share * (end - start)
        if allocation.gpu_id is not None:
            spans_by_gpu[allocation.gpu_id].append((allocation.share, start, end))
    busy = idle = 0  # Σ share × µs × covered seconds: ticks × 10⁶ × 60
    for row in minutes:
        spans = spans_by_gpu.get(row.gpu_id)
        covered_s = min(max(row.util_covered_s or 0, 0), MINUTE_S)
        if not spans or not covered_s or row.util_mean is None:
            continue
        minute_start = _us(row.minute)
        minute_end = minute_start + _MINUTE_US
        held = sum(share * max(0, min(end, minute_end) - max(start, minute_start)) for share, start, end in spans)
        if row.util_mean >= idle_threshold_pct:
            busy += held * covered_s
        else:
            idle += held * covered_s
    allocated = Fraction(allocated_us, US_PER_S)
    busy_ticks, idle_ticks = Fraction(busy, US_PER_S * MINUTE_S), Fraction(idle, US_PER_S * MINUTE_S)
    return JobUsage(
        allocated_ticks=allocated, busy_ticks=busy_ticks, idle_ticks=idle_ticks,
        unmeasured_ticks=allocated - busy_ticks - idle_ticks,
    )


@dataclass(frozen=True)
class RunRecord:
    """One run of a job (the rows of one source and job id): when it ran and how it ended."""

    start: datetime | None
    end: datetime | None
    state: str


@dataclass(frozen=True)
class Interruptions:
    """Runs that ended failed, preempted or requeued and were followed by another run, and how long each
    took to resume (next start − that end; ``None`` where the interrupted run has no end time)."""

    count: int = 0
    recoveries: tuple[timedelta | None, ...] = ()
    awaiting_recovery: bool = False  # the latest run was interrupted and nothing has resumed it yet

    @property
    def total_recovery(self) -> timedelta | None:
        known = [recovery for recovery in self.recoveries if recovery is not None]
        return sum(known, timedelta()) if known else None


def interruptions(runs: Iterable[RunRecord]) -> Interruptions:
    """Interruptions over the runs of one (source, job id), taken in start order. A run that never
    started (a requeued job still waiting) resumes nothing; it only shows the job awaits recovery."""
    started = sorted((run for run in runs if run.start is not None), key=lambda run: run.start)
    recoveries = [
        (following.start - run.end) if run.end is not None else None
        for run, following in pairwise(started)
        if run.state in INTERRUPTED_STATES
    ]
    return Interruptions(
        count=len(recoveries), recoveries=tuple(recoveries),
        awaiting_recovery=bool(started) and started[-1].state in INTERRUPTED_STATES,
    )


@dataclass(frozen=True)
class JobKpis:
    """Everything the job page shows as KPIs (DESIGN.md §4)."""

    times: JobTimes
    usage: JobUsage
    interruptions: Interruptions = field(default_factory=Interruptions)


def job_kpis(
    *, submit: datetime | None, start: datetime | None, end: datetime | None, running: bool,
    allocations: Iterable[AllocationSpan], minutes: Iterable[MinuteUsage], runs: Sequence[RunRecord] = (),
    now: datetime, idle_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT,
) -> JobKpis:
    """Queue wait, run time, turnaround, the allocation's busy/idle/unmeasured split and efficiency, and
    the interruptions across ``runs`` (every run of the job's source and id, this one included)."""
    return JobKpis(
        times=job_times(submit=submit, start=start, end=end, running=running, now=now),
        usage=job_usage(allocations, minutes, now=now, idle_threshold_pct=idle_threshold_pct),
        interruptions=interruptions(runs),
    )


def card_hours(value: Fraction, places: int = 2) -> Decimal:
    """An exact card-hour figure for display, rounded once, half-up."""
    return _rounded(value, places)


def percent(ratio: Fraction | None, places: int = 1) -> Decimal | None:
    """A 0–1 ratio as a percentage for display, rounded once, half-up."""
    return None if ratio is None else _rounded(ratio * 100, places)


def percent_of(part: int, whole: int, places: int = 1) -> Decimal | None:
    """``percent(Fraction(part, whole))`` for integers, in integer arithmetic (the board's ranking shows
    thousands of shares a request); None when ``whole`` is 0."""
    if not whole:
        return None
    scaled, divisor = abs(part) * 100 * 10**places, abs(whole)
    units = (2 * scaled + divisor) // (2 * divisor)
    return Decimal(-units if (part < 0) != (whole < 0) and units else units).scaleb(-places)


def _rounded(value: Fraction, places: int) -> Decimal:
    quantum = Decimal(1).scaleb(-places)
    scaled = Fraction(value) * 10**places
    # Half-up on the exact fraction (away from zero), so no intermediate Decimal division rounds first.
    whole, remainder = divmod(abs(scaled.numerator), scaled.denominator)
    if 2 * remainder >= scaled.denominator:
        whole += 1
    sign = -1 if scaled < 0 else 1
    return (Decimal(sign * whole) * quantum).quantize(quantum, rounding=ROUND_HALF_UP)


def _us(moment: datetime) -> int:
    """Whole microseconds since the Unix epoch of an aware datetime (exact, unlike ``timestamp()``)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)
