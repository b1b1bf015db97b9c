"""What each scenario compares, as pure functions (tested in tests/chaos/test_harness.py): what the agents
produced against what the database holds, two sets of rows, the pages' answers during a fault, and the
one line a scenario prints.

No Django and no I/O here: the scenarios read the numbers (chaos/observe.py) and pass them in.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
NAME_WIDTH = 16
# What a page or an API answer must not show a reader, whatever its status: a Python traceback or the
# database driver's own words.
LEAKS = ("Traceback (most recent call last)", "psycopg", "OperationalError", 'File "/')


@dataclass(frozen=True)
class NodeCount:
    """One node at one moment: the agent's side (``produced``: its spool's last seq; seqs start at 1 and
    every record is one GPU's sample) and the collector's (cursor, rows stored, rows rejected, records
    the spool dropped), the database's numbers read in one statement."""

    node: str
    produced: int
    cursor: int
    stored: int
    distinct: int
    rejected: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class GpuSpan:
    """One GPU's stored samples: how many, and the first and last interval ends (epoch seconds)."""

    gpu: str
    count: int
    first_ts: float
    last_ts: float
    interval_s: int

    @property
    def expected(self) -> int:
        """Samples a gapless run from first to last holds."""
        return round((self.last_ts - self.first_ts) / self.interval_s) + 1


def count_problems(counts: Iterable[NodeCount], *, caught_up: bool = True) -> list[str]:
    """Why the stored samples are not exactly the produced ones (empty when they are).

    Below its cursor a node must hold one row per record, less the rejected ones: a missing one is lost,
    one more is doubled. ``caught_up``: the cursor must also have reached what the agent had produced."""
    problems = []
    for c in counts:
        if c.stored != c.distinct:
            problems.append(f"{c.node}: {c.stored - c.distinct} rows doubled by (gpu, ts)")
        accounted = c.stored + c.rejected
        below_cursor = c.cursor - c.dropped
        if accounted < below_cursor:
            problems.append(f"{c.node}: {below_cursor - accounted} of {below_cursor} records below the cursor lost")
        elif accounted > below_cursor:
            problems.append(f"{c.node}: {accounted - below_cursor} rows more than records below the cursor")
        if c.dropped:
            problems.append(f"{c.node}: the agent's spool dropped {c.dropped} records")
        if c.cursor > c.produced:
            problems.append(f"{c.node}: cursor {c.cursor} beyond the agent's last seq {c.produced}")
        elif caught_up and c.cursor < c.produced:
            problems.append(f"{c.node}: {c.produced - c.cursor} records not collected yet")
    return problems


def gap_problems(spans: Iterable[GpuSpan]) -> list[str]:
    """GPUs whose stored samples have holes between their first and last (the sim samples every interval)."""
    return [f"{s.gpu}: {s.expected - s.count} samples missing between its first and last" if s.count < s.expected
            else f"{s.gpu}: {s.count - s.expected} samples more than intervals"
            for s in spans if s.count != s.expected]


def count_totals(counts: Sequence[NodeCount]) -> str:
    """The evidence of a count check: produced, stored, rejected, doubles, over every node."""
    produced = sum(c.produced for c in counts)
    stored = sum(c.stored for c in counts)
    doubled = sum(c.stored - c.distinct for c in counts)
    rejected = sum(c.rejected for c in counts)
    return f"produced={produced} stored={stored} rejected={rejected} doubled={doubled}"


def row_differences(expected: Iterable[tuple], actual: Iterable[tuple]) -> tuple[int, int]:
    """(rows missing, rows extra) of ``actual`` against ``expected``, both taken as multisets."""
    want, got = Counter(expected), Counter(actual)
    return sum((want - got).values()), sum((got - want).values())


@dataclass(frozen=True)
class Probe:
    """One request a prober made during a fault: what it asked and what came back."""

    url: str
    status: int  # 0: no answer (refused, timed out)
    content_type: str = ""
    body: str = ""

    @property
    def leaks(self) -> bool:
        return any(leak in self.body for leak in LEAKS)


def probe_problems(probes: Sequence[Probe], *, status: int, html: bool = False) -> list[str]:
    """Probes that did not answer ``status`` (with a readable HTML page when ``html``), or showed a
    traceback. No probe at all is a problem too: a scenario that looked at nothing proves nothing."""
    if not probes:
        return ["no page was probed"]
    problems = []
    for probe in probes:
        if probe.status != status:
            answer = probe.status or ("nothing" + (f" ({probe.body})" if probe.body else ""))
            problems.append(f"{probe.url} answered {answer}, not {status}")
        elif html and ("text/html" not in probe.content_type or "<html" not in probe.body.lower()):
            problems.append(f"{probe.url} answered {status} without an HTML page")
        if probe.leaks:
            problems.append(f"{probe.url} showed a traceback or the driver's error")
    return sorted(set(problems))


def probe_summary(probes: Sequence[Probe]) -> str:
    """``pages=200×12,503×2``: the statuses the probes got, most common first."""
    counts = Counter(p.status for p in probes)
    return "answers=" + (",".join(f"{s or 'none'}×{n}" for s, n in counts.most_common()) or "none")


@dataclass(frozen=True)
class Verdict:
    name: str
    outcome: str  # PASS, FAIL or SKIP
    evidence: str

    def line(self) -> str:
        return f"{self.outcome:<4}  {self.name:<{NAME_WIDTH}}  {self.evidence}"


def verdict(name: str, problems: Sequence[str], evidence: str) -> Verdict:
    """PASS with the evidence, or FAIL with the problems first (at most five, then how many more)."""
    if not problems:
        return Verdict(name, PASS, evidence)
    shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return Verdict(name, FAIL, f"{shown} | {evidence}")


def exit_code(verdicts: Iterable[Verdict]) -> int:
    """1 when any scenario failed (or none ran), else 0; a skipped one neither passes nor fails."""
    outcomes = [v.outcome for v in verdicts]
    return 1 if not outcomes or FAIL in outcomes else 0


_TASK_LINE = re.compile(r"Task (?P<name>[\w.]+)\[(?P<id>[\w-]+)\] (?P<what>received|succeeded in [\d.]+s: (?P<result>.*))$")
# Results that say a run did nothing: the task's lock was held, or the period was already done.
_NOTHING = ("None", "0", "{}", "[]", "False", "")


def task_runs(log_lines: Iterable[str]) -> dict[str, tuple[int, int]]:
    """From a Celery worker's log: task name → (runs received, runs that did something). A run did
    something unless its logged result is empty (None, 0, {}), a dict of counts that are all 0, or says it
    skipped."""
    runs: dict[str, list[int]] = {}
    for line in log_lines:
        match = _TASK_LINE.search(line.rstrip())
        if not match:
            continue
        counts = runs.setdefault(match["name"], [0, 0])
        if match["what"] == "received":
            counts[0] += 1
        elif _did_work(match["result"].strip()):
            counts[1] += 1
    return {name: (received, effects) for name, (received, effects) in runs.items()}


def _did_work(result: str) -> bool:
    if result in _NOTHING or "skip" in result.lower():
        return False
    numbers = re.findall(r":\s*(-?\d+(?:\.\d+)?)", result)  # a dict of counts: all zero is nothing done
    return not numbers or any(float(n) for n in numbers)
