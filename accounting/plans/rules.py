"""Plan against actual (issue 19): the pure rules, no ORM and no request.

- **Ratio** = actual ÷ estimate, exact (:class:`~fractions.Fraction`); no estimate, or an estimate of 0, has
  no ratio (``None``: "no estimate", never 0).
- **Deviation** with the setting ``pct`` (``CARDHOUR_PLAN_DEVIATION_PCT``, default 30): *over* when the ratio
  is beyond 1 + pct/100; *under* when the figure is final (a finished job, a past week) and the ratio is below
  1 − pct/100; otherwise *on plan*. A figure still growing (a running job, the current week) is never *under*:
  it may yet reach its estimate. Exactly ±pct is on plan ("beyond" the setting).
- **Planned card-hours per week**: a started job's estimate is spread evenly over its *planned window*, from
  its start for estimate ÷ GPUs hours (as long as the estimate says it would run); a job with no GPU count has
  its whole estimate at its start. Queued jobs have no start, so no week: they are planned but not placed.
- **Waiting for data**: a job held GPUs before its data was ready from its start until ``data_ready_at``
  (or its end, or now, when earlier); a running job flagged ``data_ready = false`` waits from its start until now.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from cluster.jobs.kpis import AllocationSpan

OVER, UNDER, ON_PLAN, NO_ESTIMATE = "over", "under", "on_plan", "no_estimate"
DEVIATIONS = (OVER, UNDER, ON_PLAN, NO_ESTIMATE)


def ratio(actual: Fraction | Decimal | int, estimate: Fraction | Decimal | int | None) -> Fraction | None:
    """actual ÷ estimate, exact; ``None`` without an estimate or with an estimate of 0."""
    if estimate is None or estimate <= 0:
        return None
    return Fraction(actual) / Fraction(estimate)


def deviation(value: Fraction | None, *, pct: int, final: bool) -> str:
    """:data:`OVER`, :data:`UNDER`, :data:`ON_PLAN` or :data:`NO_ESTIMATE` for a ratio (see the module)."""
    if value is None:
        return NO_ESTIMATE
    band = Fraction(pct, 100)
    if value > 1 + band:
        return OVER
    if final and value < 1 - band:
        return UNDER
    return ON_PLAN


@dataclass(frozen=True)
class PlannedWindow:
    """``card_hours`` planned evenly over ``[start, end)``; ``end == start``: all of it at ``start``."""

    start: datetime
    end: datetime
    card_hours: Fraction


def planned_window(*, start: datetime | None, estimate: Decimal | None, gpu_count: Decimal) -> PlannedWindow | None:
    """A started job's planned window (see the module); ``None`` when it has no start or no estimate."""
    if start is None or estimate is None or estimate <= 0:
        return None
    if gpu_count <= 0:
        return PlannedWindow(start, start, Fraction(estimate))
    hours = Fraction(estimate) / Fraction(gpu_count)
    micros = int(hours * 3600 * 1_000_000)
    return PlannedWindow(start, start + timedelta(microseconds=max(micros, 1)), Fraction(estimate))


def spread(windows: Iterable[PlannedWindow], buckets: Sequence[tuple[datetime, datetime]]) -> list[Fraction]:
    """Planned card-hours in each bucket ``[lo, hi)``: each window's card-hours by the share of its length that
    falls in the bucket (a point window wholly in the bucket holding its start). Exact."""
    out = [Fraction(0)] * len(buckets)
    for window in windows:
        length = window.end - window.start
        for n, (lo, hi) in enumerate(buckets):
            if not length:
                if lo <= window.start < hi:
                    out[n] += window.card_hours
                continue
            overlap = min(hi, window.end) - max(lo, window.start)
            if overlap > timedelta(0):
                out[n] += window.card_hours * Fraction(overlap // timedelta(microseconds=1),
                                                       length // timedelta(microseconds=1))
    return out


def week_days(first: date, following: date) -> list[tuple[date, date]]:
    """The weeks (Monday to Sunday) of the days ``[first, following)``, each clipped to them, as ``[from, to)``."""
    weeks = []
    day = first
    while day < following:
        monday_after = day + timedelta(days=7 - day.weekday())
        end = min(monday_after, following)
        weeks.append((day, end))
        day = end
    return weeks


def wait_window(*, start: datetime | None, end: datetime | None, running: bool, data_ready: bool | None,
                data_ready_at: datetime | None, now: datetime) -> tuple[datetime, datetime] | None:
    """``[start, until)`` while the job held GPUs before its data was ready (see the module); ``None`` if it
    never did."""
    if start is None:
        return None
    stop = end or (now if running else None)
    if data_ready_at is not None and data_ready_at > start:
        until = data_ready_at if stop is None else min(data_ready_at, stop)
    elif data_ready is False and running and end is None:
        until = now
    else:
        return None
    return (start, until) if until > start else None


def clip_spans(spans: Iterable[AllocationSpan], lo: datetime, hi: datetime, *, now: datetime) -> list[AllocationSpan]:
    """The allocation spans cut to ``[lo, hi)`` (a running one counts to ``now``); spans left empty dropped."""
    out = []
    for span in spans:
        start, end = max(span.start, lo), min(span.end or now, hi)
        if end > start:
            out.append(AllocationSpan(gpu_id=span.gpu_id, share=span.share, start=start, end=end))
    return out
