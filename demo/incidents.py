"""The demo history's incidents (demo/history.py): node outages and sample gaps, placed by the business
day alone (a fixed seed and the date), so a longer or later history keeps the same ones.

- **Outages**: every business day one node of :data:`OUTAGE_HOSTS` is unreachable for 2–5 hours
  (16–40 of a day's 1,536 card-hours: 1–2.6 % of the capacity is down); its status history says so,
  it has no samples then, and a job it cuts failed.
- **Sample gaps**: every business day a node of :data:`GAP_HOSTS` sends no samples for half an hour to
  two and a half hours while up and running its jobs (a lost spool): those minutes are unmeasured,
  not idle.

Neither falls in a maintenance window of its node or crosses the history's end. The node that holds
the always-full and the long-idle GPU (demo/workloads.py) and the node in maintenance have neither.
"""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta

from core.timeutils import business_day_bounds, business_day_of

OUTAGE_HOSTS = ("gpu-h200-01", "gpu-h200-02", "gpu-h200-04", "gpu-h100-02", "gpu-l40s-01")
OUTAGE_MINUTES = (120, 300)
GAP_HOSTS = ("gpu-h200-01", "gpu-h200-02", "gpu-h200-03", "gpu-h200-04", "gpu-h100-02")
GAP_MINUTES = (30, 150)
SEED = 6
MINUTE = timedelta(minutes=1)


def _days(start: datetime, end: datetime) -> list[date]:
    first, last = business_day_of(start), business_day_of(end)
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _clear(host: str, lo: datetime, hi: datetime, taken: list[tuple]) -> bool:
    return not any(h == host and a < hi and lo < b for h, a, b, *_rest in taken)


def incidents(*, start: datetime, end: datetime, maintenance: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """``(outages, gaps)`` in ``[start, end)``, each a list of (host, lo, hi); ``maintenance``: the nodes'
    maintenance windows as (host, lo, hi)."""
    outages: list[tuple] = []
    gaps: list[tuple] = []
    for day in _days(start, end):
        rng = random.Random(f"{SEED}/{day.isoformat()}")
        midnight = business_day_bounds(day)[0]
        host = rng.choice(OUTAGE_HOSTS)
        lo = midnight + rng.randrange(0, 19 * 60) * MINUTE
        hi = lo + rng.randrange(*OUTAGE_MINUTES) * MINUTE
        if start <= lo and hi <= end and _clear(host, lo, hi, maintenance + outages):
            outages.append((host, lo, hi))
        host = rng.choice(GAP_HOSTS)
        lo = midnight + rng.randrange(0, 21 * 60) * MINUTE
        hi = lo + rng.randrange(*GAP_MINUTES) * MINUTE
        if start <= lo and hi <= end and _clear(host, lo, hi, maintenance + outages):
            gaps.append((host, lo, hi))
    return outages, gaps
