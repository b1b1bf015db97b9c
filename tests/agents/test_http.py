"""The HTTP endpoint's parts that need no process: fast pages, rate-limited auth logging."""

import json
import logging
import time

from agents.backends.sim import SimBackend
from agents.http import _AuthLog, samples_body
from agents.spool import Spool


def test_a_full_20000_record_page_is_one_compact_json_document(tmp_path):
    # Its speed (spliced, not re-encoded) is measured by `make bench`, not asserted here.
    spool = Spool(tmp_path / "s.sqlite")
    backend = SimBackend(hostname="big", gpus=8, seed=2)
    ts = 1_793_577_600
    for _batch in range(25):  # 25 × 100 intervals × 8 GPUs = 20,000 records
        batch = []
        for _i in range(100):
            ts += 10
            batch += backend.sample(ts=ts, interval_s=10)
        spool.append(batch)
    body = samples_body(spool, after=0, limit=20_000, agent_time=1_793_600_000.5)
    page = json.loads(body)
    assert len(page["records"]) == 20_000 and page["more"] is False and page["last_seq"] == 20_000
    assert page["records"][0]["seq"] == 1 and page["records"][0]["gpu_uuid"].startswith("GPU-")
    assert page["agent_time"] == 1_793_600_000.5
    assert b": " not in body[:2000]  # compact
    spool.close()


def test_it_logs_a_rejected_client_once_a_minute(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    auth_log = _AuthLog()
    assert auth_log.should_log("10.0.0.1")
    assert not auth_log.should_log("10.0.0.1")
    assert auth_log.should_log("10.0.0.2")
    now[0] += 59
    assert not auth_log.should_log("10.0.0.1")
    now[0] += 2
    assert auth_log.should_log("10.0.0.1")


def test_a_rejected_request_is_logged_once_per_address(tmp_path, caplog):
    from agents.agent import Agent
    from agents.config import parse_config
    from tests.agents.agent_helpers import TOKEN_SHA256, free_port, http_get

    port = free_port()
    config = parse_config({"backend": "sim", "token_sha256": TOKEN_SHA256, "listen": f"127.0.0.1:{port}",
                           "spool_path": str(tmp_path / "s.sqlite"), "sim": {"gpus": 1}})
    agent = Agent(config)
    agent.start()
    try:
        with caplog.at_level(logging.WARNING, logger="agents.http"):
            for _request in range(5):
                assert http_get(f"http://127.0.0.1:{port}/metrics", token="nope")[0] == 401
        rejected = [r for r in caplog.records if r.name == "agents.http"]
        assert len(rejected) == 1 and "wrong token" in rejected[0].getMessage()
        assert http_get(f"http://127.0.0.1:{port}/metrics")[0] == 200
    finally:
        agent.stop()


def _spool_with(tmp_path, n):
    spool = Spool(tmp_path / "n.sqlite")
    backend = SimBackend(hostname="ndjson-node", gpus=1, model="H200", seed=1)
    for i in range(n):
        spool.append(backend.sample(ts=1_793_577_600 + 10 * (i + 1), interval_s=10))
    return spool


def test_it_serves_a_page_as_ndjson_with_the_same_records(tmp_path):
    spool = _spool_with(tmp_path, 5)
    as_json = json.loads(samples_body(spool, after=0, limit=3, agent_time=1.0))
    lines = samples_body(spool, after=0, limit=3, agent_time=1.0, ndjson=True).decode().splitlines()
    meta = json.loads(lines[0])
    assert meta == {"spool_id": spool.spool_id, "last_seq": as_json["last_seq"], "more": True,
                    "dropped_total": 0, "agent_time": 1.0, "count": 3}
    assert [json.loads(line) for line in lines[1:]] == as_json["records"]


def test_a_cursor_of_another_spool_acknowledges_nothing(tmp_path):
    spool = _spool_with(tmp_path, 5)
    samples_body(spool, after=3, limit=10, agent_time=1.0, ndjson=True, spool_id="some-older-spool")
    assert len(spool.read(0, 10)[0]) == 5
    samples_body(spool, after=3, limit=10, agent_time=1.0, ndjson=True, spool_id=spool.spool_id)
    assert [r["seq"] for r in spool.read(0, 10)[0]] == [4, 5]


def test_one_thread_serves_several_agents_and_ends_when_stopped(tmp_path):
    import threading

    from agents.agent import Agent
    from agents.config import parse_config
    from agents.http import serve_all
    from tests.agents.agent_helpers import TOKEN_SHA256, free_port, get_json

    stop = threading.Event()
    agents = []
    for name in ("node-a", "node-b"):
        config = parse_config({"backend": "sim", "token_sha256": TOKEN_SHA256, "listen": f"127.0.0.1:{free_port()}",
                               "spool_path": str(tmp_path / f"{name}.sqlite"), "sim": {"gpus": 1}, "hostname": name})
        agents.append(Agent(config, stop_event=stop))
    server = threading.Thread(target=serve_all, args=([agent.server for agent in agents], stop), kwargs={"poll_interval": 0.05})
    server.start()
    for agent in agents:
        agent.start(serve=False)
    try:
        for agent in agents:
            status, body = get_json(f"http://127.0.0.1:{agent.server.server_address[1]}/healthz")
            assert status == 200 and body["spool_id"] == agent.spool.spool_id  # each node answers for itself
        assert sum(thread.name.startswith("http-") for thread in threading.enumerate()) == 0
    finally:
        stop.set()
        server.join(5)
        for agent in agents:
            agent.stop()
    assert not server.is_alive()
