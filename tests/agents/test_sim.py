"""The simulated node: deterministic, realistic, varied, MIG as NVML reports it, GPM where NVML has it."""

import re
import statistics
import uuid

import pytest

from agents.backends.gpu_models import MODELS
from agents.backends.sim import SimBackend, sim_gpu_uuid
from agents.backends.sim_workloads import IDLE, INFERENCE, STARVED, TRAINING, Job, gpm_at
from agents.records import FLOAT_RANGES, GPM_FIELDS, RECORD_FIELDS

PERCENT_GPM = GPM_FIELDS[:7]  # sm_active … fp64_active; then NVLink and PCIe MiB/s

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
    assert [(i["profile"], i["gi_id"], i["ci_id"], i["memory_mib"], i["slices"], i["total_slices"], i["sm_count"])
            for i in gpu0["mig_instances"]] == [
        ("3g.40gb", 2, 0, 40448, 3, 7, 60), ("2g.20gb", 3, 0, 20096, 2, 7, 32),
        ("1g.10gb", 9, 0, 9984, 1, 7, 16), ("1g.10gb", 10, 0, 9984, 1, 7, 16),
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


def test_the_h200s_split_gpu_instance_shares_its_memory_between_its_compute_instances():
    """As in the H200 capture: GI 2 holds two compute instances (16 and 32 SMs) that report the GPU
    instance's memory, used and total, each listing the processes that run in it."""
    backend = SimBackend(hostname="gpu-h200-01", gpus=1, model="H200", mig=True)
    instances = backend.inventory()["gpus"][0]["mig_instances"]
    assert [(i["profile"], i["gi_id"], i["ci_id"], i["memory_mib"], i["sm_count"]) for i in instances] == [
        ("1c.3g.71gb", 2, 0, 71424, 16), ("2c.3g.71gb", 2, 1, 71424, 32), ("2g.35gb", 3, 0, 33280, 32),
        ("1g.18gb", 9, 0, 16384, 16), ("1g.18gb", 10, 0, 16384, 16),
    ]
    placed = set()
    for ts in range(T0, T0 + 12 * 3600, 300):
        parent, *migs = backend.sample(ts=ts, interval_s=10)
        assert len(migs) == 5
        one_c, two_c = migs[:2]
        assert one_c["mem_used_mib"] == two_c["mem_used_mib"] <= one_c["mem_total_mib"] == 71424
        assert parent["mem_used_mib"] == sum(m["mem_used_mib"] for m in migs[1:])  # GI 2 counted once
        assert one_c["mem_used_mib"] >= 22 + max((p["used_mib"] for m in (one_c, two_c) for p in m["processes"]), default=0)
        for mig, instance in zip(migs, instances, strict=True):
            for process in mig["processes"]:
                placed.add((process["gi_id"], process["ci_id"]))
                assert (process["gi_id"], process["ci_id"]) == (instance["gi_id"], instance["ci_id"])
    assert {(2, 0), (2, 1)} <= placed


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


# -- GPM ---------------------------------------------------------------------------------------------


def test_gpm_over_a_day_reads_as_real_hopper_gpus_do():
    records = day_of_records(SimBackend(hostname="gpu-h100-02", gpus=8, model="H100", seed=0))
    for record in records:
        for name in GPM_FIELDS:
            low, high = FLOAT_RANGES[name]
            assert record[name] is not None and low <= record[name] <= high, (name, record[name])
        assert record["sm_occupancy"] <= record["sm_active"]
        assert record["fp64_active"] == 0  # ML does no FP64
    training = [r for r in records if r["util_gpu"] >= 85]  # steady training (sim_workloads.TRAINING)
    assert len(training) > 500
    util, sm = statistics.mean(r["util_gpu"] for r in training), statistics.mean(r["sm_active"] for r in training)
    assert 10 <= util - sm <= 35  # real fleets: SM activity ~20 points under the duty cycle
    assert sum(r["sm_active"] < r["util_gpu"] for r in training) / len(training) > 0.85
    assert statistics.mean(r["sm_occupancy"] for r in training) < sm
    assert statistics.mean(r["tensor_active"] for r in training) > 20
    assert statistics.mean(r["fp16_active"] for r in training) > 2 * statistics.mean(r["fp32_active"] for r in training)
    assert any(r["nvlink_rx_mibs"] > 1000 for r in training)  # multi-GPU jobs all-reduce over NVLink
    # A GPU a job holds but leaves idle, and a free one: measured, so 0 (not null), but for a little PCIe.
    idle = [r for r in records if r["util_gpu_max"] == 0]
    assert idle and any(r["processes"] for r in idle) and any(not r["processes"] for r in idle)
    for record in idle:
        assert all(record[name] == 0 for name in (*PERCENT_GPM, "nvlink_rx_mibs", "nvlink_tx_mibs"))
        assert 0 < record["pcie_rx_mibs"] < 1 and 0 < record["pcie_tx_mibs"] < 1


def test_gpm_by_workload_kind():
    def job(kind):
        return Job(kind=kind, start=T0, end=T0 + 3600, mem_frac=0.5, pid=1, user="alice", job_ref=None,
                   period_s=100, phase=0, traits=12345)

    def mean(kind, util):
        readings = [gpm_at(job(kind), 7, T0 + s, util) for s in range(600)]
        return {name: statistics.mean(r[i] for r in readings) for i, name in enumerate(GPM_FIELDS)}

    training, starved, inference = mean(TRAINING, 90), mean(STARVED, 90), mean(INFERENCE, 90)
    assert training["tensor_active"] > inference["tensor_active"] > 0
    assert starved["tensor_active"] > inference["tensor_active"]  # data-starved training is training
    assert inference["dram_active"] > training["dram_active"]  # serving is memory-bound
    assert training["fp16_active"] > training["fp32_active"] > training["fp64_active"] == 0
    assert inference["nvlink_rx_mibs"] == inference["nvlink_tx_mibs"] == 0  # one GPU, no all-reduce
    assert mean(IDLE, 0)["sm_active"] == mean(TRAINING, 0)["tensor_active"] == 0
    assert gpm_at(None, 7, T0, 0)[:9] == (0,) * 9


def test_gpm_is_null_where_nvml_has_none():
    for model in ("A100", "L40S"):  # no GPM before Hopper
        records = day_of_records(SimBackend(hostname="n", gpus=2, model=model), hours=2, step=600)
        assert all(r[name] is None for r in records for name in GPM_FIELDS)
    # Hopper under MIG, as the nvml backend reports it: the parent's null, each MIG device its GPU
    # instance's percentages (nvmlGpmMigSampleGet), so GI 2's two compute instances read the same.
    backend = SimBackend(hostname="gpu-h200-01", gpus=1, model="H200", mig=True)
    saw_busy = saw_split_busy = False
    for ts in range(T0, T0 + 12 * 3600, 300):
        parent, *migs = backend.sample(ts=ts, interval_s=10)
        assert all(parent[name] is None for name in GPM_FIELDS)
        for mig in migs:
            assert mig["util_gpu"] is None  # NVML gives no utilization for a MIG instance: that stays
            assert all(mig[name] is not None for name in PERCENT_GPM)
            assert all(mig[name] is None for name in GPM_FIELDS[7:])  # NVLink and PCIe: the whole GPU's
            assert mig["sm_occupancy"] <= mig["sm_active"] <= 100
            saw_busy = saw_busy or mig["sm_active"] > 20
        one_c, two_c, *others = migs
        assert [one_c[name] for name in PERCENT_GPM] == [two_c[name] for name in PERCENT_GPM]
        saw_split_busy = saw_split_busy or one_c["sm_active"] > 0
        for mig in [*others, one_c] if not (one_c["processes"] or two_c["processes"]) else others:
            if not mig["processes"]:
                assert mig["sm_active"] == 0
    assert saw_busy and saw_split_busy
