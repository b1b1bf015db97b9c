"""The simulated node: deterministic, realistic, varied, MIG as NVML reports it."""

import re
import uuid

import pytest

from agents.backends.gpu_models import MODELS
from agents.backends.sim import SimBackend, sim_gpu_uuid
from agents.records import RECORD_FIELDS

T0 = 1_793_577_600  # 2026-11-02T00:00:00Z, a multiple of 10
UUID_SHAPE = re.compile(r"^(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def day_of_records(backend, *, hours=24, step=60, interval=10):
    out = []
    for ts in range(T0, T0 + hours * 3600, step):
        out.extend(backend.sample(ts=ts, interval_s=interval))
    return out


def test_it_is_a_pure_function_of_seed_gpu_and_time():
    one = SimBackend(hostname="gpu-h200-01", gpus=8, seed=7)
    two = SimBackend(hostname="gpu-h200-01", gpus=8, seed=7)
    # Asked in a different order (a restarted agent, a catch-up): the same values.
    forward = [one.sample(ts=T0 + 10 * i, interval_s=10) for i in range(50)]
    backward = [two.sample(ts=T0 + 10 * i, interval_s=10) for i in reversed(range(50))][::-1]
    assert forward == backward
    other_seed = SimBackend(hostname="gpu-h200-01", gpus=8, seed=8).sample(ts=T0, interval_s=10)
    assert other_seed != forward[0]


def test_its_records_follow_the_contract_and_stay_in_realistic_ranges():
    for short, spec in MODELS.items():
        backend = SimBackend(hostname=f"n-{short}", gpus=8, model=short, seed=3)
        job_refs = []
        for record in day_of_records(backend, hours=12, step=120):
            assert tuple(record) == RECORD_FIELDS  # the contract's fields, in its order
            assert record["ts"] % 10 == 0 and record["interval_s"] == 10
            assert 0 <= record["util_gpu"] <= record["util_gpu_max"] <= 100
            assert 0 <= record["util_mem"] <= 100
            assert 0 <= record["mem_used_mib"] <= record["mem_total_mib"] == spec.memory_mib
            assert spec.idle_w * 0.95 <= record["power_w"] <= spec.power_limit_w
            assert record["energy_j"] == pytest.approx(record["power_w"] * 10)
            assert 15 <= record["temp_c"] <= 90
            assert record["sm_clock_mhz"] in (spec.idle_sm_clock_mhz, spec.max_sm_clock_mhz)
            assert record["xid_count"] >= 0 and record["ecc_dbe_count"] >= 0
            for process in record["processes"]:
                assert set(process) == {"pid", "user", "used_mib", "job_ref", "gi_id", "ci_id"}
                job_refs.append(process["job_ref"])
                assert process["gi_id"] is None and process["ci_id"] is None
            assert record["mem_used_mib"] == sum(p["used_mib"] for p in record["processes"])
        named = [ref for ref in job_refs if ref is not None]
        assert named and all(re.fullmatch(r"job_\d{6}", ref) for ref in named)  # Slurm jobs' cgroups
        assert None in job_refs  # and processes outside any job


def test_it_mixes_workloads_that_change_over_time():
    records = day_of_records(SimBackend(hostname="gpu-h100-02", gpus=8, model="H100", seed=0))
    training = [r for r in records if r["util_gpu"] >= 85]
    allocated_idle = [r for r in records if r["util_gpu_max"] == 0 and r["processes"]]
    free = [r for r in records if not r["processes"]]
    oscillating = [r for r in records if 30 <= r["util_gpu"] <= 75]
    assert training and allocated_idle and free and oscillating
    assert all(r["mem_used_mib"] == 0 and r["util_gpu"] == 0 for r in free)
    assert any(p["job_ref"] is None for r in records for p in r["processes"])
    jobs_on_gpu0 = {p["job_ref"] for r in records if r["gpu_uuid"] == records[0]["gpu_uuid"] for p in r["processes"]}
    assert len(jobs_on_gpu0) >= 5  # jobs start and end during a day
    users = {p["user"] for r in records for p in r["processes"]}
    assert len(users) >= 5


def test_it_gives_nvml_shaped_uuids_that_match_the_demo_data_set():
    namespace = uuid.UUID("6f1c3a52-8f0e-4c1e-9a53-2b7d7e0c9d11")  # demo/cluster.py's UUID_NAMESPACE
    assert sim_gpu_uuid("gpu-h200-01", 3) == f"GPU-{uuid.uuid5(namespace, 'gpu-h200-01/3')}"
    assert sim_gpu_uuid("gpu-h100-01", 0, mig_slot=2) == f"MIG-{uuid.uuid5(namespace, 'gpu-h100-01/0/mig2')}"
    assert sim_gpu_uuid("gpu-h200-01", 3, seed=5) != sim_gpu_uuid("gpu-h200-01", 3)
    inventory = SimBackend(hostname="gpu-h200-01", gpus=8, seed=0).inventory()
    uuids = [gpu["uuid"] for gpu in inventory["gpus"]]
    assert all(UUID_SHAPE.match(u) for u in uuids) and len(set(uuids)) == 8
    assert inventory["gpus"][3]["uuid"] == sim_gpu_uuid("gpu-h200-01", 3)
    assert inventory["host"] == "gpu-h200-01" and inventory["driver_version"] == "590.48.01"
    assert inventory["gpus"][0]["pci_bus_id"] == "00000000:18:00.0"
    assert inventory["gpus"][0]["mig_mode"] is False and inventory["gpus"][0]["mig_instances"] == []


def test_it_partitions_gpu_0_like_the_h100_capture():
    backend = SimBackend(hostname="gpu-h100-01", gpus=2, model="H100", mig=True)
    gpu0 = backend.inventory()["gpus"][0]
    assert gpu0["mig_mode"] is True
    assert [(i["profile"], i["gi_id"], i["ci_id"], i["memory_mib"], i["slices"], i["total_slices"])
            for i in gpu0["mig_instances"]] == [
        ("3g.40gb", 2, 0, 40448, 3, 7), ("2g.20gb", 3, 0, 20096, 2, 7),
        ("1g.10gb", 9, 0, 9984, 1, 7), ("1g.10gb", 10, 0, 9984, 1, 7),
    ]
    instances = {i["uuid"]: i for i in gpu0["mig_instances"]}
    saw_process = False
    for ts in range(T0, T0 + 6 * 3600, 300):
        records = backend.sample(ts=ts, interval_s=10)
        assert len(records) == 1 + 4 + 1
        parent, *migs, other = records
        assert parent["gpu_uuid"] == gpu0["uuid"] and parent["util_gpu"] is None and parent["processes"] == []
        assert parent["power_w"] is not None and parent["temp_c"] is not None
        assert parent["mem_used_mib"] == sum(m["mem_used_mib"] for m in migs)
        for mig in migs:
            instance = instances[mig["gpu_uuid"]]
            assert mig["util_gpu"] is None and mig["power_w"] is None and mig["energy_j"] is None
            assert 0 < mig["mem_used_mib"] <= mig["mem_total_mib"] == instance["memory_mib"]
            for process in mig["processes"]:
                assert (process["gi_id"], process["ci_id"]) == (instance["gi_id"], 0)
                saw_process = True
        assert other["util_gpu"] is not None
    assert saw_process


def test_it_refuses_an_unknown_model_or_mig_on_a_gpu_without_it():
    with pytest.raises(ValueError):
        SimBackend(hostname="h", model="GTX 1080")
    with pytest.raises(ValueError):
        SimBackend(hostname="h", model="L40S", mig=True)


def test_it_averages_over_longer_intervals():
    backend = SimBackend(hostname="h", gpus=4, seed=1)
    record = backend.sample(ts=T0 + 300, interval_s=300)[0]
    assert record["interval_s"] == 300
    assert record["energy_j"] == pytest.approx(record["power_w"] * 300)


def test_a_node_in_maintenance_runs_no_workload():
    moments = range(T0, T0 + 6 * 3600, 600)
    for mig in (False, True):
        busy = SimBackend(hostname="gpu-h100-01", model="H100", mig=mig)
        idle = SimBackend(hostname="gpu-h100-01", model="H100", mig=mig, maintenance=True)
        assert any(r["processes"] for t in moments for r in busy.sample(ts=t, interval_s=10))
        records = [r for t in moments for r in idle.sample(ts=t, interval_s=10)]
        assert len(records) == len([r for t in moments for r in busy.sample(ts=t, interval_s=10)])
        assert not any(r["processes"] for r in records)
        assert {r["util_gpu"] for r in records if r["util_gpu"] is not None} <= {0.0}
        assert all(r["mem_used_mib"] == 0 for r in records if not mig)
