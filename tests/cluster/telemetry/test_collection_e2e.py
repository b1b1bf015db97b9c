"""Telemetry end to end with real processes (DESIGN.md §3): a real agent (``python -m agents run``, sim or
replay backend on an accelerated clock) on a localhost port, the test PostgreSQL, and where it matters a
real Celery worker on the test database. Collection runs in-process (``collect_node``) where a worker
adds nothing. Every wait has a deadline; every process is killed in a ``finally``."""

import contextlib
import csv
import json
import random
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection

from cluster.choices import AlertKind, AlertSubject, AlertTier, NodeStatus
from cluster.inventory.services import node_register
from cluster.models import (
    Alert,
    CollectionState,
    DirtyBucket,
    Gpu,
    HourRollup,
    MinuteRollup,
    Node,
    NodeStatusPeriod,
    Sample,
)
from cluster.tasks import collect_nodes, rollup_pending
from cluster.telemetry import dirty_marks, rollups
from cluster.telemetry.collector import collect_node
from cluster.telemetry.importer import import_samples
from tests.agents.agent_helpers import free_port, http_get, wait_for
from tests.cluster.telemetry.e2e_helpers import INTERVAL_S, Agent, Worker, aligned_start

SPEED = "600"  # an hour of 10 s samples in six seconds
GPUS = 2
ROLLUP_VALUES = rollups.ROLLUP_COLUMNS[2:]
SAMPLE_VALUES = dirty_marks.SAMPLE_COLUMNS[2:]


# --- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture
def make_agent(tmp_path):
    """Makes (not starts) agents; every one is killed at the end, whatever happened."""
    made: list[Agent] = []

    def make(hostname: str, token: str, *args: str, port: int | None = None) -> Agent:
        agent = Agent(*args, token=token, hostname=hostname, port=port, spool=tmp_path / f"{hostname}.sqlite",
                      log_dir=tmp_path)
        made.append(agent)
        return agent

    try:
        yield make
    finally:
        for agent in made:
            agent.close()


def sim_node(make_agent, hostname: str) -> tuple[Node, str, Agent]:
    """A node registered as an admin would (token issued by the server, its hash in the agent's
    config) and its sim agent with 2 H200s, not started yet (``agent.start("--start=…")``)."""
    port = free_port()
    node, token = node_register(hostname=hostname, agent_url=f"http://127.0.0.1:{port}")
    agent = make_agent(hostname, token, "--backend", "sim", "--gpus", str(GPUS), "--model", "H200",
                       "--interval", str(INTERVAL_S), "--speed", SPEED, port=port)
    return node, token, agent


def state_of(node: Node) -> CollectionState:
    return CollectionState.objects.get(node=node)


def collect(node: Node, **kwargs):
    outcome = collect_node(node_id=node.pk, **kwargs)
    assert not outcome.error, outcome
    return outcome


def collect_until_caught_up(node: Node, agent: Agent, *, collect_once=None, timeout: float = 30.0) -> CollectionState:
    """Collect until the agent's clock has met real time and the stored cursor is the agent's last
    seq, unchanged across the collection (a new boundary may fall in between: then once more)."""
    collect_once = collect_once or (lambda _before: collect(node))
    deadline = time.monotonic() + timeout
    while True:
        before = agent.healthz()
        collect_once(before)
        state = state_of(node)
        after = agent.healthz()
        if (agent.caught_up(before) and state.spool_id == after["spool_id"]
                and state.cursor == before["last_seq"] == after["last_seq"]):
            return state
        assert time.monotonic() < deadline, f"the collector never caught up: {before=} {after=} cursor={state.cursor}"
        time.sleep(0.1)


def sample_times(node: Node) -> dict[str, list[int]]:
    times: dict[str, list[int]] = {}
    for uuid, ts in Sample.objects.filter(gpu__node=node).order_by("gpu__uuid", "ts").values_list("gpu__uuid", "ts"):
        times.setdefault(uuid, []).append(int(ts.timestamp()))
    return times


