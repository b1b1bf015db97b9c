"""PostgreSQL lost in the middle of a collection (issue 17): the page's one transaction (records, cursor,
counters) goes as a whole, the cursor stays where it was, and the next collection stores every record once.

The agent is a stand-in HTTP server; while the collector waits for its page, the server ends the collector's
own database session (``pg_terminate_backend``), as a database restart would."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import InterfaceError, OperationalError, connection

from cluster.inventory.services import node_register
from cluster.models import CollectionState, Sample
from cluster.telemetry.collector import collect_node
from tests.conftest import T0

NOW = T0 + timedelta(hours=12)
INVENTORY = {"host": "n1", "agent_version": "x",
             "gpus": [{"index": 0, "uuid": "GPU-n1-0", "name": "NVIDIA H200", "memory_mib": 143771}]}


def records(first_seq: int, count: int) -> list[dict]:
    start = int(NOW.timestamp()) // 10 * 10 - 600  # record seq n covers the 10 s ending at start + 10 n
    return [{"seq": seq, "ts": start + 10 * seq, "gpu_uuid": "GPU-n1-0", "interval_s": 10,
             "util_gpu": 30.0} for seq in range(first_seq, first_seq + count)]


class Agent(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.spooled = records(1, 12)
        self.asked_after: list[int] = []
        self.kill_backend: int | None = None  # the collector's backend pid to end during the next samples answer

    def page(self, after: int) -> bytes:
        rows = [row for row in self.spooled if row["seq"] > after]
        head = {"spool_id": "s1", "last_seq": self.spooled[-1]["seq"], "more": False, "dropped_total": 0,
                "agent_time": NOW.timestamp(), "count": len(rows)}
        return b"".join(json.dumps(line).encode() + b"\n" for line in [head, *rows])


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/v1/inventory"):
            body, content_type = json.dumps(INVENTORY).encode(), "application/json"
        else:
            after = int(self.path.split("after=")[1].split("&")[0])
            self.server.asked_after.append(after)
            if self.server.kill_backend is not None:
                end_session(self.server.kill_backend)
                self.server.kill_backend = None
            body, content_type = self.server.page(after), "application/x-ndjson"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def end_session(pid: int) -> None:
    """End the database session ``pid`` from a connection of our own, and wait until it is gone."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
            assert cursor.fetchone()[0] is True
    finally:
        other.close()


@pytest.fixture
def agent():
    server = Agent()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=True)
def test_the_cursor_stays_when_the_database_goes_mid_page_and_nothing_is_lost_or_doubled(agent):
    node, _token = node_register(hostname="n1", agent_url=f"http://127.0.0.1:{agent.server_port}")
    agent.spooled = records(1, 6)
    assert collect_node(node_id=node.pk, now=NOW).stored == 6
    assert CollectionState.objects.get(node=node).cursor == 6

    agent.spooled = records(1, 12)  # six more spooled since
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        agent.kill_backend = cursor.fetchone()[0]
    with pytest.raises((OperationalError, InterfaceError)):
        collect_node(node_id=node.pk, now=NOW + timedelta(seconds=30))
    assert agent.kill_backend is None  # the session was ended while the page was being read
    connection.close()  # what Django does at the end of the request or task that failed

    state = CollectionState.objects.get(node=node)
    assert (state.cursor, state.records_stored) == (6, 6)
    assert Sample.objects.count() == 6

    outcome = collect_node(node_id=node.pk, now=NOW + timedelta(seconds=60))
    assert (outcome.error, outcome.stored) == ("", 6)
    assert agent.asked_after == [0, 6, 6]  # asked again from the kept cursor
    state = CollectionState.objects.get(node=node)
    assert (state.cursor, state.records_stored, state.records_rejected) == (12, 12, 0)
    stored = sorted(int(ts.timestamp()) for ts in Sample.objects.values_list("ts", flat=True))
    assert stored == sorted(row["ts"] for row in records(1, 12))  # each record once


@pytest.mark.django_db
def test_a_collection_killed_mid_page_is_redone_and_equals_an_uninterrupted_run(agent, monkeypatch):
    """The worker dies after the page's records were written and before its cursor moved: the page's
    transaction goes whole, and the redo stores what one uninterrupted collection stores."""
    from cluster.telemetry import collector
    from tests.crash import WorkerKilled, crash_after_call

    node, _token = node_register(hostname="n1", agent_url=f"http://127.0.0.1:{agent.server_port}")
    agent.spooled = records(1, 12)
    calls = crash_after_call(monkeypatch, collector, "_ingest", call=1)
    with pytest.raises(WorkerKilled):
        collect_node(node_id=node.pk, now=NOW)
    assert len(calls) == 1
    assert not Sample.objects.exists()
    assert CollectionState.objects.get(node=node).cursor == 0
    monkeypatch.undo()

    assert collect_node(node_id=node.pk, now=NOW).stored == 12
    state = CollectionState.objects.get(node=node)
    assert (state.cursor, state.records_stored) == (12, 12)
    stored = sorted(int(ts.timestamp()) for ts in Sample.objects.values_list("ts", flat=True))
    assert stored == [row["ts"] for row in records(1, 12)]
