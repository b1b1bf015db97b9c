"""The agent's clocks: real, and accelerated until it meets real time."""

import threading
import time

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


def test_it_sleeps_faster_on_an_accelerated_clock():
    clock = AcceleratedClock(start=time.time() - 3600, speed=1000)
    target = clock.now() + 100  # 100 virtual seconds = 0.1 real seconds
    started = time.monotonic()
    assert clock.sleep_until(target, threading.Event())
    assert clock.now() >= target
    assert time.monotonic() - started < 2


def test_it_stops_sleeping_when_told():
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    started = time.monotonic()
    assert not RealClock().sleep_until(time.time() + 30, stop)
    assert time.monotonic() - started < 5


def test_it_uses_the_real_clock_when_there_is_nothing_to_accelerate():
    assert isinstance(make_clock(start=None, speed=1), RealClock)
    assert isinstance(make_clock(start=time.time() - 60, speed=5), AcceleratedClock)
    future = make_clock(start=time.time() + 3600, speed=5)  # clamped to now
    assert future.now() <= time.time()


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
