"""The sampling loop: asks the backend for records as the agent's clock passes interval boundaries
and appends them to the spool.

Interval backends (the ``Backend`` protocol of agents/records.py: nvml, sim). At each boundary
``ts`` (a multiple of ``interval_s`` on the agent's clock) the loop calls
``backend.sample(ts=ts, interval_s=interval_s)``. When it is behind (an accelerated clock catching
up, a slow backend), it produces every boundary in order, none skipped, and stores a run of them in
one spool transaction. Only backends that can compute a past interval (sim, replay) may run on an
accelerated clock; nvml runs on the real clock, where the loop is behind by at most one boundary.

Extension for sources with their own timestamps (replay). A backend that has
``records_between(after: float, upto: float) -> list[Record]`` (records with ``after < ts <= upto``,
in ts order, a pure function of its arguments) is driven by that instead: each time the clock
passes a boundary, the loop asks for everything up to the clock's current second and stores it as
is. Records keep their own ``ts`` and ``interval_s``; the boundaries only pace the loop.

Where it starts. The loop is given ``after_ts``, the last time already covered, from
:func:`resume_after`: the clock's start, or the newest spooled record if that is later, so a
restarted agent neither repeats nor (on the real clock) backfills what it slept through.

The loop stops when ``stop`` is set (the agent's SIGTERM/SIGINT handler sets it); a batch in hand
is stored first.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from agents.clock import Clock
from agents.records import Backend, Record
from agents.spool import Spool

log = logging.getLogger(__name__)

# A catch-up batch ends after this many boundaries or records, whichever comes first, so one
# transaction stays small and the clock is re-read now and then.
BATCH_TICKS = 360
BATCH_RECORDS = 20_000
_STORE_RETRY_S = 5.0


def resume_after(*, clock_start: float, spool_last_ts: int | None) -> int:
    """The last second already covered: the sampler's first records come after it."""
    fresh = math.ceil(clock_start) - 1
    return fresh if spool_last_ts is None else max(fresh, spool_last_ts)


class Sampler:
    """Runs in its own thread (:meth:`run`). ``on_store`` sees each stored batch (the agent keeps
    the latest record per GPU for /metrics)."""

    def __init__(
        self,
        *,
        backend: Backend,
        spool: Spool,
        clock: Clock,
        interval_s: int,
        after_ts: int,
        stop: threading.Event,
        on_store: Callable[[list[Record]], None] | None = None,
    ) -> None:
        self.backend, self.spool, self.clock = backend, spool, clock
        self.interval_s, self.stop = interval_s, stop
        self.on_store = on_store
        self.covered_to = after_ts  # newest second whose records are stored
        self.errors = 0
        self._between = getattr(backend, "records_between", None)

    def _next_boundary(self, after: float) -> int:
        return (math.floor(after) // self.interval_s + 1) * self.interval_s

    def run(self) -> None:
        while not self.stop.is_set():
            boundary = self._next_boundary(self.covered_to)
            now = self.clock.now()
            if boundary > now:
                self.clock.sleep_until(boundary, self.stop)
                continue
            if self._between is not None:
                records, covered = self._collect_between(now)
            else:
                records, covered = self._collect_intervals(now)
            if not self._store(records, now):
                return
            self.covered_to = covered

    def _collect_intervals(self, now: float) -> tuple[list[Record], int]:
        records: list[Record] = []
        ts = self._next_boundary(self.covered_to)
        covered = self.covered_to
        for _tick in range(BATCH_TICKS):
            if ts > now or len(records) >= BATCH_RECORDS:
                break
            try:
                records.extend(self.backend.sample(ts=ts, interval_s=self.interval_s))
            except Exception:
                # The protocol says sample() does not raise; if one does, this interval is lost
                # (a backend may not be able to sample the past) and the loop carries on.
                self.errors += 1
                log.exception("backend failed to sample the interval ending %s", ts)
            covered = ts
            ts += self.interval_s
        return records, covered

    def _collect_between(self, now: float) -> tuple[list[Record], int]:
        upto = min(math.floor(now), self.covered_to + BATCH_TICKS * self.interval_s)
        try:
            return self._between(self.covered_to, upto), upto
        except Exception:
            self.errors += 1
            log.exception("backend failed to give records in (%s, %s]", self.covered_to, upto)
            return [], upto

    def _store(self, records: list[Record], now: float) -> bool:
        """Append ``records``; on a spool error retry until it works or the agent stops (a full
        disk frees up; records are kept in memory meanwhile). False if stopped first."""
        if not records:
            return True
        while True:
            try:
                self.spool.append(records, now=now)
                break
            except Exception:
                self.errors += 1
                log.exception("could not store %d records in the spool; retrying", len(records))
                if self.stop.wait(_STORE_RETRY_S):
                    return False
        if self.on_store is not None:
            self.on_store(records)
        return True
