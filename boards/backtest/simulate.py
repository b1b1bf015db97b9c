"""The threshold backtest's replay (issue 19): what a scaling rule set would have held, minute by minute, over a
recorded history, and what that would have meant. Pure: plain dataclasses, ints and floats, no Django, no
database (STYLE.md 1); property-tested in tests/boards/backtest/test_simulate.py.

The model, minute by minute (``t`` = 0 … n − 1):

- The recorded inputs (:class:`Series`): ``held`` the GPUs actually held; ``in_use`` the GPUs running work (jobs'
  allocations and bookings); ``queued`` the GPUs asked for by jobs that were submitted and not yet started;
  ``load`` the recorded work as a sum over GPUs of the metric (GPU-percent: two GPUs at 50 % memory used are a
  load of 100). Demand is ``in_use + queued``.
- The rule's GPUs ``S`` start at the actual GPUs held in the first minute, clamped to ``[minimum, maximum]``.
- Each minute the rule reads its metric as the recorded load spread over the GPUs it held the minute before
  (``S_prev``): ``min(100, load / S_prev)``. A pool that cannot hold its demand (``demand > S_prev``: jobs wait,
  or are cut) reads 100 %: every GPU it has is taken. No GPUs and no demand read 0 %.
- Scale up when the metric is at or above ``up_pct``: by one group, or by as many groups as the demand needs when
  it exceeds ``S_prev`` (as a cluster autoscaler sizes for pending jobs), never past ``maximum``.
- Scale down when the metric has been below ``down_pct`` for ``buffer_minutes`` minutes in a row (this one
  included; 0 and 1 both mean this minute alone): by one group, never under ``minimum``; with a ``headroom`` set,
  only if at least ``headroom`` GPUs stay free above the GPUs in use afterwards (else the reclaim is skipped).
  The buffer counts afresh after each reclaim.
- A scale event (up or down) needs ``cooldown_minutes`` minutes since the last one. The rule reacts within the
  minute: the GPUs it decided are the ones it holds in minute ``t`` (a replay of minute data cannot see finer).
- A minute is *under-provisioned* when demand exceeds ``S``; a running job is *cut short* in a minute when the
  GPUs in use exceed ``S``. The longest cut is the longest run of consecutive such minutes: how long the
  longest-cut job would have waited for its GPUs to come back.
- A minute where the rule wanted to scale up but held ``maximum`` (or down at ``minimum``) hits a bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MEMORY, UTILIZATION = "memory", "utilization"
METRICS = (MEMORY, UTILIZATION)
FULL_PCT = 100.0


@dataclass(frozen=True)
class RuleSet:
    """One scaling rule: thresholds in percent of the metric, sizes in GPUs, times in minutes."""

    name: str
    metric: str = MEMORY
    up_pct: float = 80.0
    down_pct: float = 20.0
    group: int = 8
    minimum: int = 0
    maximum: int = 64
    cooldown_minutes: int = 30
    buffer_minutes: int = 0
    headroom: int | None = None

    def problems(self) -> list[tuple[str, str]]:
        """(field, rule) for each rule this set breaks; none: it can be replayed. The words are English keys the
        form and the command translate (boards/backtest/forms.py)."""
        out = []
        if self.metric not in METRICS:
            out.append(("metric", "metric"))
        if not 0 <= self.down_pct < self.up_pct <= FULL_PCT:
            out.append(("down_pct", "thresholds"))
        if self.group < 1:
            out.append(("group", "group"))
        if not 0 <= self.minimum <= self.maximum:
            out.append(("maximum", "bounds"))
        if self.cooldown_minutes < 0:
            out.append(("cooldown_minutes", "not_negative"))
        if self.buffer_minutes < 0:
            out.append(("buffer_minutes", "not_negative"))
        if self.headroom is not None and self.headroom < 0:
            out.append(("headroom", "not_negative"))
        return out


@dataclass(frozen=True)
class Series:
    """The recorded minutes of one scope (sequences of equal length; the load of the rule's metric)."""

    held: Sequence[int]
    in_use: Sequence[int]
    queued: Sequence[int]
    load: Sequence[float]

    def __post_init__(self):
        lengths = {len(self.held), len(self.in_use), len(self.queued), len(self.load)}
        if len(lengths) != 1:
            raise ValueError(f"the series differ in length: {sorted(lengths)}")

    def __len__(self) -> int:
        return len(self.held)


@dataclass
class Outcome:
    """What one rule set did over the series: its GPUs per minute and the figures a person compares."""

    rule: RuleSet
    gpus: list[int] = field(default_factory=list)
    scale_ups: int = 0
    scale_downs: int = 0
    under_minutes: int = 0
    cut_minutes: int = 0
    longest_cut_minutes: int = 0
    cuts: int = 0  # scale-downs that left fewer GPUs than were in use
    bound_minutes: int = 0
    gpu_minutes: int = 0

    @property
    def scale_events(self) -> int:
        return self.scale_ups + self.scale_downs


def metric_pct(load: float, demand: int, gpus: int) -> float:
    """The rule's reading: ``load`` spread over ``gpus`` (see the module docstring)."""
    if demand > gpus:
        return FULL_PCT
    if gpus <= 0:
        return 0.0
    return min(FULL_PCT, load / gpus)


def simulate(series: Series, rule: RuleSet) -> Outcome:
    """Replay ``series`` under ``rule`` (which must have no :meth:`RuleSet.problems`)."""
    if rule.problems():
        raise ValueError(f"rule set {rule.name!r} breaks {rule.problems()}")
    out = Outcome(rule)
    n = len(series)
    if n == 0:
        return out
    lo, hi, group = rule.minimum, rule.maximum, rule.group
    up, down, cooldown = rule.up_pct, rule.down_pct, rule.cooldown_minutes
    buffer, headroom = max(1, rule.buffer_minutes), rule.headroom
    held, in_use_s, queued_s, load_s = series.held, series.in_use, series.queued, series.load
    gpus = min(hi, max(lo, int(held[0])))
    since = cooldown  # no event yet: the first minute may scale
    below = 0
    run = 0
    trace = out.gpus
    ups = downs = under = cut = longest = cuts = bound = total = 0
    for t in range(n):
        in_use = in_use_s[t]
        demand = in_use + queued_s[t]
        # the reading, inlined from metric_pct (44,640 minutes × 4 rule sets a page)
        if demand > gpus:
            reading = FULL_PCT
        elif gpus <= 0:
            reading = 0.0
        else:
            reading = load_s[t] / gpus
        below = below + 1 if reading < down else 0
        if reading >= up:
            if gpus >= hi:
                bound += 1
            elif since >= cooldown:
                step = group
                if demand > gpus:
                    step = -(-(demand - gpus) // group) * group
                gpus = min(hi, gpus + step)
                ups += 1
                since = 0
        elif below >= buffer:
            target = gpus - group
            if gpus <= lo:
                bound += 1
            elif since >= cooldown and (headroom is None or max(lo, target) >= in_use + headroom):
                gpus = max(lo, target)
                downs += 1
                since = 0
                below = 0
                if gpus < in_use:
                    cuts += 1
        since += 1
        trace.append(gpus)
        total += gpus
        if demand > gpus:
            under += 1
        if in_use > gpus:
            cut += 1
            run += 1
            if run > longest:
                longest = run
        else:
            run = 0
    out.scale_ups, out.scale_downs, out.under_minutes, out.cut_minutes = ups, downs, under, cut
    out.longest_cut_minutes, out.cuts, out.bound_minutes, out.gpu_minutes = longest, cuts, bound, total
    return out


def actual_outcome(series: Series) -> Outcome:
    """The recorded history read as if it were a rule: the GPUs actually held, the minutes its demand exceeded
    them, and the scale events (each minute the count changed)."""
    out = Outcome(RuleSet(name="actual"), gpus=[int(h) for h in series.held])
    run = 0
    previous = out.gpus[0] if out.gpus else 0
    for t, gpus in enumerate(out.gpus):
        in_use = series.in_use[t]
        out.gpu_minutes += gpus
        if in_use + series.queued[t] > gpus:
            out.under_minutes += 1
        if gpus > previous:
            out.scale_ups += 1
        elif gpus < previous:
            out.scale_downs += 1
        previous = gpus
        if in_use > gpus:
            out.cut_minutes += 1
            run += 1
            out.longest_cut_minutes = max(out.longest_cut_minutes, run)
        else:
            run = 0
    return out