def assert_contiguous(node: Node, *, first: int) -> int:
    """Every GPU has one sample at every interval boundary from ``first`` to the same last one, and
    nothing else. Returns the last boundary."""
    times = sample_times(node)
    assert len(times) == GPUS, times.keys()
    last = max(ts[-1] for ts in times.values())
    expected = list(range(first, last + 1, INTERVAL_S))
    for uuid, got in times.items():
        if got != expected:
            missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
            pytest.fail(f"{uuid}: {len(got)} samples for {len(expected)} boundaries; "
                        f"missing {missing[:10]}, unexpected {extra[:10]}, repeated {len(got) - len(set(got))}")
    return last


def assert_stored_once(node: Node, state: CollectionState) -> int:
    """Nothing stored twice: the samples are distinct (gpu, ts) and the collector counted each once."""
    samples = Sample.objects.filter(gpu__node=node)
    count = samples.count()
    assert samples.values("gpu_id", "ts").distinct().count() == count
    assert state.records_stored == count
    assert state.records_rejected == 0, state.rejected_by_reason
    return count


def rollup_rows(model, node: Node) -> dict:
    """Every rollup row of the node's GPUs, keyed by (GPU uuid, bucket), with every value."""
    rows = model.objects.filter(gpu__node=node).values_list("gpu__uuid", "bucket", *ROLLUP_VALUES)
    return {(uuid, bucket): tuple(values) for uuid, bucket, *values in rows}


