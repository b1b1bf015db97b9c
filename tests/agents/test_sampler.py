"""The sampling loop: every boundary in order, resuming, the replay extension, failures, stopping."""

import threading
import time

from agents.backends.sim import SimBackend
from agents.clock import AcceleratedClock
from agents.records import empty_record
from agents.sampler import Sampler, resume_after
from agents.spool import Spool
from tests.agents.agent_helpers import wait_for


class CountingBackend:
    """Two GPUs; records which intervals it was asked for; optionally fails at some."""

    def __init__(self, fail_at=()):
        self.asked = []
        self.fail_at = set(fail_at)

    def sample(self, *, ts, interval_s):
        self.asked.append(ts)
        if ts in self.fail_at:
            raise RuntimeError("boom")
        return [empty_record(ts=ts, gpu_uuid=f"GPU-{i}", interval_s=interval_s) for i in range(2)]

    def inventory(self):
        return {"gpus": []}

    def close(self):
        pass


class RowsBackend(CountingBackend):
    """Irregular timestamps through records_between (the replay extension)."""

    def __init__(self, times):
        super().__init__()
        self.times = times

    def records_between(self, after, upto):
        return [empty_record(ts=t, gpu_uuid="GPU-r", interval_s=7) for t in self.times if after < t <= upto]


def run_until(sampler, condition, timeout=10):
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    try:
        wait_for(condition, timeout=timeout, what="the sampler")
    finally:
        sampler.stop.set()
        thread.join(5)
    assert not thread.is_alive()


def make_sampler(backend, spool, *, start, interval=10, speed=2000):
    clock = AcceleratedClock(start=start, speed=speed)
    return Sampler(backend=backend, spool=spool, clock=clock, interval_s=interval,
                   after_ts=resume_after(clock_start=clock.start, spool_last_ts=spool.last_ts()),
                   stop=threading.Event())


def test_it_produces_every_boundary_in_order_when_catching_up(tmp_path):
    spool = Spool(tmp_path / "s.sqlite")
    start = time.time() - 600
    sampler = make_sampler(CountingBackend(), spool, start=start)
    run_until(sampler, lambda: sampler.covered_to >= start + 590)
    rows, _last, _more = spool.read(after=0, limit=10_000)
    times = sorted({r["ts"] for r in rows})
    assert all(t % 10 == 0 for t in times)
    assert times == list(range(times[0], times[-1] + 10, 10))  # none skipped
    assert times[0] - 10 < start <= times[0]
    assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)
    assert all(r["interval_s"] == 10 for r in rows)
    spool.close()


def test_it_resumes_after_the_newest_spooled_record(tmp_path):
    spool = Spool(tmp_path / "s.sqlite")
    start = time.time() - 300
    first = make_sampler(CountingBackend(), spool, start=start)
    run_until(first, lambda: first.covered_to >= start + 100)
    last = spool.last_ts()
    second_backend = CountingBackend()
    second = make_sampler(second_backend, spool, start=start)  # the same configured start
    run_until(second, lambda: second.covered_to >= last + 50)
    assert second_backend.asked[0] == last + 10
    rows, _last, _more = spool.read(after=0, limit=10_000)
    per_gpu = [r["ts"] for r in rows if r["gpu_uuid"] == "GPU-0"]
    assert per_gpu == list(range(per_gpu[0], per_gpu[-1] + 10, 10))  # no repeat, no hole
    spool.close()


def test_resume_after_is_the_clock_start_or_the_spool_end():
    assert resume_after(clock_start=1000.0, spool_last_ts=None) == 999
    assert resume_after(clock_start=1000.5, spool_last_ts=None) == 1000
    assert resume_after(clock_start=1000.0, spool_last_ts=1500) == 1500
    assert resume_after(clock_start=2000.0, spool_last_ts=1500) == 1999


def test_it_carries_on_past_a_failing_interval(tmp_path):
    spool = Spool(tmp_path / "s.sqlite")
    start = time.time() - 200
    first_ts = (int(start) // 10 + 1) * 10
    backend = CountingBackend(fail_at={first_ts + 20})
    sampler = make_sampler(backend, spool, start=start)
    run_until(sampler, lambda: sampler.covered_to >= first_ts + 60)
    assert sampler.errors == 1
    stored = {r["ts"] for r in spool.read(after=0, limit=1000)[0]}
    assert first_ts + 20 not in stored and {first_ts + 10, first_ts + 30} <= stored
    spool.close()


def test_it_hands_out_irregular_records_as_the_clock_passes_them(tmp_path):
    spool = Spool(tmp_path / "s.sqlite")
    now = int(time.time())
    times = [now - 500, now - 493, now - 431, now - 430, now - 200, now - 33]
    sampler = make_sampler(RowsBackend(times), spool, start=times[0])
    run_until(sampler, lambda: spool.stats()["records"] == len(times))
    rows, _last, _more = spool.read(after=0, limit=100)
    assert [r["ts"] for r in rows] == times  # all of them, in order, not re-timed
    assert all(r["interval_s"] == 7 for r in rows)
    spool.close()


def test_it_stops_promptly_while_waiting_for_the_next_boundary(tmp_path):
    spool = Spool(tmp_path / "s.sqlite")
    sampler = make_sampler(SimBackend(hostname="h", gpus=1), spool, start=time.time(), interval=3600, speed=1)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    time.sleep(0.1)
    started = time.monotonic()
    sampler.stop.set()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2
    spool.close()
