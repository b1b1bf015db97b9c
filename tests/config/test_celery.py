"""DESIGN.md §7: Celery tasks are acked late, survive a worker crash, and have time limits.

The worker tests start real ``celery -A config worker`` processes (prefork, one child) on a queue of
their own, with the probe tasks of tests/config/celery_probe.py, and watch them through Redis.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from config.celery import app
from tests.config.celery_probe import overrun_probe, ping_probe, probe_key, probe_redis, slow_probe

REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0
# What the crash test lets the broker wait before redelivering an unacknowledged task; the settings
# default (twice the task time limit plus a minute) is far too long for a test.
VISIBILITY_TIMEOUT_S = 2


def test_it_uses_the_settings_that_make_tasks_survive():
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_time_limit and conf.task_time_limit > 0
    assert 0 < conf.task_soft_time_limit < conf.task_time_limit
    # A task that names no limits of its own gets these; its sender writes them into each message.
    assert (ping_probe.time_limit, ping_probe.soft_time_limit) == (
        conf.task_time_limit,
        conf.task_soft_time_limit,
    )
    # Redis redelivers a task unacknowledged this long, even one still running: it must outlast the limit.
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit


@pytest.fixture
def probe(tmp_path):
    """A run id, a queue and a worker launcher for one test; workers, keys and the queue go afterwards."""
    run = Probe(tmp_path)
    try:
        yield run
    finally:
        run.close()


class Probe:
    def __init__(self, tmp_path: Path):
        self.run_id = uuid.uuid4().hex
        self.queue = f"celery-probe-{self.run_id}"
        self.tmp_path = tmp_path
        self.redis = probe_redis()
        self.workers: list[tuple[subprocess.Popen, Path]] = []

    def start_worker(self, **env: str) -> subprocess.Popen:
        """Start a worker in a session (process group) of its own, so that it can be killed whole."""
        log = self.tmp_path / f"worker-{len(self.workers) + 1}.log"
        command = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "-Q", self.queue, "--concurrency", "1", "--pool", "prefork",
            "-I", "tests.config.celery_probe", "--loglevel", "INFO",
            "--without-heartbeat", "--without-gossip", "--without-mingle",
            "-n", f"probe-{self.run_id}-{len(self.workers) + 1}@%h",
        ]  # fmt: skip
        with log.open("wb") as out:
            worker = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.workers.append((worker, log))
        return worker

    def send(self, task, *args):
        task.apply_async(args=(self.run_id, *args), queue=self.queue)

    def records(self, what: str) -> list[dict]:
        return [json.loads(item) for item in self.redis.lrange(probe_key(self.run_id, what), 0, -1)]

    def wait_for(self, what: str, count: int = 1) -> list[dict]:
        """Poll until ``count`` records of ``what`` are there; fail with the workers' logs after the deadline."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if len(found := self.records(what)) >= count:
                return found
            time.sleep(0.1)
        pytest.fail(f"no {count} {what!r} record(s) within {DEADLINE_S} s: {found}\n{self.logs()}")

    def kill(self, worker: subprocess.Popen) -> None:
        """SIGKILL the worker's whole process group: the main process and its pool child die at once."""
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=DEADLINE_S)

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}" for _, log in self.workers
        )

    def close(self) -> None:
        for worker, _ in self.workers:
            # The whole group, even if the main process is gone: a pool child may outlive it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=DEADLINE_S)
        self.forget_broker_state()
        self.redis.close()

    def forget_broker_state(self) -> None:
        """Delete the probe records and what kombu keeps for this run's queue and workers (the Redis may be shared)."""
        records = list(self.redis.scan_iter(match=probe_key(self.run_id, "*")))
        queue = self.queue.encode()
        self.redis.delete(
            *records, self.queue, f"_kombu.binding.{self.queue}", f"_kombu.binding_permanent.{self.queue}"
        )
        self.redis.zrem("_kombu.binding_deadlines", self.queue)
        pidbox = [m for m in self.redis.smembers("_kombu.binding.celery.pidbox") if self.run_id.encode() in m]
        if pidbox:
            self.redis.srem("_kombu.binding.celery.pidbox", *pidbox)
        # A message still unacknowledged when a test fails (kombu's ack emulation).
        for tag, payload in self.redis.hscan_iter("unacked"):
            if queue in payload:
                self.redis.hdel("unacked", tag)
                self.redis.zrem("unacked_index", tag)