def assert_rollups_are_as_from_raw(node: Node, *, first: int, last: int) -> None:
    """Minute and hour rollups as maintained equal, row for row and value for value, what
    recomputing the whole span from raw gives."""
    assert not DirtyBucket.objects.filter(gpu__node=node).exists()
    minutes, hours = rollup_rows(MinuteRollup, node), rollup_rows(HourRollup, node)
    # A record covers (ts - 10, ts]: the first minute is the one holding first - 10.
    per_gpu = (last - 1) // 60 - (first - INTERVAL_S) // 60 + 1
    assert len(minutes) == GPUS * per_gpu
    assert len(hours) == GPUS * ((last - 1) // 3600 - (first - INTERVAL_S) // 3600 + 1)
    for (uuid, bucket), values in minutes.items():
        row = dict(zip(ROLLUP_VALUES, values, strict=True))
        start = int(bucket.timestamp())
        if start >= first - INTERVAL_S and start + 60 <= last:
            assert (row["covered_s"], row["sample_count"]) == (60, 6), (uuid, bucket, row)
    rollups.recompute_range(start=at(first - 3600), end=at(last + 3600))
    assert rollup_rows(MinuteRollup, node) == minutes
    assert rollup_rows(HourRollup, node) == hours


def at(epoch_s: int) -> datetime:
    return datetime.fromtimestamp(epoch_s, UTC)


def open_alert(node: Node, kind: str) -> Alert | None:
    return Alert.objects.open().about(AlertSubject.NODE, node.pk).filter(kind=kind).first()


def status_history(node: Node) -> list[str]:
    return list(NodeStatusPeriod.objects.filter(node=node).order_by("started_at", "pk").values_list("status", flat=True))


def spooled_after(spool: Path, seq: int) -> tuple[set[tuple[str, int]], int]:
    """What a stopped agent's spool file holds after ``seq``: {(gpu uuid, ts)} and its highest seq."""
    with contextlib.closing(sqlite3.connect(spool)) as db:
        rows = db.execute("SELECT seq, body FROM records WHERE seq > ? ORDER BY seq", (seq,)).fetchall()
    records = {(body["gpu_uuid"], body["ts"]) for body in (json.loads(text) for _seq, text in rows)}
    return records, (rows[-1][0] if rows else seq)


# --- through a real worker -------------------------------------------------------------------------


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_it_collects_through_a_worker_contiguously_and_rolls_up_as_from_raw(make_agent, tmp_path):
    first = aligned_start(60 * 60)
    node, _token, agent = sim_node(make_agent, "e2e-worker-01")
    # Small pages, so one task stores several and ends pages inside minutes that the next one completes.
    worker = Worker(tmp_path, TELEMETRY_FETCH_LIMIT="150")
    try:
        worker.wait_ready()
        agent.start(f"--start={first}")  # collection runs while the agent is still catching up

        def wait_db(condition, what: str) -> None:
            try:
                wait_for(condition, timeout=60, what=what, step=0.05)
            except AssertionError as error:
                state = CollectionState.objects.filter(node=node).first()
                raise AssertionError(f"{error}; state {state and state.last_error!r}\n{worker.logs()}") from None

        def collect_and_roll_up(before: dict) -> None:
            worker.send(collect_nodes, [node.pk], queue="collect")
            wait_db(lambda: CollectionState.objects.filter(node=node, cursor__gte=max(1, before["last_seq"])).exists(),
                    f"the worker to store up to seq {before['last_seq']}")
            worker.send(rollup_pending, queue="rollup")  # incremental, between collections

        state = collect_until_caught_up(node, agent, collect_once=collect_and_roll_up, timeout=60)
        worker.send(rollup_pending, queue="rollup")
        wait_db(lambda: not DirtyBucket.objects.filter(gpu__node=node).exists(), "the worker to roll up every bucket")
    finally:
        worker.close()

    last = assert_contiguous(node, first=first)
    assert assert_stored_once(node, state) == state.cursor  # one sample a spool seq: cursor = agent's last seq
    node.refresh_from_db()
    assert node.status == NodeStatus.UP and node.last_seen_at is not None
    assert Gpu.objects.filter(node=node).count() == GPUS  # registered from /v1/inventory
    assert_rollups_are_as_from_raw(node, first=first, last=last)


# --- in-process collection, real agents ------------------------------------------------------------


@pytest.mark.django_db
def test_it_collects_every_record_once_after_an_outage(make_agent, settings):
    first = aligned_start(60 * 60)
    node, _token, agent = sim_node(make_agent, "e2e-outage-01")
    agent.start(f"--start={first}")
    agent.wait_for_seq(40)
    collect(node)
    cursor = state_of(node).cursor
    assert cursor >= 40

    # The outage: nobody collects while the agent keeps sampling.
    agent.wait_for_seq(cursor + 300)
    settings.TELEMETRY_FETCH_LIMIT = 50
    outcome = collect(node)
    assert outcome.pages >= 6 and outcome.stored >= 300
    state = collect_until_caught_up(node, agent)

    assert_contiguous(node, first=first)
    assert assert_stored_once(node, state) == state.cursor


@pytest.mark.django_db
def test_it_loses_nothing_spooled_before_the_agent_is_killed(make_agent):
    first = aligned_start(60 * 60)
    node, _token, agent = sim_node(make_agent, "e2e-kill-01")
    agent.start(f"--start={first}")
    agent.wait_for_seq(40)
    collect(node)
    cursor = state_of(node).cursor
    reported = agent.wait_for_seq(cursor + 200)
    agent.kill9()  # mid catch-up: the sampler is writing a batch every few milliseconds

    uncollected, spooled_seq = spooled_after(agent.spool, cursor)
    assert spooled_seq >= reported, "a record the agent reported before kill -9 is gone from its spool"
    assert len(uncollected) >= 200

    agent.start(f"--start={first}")  # same spool, same port: resumes after the newest spooled record
    state = collect_until_caught_up(node, agent)
    stored = {(uuid, ts) for uuid, times in sample_times(node).items() for ts in times}
    assert uncollected <= stored, sorted(uncollected - stored)[:10]
    assert_contiguous(node, first=first)
    assert assert_stored_once(node, state) == state.cursor


@pytest.mark.django_db
def test_it_restarts_its_cursor_when_the_spool_is_created_afresh(make_agent):
    first = aligned_start(40 * 60)
    node, _token, agent = sim_node(make_agent, "e2e-respool-01")
    agent.start(f"--start={first}")
    old = collect_until_caught_up(node, agent)
    old_count = assert_stored_once(node, old)
    old_last = max(ts[-1] for ts in sample_times(node).values())

    assert agent.stop() == 0
    for suffix in ("", "-wal", "-shm"):
        Path(f"{agent.spool}{suffix}").unlink(missing_ok=True)
    second = aligned_start(20 * 60)
    agent.start(f"--start={second}")
    new_spool = agent.healthz()["spool_id"]
    assert new_spool != old.spool_id

    new = collect_until_caught_up(node, agent)
    assert new.spool_id == new_spool
    assert new.cursor < old.cursor  # so a cursor that did not restart would have fetched none of them
    last = assert_contiguous(node, first=first)
    # The new spool held every boundary from `second` to `last` (seqs 1..cursor); those up to
    # old_last were stored already and are not stored again.
    assert new.cursor == GPUS * ((last - second) // INTERVAL_S + 1)
    overlap = GPUS * ((old_last - second) // INTERVAL_S + 1)
    assert assert_stored_once(node, new) == old_count + new.cursor - overlap


@pytest.mark.django_db(transaction=True)
def test_it_stores_nothing_twice_when_collections_run_twice_and_at_once(make_agent, settings):
    settings.TELEMETRY_FETCH_LIMIT = 25  # many pages, so the two collections interleave
    first = aligned_start(30 * 60)
    node, _token, agent = sim_node(make_agent, "e2e-twice-01")
    agent.start(f"--start={first}")
    agent.wait_caught_up()

    barrier = threading.Barrier(2)
    outcomes, errors = [], []

    def run() -> None:
        try:
            barrier.wait(timeout=10)
            outcomes.append(collect_node(node_id=node.pk))
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    assert [outcome.error for outcome in outcomes] == ["", ""]
    collect(node)
    collect(node)
    state = collect_until_caught_up(node, agent)

    assert_contiguous(node, first=first)
    assert assert_stored_once(node, state) == state.cursor


@pytest.mark.django_db
def test_it_marks_a_node_unauthorized_until_its_token_is_fixed(make_agent):
    node, token, agent = sim_node(make_agent, "e2e-token-01")
    agent.start(f"--start={aligned_start(10 * 60)}")
    node.agent_token = "not-the-token"
    node.save(update_fields=["agent_token"])
    assert http_get(f"{agent.url}/v1/samples?after=0", token="not-the-token")[0] == 401

    outcome = collect_node(node_id=node.pk)
    assert "401" in outcome.error
    node.refresh_from_db()
    assert node.status == NodeStatus.UNAUTHORIZED
    assert status_history(node) == [NodeStatus.UP, NodeStatus.UNAUTHORIZED]
    assert NodeStatusPeriod.objects.get(node=node, ended_at__isnull=True).status == NodeStatus.UNAUTHORIZED
    alert = open_alert(node, AlertKind.NODE_UNAUTHORIZED)
    assert alert is not None and alert.tier == AlertTier.WARNING
    assert not Sample.objects.filter(gpu__node=node).exists()
    assert state_of(node).consecutive_failures == 1

    node.agent_token = token
    node.save(update_fields=["agent_token"])
    assert collect(node).stored > 0
    node.refresh_from_db()
    assert node.status == NodeStatus.UP
    assert status_history(node) == [NodeStatus.UP, NodeStatus.UNAUTHORIZED, NodeStatus.UP]
    alert.refresh_from_db()
    assert alert.closed_at is not None and open_alert(node, AlertKind.NODE_UNAUTHORIZED) is None
    assert state_of(node).consecutive_failures == 0


@pytest.mark.django_db
def test_it_marks_a_node_unreachable_after_three_failed_collections(make_agent, settings):
    assert settings.TELEMETRY_UNREACHABLE_AFTER == 3
    node, _token, agent = sim_node(make_agent, "e2e-down-01")  # not started: its port is closed
    for attempt in (1, 2):
        assert "cannot reach the agent" in collect_node(node_id=node.pk).error
        node.refresh_from_db()
        assert node.status == NodeStatus.UP, f"unreachable after {attempt} failure(s)"
        assert open_alert(node, AlertKind.NODE_UNREACHABLE) is None
        assert state_of(node).consecutive_failures == attempt

    assert "cannot reach the agent" in collect_node(node_id=node.pk).error
    node.refresh_from_db()
    assert node.status == NodeStatus.UNREACHABLE
    assert status_history(node) == [NodeStatus.UP, NodeStatus.UNREACHABLE]
    alert = open_alert(node, AlertKind.NODE_UNREACHABLE)
    assert alert is not None and alert.tier == AlertTier.CRITICAL

    agent.start(f"--start={aligned_start(10 * 60)}")
    assert collect(node).stored > 0
    node.refresh_from_db()
    assert node.status == NodeStatus.UP
    assert status_history(node) == [NodeStatus.UP, NodeStatus.UNREACHABLE, NodeStatus.UP]
    alert.refresh_from_db()
    assert alert.closed_at is not None
    assert state_of(node).consecutive_failures == 0


# --- replay equivalence ----------------------------------------------------------------------------


def write_samples_csv(path: Path, *, node: str, first: int, every_s: int, span_s: int) -> int:
    """Two GPUs of ``node`` sampled every ``every_s`` seconds for ``span_s`` (GPU 1 a few seconds later,
    a few rows missing, a few without utilization), no ``interval_s`` column; returns the row count."""
    rnd = random.Random(every_s)
    rows = []
    for gpu in range(GPUS):
        for ts in range(first + 13 * gpu, first + span_s + 1, every_s):
            roll = rnd.random()
            if roll < 0.03:
                continue
            util = "" if roll < 0.06 else f"{rnd.uniform(0, 100):.1f}"
            rows.append([ts, node, gpu, util, rnd.randrange(0, 140_000), f"{rnd.uniform(80, 700):.1f}"])
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["ts", "node", "gpu", "util_gpu", "mem_used_mib", "power_w"])
        writer.writerows(rows)
    return len(rows)


def telemetry_of(hostname: str) -> dict[str, dict]:
    """The node's samples and rollups keyed by GPU uuid, so two registrations of one node compare."""
    node = Node.objects.get(hostname=hostname)
    samples = Sample.objects.filter(gpu__node=node).values_list("gpu__uuid", "ts", *SAMPLE_VALUES)
    return {
        "samples": {(uuid, ts): tuple(values) for uuid, ts, *values in samples},
        "minutes": rollup_rows(MinuteRollup, node),
        "hours": rollup_rows(HourRollup, node),
    }


def forget_node(hostname: str) -> None:
    """Delete the node and all its telemetry: the next path starts from nothing."""
    gpus = Gpu.objects.filter(node__hostname=hostname)
    for model in (DirtyBucket, MinuteRollup, HourRollup, Sample):
        model.objects.filter(gpu__in=gpus).delete()
    gpus.delete()
    Node.objects.filter(hostname=hostname).delete()


@pytest.mark.parametrize("every_s", [10, 57])
@pytest.mark.django_db
def test_it_rolls_up_a_replayed_csv_as_it_rolls_up_the_imported_one(make_agent, tmp_path, every_s):
    hostname = f"e2e-replay-{every_s}"
    span_s = 20 * 60 if every_s == 10 else 40 * 60
    first = aligned_start(span_s + 5 * 60) + 7  # rows off the 10 s grid, ending 5 minutes ago
    path = tmp_path / "samples.csv"
    rows = write_samples_csv(path, node=hostname, first=first, every_s=every_s, span_s=span_s)

    report = import_samples(path)
    assert (report.imported, report.rejected) == (rows, [])
    rollups.rollup_pending()
    imported = telemetry_of(hostname)
    forget_node(hostname)

    port = free_port()
    node, token = node_register(hostname=hostname, agent_url=f"http://127.0.0.1:{port}")
    agent = make_agent(hostname, token, "--backend", "replay", "--replay-file", str(path),
                       "--interval", str(INTERVAL_S), "--speed", SPEED, port=port)
    agent.start()  # the clock starts at the first row (the replay default)
    agent.wait_for_seq(rows)
    state = collect_until_caught_up(node, agent)
    assert state.cursor == rows
    assert_stored_once(node, state)
    rollups.rollup_pending()
    replayed = telemetry_of(hostname)

    assert len(imported["samples"]) == rows
    assert replayed["samples"] == imported["samples"]
    assert imported["minutes"] and replayed["minutes"] == imported["minutes"]
    assert imported["hours"] and replayed["hours"] == imported["hours"]
