"""``python -m agents fleet``: N simulated agents in one process on consecutive ports."""

import json
import signal
import subprocess
import sys
import time

import pytest

from agents.backends.sim import sim_gpu_uuid
from agents.config import ConfigError
from agents.fleet import plan_fleet, sync_token_file
from tests.agents.agent_helpers import ROOT, free_port_run, get_json, wait_for


def test_it_plans_the_demo_cluster():
    base = free_port_run(8)  # a plan binds nothing, but its ports are ones free on this machine
    plan = plan_fleet(nodes=8, models="H200:4,H100:2,L40S:2", base_port=base, prefix="gpu-", mig="gpu-h100-01",
                      maintenance="gpu-l40s-02")
    assert [(n.hostname, n.port - base, n.spec.short_name, n.mig, n.maintenance) for n in plan] == [
        ("gpu-h200-01", 0, "H200", False, False), ("gpu-h200-02", 1, "H200", False, False),
        ("gpu-h200-03", 2, "H200", False, False), ("gpu-h200-04", 3, "H200", False, False),
        ("gpu-h100-01", 4, "H100", True, False), ("gpu-h100-02", 5, "H100", False, False),
        ("gpu-l40s-01", 6, "L40S", False, False), ("gpu-l40s-02", 7, "L40S", False, True),
    ]


def test_it_splits_nodes_evenly_without_counts():
    plan = plan_fleet(nodes=8, models="H200,H100,L40S", base_port=free_port_run(8), prefix="sim-")
    assert [n.hostname for n in plan] == [
        "sim-h200-01", "sim-h200-02", "sim-h200-03", "sim-h100-01", "sim-h100-02", "sim-h100-03",
        "sim-l40s-01", "sim-l40s-02",
    ]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"models": "H200,V100"}, "--models"), ({"models": "H200:2,H100"}, "--models"),
     ({"nodes": 3, "models": "H200:2"}, "--nodes"), ({"models": "L40S", "mig": "gpu-l40s-01"}, "--mig"),
     ({"models": "H200", "mig": "nope"}, "--mig"), ({"nodes": 1, "models": "H200,H100"}, "--nodes"),
     ({"models": "H200", "maintenance": "gpu-h200-01,nope"}, "--maintenance")],
)
def test_it_names_the_option_of_a_bad_plan(kwargs, key):
    kwargs = {"nodes": None, "base_port": free_port_run(4), "prefix": "gpu-", **kwargs}
    with pytest.raises(ConfigError) as error:
        plan_fleet(**kwargs)
    assert error.value.key == key


def test_it_keeps_tokens_it_finds_and_adds_missing_ones(tmp_path):
    path = tmp_path / "tokens.json"
    base = free_port_run(2)
    plan = plan_fleet(nodes=2, models="H200", base_port=base, prefix="gpu-")
    path.write_text(json.dumps({"gpu-h200-01": {"url": "http://old:1", "token": "kept"}, "other": {"token": "x"}}))
    entries = sync_token_file(path, plan, url_host="127.0.0.1", gpus=8)
    assert entries["gpu-h200-01"] == {"url": f"http://127.0.0.1:{base}", "token": "kept", "model": "NVIDIA H200",
                                      "gpus": 8, "mig": False}
    assert len(entries["gpu-h200-02"]["token"]) >= 32 and entries["other"] == {"token": "x"}
    assert json.loads(path.read_text()) == entries
    assert path.stat().st_mode & 0o777 == 0o600
    modified = path.stat().st_mtime_ns
    assert sync_token_file(path, plan, url_host="127.0.0.1", gpus=8) == entries  # nothing changed: not rewritten
    assert path.stat().st_mtime_ns == modified


