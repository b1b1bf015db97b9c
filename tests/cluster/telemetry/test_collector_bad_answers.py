"""The collector against answers the real agent never gives: a stand-in HTTP server replies with a
malformed page. Nothing of such a page is stored, the cursor stays, the node reads "agent error"."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cluster.choices import AlertKind, NodeStatus
from cluster.inventory.services import node_register
from cluster.models import Alert, CollectionState, Gpu, NodeStatusPeriod, Sample
from cluster.telemetry.collector import collect_node

pytestmark = pytest.mark.django_db

INVENTORY = {"host": "odd-agent", "agent_version": "x", "gpus": [{"index": 0, "uuid": "GPU-odd-0", "name": "NVIDIA H200", "memory_mib": 143771}]}


class Agent(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.samples_body = b""
        self.content_type = "application/x-ndjson"
        self.requests = []


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/v1/inventory"):
            body, content_type = json.dumps(INVENTORY).encode(), "application/json"
        else:
            body, content_type = self.server.samples_body, self.server.content_type
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def agent():
    server = Agent()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def node(agent):
    node, token = node_register(hostname="odd-agent", agent_url=f"http://127.0.0.1:{agent.server_port}")
    node.issued_token = token
    return node


def page(records, **meta):
    from django.utils import timezone

    # The stand-in's clock is the server's: a clock far off flags the node (tests/cluster/telemetry/test_clock_skew.py).
    head = {"spool_id": "s1", "last_seq": len(records), "more": False, "dropped_total": 0,
            "agent_time": timezone.now().timestamp(), "count": len(records)}
    head.update(meta)
    return b"".join(json.dumps(x).encode() + b"\n" for x in [head, *records])


def good_record(seq):
    from django.utils import timezone

    ts = int(timezone.now().timestamp()) // 10 * 10 - 600 + 10 * seq
    return {"seq": seq, "ts": ts, "gpu_uuid": "GPU-odd-0", "interval_s": 10, "util_gpu": 50.0}


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"<html>oops</html>", "text/html", "not application/x-ndjson"),
        (b'{"spool_id": "s1"}\n', "application/x-ndjson", "meta field 'last_seq' is missing"),
        (None, "application/x-ndjson", "announced 3 records but sent 2 lines"),
        (b"garbage\n", "application/x-ndjson", "first line of /v1/samples is not a JSON object"),
        ("not-json-line", "application/x-ndjson", "a record line is not JSON"),
    ],
)
def test_a_malformed_page_stores_nothing_keeps_the_cursor_and_flags_the_node(agent, node, body, content_type, reason):
    agent.samples_body = page([good_record(1)])
    assert collect_node(node_id=node.pk).stored == 1
    cursor = CollectionState.objects.get(node=node).cursor

    if body is None:  # truncated: the meta line promises more than came
        body = page([good_record(2), good_record(3)], count=3)
    elif body == "not-json-line":
        body = page([good_record(2)]) + b"{broken\n"
        body = body.replace(b'"count": 1', b'"count": 2')
    agent.samples_body, agent.content_type = body, content_type
    outcome = collect_node(node_id=node.pk)

    assert reason in outcome.error
    assert Sample.objects.count() == 1
    state = CollectionState.objects.get(node=node)
    assert state.cursor == cursor
    assert reason in state.last_error
    node.refresh_from_db()
    assert node.status == NodeStatus.AGENT_ERROR
    assert NodeStatusPeriod.objects.get(node=node, ended_at__isnull=True).status == NodeStatus.AGENT_ERROR
    assert Alert.objects.open().get(subject_id=node.pk, kind=AlertKind.AGENT_ERROR)

    agent.samples_body, agent.content_type = page([good_record(2)], last_seq=2), "application/x-ndjson"
    collect_node(node_id=node.pk)
    node.refresh_from_db()
    assert node.status == NodeStatus.UP
    assert not Alert.objects.open().filter(subject_id=node.pk).exists()
    assert Sample.objects.count() == 2


def test_bad_records_are_counted_per_reason_and_the_rest_stored(agent, node):
    records = [good_record(1), {**good_record(2), "util_gpu": 150}, {**good_record(3), "gpu_uuid": "GPU-stranger"}, good_record(4)]
    agent.samples_body = page(records)
    outcome = collect_node(node_id=node.pk)
    assert outcome.stored == 2
    assert outcome.rejected == {"util_gpu: above 100": 1, "gpu_uuid: unknown GPU": 1}
    state = CollectionState.objects.get(node=node)
    assert (state.cursor, state.records_stored, state.records_rejected) == (4, 2, 2)
    assert state.rejected_by_reason == {"util_gpu: above 100": 1, "gpu_uuid: unknown GPU": 1}


def test_the_inventory_registers_gpus_and_marks_missing_ones(agent, node):
    agent.samples_body = page([])
    collect_node(node_id=node.pk)
    assert Gpu.objects.get(uuid="GPU-odd-0").node == node
    INVENTORY["gpus"][0]["uuid"] = "GPU-odd-0-replaced"
    try:
        CollectionState.objects.filter(node=node).update(inventory_refreshed_at=None)
        collect_node(node_id=node.pk)
    finally:
        INVENTORY["gpus"][0]["uuid"] = "GPU-odd-0"
    assert Gpu.objects.get(uuid="GPU-odd-0").status == "missing"
    assert Gpu.objects.get(uuid="GPU-odd-0-replaced").status == "active"


def test_the_collector_presents_the_node_token_and_its_spool(agent, node):
    agent.samples_body = page([good_record(1)])
    collect_node(node_id=node.pk)
    collect_node(node_id=node.pk)
    assert {auth for _path, auth in agent.requests} == {f"Bearer {node.issued_token}"}
    samples = [path for path, _auth in agent.requests if path.startswith("/v1/samples")]
    assert samples[0].startswith("/v1/samples?after=0&limit=")
    assert "after=1" in samples[-1] and "spool_id=s1" in samples[-1]
