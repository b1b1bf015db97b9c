"""An agent whose clock is an hour ahead or behind (issue 17, DESIGN.md §3): its node is flagged (a warning
alert, a mark on the inventory and node pages) and its records meet the collector's time rules: those more
than TELEMETRY_MAX_FUTURE_S ahead are refused and counted, those behind are stored at the times they carry.

The agent is a stand-in HTTP server answering real pages whose ``agent_time`` and record times come from a
clock ``skew_s`` off the server's; the collector runs on a fixed clock."""

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse

from cluster.choices import AlertKind, AlertTier, NodeStatus
from cluster.inventory.services import node_register
from cluster.models import Alert, CollectionState, Sample
from cluster.telemetry.collector import collect_node
from tests.conftest import T0

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(hours=12)
INVENTORY = {"host": "skewed", "agent_version": "x",
             "gpus": [{"index": 0, "uuid": "GPU-skewed-0", "name": "NVIDIA H200", "memory_mib": 143771}]}


class Agent(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.skew_s = 0.0
        self.seq = 0

    def samples_page(self, count: int = 6) -> bytes:
        """``count`` new records sampled every 10 s up to the agent's own now."""
        agent_now = NOW.timestamp() + self.skew_s
        newest = int(agent_now) // 10 * 10
        records = []
        for back in range(count - 1, -1, -1):
            self.seq += 1
            records.append({"seq": self.seq, "ts": newest - 10 * back, "gpu_uuid": "GPU-skewed-0", "interval_s": 10,
                            "util_gpu": 40.0})
        head = {"spool_id": "s1", "last_seq": self.seq, "more": False, "dropped_total": 0, "agent_time": agent_now,
                "count": len(records)}
        return b"".join(json.dumps(line).encode() + b"\n" for line in [head, *records])


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/v1/inventory"):
            body, content_type = json.dumps(INVENTORY).encode(), "application/json"
        else:
            body, content_type = self.server.samples_page(), "application/x-ndjson"
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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def node(agent):
    node, _token = node_register(hostname="skewed", agent_url=f"http://127.0.0.1:{agent.server_port}")
    return node


def skew_alerts(node):
    return Alert.objects.filter(subject_id=node.pk, kind=AlertKind.NODE_CLOCK_SKEW)


def test_a_clock_an_hour_ahead_flags_the_node_and_its_records_are_refused_and_counted(agent, node, settings):
    settings.TELEMETRY_MAX_CLOCK_SKEW_S, settings.TELEMETRY_MAX_FUTURE_S = 120, 600
    agent.skew_s = 3600
    outcome = collect_node(node_id=node.pk, now=NOW)

    assert outcome.error == ""
    assert (outcome.stored, outcome.rejected) == (0, {"ts: too far in the future": 6})
    assert Sample.objects.count() == 0
    state = CollectionState.objects.get(node=node)
    assert (state.cursor, state.records_rejected, state.clock_skew_s) == (6, 6, 3600.0)
    alert = skew_alerts(node).get()
    assert (alert.tier, alert.closed_at, alert.opened_at) == (AlertTier.WARNING, None, NOW)
    assert "3600 s ahead of the server's" in alert.message
    assert alert.details["clock_skew_s"] == 3600.0
    node.refresh_from_db()
    assert node.status == NodeStatus.UP  # the agent answers: it is up, with a clock to fix


def test_a_clock_an_hour_behind_flags_the_node_and_its_records_are_stored_at_their_times(agent, node):
    agent.skew_s = -3600
    outcome = collect_node(node_id=node.pk, now=NOW)

    assert (outcome.stored, outcome.rejected) == (6, {})
    newest = int(NOW.timestamp() - 3600) // 10 * 10
    assert sorted(int(ts.timestamp()) for ts in Sample.objects.values_list("ts", flat=True)) == [
        newest - 10 * back for back in range(5, -1, -1)]
    alert = skew_alerts(node).get()
    assert alert.tier == AlertTier.WARNING
    assert "3600 s behind the server's" in alert.message


def test_the_flag_lasts_as_long_as_the_skew_and_closes_when_the_clock_is_right(agent, node):
    agent.skew_s = 3600
    collect_node(node_id=node.pk, now=NOW)
    collect_node(node_id=node.pk, now=NOW + timedelta(minutes=1))
    alert = skew_alerts(node).get()  # one episode, refreshed
    assert alert.last_seen_at == NOW + timedelta(minutes=1)

    agent.skew_s = 0.5  # synchronised again
    later = NOW + timedelta(minutes=2)
    collect_node(node_id=node.pk, now=later)
    alert.refresh_from_db()
    assert alert.closed_at == later
    assert not Alert.objects.open().filter(subject_id=node.pk).exists()


def test_a_skew_within_the_limit_raises_nothing(agent, node, settings):
    settings.TELEMETRY_MAX_CLOCK_SKEW_S = 120
    for skew in (119, -119):
        agent.skew_s = skew
        collect_node(node_id=node.pk, now=NOW)
    assert not skew_alerts(node).exists()
    assert Sample.objects.count() == 12


def test_the_inventory_and_the_node_page_show_the_flag(agent, node, client, admin_user, django_assert_max_num_queries):
    other, _token = node_register(hostname="on-time", agent_url="http://127.0.0.1:9")
    agent.skew_s = -3600
    collect_node(node_id=node.pk, now=NOW)
    client.force_login(admin_user)

    inventory = client.get(reverse("cluster:inventory"))
    assert inventory.status_code == 200
    rows = {row.split("</tr>")[0].count('data-testid="clock-skewed"'): row for row in
            inventory.content.decode().split("<tr")[1:] if "node-detail" in row or "/inventory/nodes/" in row}
    flagged = [row for count, row in rows.items() if count]
    assert len(flagged) == 1 and ">skewed<" in flagged[0]
    assert ">on-time<" not in flagged[0]

    page = client.get(reverse("cluster:node-detail", args=[node.hostname]))
    body = page.content.decode()
    assert page.status_code == 200
    assert 'data-testid="clock-skewed"' in body
    assert "Agent clock off" in body  # the open alert's kind in the node's alert banner
    assert 'data-testid="clock-skewed"' not in client.get(
        reverse("cluster:node-detail", args=[other.hostname])).content.decode()
