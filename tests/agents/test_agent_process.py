"""A real agent process (sim backend, accelerated clock) on a free localhost port: HTTP API, auth,
paging, alignment, kill -9 and restart, a recreated spool, /metrics and shutdown; and what /metrics
makes of given records (agents/metrics.py: the GPM fields' DCGM names and scales)."""

import json
import signal
import time
from collections import defaultdict

import pytest

from agents.backends.sim import SimBackend
from agents.metrics import Telemetry
from agents.records import GPM_FIELDS, empty_record
from tests.agents.agent_helpers import AgentProcess, get_json, http_get, parse_prometheus

SIM = ("--backend", "sim", "--interval", "10", "--speed", "600", "--start=-10m")


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """One H100 node with 2 GPUs, GPU 0 MIG-partitioned: 6 records an interval."""
    spool = tmp_path_factory.mktemp("agent") / "spool.sqlite"
    with AgentProcess(*SIM, "--gpus", "2", "--model", "H100", "--mig", spool=spool, hostname="gpu-h100-01") as agent:
        agent.wait_for_records(6 * 50)
        yield agent


def per_gpu_times(records):
    times = defaultdict(list)
    for record in records:
        times[record["gpu_uuid"]].append(record["ts"])
    return times


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_it_answers_healthz_to_anyone_with_ok_only(agent, token):
    status, body = get_json(f"{agent.url}/healthz", token=token)
    assert (status, body) == (200, {"ok": True})  # no version, spool id or sequence for a stranger


def test_healthz_with_the_token_tells_the_version_spool_and_sequence(agent):
    status, body = get_json(f"{agent.url}/healthz")
    answered_at = time.time()  # the agent is another process: its clock (replaying from the past) never passes ours
    assert status == 200
    assert body["ok"] is True and body["backend"] == "sim" and len(body["spool_id"]) == 32
    assert body["agent_version"] and body["last_seq"] >= 0
    assert body["agent_time"] <= answered_at + 1


@pytest.mark.parametrize("path", ["/v1/samples?after=0", "/v1/inventory", "/metrics"])
@pytest.mark.parametrize("token", [None, "wrong-token", ""])
def test_it_refuses_a_missing_or_wrong_token(agent, path, token):
    status, headers, body = http_get(agent.url + path, token=token)
    assert status == 401
    assert headers["WWW-Authenticate"] == "Bearer"
    assert json.loads(body) == {"error": "unauthorized", "detail": "a valid bearer token is required"}


def test_it_answers_404_as_json(agent):
    status, _headers, body = http_get(f"{agent.url}/v2/nothing")
    assert status == 404 and json.loads(body)["error"] == "not_found"


def test_it_pages_records_aligned_to_interval_boundaries(agent):
    records, after, spool_ids = [], 0, set()
    while True:
        page = agent.samples(after=after, limit=70)
        assert set(page) == {"spool_id", "records", "last_seq", "more", "dropped_total", "agent_time"}
        assert len(page["records"]) <= 70
        spool_ids.add(page["spool_id"])
        records += page["records"]
        if not page["records"]:
            assert page["last_seq"] == after
            break
        assert page["last_seq"] == page["records"][-1]["seq"]
        after = page["last_seq"]
    assert len(spool_ids) == 1 and page["dropped_total"] == 0
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert len(records) >= 300
    for record in records:
        assert record["ts"] % 10 == 0 and record["interval_s"] == 10
        assert record["ts"] <= page["agent_time"]
    times = per_gpu_times(records)
    assert len(times) == 6  # 2 GPUs + 4 MIG instances
    for series in times.values():
        assert series == list(range(series[0], series[-1] + 10, 10))  # every boundary, in order


@pytest.mark.parametrize(
    ("query", "parameter"),
    [("after=-1", "after"), ("after=abc", "after"), ("after=", "after"), ("after=1&after=2", "after"),
     ("after=0&limit=0", "limit"), ("after=0&limit=ten", "limit"), ("limit=1.5", "limit")],
)
def test_it_rejects_bad_paging_parameters_naming_them(agent, query, parameter):
    status, body = get_json(f"{agent.url}/v1/samples?{query}")
    assert status == 400
    assert body["parameter"] == parameter and body["detail"].startswith(f"{parameter}: must be")


def test_it_caps_the_page_size(agent):
    status, body = get_json(f"{agent.url}/v1/samples?after=0&limit=99999999")
    assert status == 200 and len(body["records"]) <= 20_000


