"""The agent's clock: real time, or an accelerated clock that replays the recent past quickly.

The sampler asks its clock what time it is and sleeps until the next interval boundary. A real
agent uses :class:`RealClock` (``time.time()``). A simulated or replayed agent may use
:class:`AcceleratedClock`, which starts in the past and runs ``speed`` times faster than real time
until it has caught up with real time, then runs at real speed. It never runs ahead of real time,
because the server rejects records stamped more than a few minutes in the future.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

# Longest single wait: if the machine's clock is stepped (NTP, suspend), a sleeper re-reads the time
# at least this often instead of oversleeping a whole computed delay.
_MAX_WAIT_S = 1.0


class Clock(Protocol):
    """What the sampler needs from a clock."""

    start: float

    def now(self) -> float:
        """Epoch seconds (UTC) on this clock."""

    def sleep_until(self, target: float, stop: threading.Event) -> bool:
        """Wait until ``now() >= target``; False if ``stop`` was set first."""


class RealClock:
    """Wall-clock time. ``start`` is when the clock was made (the agent's start)."""

    def __init__(self, *, real: Callable[[], float] = time.time) -> None:
        self._real = real
        self.start = real()
        self.speed = 1.0

    def now(self) -> float:
        return self._real()

    def sleep_until(self, target: float, stop: threading.Event) -> bool:
        while not stop.is_set():
            remaining = target - self._real()
            if remaining <= 0:
                return True
            stop.wait(min(remaining, _MAX_WAIT_S))
        return False


class AcceleratedClock:
    """A clock that starts at ``start`` (epoch seconds, not after now) and runs ``speed``× faster than
    real time until it meets real time, then stays with it.

    Virtual time is ``min(start + (real - real0) * speed, real)``: both terms grow with real time, so
    the clock is monotonic, and the ``min`` is what makes it stop gaining once it has caught up.
    """

    def __init__(self, *, start: float, speed: float, real: Callable[[], float] = time.time) -> None:
        if speed < 1:
            raise ValueError("speed must be at least 1")
        self._real = real
        self._real0 = real()
        if start > self._real0:
            raise ValueError("an accelerated clock cannot start in the future")
        self.start = float(start)
        self.speed = float(speed)

    def now(self) -> float:
        real = self._real()
        return min(self.start + (real - self._real0) * self.speed, real)

    def real_time_of(self, target: float) -> float:
        """The real time at which this clock reads ``target``: the inverse of :meth:`now`, which is
        the max of the inverses of the two increasing terms of its ``min``."""
        return max(self._real0 + (target - self.start) / self.speed, target)

    def sleep_until(self, target: float, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self.now() >= target:
                return True
            stop.wait(min(max(self.real_time_of(target) - self._real(), 0.0), _MAX_WAIT_S))
        return False


class SkewedClock:
    """A clock ``offset_s`` seconds off another (ahead when positive): the clock of a node whose machine
    time was never synchronised. Only the fleet's ``--clock-offset`` makes one, for the fault scenarios
    (``make chaos``); a real agent reads its machine's clock, wrong or not."""

    def __init__(self, inner: Clock, *, offset_s: float) -> None:
        self._inner = inner
        self.offset_s = float(offset_s)
        self.start = inner.start + self.offset_s
        self.speed = getattr(inner, "speed", 1.0)

    def now(self) -> float:
        return self._inner.now() + self.offset_s

    def sleep_until(self, target: float, stop: threading.Event) -> bool:
        return self._inner.sleep_until(target - self.offset_s, stop)


def make_clock(*, start: float | None, speed: float, real: Callable[[], float] = time.time) -> Clock:
    """The real clock when there is nothing to accelerate, else an accelerated one. A ``start`` in
    the future is clamped to now (nothing may be stamped ahead of real time)."""
    now = real()
    if start is None or (start >= now and speed == 1):
        return RealClock(real=real)
    return AcceleratedClock(start=min(start, now), speed=speed, real=real)
