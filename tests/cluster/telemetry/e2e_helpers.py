"""Real processes for the collection end-to-end tests (tests/cluster/telemetry/test_collection_e2e.py): a node
agent (``python -m agents run``) and a Celery worker, each in a process group of its own so that a
test's ``finally`` can kill it whole, with bounded waits only."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agents.config import hash_token
from config.celery import app as celery_app
from tests.agents.agent_helpers import free_port, get_json, wait_for

ROOT = Path(__file__).resolve().parents[3]
INTERVAL_S = 10
STOP_TIMEOUT_S = 10.0


def aligned_start(seconds_ago: float, interval_s: int = INTERVAL_S) -> int:
    """An epoch second ``seconds_ago`` in the past, on an interval boundary: a sim agent started there
    stores its first record at exactly this time (agents/sampler.py: resume_after)."""
    start = math.floor(time.time() - seconds_ago)
    return start - start % interval_s


def log_tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class Agent:
    """A real ``python -m agents run`` child on a fixed localhost port, holding ``token``'s hash.

    ``start()`` may be called again after ``stop()`` or ``kill9()``: same port, same spool."""

    def __init__(self, *args: str, token: str, spool: Path, hostname: str, port: int | None = None,
                 log_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.spool = spool
        self.hostname = hostname
        self.token = token
        self.log = (log_dir or spool.parent) / f"agent-{hostname}.log"
        self.args = [
            "--listen", f"127.0.0.1:{self.port}", "--token-sha256", hash_token(token), "--spool", str(spool),
            "--hostname", hostname, "--log-level", "warning", *args,
        ]
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self, *extra: str, timeout: float = 20.0) -> Agent:
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts}: {' '.join(extra)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agents", "run", *self.args, *extra], cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        wait_for(self._healthy, timeout=timeout, what=f"the agent's /healthz on {self.url}", step=0.05)
        return self

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the agent exited with {self.process.returncode}:\n{log_tail(self.log)}")
        try:
            status, body = get_json(f"{self.url}/healthz", token=self.token)
        except OSError:
            return False
        return status == 200 and body["ok"]

    def healthz(self) -> dict[str, Any]:
        status, body = get_json(f"{self.url}/healthz", token=self.token)
        assert status == 200 and body["ok"], body
        return body

    def caught_up(self, health: dict[str, Any] | None = None) -> bool:
        """The accelerated clock has met real time (it then reads real time, never more)."""
        health = health or self.healthz()
        return time.time() - health["agent_time"] < 2.0

    def wait_for_seq(self, seq: int, *, timeout: float = 30.0) -> int:
        """Until the spool has handed out ``seq``; returns the last seq seen."""
        return wait_for(lambda: (last := self.healthz()["last_seq"]) >= seq and last, timeout=timeout,
                        what=f"spool seq {seq} on {self.hostname}")

    def wait_caught_up(self, *, timeout: float = 30.0) -> dict[str, Any]:
        def caught_up() -> dict[str, Any] | None:
            health = self.healthz()
            return health if self.caught_up(health) else None

        return wait_for(caught_up, timeout=timeout, what=f"{self.hostname}'s clock to catch up with real time", step=0.1)

    def kill9(self) -> None:
        """SIGKILL the agent's process group: no shutdown code runs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM and wait (SIGKILL after STOP_TIMEOUT_S); returns the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.process.returncode

    def close(self) -> None:
        """For ``finally``: whatever state it is in, nothing of it is left running."""
        if self.process is not None and self.process.poll() is None:
            self.kill9()


def worker_database_url() -> str:
    """DATABASE_URL naming the TEST database (DESIGN.md §7): what a worker subprocess must use."""
    from django.db import connection

    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


class Worker:
    """A real ``celery -A config worker`` (solo pool) on the test database, consuming queues of its
    own: the Redis may be shared with another test session, whose ``collect`` messages (node ids of
    another database) must not reach this worker, nor ours theirs."""

    def __init__(self, log_dir: Path, **env: str) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self.queues = {name: f"{name}-e2e-{self.run_id}" for name in ("collect", "rollup", "default")}
        self.log = log_dir / f"worker-{self.run_id}.log"
        command = [
            sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", ",".join(self.queues.values()),
            "--pool", "solo", "--loglevel", "INFO", "--without-heartbeat", "--without-gossip", "--without-mingle",
            "-n", f"e2e-{self.run_id}@%h",
        ]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env={**os.environ, "DATABASE_URL": worker_database_url(), **env},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def wait_ready(self, *, timeout: float = 60.0) -> None:
        """Until the worker logs that it consumes its queues (Django and Celery load in a few seconds)."""

        def ready() -> bool:
            assert self.process.poll() is None, f"the worker exited with {self.process.returncode}:\n{self.logs()}"
            return " ready." in log_tail(self.log, 100_000)

        try:
            wait_for(ready, timeout=timeout, what="the Celery worker to be ready", step=0.1)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.logs()}") from None

    def send(self, task, *args, queue: str) -> None:
        """Send ``task`` through the project's Celery app by name: a ``shared_task`` resolves to whatever
        app is current, and in a process that never imported config.celery that is Celery's default
        app (amqp://localhost), not our broker."""
        assert self.process.poll() is None, f"the worker exited with {self.process.returncode}:\n{self.logs()}"
        celery_app.send_task(task.name, args=args, queue=self.queues[queue])

    def logs(self) -> str:
        return f"--- {self.log.name}\n{log_tail(self.log)}"

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT_S)
        self._forget_queues()

    def _forget_queues(self) -> None:
        """Delete what kombu keeps in Redis for this worker's queues (messages a failed test left too)."""
        import redis

        with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
            for queue in self.queues.values():
                client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
                client.zrem("_kombu.binding_deadlines", queue)
            for tag, payload in client.hscan_iter("unacked"):
                if any(queue.encode() in payload for queue in self.queues.values()):
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)
