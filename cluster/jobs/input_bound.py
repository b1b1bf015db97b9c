"""The input-bound hint (issue 19): a job whose GPUs swing between busy and idle minute by minute is
likely waiting on data or checkpoints. A pure function of the job's per-minute utilization, no ORM.

The rule, with its thresholds (:class:`InputBoundRule`; the settings ``CARDHOUR_INPUT_BOUND_*`` give them):

- Each measured minute is **high** at a utilization of ``high_pct`` (60 %) or more, **low** at ``low_pct``
  (15 %) or less, else **mid** (a minute that was busy for part of its seconds: a transition). A minute
  without a measurement (``None``) is skipped: it neither ends nor starts anything.
- Mid minutes are left out of the sequence of levels too, so a swing that passes through a mid minute is
  one swing. In that sequence a **switch** is a high minute next to a low one, and a **dip** is a run of
  low minutes with high ones on both sides. A dip of at most ``max_dip_minutes`` (10) minutes is
  **short**: a wait on the minute scale; a longer one is a stall, a phase of the job, not starving input.
- The **evidence** is the share of the measured minutes spent in short dips (the low minutes between
  high ones).
- The job is flagged when it has at least ``min_minutes`` (30) measured minutes, at least ``min_dips`` (3)
  short dips and a share of at least ``min_share_pct`` (10 %). Steady high (no dips), steady low (idle,
  not input-bound: no high minutes) and one long dip are never flagged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import pairwise

HIGH, MID, LOW = "high", "mid", "low"


@dataclass(frozen=True)
class InputBoundRule:
    """The thresholds of the rule (module docstring)."""

    high_pct: float = 60.0
    low_pct: float = 15.0
    min_minutes: int = 30
    min_share_pct: float = 10.0
    min_dips: int = 3
    max_dip_minutes: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.low_pct < self.high_pct <= 100:
            raise ValueError("input-bound rule: need 0 ≤ low_pct < high_pct ≤ 100")
        if self.min_minutes < 1 or self.min_dips < 1 or self.max_dip_minutes < 1:
            raise ValueError("input-bound rule: min_minutes, min_dips and max_dip_minutes are at least 1")
        if not 0 <= self.min_share_pct <= 100:
            raise ValueError("input-bound rule: min_share_pct lies in [0, 100]")

    def level(self, util_pct: float) -> str:
        if util_pct >= self.high_pct:
            return HIGH
        if util_pct <= self.low_pct:
            return LOW
        return MID


@dataclass(frozen=True)
class InputBound:
    """The verdict on one job and its evidence."""

    flagged: bool
    measured_minutes: int
    high_minutes: int
    low_minutes: int
    dips: int  # short dips: runs of low minutes between high ones, each at most max_dip_minutes long
    dip_minutes: int  # the low minutes in those dips
    switches: int  # high ↔ low changes, mid minutes left out
    rule: InputBoundRule

    @property
    def share_pct(self) -> float:
        """The evidence: the measured minutes spent in short dips, in % (0 with no measured minute)."""
        return 100 * self.dip_minutes / self.measured_minutes if self.measured_minutes else 0.0


def input_bound(utilization: Iterable[float | None], rule: InputBoundRule | None = None) -> InputBound:
    """The verdict on a job from its per-minute utilization (%, in time order; ``None``: not measured)."""
    rule = rule or InputBoundRule()
    levels = [rule.level(value) for value in utilization if value is not None]
    swings = [level for level in levels if level != MID]
    switches = sum(a != b for a, b in pairwise(swings))
    dips = dip_minutes = 0
    run, after_high = 0, False  # the low run in progress, and whether a high minute came before it
    for level in swings:
        if level == LOW:
            run += 1
            continue
        if after_high and 0 < run <= rule.max_dip_minutes:
            dips += 1
            dip_minutes += run
        run, after_high = 0, True
    measured = len(levels)
    verdict = InputBound(
        flagged=False, measured_minutes=measured, high_minutes=swings.count(HIGH), low_minutes=swings.count(LOW),
        dips=dips, dip_minutes=dip_minutes, switches=switches, rule=rule,
    )
    flagged = measured >= rule.min_minutes and dips >= rule.min_dips and verdict.share_pct >= rule.min_share_pct
    return replace(verdict, flagged=flagged)