def test_it_serves_the_inventory(agent):
    status, body = get_json(f"{agent.url}/v1/inventory")
    assert status == 200
    assert body == SimBackend(hostname="gpu-h100-01", gpus=2, model="H100", mig=True).inventory()


def test_it_serves_prometheus_metrics_with_dcgm_names_and_labels(agent):
    status, headers, body = http_get(f"{agent.url}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    series = parse_prometheus(body.decode())
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
                 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK",
                 "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"):
        assert name in series, name
        for labels, _value in series[name]:
            assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(labels)
            assert labels["Hostname"] == "gpu-h100-01" and labels["modelName"] == "NVIDIA H100 80GB HBM3"
    # MIG instances report memory, not utilization (null is left out, not 0).
    assert len(series["DCGM_FI_DEV_GPU_UTIL"]) == 1
    mig_memory = [labels for labels, _v in series["DCGM_FI_DEV_FB_USED"] if "GPU_I_PROFILE" in labels]
    assert sorted(labels["GPU_I_PROFILE"] for labels in mig_memory) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert all(labels["gpu"] == "0" and labels["device"] == "nvidia0" for labels in mig_memory)
    assert series["cardhour_agent_spool_last_seq"][0][1] >= 300
    assert series["cardhour_agent_spool_records"][0][1] >= 0  # other tests acknowledge records
    assert series["cardhour_agent_spool_dropped_total"][0][1] == 0
    # GPM (the simulated H100 has it): ratios 0-1, on the MIG instances and the whole GPU 1, not the MIG parent
    for name in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"):
        assert all(0 <= value <= 1 for _labels, value in series[name]), name
        assert not any(labels["gpu"] == "0" and "GPU_I_ID" not in labels for labels, _v in series[name])
        assert any(labels["gpu"] == "1" for labels, _v in series[name])


def test_it_prunes_what_the_collector_acknowledged(tmp_path):
    with AgentProcess(*SIM, "--gpus", "1", spool=tmp_path / "spool.sqlite") as agent:
        agent.wait_for_records(20)
        first = agent.samples(after=0, limit=10)
        assert [r["seq"] for r in first["records"]] == list(range(1, 11))
        agent.samples(after=10, limit=1)  # acknowledges 1-10
        assert agent.samples(after=0, limit=1)["records"][0]["seq"] == 11


def test_it_loses_nothing_on_kill_9_and_continues_the_seqs(tmp_path):
    spool = tmp_path / "spool.sqlite"
    agent = AgentProcess(*SIM, "--gpus", "2", spool=spool).start()
    agent.wait_for_records(60)
    before = agent.samples(after=0)
    agent.kill9()
    assert agent.process.returncode == -signal.SIGKILL
    restarted = AgentProcess(*SIM, "--gpus", "2", spool=spool, port=agent.port).start()
    try:
        restarted.wait_for_records(before["last_seq"] + 20)
        after = restarted.samples(after=0)
        assert after["spool_id"] == before["spool_id"]
        assert after["records"][: len(before["records"])] == before["records"]  # every served seq, unchanged
        assert [r["seq"] for r in after["records"]] == list(range(1, len(after["records"]) + 1))
        for series in per_gpu_times(after["records"]).values():  # resumed: no repeat, no hole
            assert series == list(range(series[0], series[-1] + 10, 10))
    finally:
        assert restarted.stop() == 0


def test_a_recreated_spool_has_a_new_id_and_ignores_a_stale_cursor(tmp_path):
    spool = tmp_path / "spool.sqlite"
    with AgentProcess(*SIM, "--gpus", "1", spool=spool) as agent:
        agent.wait_for_records(30)
        old = agent.samples(after=0)
        assert agent.stop() == 0
    for path in tmp_path.glob("spool.sqlite*"):
        path.unlink()
    with AgentProcess(*SIM, "--gpus", "1", spool=spool) as agent:
        agent.wait_for_records(5)
        stale = agent.samples(after=old["last_seq"])  # the collector's cursor into the old spool
        assert stale["spool_id"] != old["spool_id"]
        assert stale["records"] == [] and stale["last_seq"] == old["last_seq"]
        fresh = agent.samples(after=0)  # it restarts at 0 and nothing was pruned meanwhile
        assert fresh["records"][0]["seq"] == 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_it_stops_cleanly_on_a_signal(tmp_path, signum):
    agent = AgentProcess("--backend", "sim", "--gpus", "1", spool=tmp_path / "spool.sqlite").start()
    agent.process.send_signal(signum)
    started = time.monotonic()
    assert agent.process.wait(timeout=10) == 0
    assert time.monotonic() - started < 5
    agent.stop()