@pytest.mark.celery_worker
def test_it_requeues_a_task_whose_worker_is_killed(probe):
    first = probe.start_worker(CELERY_VISIBILITY_TIMEOUT_S=str(VISIBILITY_TIMEOUT_S))
    probe.send(slow_probe, 60)
    (started,) = probe.wait_for("started")
    assert started["visibility_timeout"] == VISIBILITY_TIMEOUT_S, (
        "the worker ignored CELERY_VISIBILITY_TIMEOUT_S; config/settings.py must read it"
    )
    probe.kill(first)
    assert probe.records("finished") == []

    # The task was never acknowledged (acks late), so Redis still holds it; once it has been out
    # longer than the visibility timeout, the next worker to start puts it back on its queue.
    time.sleep(max(0.0, started["at"] + VISIBILITY_TIMEOUT_S + 0.5 - time.time()))
    probe.start_worker(CELERY_VISIBILITY_TIMEOUT_S=str(VISIBILITY_TIMEOUT_S))
    (finished,) = probe.wait_for("finished")
    first_start, second_start = probe.records("started")
    assert second_start["task_id"] == first_start["task_id"]
    assert second_start["redelivered"] is True
    assert second_start["pid"] != first_start["pid"]
    assert finished["pid"] == second_start["pid"]


@pytest.mark.celery_worker
def test_it_requeues_a_task_whose_pool_process_dies(probe):
    worker = probe.start_worker()
    probe.send(slow_probe, 60)
    (started,) = probe.wait_for("started")
    os.kill(started["pid"], signal.SIGKILL)  # the pool child running the task, as the OOM killer would

    # reject_on_worker_lost: the worker puts the task back at once, and a fresh child runs it again.
    (finished,) = probe.wait_for("finished")
    first_start, second_start = probe.records("started")
    assert second_start["task_id"] == first_start["task_id"]
    assert second_start["pid"] not in {first_start["pid"], worker.pid}
    assert finished["pid"] == second_start["pid"]
    assert worker.poll() is None


@pytest.mark.celery_worker
def test_it_stops_a_task_at_its_time_limit(probe):
    worker = probe.start_worker()
    probe.send(overrun_probe, 30)
    probe.send(ping_probe)

    (pinged,) = probe.wait_for("pinged")  # the worker goes on to the next task
    (started,) = probe.records("started")  # once: a task stopped at its limit is not run again
    (soft,) = probe.records("soft_limit")
    assert 0.8 < soft["at"] - started["at"] < 2  # the soft limit (1 s) is raised inside the task
    assert probe.records("finished") == []
    assert (
        pinged["pid"] != started["pid"]
    )  # the hard limit (2 s) killed the pool process; a fresh one took over
    assert worker.poll() is None


def test_every_task_has_a_soft_limit_within_its_hard_limit(settings):
    """Beat refuses to send a task whose soft limit exceeds its hard one (found in the demo: a task with its
    own short time_limit inherited the global soft limit)."""
    from config.celery import app

    app.loader.import_default_modules()
    ours = {name: task for name, task in app.tasks.items() if name.startswith(("accounting.", "cluster."))}
    assert ours
    for name, task in ours.items():
        hard = task.time_limit or settings.CELERY_TASK_TIME_LIMIT
        soft = task.soft_time_limit or settings.CELERY_TASK_SOFT_TIME_LIMIT
        assert soft <= hard, name
