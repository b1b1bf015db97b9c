"""The agent's clocks: real, and accelerated until it meets real time."""

import threading

import pytest

from agents.clock import AcceleratedClock, RealClock, SkewedClock, make_clock


class FakeTime:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def test_it_runs_speed_times_faster_until_it_meets_real_time():
    real = FakeTime(10_000.0)
    clock = AcceleratedClock(start=10_000.0 - 7200, speed=10, real=real)
    assert clock.now() == 2800.0 + 0
    real.now += 100
    assert clock.now() == 2800.0 + 1000
    real.now += 700  # 8000 virtual seconds after start: it would be ahead, so it is real time
    assert clock.now() == real.now
    real.now += 5
    assert clock.now() == real.now


def test_it_never_reads_later_than_real_time():
    real = FakeTime(50_000.0)
    clock = AcceleratedClock(start=49_000.0, speed=1000, real=real)
    for _step in range(50):
        real.now += 0.37
        assert clock.now() <= real.now


def test_it_maps_a_virtual_time_back_to_real_time():
    real = FakeTime(10_000.0)
    clock = AcceleratedClock(start=2800.0, speed=10, real=real)
    assert clock.real_time_of(3800.0) == 10_100.0  # still catching up
    assert clock.real_time_of(11_000.0) == 11_000.0  # after it has caught up


def test_it_refuses_a_start_in_the_future_or_a_slow_speed():
    real = FakeTime(10_000.0)
    with pytest.raises(ValueError):
        AcceleratedClock(start=10_060.0, speed=2, real=real)
    with pytest.raises(ValueError):
        AcceleratedClock(start=9_940.0, speed=0.5, real=real)


class FakeStop:
    """A stop event whose waits move a :class:`FakeTime` on instead of sleeping (``set_after`` waits: told to stop)."""

    def __init__(self, real: FakeTime, *, set_after: int | None = None):
        self.real, self.set_after, self.waited, self.waits = real, set_after, 0.0, 0

    def is_set(self) -> bool:
        return self.set_after is not None and self.waits >= self.set_after

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        self.waited += timeout
        self.real.now += timeout
        return self.is_set()


def test_it_sleeps_faster_on_an_accelerated_clock():
    real = FakeTime(50_000.0)
    clock = AcceleratedClock(start=50_000.0 - 4096, speed=1024, real=real)  # times exact in binary floats
    target = clock.now() + 128  # 128 virtual seconds = 0.125 real seconds
    stop = FakeStop(real)
    assert clock.sleep_until(target, stop)
    assert clock.now() >= target
    assert stop.waited == 0.125


def test_it_stops_sleeping_when_told():
    real = FakeTime(50_000.0)
    stop = FakeStop(real, set_after=1)
    assert not RealClock(real=real).sleep_until(50_030.0, stop)
    assert stop.waits == 1 and real.now < 50_030.0


def test_it_uses_the_real_clock_when_there_is_nothing_to_accelerate():
    real = FakeTime(50_000.0)
    assert isinstance(make_clock(start=None, speed=1, real=real), RealClock)
    assert isinstance(make_clock(start=50_000.0 - 60, speed=5, real=real), AcceleratedClock)
    future = make_clock(start=50_000.0 + 3600, speed=5, real=real)  # clamped to now
    assert future.now() <= real.now


def test_a_skewed_clock_reads_its_offset_off_the_clock_it_wraps():
    real = FakeTime(20_000.0)
    ahead = SkewedClock(RealClock(real=real), offset_s=3600)
    behind = SkewedClock(RealClock(real=real), offset_s=-3600)
    assert (ahead.now(), behind.now()) == (23_600.0, 16_400.0)
    assert (ahead.start, behind.start) == (23_600.0, 16_400.0)
    real.now += 7
    assert (ahead.now(), behind.now()) == (23_607.0, 16_407.0)


def test_a_skewed_clock_sleeps_until_its_own_reading():
    real = FakeTime(20_000.0)
    ahead = SkewedClock(RealClock(real=real), offset_s=3600)
    stop = threading.Event()
    assert ahead.sleep_until(23_600.0, stop) is True  # its own now: no wait
    stop.set()
    assert ahead.sleep_until(23_601.0, stop) is False  # one second on: it waits, and the stop ends the wait
