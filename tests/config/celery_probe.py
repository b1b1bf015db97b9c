"""Probe tasks for tests/config/test_celery.py, loaded into real workers with ``-I tests.config.celery_probe``.

Each probe writes what happened to Redis lists under ``celery-probe:<run_id>:`` (see ``probe_key``), so a
test can watch a worker from outside it. The run id is per test, which keeps parallel runs and a shared CI
Redis apart; the test deletes the keys afterwards, and they expire on their own in case it cannot.
"""

import json
import os
import time

import redis
from celery.exceptions import SoftTimeLimitExceeded

from config.celery import app

KEY_TTL_S = 600


def probe_key(run_id: str, what: str) -> str:
    return f"celery-probe:{run_id}:{what}"


def probe_redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"])


def _record(run_id: str, what: str, **fields) -> int:
    """Append one JSON record to the ``what`` list; return the list's new length."""
    key = probe_key(run_id, what)
    with probe_redis() as client:
        length = client.rpush(key, json.dumps({"pid": os.getpid(), "at": time.time(), **fields}))
        client.expire(key, KEY_TTL_S)
    return length


@app.task(name="tests.probe.slow", bind=True)
def slow_probe(self, run_id: str, seconds: float) -> None:
    """Record the start; sleep ``seconds`` on the first run only (a redelivery finishes at once); record the end."""
    starts = _record(
        run_id,
        "started",
        task_id=self.request.id,
        redelivered=bool((self.request.delivery_info or {}).get("redelivered")),
        visibility_timeout=self.app.conf.broker_transport_options.get("visibility_timeout"),
    )
    if starts == 1:
        time.sleep(seconds)
    _record(run_id, "finished")


@app.task(name="tests.probe.overrun", time_limit=2, soft_time_limit=1)
def overrun_probe(run_id: str, seconds: float) -> None:
    """Sleep ``seconds``, ignoring the soft time limit (recorded) so that only the hard one can stop it.

    The limits are the task's own: the sender writes a task's limits into its message (its own setting
    when the task names none), and the worker enforces what the message says.
    """
    _record(run_id, "started")
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        _record(run_id, "soft_limit")
        time.sleep(seconds)
    _record(run_id, "finished")


@app.task(name="tests.probe.ping")
def ping_probe(run_id: str) -> None:
    _record(run_id, "pinged")