# ------------------------------------------------------------------ /metrics of given records (no process)


MIB = 1 << 20
SPOOL_STATS = {"records": 0, "last_seq": 0, "dropped_total": 0, "used_bytes": 0, "last_ts": 0}
PROF = {  # DCGM-exporter name → (record field, scale)
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 0.01), "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 0.01), "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 0.01),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("fp16_active", 0.01), "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("fp32_active", 0.01),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("fp64_active", 0.01),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_mibs", MIB), "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_mibs", MIB),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_mibs", MIB), "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_mibs", MIB),
}
WHOLE_GPU = {"sm_active": 62.5, "sm_occupancy": 31.25, "tensor_active": 41.75, "dram_active": 55.0, "fp16_active": 12.5,
             "fp32_active": 7.25, "fp64_active": 0.0, "nvlink_rx_mibs": 81920.0, "nvlink_tx_mibs": 79872.25,
             "pcie_rx_mibs": 3400.5, "pcie_tx_mibs": 1200.0}
INSTANCE = {"sm_active": 20.0, "tensor_active": 5.0}  # the rest null: a MIG instance without link counters


def rendered(records):
    telemetry = Telemetry(hostname="gpu-h100-01")
    telemetry.set_inventory({"gpus": [
        {"index": 0, "uuid": "GPU-mig-parent", "name": "NVIDIA H100 80GB HBM3",
         "mig_instances": [{"uuid": "MIG-3g", "profile": "3g.40gb", "gi_id": 2}]},
        {"index": 1, "uuid": "GPU-whole", "name": "NVIDIA H100 80GB HBM3", "mig_instances": []},
    ]})
    telemetry.update(records)
    text = telemetry.render(spool_stats=SPOOL_STATS, sampler_errors=0, info={"backend": "nvml"})
    return text, parse_prometheus(text)


def record(uuid, gpm=None, **fields):
    result = {**empty_record(ts=1_800_000_010, gpu_uuid=uuid, interval_s=10), "mem_used_mib": 1000, **fields}
    result.update(gpm or {})
    return result


def by_device(series):
    return {(labels["UUID"], labels.get("GPU_I_ID")): value for labels, value in series}


def test_it_exports_gpm_under_dcgm_names_as_ratios_and_bytes_per_second():
    text, series = rendered([record("GPU-mig-parent"), record("MIG-3g", INSTANCE), record("GPU-whole", WHOLE_GPU)])

    for name, (field, scale) in PROF.items():
        assert f"# TYPE {name} gauge" in text, name
        assert by_device(series[name])[("GPU-whole", None)] == pytest.approx(WHOLE_GPU[field] * scale), name
    assert by_device(series["DCGM_FI_PROF_SM_ACTIVE"]) == {("GPU-whole", None): 0.625, ("GPU-mig-parent", "2"): 0.2}
    assert by_device(series["DCGM_FI_PROF_PCIE_RX_BYTES"]) == {("GPU-whole", None): 3_565_682_688}  # 3400.5 MiB/s
    assert "DCGM_FI_PROF_PIPE_FP64_ACTIVE{" in text and by_device(series["DCGM_FI_PROF_PIPE_FP64_ACTIVE"]) == {
        ("GPU-whole", None): 0}, "a measured 0 is exported; the instance's unknown FP64 is not"
    memory_labels = {(labels["UUID"], labels.get("GPU_I_ID")): labels for labels, _v in series["DCGM_FI_DEV_FB_USED"]}
    for name in PROF:
        for labels, _value in series[name]:
            assert labels == memory_labels[(labels["UUID"], labels.get("GPU_I_ID"))], "the labels of the DEV metrics"


def test_it_never_exports_an_unknown_gpm_field_as_zero():
    old_spool_record = {key: value for key, value in record("GPU-whole").items() if key not in GPM_FIELDS}

    text, series = rendered([record("GPU-mig-parent"), record("MIG-3g"), old_spool_record])

    assert "DCGM_FI_PROF" not in text, "no GPM anywhere: no series, no HELP or TYPE lines"
    assert len(series["DCGM_FI_DEV_FB_USED"]) == 3, "the other metrics are there"