def test_it_runs_n_agents_on_consecutive_ports(tmp_path):
    base = free_port_run(3)
    token_file = tmp_path / "fleet.json"
    command = [sys.executable, "-m", "agents", "fleet", "--nodes", "3", "--gpus", "2", "--models", "H200,H100,L40S",
               "--base-port", str(base), "--token-file", str(token_file), "--spool-dir", str(tmp_path / "spools"),
               "--speed", "600", "--start=-5m", "--mig", "gpu-h100-01", "--maintenance", "gpu-l40s-01",
               "--log-level", "warning"]
    fleet = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: token_file.exists() and len(json.loads(token_file.read_text())) == 3, timeout=15,
                 what="the token file")
        tokens = json.loads(token_file.read_text())
        assert [(host, entry["url"]) for host, entry in sorted(tokens.items(), key=lambda i: i[1]["url"])] == [
            ("gpu-h200-01", f"http://127.0.0.1:{base}"), ("gpu-h100-01", f"http://127.0.0.1:{base + 1}"),
            ("gpu-l40s-01", f"http://127.0.0.1:{base + 2}"),
        ]

        def healthy(url, token):
            try:
                return get_json(f"{url}/healthz", token=token)[1]["last_seq"] >= 6
            except OSError:
                return False

        for hostname, entry in tokens.items():
            wait_for(lambda entry=entry: healthy(entry["url"], entry["token"]), timeout=15, what=f"{hostname}")
            status, inventory = get_json(f"{entry['url']}/v1/inventory", token=entry["token"])
            assert status == 200 and inventory["host"] == hostname
            assert inventory["gpus"][0]["uuid"] == sim_gpu_uuid(hostname, 0)
            assert inventory["gpus"][0]["name"] == entry["model"]
            assert inventory["gpus"][0]["mig_mode"] is (hostname == "gpu-h100-01")
            status, page = get_json(f"{entry['url']}/v1/samples?after=0", token=entry["token"])
            assert status == 200 and page["records"]
            if hostname == "gpu-l40s-01":  # in maintenance: no workload
                assert not any(r["processes"] or r["util_gpu"] for r in page["records"])
        other = tokens["gpu-h100-01"]["token"]
        assert get_json(f"{tokens['gpu-h200-01']['url']}/v1/samples", token=other)[0] == 401  # tokens differ
        assert sorted(p.name for p in (tmp_path / "spools").iterdir() if p.suffix == ".sqlite") == [
            "gpu-h100-01.sqlite", "gpu-h200-01.sqlite", "gpu-l40s-01.sqlite",
        ]
    finally:
        fleet.send_signal(signal.SIGTERM)
        out, err = fleet.communicate(timeout=15)
    assert fleet.returncode == 0, err
    assert out.splitlines()[0].startswith(f"gpu-h200-01\thttp://127.0.0.1:{base}\tH200 x2")


@pytest.mark.parametrize("offset", [3600, -3600])
def test_its_nodes_clocks_run_off_by_the_clock_offset(tmp_path, offset):
    base = free_port_run(1)
    token_file = tmp_path / "fleet.json"
    command = [sys.executable, "-m", "agents", "fleet", "--nodes", "1", "--gpus", "1", "--models", "H100",
               "--base-port", str(base), "--token-file", str(token_file), "--spool-dir", str(tmp_path / "spools"),
               "--interval", "1", f"--clock-offset={offset}", "--log-level", "warning"]
    fleet = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: token_file.exists(), timeout=15, what="the token file")
        entry = json.loads(token_file.read_text())["gpu-h100-01"]

        def sampled():
            try:
                return get_json(f"{entry['url']}/healthz", token=entry["token"])[1]["last_seq"] >= 2
            except OSError:
                return False

        wait_for(sampled, timeout=15, what="two samples")
        status, page = get_json(f"{entry['url']}/v1/samples?after=0", token=entry["token"])
        now = time.time()
    finally:
        fleet.send_signal(signal.SIGTERM)
        _out, err = fleet.communicate(timeout=15)
    assert status == 200 and fleet.returncode == 0, err
    assert abs(page["agent_time"] - (now + offset)) < 5
    assert all(abs(record["ts"] - (now + offset)) < 10 for record in page["records"])


def test_it_refuses_a_clock_offset_beyond_a_day(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agents", "fleet", "--nodes", "1", "--token-file",
                             str(tmp_path / "t.json"), "--spool-dir", str(tmp_path), "--clock-offset=90000"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "--clock-offset" in result.stderr and "86400" in result.stderr
