"""The nvml backend against the fake pynvml (tests/agents/fake_pynvml.py), and against real captures
(tests/agents/fixtures/nvml-*.json) where a GPU machine has given one. No database."""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import os
import pwd
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

import agents
from agents.backends import gpm as gpm_module
from agents.backends import nvml as nvml_module
from agents.backends.nvml import NvmlBackend
from agents.records import FLOAT_FIELDS, GPM_FIELDS, INT_FIELDS, PROCESS_FIELDS, RECORD_FIELDS
from tests.agents.fake_pynvml import FakeMig, FakeNvml, FakeProcess, h100_mig, h200, l40s

T0 = 1_800_000_000  # an interval boundary (2027-01-15T08:00:00Z)
INTERVAL = 10
BOOT = T0 - 86_400  # the fake machine booted a day before T0
FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def us(seconds: float) -> int:
    return round(seconds * 1_000_000)


class Clock:
    """The agent's clocks: wall time, and time since boot (``time.monotonic`` on Linux)."""

    def __init__(self) -> None:
        self.now = float(T0)

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now - BOOT


class Node:
    """A backend over a fake NVML, sampled the way the sampler does: just after each boundary."""

    def __init__(self, fake: FakeNvml, proc_root: Path | str = "/nonexistent-proc") -> None:
        self.fake = fake
        self.clock = Clock()
        fake.clock = self.clock.monotonic  # the GPUs' GPM samples are stamped on the agent's clock
        self.backend = NvmlBackend(
            hostname="gpu-node-01", nvml=fake, proc_root=proc_root,
            wall_clock=self.clock.time, mono_clock=self.clock.monotonic,
        )

    def sample(self, ts: int, interval_s: int = INTERVAL, *, at: float | None = None) -> dict[str, dict]:
        self.clock.now = ts + 0.25 if at is None else at
        records = self.backend.sample(ts=ts, interval_s=interval_s)
        for record in records:
            check_record(record)
        by_uuid = {record["gpu_uuid"]: record for record in records}
        assert len(by_uuid) == len(records), "one record per GPU and MIG device"
        return by_uuid


# ------------------------------------------------------------------ the record contract


def check_record(record: dict, *, spooled: bool = False, mig_uuids: frozenset[str] = frozenset()) -> None:
    """A record as agents/records.py defines it: names, types, nulls, ts alignment."""
    expected = set(RECORD_FIELDS) | ({"seq"} if spooled else set())
    assert set(record) == expected, f"fields {sorted(set(record) ^ expected)} differ from the contract"
    if spooled:
        assert _is_int(record["seq"]) and record["seq"] > 0
    assert _is_int(record["ts"]) and _is_int(record["interval_s"])
    assert 1 <= record["interval_s"] <= 3600
    assert record["ts"] % record["interval_s"] == 0, "ts is aligned to interval boundaries"
    assert isinstance(record["gpu_uuid"], str) and re.match(r"^(GPU|MIG)-\S+$", record["gpu_uuid"])
    for name in FLOAT_FIELDS:
        value = record[name]
        assert value is None or (isinstance(value, int | float) and not isinstance(value, bool)), (name, value)
        assert value is None or value >= 0, (name, value)
    for name in ("util_gpu", "util_gpu_max", "util_mem"):
        assert record[name] is None or 0 <= record[name] <= 100, (name, record[name])
    if record["util_gpu"] is not None:
        assert record["util_gpu_max"] is not None and record["util_gpu_max"] >= record["util_gpu"]
    for name in INT_FIELDS:
        value = record[name]
        assert value is None or (_is_int(value) and value >= 0), (name, value)
    if record["gpu_uuid"].startswith("MIG-") or record["gpu_uuid"] in mig_uuids:
        assert record["util_gpu"] is None and record["util_gpu_max"] is None, "MIG reports no utilization"
    assert isinstance(record["processes"], list)
    for process in record["processes"]:
        assert set(process) == set(PROCESS_FIELDS), process
        assert _is_int(process["pid"]) and process["pid"] > 0
        assert process["user"] is None or isinstance(process["user"], str)
        assert process["job_ref"] is None or isinstance(process["job_ref"], str)
        for name in ("used_mib", "gi_id", "ci_id"):
            assert process[name] is None or (_is_int(process[name]) and process[name] >= 0), (name, process)
    assert json.loads(json.dumps(record)) == record, "JSON round trip"


def check_inventory(inventory: dict) -> None:
    assert set(inventory) == {"host", "agent_version", "driver_version", "cuda_version", "gpus"}
    assert isinstance(inventory["host"], str) and inventory["host"]
    assert isinstance(inventory["agent_version"], str)
    for name in ("driver_version", "cuda_version"):
        assert inventory[name] is None or isinstance(inventory[name], str)
    assert isinstance(inventory["gpus"], list)
    for gpu in inventory["gpus"]:
        assert set(gpu) == {"index", "uuid", "name", "memory_mib", "pci_bus_id", "mig_mode", "mig_instances"}
        assert _is_int(gpu["index"]) and gpu["uuid"].startswith("GPU-")
        assert gpu["name"] is None or isinstance(gpu["name"], str)
        assert gpu["memory_mib"] is None or _is_int(gpu["memory_mib"])
        assert gpu["pci_bus_id"] is None or re.match(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$", gpu["pci_bus_id"])
        assert gpu["mig_mode"] in (True, False, None)
        for instance in gpu["mig_instances"]:
            assert set(instance) == {"uuid", "profile", "gi_id", "ci_id", "memory_mib", "slices", "total_slices",
                                     "sm_count"}
            assert instance["uuid"].startswith("MIG-")
            for name in ("gi_id", "ci_id", "memory_mib", "slices", "total_slices", "sm_count"):
                assert instance[name] is None or _is_int(instance[name]), (name, instance)
    json.dumps(inventory)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------ fake /proc


def write_proc(root: Path, pid: int, *, uid: int, cgroup: str) -> None:
    directory = root / str(pid)
    directory.mkdir(parents=True)
    (directory / "status").write_text(
        f"Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nTgid:\t{pid}\nPid:\t{pid}\n"
        f"PPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    )
    (directory / "cgroup").write_text(cgroup)


def unknown_uid() -> int:
    uid = 3_999_999
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


# ------------------------------------------------------------------ utilization


def test_it_takes_mean_and_max_utilization_from_the_samples_of_the_interval():
    fake = FakeNvml([h200()])
    node = Node(fake)
    for offset, value in [(-25, 99), (-5, 98), (0, 97), (1, 20), (4, 60), (9.5, 100), (10, 40), (10.3, 0)]:
        fake.push_util(0, us(T0 + offset), value)
    uuid = fake.gpus[0].uuid

    first = node.sample(T0 + 10)[uuid]  # (T0, T0+10]: not the ones at or before T0, nor the one after

    assert first["util_gpu"] == pytest.approx(55.0)  # mean of 20, 60, 100, 40
    assert first["util_gpu_max"] == 100

    fake.push_util(0, us(T0 + 15), 10)
    second = node.sample(T0 + 20)[uuid]  # the sample after T0+10 was kept for this interval

    assert second["util_gpu"] == pytest.approx(5.0)
    assert second["util_gpu_max"] == 10


def test_it_reports_unknown_utilization_when_nvml_has_no_new_sample(caplog):
    fake = FakeNvml([h200()])
    node = Node(fake)
    uuid = fake.gpus[0].uuid
    caplog.set_level(logging.INFO, logger=nvml_module.__name__)

    empty = node.sample(T0 + 10)[uuid]  # the buffer is empty: NOT_FOUND

    assert empty["util_gpu"] is None and empty["util_gpu_max"] is None and empty["util_mem"] is None
    fake.push_util(0, us(T0 + 12), 30)
    assert node.sample(T0 + 20)[uuid]["util_gpu"] == 30
    again = node.sample(T0 + 30)[uuid]  # nothing new since T0+12: unknown, not 0 and not 30
    assert again["util_gpu"] is None and again["util_gpu_max"] is None
    assert "utilization" not in caplog.text, "NOT_FOUND is not an error"


def test_it_reports_unknown_utilization_when_every_sample_is_older_than_the_interval():
    fake = FakeNvml([h200()])
    node = Node(fake)
    for second in range(30):
        fake.push_util(0, us(T0 - 60 + second), 90)  # an old buffer, seen on the first call

    record = node.sample(T0 + 10)[fake.gpus[0].uuid]

    assert record["util_gpu"] is None
    assert fake.gpus[0].samples  # and they are consumed: the next call asks for newer ones only
    assert node.backend._gpus[0].last_seen[pynvml.NVML_GPU_UTILIZATION_SAMPLES] == us(T0 - 31)


def test_it_reads_sample_values_in_the_value_type_nvml_gives():
    gpu = h200()
    gpu.sample_value_type = pynvml.NVML_VALUE_TYPE_DOUBLE
    fake = FakeNvml([gpu])
    node = Node(fake)
    fake.push_util(0, us(T0 + 2), 12.5)
    fake.push_util(0, us(T0 + 7), 37.5)

    record = node.sample(T0 + 10)[gpu.uuid]

    assert record["util_gpu"] == pytest.approx(25.0)
    assert record["util_gpu_max"] == pytest.approx(37.5)


def test_it_drops_utilization_samples_outside_0_to_100(caplog):
    fake = FakeNvml([h200()])
    node = Node(fake)
    fake.push_util(0, us(T0 + 2), 50)
    fake.push_util(0, us(T0 + 3), 4_294_967_295)  # garbage NVML is known to return now and then
    fake.push_util(0, us(T0 + 4), 2619)

    record = node.sample(T0 + 10)[fake.gpus[0].uuid]

    assert (record["util_gpu"], record["util_gpu_max"]) == (50, 50)
    assert "outside 0-100" in caplog.text


def test_it_finds_the_interval_when_nvml_stamps_samples_with_time_since_boot():
    fake = FakeNvml([h200()])
    node = Node(fake)
    for offset, value in [(-3, 100), (2, 10), (8, 30), (11, 100)]:
        fake.push_util(0, us(T0 + offset - BOOT), value)

    record = node.sample(T0 + 10)[fake.gpus[0].uuid]

    assert (record["util_gpu"], record["util_gpu_max"]) == (20, 30)


def test_it_averages_memory_utilization_and_leaves_it_null_where_unsupported():
    without = h200(1)
    without.unsupported_samples.add(pynvml.NVML_MEMORY_UTILIZATION_SAMPLES)
    fake = FakeNvml([h200(0), without])
    node = Node(fake)
    for index in (0, 1):
        fake.push_util(index, us(T0 + 5), 100)
        fake.push_mem_util(index, us(T0 + 3), 7)
        fake.push_mem_util(index, us(T0 + 6), 8)

    records = node.sample(T0 + 10)

    assert records[fake.gpus[0].uuid]["util_mem"] == pytest.approx(7.5)
    assert records[without.uuid]["util_mem"] is None
    assert records[without.uuid]["util_gpu"] == 100


# ------------------------------------------------------------------ memory, power, energy, temperature, clock


def test_it_maps_memory_power_temperature_and_clock():
    fake = FakeNvml([h200()])
    node = Node(fake)

    record = node.sample(T0 + 10)[fake.gpus[0].uuid]

    assert record["mem_used_mib"] == 32362  # as nvidia-smi shows it: the reserved 614 MiB apart
    assert record["mem_total_mib"] == 143771
    assert record["power_w"] == pytest.approx(627.32)  # first reading: no energy baseline yet
    assert record["energy_j"] is None
    assert record["temp_c"] == 52
    assert record["sm_clock_mhz"] == 1980
    assert record["ts"] == T0 + 10 and record["interval_s"] == INTERVAL


def test_it_falls_back_to_memory_info_v1_on_an_older_driver():
    gpu = h200()
    gpu.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    node = Node(FakeNvml([gpu]))

    record = node.sample(T0 + 10)[gpu.uuid]

    assert (record["mem_used_mib"], record["mem_total_mib"]) == (32362 + 614, 143771)


def test_it_takes_energy_and_mean_power_from_the_energy_counter():
    gpu = h200()
    node = Node(FakeNvml([gpu]))
    assert node.sample(T0 + 10)[gpu.uuid]["energy_j"] is None  # first reading: no baseline

    gpu.energy_mj += 6_300_000
    record = node.sample(T0 + 20)[gpu.uuid]
    assert record["energy_j"] == pytest.approx(6300.0)
    assert record["power_w"] == pytest.approx(630.0)  # the interval's mean, not the 627.32 W reading

    gpu.energy_mj = 1_500  # the driver was reloaded: the counter restarted
    reset = node.sample(T0 + 30)[gpu.uuid]
    assert reset["energy_j"] is None
    assert reset["power_w"] == pytest.approx(627.32)

    gpu.energy_mj += 6_000_000
    assert node.sample(T0 + 40)[gpu.uuid]["energy_j"] == pytest.approx(6000.0)

    gpu.energy_mj += 12_400_000  # one boundary missed: 20 s since the last reading
    missed = node.sample(T0 + 60)[gpu.uuid]
    assert missed["power_w"] == pytest.approx(620.0)
    assert missed["energy_j"] == pytest.approx(6200.0)  # this record's 10 s

    gpu.energy_mj += 60_000_000  # the agent stalled a minute: no guess
    stalled = node.sample(T0 + 120)[gpu.uuid]
    assert stalled["energy_j"] is None and stalled["power_w"] == pytest.approx(627.32)
    gpu.energy_mj += 6_100_000
    assert node.sample(T0 + 130)[gpu.uuid]["energy_j"] == pytest.approx(6100.0)


def test_it_shares_energy_by_time_when_the_sampler_catches_up_a_boundary():
    gpu = h200()
    node = Node(FakeNvml([gpu]))
    node.sample(T0 + 10)
    gpu.energy_mj += 12_000_000  # 20 s at 600 W: the boundary T0+20 is sampled late, at T0+30.25

    late = node.sample(T0 + 20, at=T0 + 30.25)[gpu.uuid]
    caught_up = node.sample(T0 + 30, at=T0 + 30.3)[gpu.uuid]

    assert (late["power_w"], late["energy_j"]) == (pytest.approx(600.0), pytest.approx(6000.0))
    assert caught_up["energy_j"] is None, "0.05 s after the last reading: nothing to measure"
    assert caught_up["power_w"] == pytest.approx(627.32)  # the one reading, not 0 W
    gpu.energy_mj += 6_150_000
    on_time = node.sample(T0 + 40)[gpu.uuid]  # measured from the T0+30.25 reading, kept as baseline
    assert on_time["energy_j"] == pytest.approx(6150.0)


def test_it_counts_new_double_bit_ecc_errors():
    gpu, without = h200(0), h200(1)
    without.fail("nvmlDeviceGetTotalEccErrors", pynvml.NVML_ERROR_NOT_SUPPORTED)
    node = Node(FakeNvml([gpu, without]))

    first = node.sample(T0 + 10)
    assert first[gpu.uuid]["ecc_dbe_count"] is None  # no baseline yet
    gpu.ecc_dbe_volatile += 2
    assert node.sample(T0 + 20)[gpu.uuid]["ecc_dbe_count"] == 2
    assert node.sample(T0 + 30)[gpu.uuid]["ecc_dbe_count"] == 0
    gpu.ecc_dbe_volatile = 1  # counter reset (driver reload), then one new error
    last = node.sample(T0 + 40)
    assert last[gpu.uuid]["ecc_dbe_count"] == 1
    assert last[without.uuid]["ecc_dbe_count"] is None


# ------------------------------------------------------------------ XID events


def test_it_counts_xid_events_per_gpu(caplog):
    no_events = h200(2)
    no_events.events_supported = False
    fake = FakeNvml([h200(0), h200(1), no_events])
    node = Node(fake)
    fake.emit_xid(0, 79)
    fake.emit_xid(0, 79)
    fake.emit_xid(1, 48)

    records = node.sample(T0 + 10)

    assert records[fake.gpus[0].uuid]["xid_count"] == 2
    assert records[fake.gpus[1].uuid]["xid_count"] == 1
    assert records[no_events.uuid]["xid_count"] is None  # registration refused: unknown, not 0
    assert "XID 79" in caplog.text and "XID 48" in caplog.text
    later = node.sample(T0 + 20)
    assert [later[gpu.uuid]["xid_count"] for gpu in fake.gpus] == [0, 0, None]


# ------------------------------------------------------------------ processes


def test_it_lists_processes_with_their_users_and_job_refs(tmp_path):
    me = pwd.getpwuid(os.getuid()).pw_name
    root_name = pwd.getpwuid(0).pw_name
    stranger = unknown_uid()
    pod = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    container = "4f" * 32
    write_proc(tmp_path, 10291, uid=os.getuid(), cgroup="0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
    write_proc(tmp_path, 10293, uid=0, cgroup=(
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{pod.replace('-', '_')}.slice/cri-containerd-{'ab' * 32}.scope\n"
    ))
    write_proc(tmp_path, 10309, uid=stranger, cgroup=f"12:memory:/docker/{container}\n1:name=systemd:/docker/{container}\n")
    gpu = h200()
    gpu.processes.append(FakeProcess(77777, None))  # gone from /proc, memory not available
    node = Node(FakeNvml([gpu]), proc_root=tmp_path)

    processes = node.sample(T0 + 10)[gpu.uuid]["processes"]

    assert processes == [
        {"pid": 10291, "user": me, "used_mib": 2566, "job_ref": "job_4242", "gi_id": None, "ci_id": None},
        {"pid": 10293, "user": root_name, "used_mib": 1542, "job_ref": f"k8s-pod:{pod}", "gi_id": None, "ci_id": None},
        {"pid": 10309, "user": None, "used_mib": 28234, "job_ref": f"container:{container}", "gi_id": None, "ci_id": None},
        {"pid": 77777, "user": None, "used_mib": None, "job_ref": None, "gi_id": None, "ci_id": None},
    ]


def test_it_gives_an_empty_process_list_when_nvml_refuses_it():
    gpu = h200()
    gpu.fail("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_NO_PERMISSION)
    node = Node(FakeNvml([gpu]))

    assert node.sample(T0 + 10)[gpu.uuid]["processes"] == []


# ------------------------------------------------------------------ MIG


def mig_node(tmp_path: Path, **changes) -> tuple[Node, FakeNvml]:
    gpu = h100_mig()
    for name, value in changes.items():
        setattr(gpu, name, value)
    gpu.processes.append(FakeProcess(30001, 512, gi_id=9, ci_id=0))  # on the first 1g.10gb
    gpu.processes.append(FakeProcess(30002, 256, gi_id=12, ci_id=0))  # an instance not enumerated
    write_proc(tmp_path, 21198, uid=0, cgroup="4:memory:/slurm/uid_1000/job_777/step_0/task_0\n")
    fake = FakeNvml([gpu])
    return Node(fake, proc_root=tmp_path), fake


def test_it_samples_mig_devices_with_null_utilization_and_attributes_processes(tmp_path):
    node, fake = mig_node(tmp_path)
    gpu = fake.gpus[0]
    three_g, two_g, one_g, other_one_g = gpu.migs

    records = node.sample(T0 + 10)

    assert list(records) == [gpu.uuid, three_g.uuid, two_g.uuid, one_g.uuid, other_one_g.uuid]
    parent = records[gpu.uuid]
    assert parent["util_gpu"] is None and parent["util_gpu_max"] is None and parent["util_mem"] is None
    assert "nvmlDeviceGetSamples" not in fake.calls, "no utilization in MIG mode"
    assert (parent["mem_used_mib"], parent["mem_total_mib"]) == (11125, 81559)
    assert parent["power_w"] == pytest.approx(432.21)
    assert (parent["temp_c"], parent["sm_clock_mhz"], parent["xid_count"]) == (53, 1980, 0)
    assert [p["pid"] for p in parent["processes"]] == [30002]  # matched to no MIG device
    for mig, used, total in [(three_g, 11091, 40448), (two_g, 17, 20096), (one_g, 9, 9984), (other_one_g, 9, 9984)]:
        instance = records[mig.uuid]
        assert (instance["mem_used_mib"], instance["mem_total_mib"]) == (used, total)
        assert instance["util_gpu"] is None and instance["util_gpu_max"] is None
        assert instance["power_w"] is None and instance["energy_j"] is None and instance["xid_count"] is None
    assert [(p["pid"], p["used_mib"], p["gi_id"], p["ci_id"]) for p in records[three_g.uuid]["processes"]] == [
        (21180, 2296, 2, 0), (21181, 1272, 2, 0), (21198, 7484, 2, 0),
    ]
    assert records[three_g.uuid]["processes"][2]["job_ref"] == "job_777"
    assert records[two_g.uuid]["processes"] == []
    assert [p["pid"] for p in records[one_g.uuid]["processes"]] == [30001]


def test_it_asks_each_mig_device_for_its_processes_without_root(tmp_path):
    node, fake = mig_node(tmp_path, mig_processes_need_root=True)
    gpu = fake.gpus[0]

    records = node.sample(T0 + 10)

    assert records[gpu.uuid]["processes"] == []
    assert [p["pid"] for p in records[gpu.migs[0].uuid]["processes"]] == [21180, 21181, 21198]
    assert [p["pid"] for p in records[gpu.migs[2].uuid]["processes"]] == [30001]


def test_it_follows_mig_devices_created_while_it_runs(tmp_path):
    node, fake = mig_node(tmp_path)
    fake.add_mig(0, FakeMig(profile="1g.10gb", gi_id=12, ci_id=0, memory_total_mib=9984, memory_used_mib=300,
                            slices=1, profile_memory_mb=9856, multiprocessors=16, uuid="MIG-new-instance"))

    records = node.sample(T0 + 10)

    assert [p["pid"] for p in records["MIG-new-instance"]["processes"]] == [30002]
    assert records[fake.gpus[0].uuid]["processes"] == []


# ------------------------------------------------------------------ failures


def test_it_keeps_sampling_the_other_gpus_when_one_is_lost(caplog, tmp_path):
    fake = FakeNvml([h200(0), h200(1), h100_mig(2)])
    lost, mig_gpu = fake.gpus[1], fake.gpus[2]
    node = Node(fake, proc_root=tmp_path)
    node.sample(T0 + 10)

    lost.lost = mig_gpu.lost = True
    fake.emit_xid(1, 79)  # "GPU has fallen off the bus"
    for gpu in fake.gpus:
        gpu.energy_mj += 5_000_000
    records = node.sample(T0 + 20)
    again = node.sample(T0 + 30)

    assert records[fake.gpus[0].uuid]["energy_j"] == pytest.approx(5000.0)
    assert records[fake.gpus[0].uuid]["mem_used_mib"] == 32362
    measurements = [name for name in (*FLOAT_FIELDS, *INT_FIELDS) if name != "xid_count"]
    for uuid in (lost.uuid, mig_gpu.uuid, *(mig.uuid for mig in mig_gpu.migs)):
        for record in (records[uuid], again[uuid]):
            assert all(record[name] is None for name in measurements), record
            assert record["processes"] == []
    # the event set still reports: the XID that took the GPU away is not lost with it
    assert [records[lost.uuid]["xid_count"], again[lost.uuid]["xid_count"]] == [1, 0]
    assert all(records[mig.uuid]["xid_count"] is None for mig in mig_gpu.migs)
    assert caplog.text.count("GPU is lost") == 2  # once per GPU, not once per interval

    lost.lost = False  # back after a reset: counters start afresh
    back = node.sample(T0 + 40)[lost.uuid]
    assert back["mem_used_mib"] == 32362 and back["energy_j"] is None


def test_it_nulls_fields_nvml_cannot_give_and_logs_each_error_once(caplog):
    gpu = h200()
    gpu.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu.fail("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NOT_SUPPORTED)
    gpu.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_NO_PERMISSION)
    gpu.fail("nvmlDeviceGetClockInfo", pynvml.NVML_ERROR_UNKNOWN)
    gpu.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake = FakeNvml([gpu])
    node = Node(fake)
    caplog.set_level(logging.INFO, logger=nvml_module.__name__)

    for step in (1, 2, 3):
        record = node.sample(T0 + 10 * step)[gpu.uuid]
        assert record["power_w"] is None and record["energy_j"] is None
        assert record["temp_c"] is None and record["sm_clock_mhz"] is None
        assert record["util_gpu"] is None and record["util_mem"] is None
        assert (record["mem_used_mib"], record["mem_total_mib"]) == (32362, 143771)

    messages = [r.getMessage() for r in caplog.records]
    for what in ("power", "energy counter", "temperature", "SM clock", "utilization samples"):
        assert sum(f": {what} unavailable" in m for m in messages) == 1, what
    levels = {r.getMessage().split(": ")[1]: r.levelno for r in caplog.records}
    assert levels["power unavailable"] == logging.INFO  # not supported: expected
    assert levels["SM clock unavailable"] == logging.WARNING  # an unknown error


def test_it_never_raises_for_an_unexpected_failure_on_one_gpu(caplog):
    fake = FakeNvml([h200(0), h200(1)])
    broken = fake.gpus[0]
    real = fake.nvmlDeviceGetTemperature

    def temperature(handle, sensor):
        if fake.nvmlDeviceGetUUID(handle) == broken.uuid:
            raise ValueError("a binding surprise")
        return real(handle, sensor)

    fake.nvmlDeviceGetTemperature = temperature
    node = Node(fake)

    records = node.sample(T0 + 10)

    assert records[broken.uuid]["mem_used_mib"] is None
    assert records[fake.gpus[1].uuid]["temp_c"] == 52
    assert "sampling failed" in caplog.text


def test_it_retries_a_gpu_it_could_not_open_at_start():
    fake = FakeNvml([h200(0), h200(1)])
    late = fake.gpus[1]
    late.handle_fails_with = pynvml.NVML_ERROR_GPU_IS_LOST
    node = Node(fake)

    assert list(node.sample(T0 + 10)) == [fake.gpus[0].uuid]
    assert [gpu["index"] for gpu in node.backend.inventory()["gpus"]] == [0]

    late.handle_fails_with = None
    fake.emit_xid(1)  # not registered yet: not delivered
    assert list(node.sample(T0 + 20)) == [fake.gpus[0].uuid, late.uuid]
    assert [gpu["index"] for gpu in node.backend.inventory()["gpus"]] == [0, 1]
    fake.emit_xid(1)
    assert node.sample(T0 + 30)[late.uuid]["xid_count"] == 1


# ------------------------------------------------------------------ GPM


BUSY = {  # what an H200 running a bf16 training step might read, by record field
    "sm_active": 62.5, "sm_occupancy": 31.25, "tensor_active": 41.75, "dram_active": 55.0, "fp16_active": 12.5,
    "fp32_active": 7.25, "fp64_active": 0.0, "pcie_tx_mibs": 1200.0, "pcie_rx_mibs": 3400.5,
    "nvlink_rx_mibs": 81920.0, "nvlink_tx_mibs": 79872.25,
}


def gpm_of(record: dict) -> dict:
    return {name: record[name] for name in GPM_FIELDS}


def test_it_measures_gpm_between_this_and_the_previous_intervals_sample():
    fake = FakeNvml([h200()])
    gpu = fake.gpus[0]
    node = Node(fake)
    gpu.gpm.run(**BUSY)

    first = node.sample(T0 + 10)[gpu.uuid]
    second = node.sample(T0 + 20)[gpu.uuid]
    gpu.gpm.rates.clear()
    gpu.gpm.add("sm_active", 400)  # busy 4 s of the 10 s, fabricated as counter movement
    gpu.gpm.add("pcie_rx_mibs", 25_000)
    third = node.sample(T0 + 30)[gpu.uuid]

    assert gpm_of(first) == dict.fromkeys(GPM_FIELDS), "one sample only: unknown, not 0"
    assert gpm_of(second) == pytest.approx(BUSY)
    assert third["sm_active"] == pytest.approx(40.0) and third["pcie_rx_mibs"] == pytest.approx(2500.0)
    assert third["tensor_active"] == 0 and third["nvlink_tx_mibs"] == 0, "an idle pipe is 0, measured"
    assert second["temp_c"] == 52 and second["mem_used_mib"] == 32362
    assert fake.calls.count("nvmlGpmSampleGet") == 3 and fake.calls.count("nvmlGpmMetricsGet") == 2
    assert fake.calls.count("nvmlGpmQueryDeviceSupport") == 1, "support is decided once, at start"


def test_it_gives_null_gpm_on_a_gpu_without_it_and_still_measures_the_others(caplog):
    fake = FakeNvml([l40s(0), h200(1)])
    old, new = fake.gpus
    new.gpm.run(sm_active=90.0)
    caplog.set_level(logging.INFO, logger=gpm_module.__name__)
    node = Node(fake)

    records = [node.sample(T0 + 10 * step) for step in (1, 2, 3)]

    assert all(gpm_of(r[old.uuid]) == dict.fromkeys(GPM_FIELDS) for r in records)
    assert all(r[old.uuid]["mem_total_mib"] == 46068 for r in records)
    assert [r[new.uuid]["sm_active"] for r in records] == [None, 90.0, 90.0]
    assert fake.calls.count("nvmlGpmSampleGet") == 3, "the L40S is not asked every interval"
    assert caplog.text.count(f"GPU {old.uuid}: GPM not supported") == 1
    assert caplog.text.count(f"GPU {new.uuid}: GPM supported") == 1


@pytest.mark.parametrize(
    ("scenario", "logged"),
    [
        ("old driver", "GPM support unavailable: Function Not Found"),
        ("old binding", "this nvidia-ml-py has no nvmlGpmQueryDeviceSupport"),
        ("support refused", "GPM support unavailable: Insufficient Permissions"),
        ("sample refused", "GPM sample unavailable: Insufficient Permissions"),
        ("metrics refused", "GPM metrics unavailable: Not Supported"),
        ("binding surprise", "GPM sampling failed; its GPM fields are null"),
    ],
)
def test_it_gives_null_gpm_where_nvml_cannot_and_samples_everything_else(scenario, logged, monkeypatch, caplog):
    gpu = h200()
    gpu.gpm.run(**BUSY)
    if scenario == "old binding":
        monkeypatch.delattr(FakeNvml, "nvmlGpmQueryDeviceSupport")  # the fake now answers as pynvml lacks it
    if scenario == "support refused":
        gpu.fail("nvmlGpmQueryDeviceSupport", pynvml.NVML_ERROR_NO_PERMISSION)
    if scenario == "sample refused":
        gpu.fail("nvmlGpmSampleGet", pynvml.NVML_ERROR_NO_PERMISSION)
    fake = FakeNvml([gpu, *([h200(1)] if scenario in ("support refused", "sample refused") else [])],
                    driver_has_gpm=scenario != "old driver")
    if scenario == "metrics refused":
        monkeypatch.setattr(fake, "nvmlGpmMetricsGet", lambda metricsGet: _raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED))
    if scenario == "binding surprise":  # e.g. a changed ctypes structure: GPM null, the record kept
        monkeypatch.setattr(fake, "nvmlGpmMetricsGet", lambda metricsGet: _raise_nvml(None))
    caplog.set_level(logging.INFO)
    node = Node(fake)

    records = [node.sample(T0 + 10 * step) for step in (1, 2, 3)]

    for by_uuid in records:
        assert gpm_of(by_uuid[gpu.uuid]) == dict.fromkeys(GPM_FIELDS), scenario
        assert by_uuid[gpu.uuid]["mem_used_mib"] == 32362 and by_uuid[gpu.uuid]["temp_c"] == 52
        assert by_uuid[gpu.uuid]["processes"], "the processes are listed as usual"
    assert caplog.text.count(logged) == 1, caplog.text
    if scenario in ("support refused", "sample refused"):  # the second GPU's GPM is its own
        assert records[2][fake.gpus[1].uuid]["sm_active"] == 0
    # an older driver, binding or permission is expected, not a warning; a surprise is an error
    expected_level = logging.ERROR if scenario == "binding surprise" else logging.INFO
    assert all(r.levelno == expected_level for r in caplog.records if logged in r.getMessage())


def _raise_nvml(code: int | None):
    raise pynvml.NVMLError(code) if code is not None else TypeError("expected c_uint instance")


def test_it_nulls_only_the_metrics_whose_own_return_code_is_an_error(caplog):
    gpu = h200()
    gpu.gpm.run(**BUSY)
    gpu.gpm.fail_metric("nvlink_rx_mibs", pynvml.NVML_ERROR_NOT_SUPPORTED)  # a PCIe card: no NVLink
    gpu.gpm.fail_metric("tensor_active", pynvml.NVML_ERROR_UNKNOWN)
    node = Node(FakeNvml([gpu]))
    caplog.set_level(logging.INFO, logger=gpm_module.__name__)

    node.sample(T0 + 10)
    records = [node.sample(T0 + 10 * step)[gpu.uuid] for step in (2, 3)]

    for record in records:
        assert record["nvlink_rx_mibs"] is None and record["tensor_active"] is None
        assert gpm_of(record) == pytest.approx({**BUSY, "nvlink_rx_mibs": None, "tensor_active": None})
    levels = {r.getMessage().split(": ")[1]: r.levelno for r in caplog.records if "unavailable" in r.getMessage()}
    assert levels == {"GPM nvlink_rx_mibs unavailable": logging.INFO, "GPM tensor_active unavailable": logging.WARNING}
    assert sum("unavailable" in r.getMessage() for r in caplog.records) == 2, "each logged once"


def test_it_drops_garbage_gpm_values_and_clamps_rounding_at_full_load():
    gpu = h200()
    node = Node(FakeNvml([gpu]))
    node.sample(T0 + 10)
    gpu.gpm.add("sm_active", 1003)  # 100.3 %: rounding at full load
    gpu.gpm.add("sm_occupancy", 5_000)  # 500 %: garbage
    gpu.gpm.add("dram_active", -10)  # a counter that went back
    gpu.gpm.add("pcie_rx_mibs", float("nan"))

    record = node.sample(T0 + 20)[gpu.uuid]

    assert record["sm_active"] == 100
    assert record["sm_occupancy"] is None and record["dram_active"] is None and record["pcie_rx_mibs"] is None
    assert record["fp32_active"] == 0


def test_it_keeps_the_older_gpm_sample_when_a_boundary_is_caught_up_late():
    gpu = h200()
    fake = FakeNvml([gpu])
    node = Node(fake)
    node.sample(T0 + 10)
    gpu.gpm.add("sm_active", 1000)  # 50 % over the 20 s to T0+30.25

    late = node.sample(T0 + 20, at=T0 + 30.25)[gpu.uuid]
    gpu.gpm.add("sm_active", 250)
    caught_up = node.sample(T0 + 30, at=T0 + 30.3)[gpu.uuid]  # 50 ms later: NVML needs 100 ms
    on_time = node.sample(T0 + 40)[gpu.uuid]

    assert late["sm_active"] == pytest.approx(50.0)
    assert gpm_of(caught_up) == dict.fromkeys(GPM_FIELDS)
    assert on_time["sm_active"] == pytest.approx(25.0), "measured from the T0+30.25 sample, kept as baseline"
    assert fake.calls.count("nvmlGpmMetricsGet") == 2


def test_it_starts_gpm_afresh_after_the_agent_stalled():
    gpu = h200()
    gpu.gpm.run(sm_active=70.0)
    node = Node(FakeNvml([gpu]))
    node.sample(T0 + 10)

    stalled = node.sample(T0 + 50)[gpu.uuid]  # 40 s after the last sample: not this interval's activity
    after = node.sample(T0 + 60)[gpu.uuid]

    assert stalled["sm_active"] is None and after["sm_active"] == pytest.approx(70.0)


def test_it_samples_each_mig_gpu_instance_through_its_parent(tmp_path):
    node, fake = mig_node(tmp_path)
    gpu = fake.gpus[0]
    three_g, two_g, one_g, other_one_g = gpu.migs
    gpu.gpm.run(sm_active=99.0)  # the whole GPU's counters: not reported in MIG mode
    three_g.gpm.run(**BUSY)
    two_g.gpm.run(sm_active=20.0, tensor_active=5.0)
    other_one_g.fail("nvmlGpmMigSampleGet", pynvml.NVML_ERROR_NO_PERMISSION)
    fake.add_mig(0, FakeMig(profile="1c.3g.40gb", gi_id=2, ci_id=1, memory_total_mib=40448, memory_used_mib=0,
                            slices=3, profile_memory_mb=40192, multiprocessors=16, uuid="MIG-second-ci-of-gi-2"))

    node.sample(T0 + 10)
    records = node.sample(T0 + 20)

    assert gpm_of(records[gpu.uuid]) == dict.fromkeys(GPM_FIELDS), "MIG mode: the parent is unmeasured"
    assert "nvmlGpmSampleGet" not in fake.calls
    assert gpm_of(records[three_g.uuid]) == pytest.approx(BUSY)
    assert gpm_of(records["MIG-second-ci-of-gi-2"]) == pytest.approx(BUSY), "a compute instance: its GPU instance's"
    assert (records[two_g.uuid]["sm_active"], records[two_g.uuid]["tensor_active"]) == (20.0, 5.0)
    assert records[one_g.uuid]["sm_active"] == 0
    assert gpm_of(records[other_one_g.uuid]) == dict.fromkeys(GPM_FIELDS)
    assert records[other_one_g.uuid]["mem_total_mib"] == 9984


def test_it_frees_gpm_samples_of_devices_that_went_away_and_on_close(tmp_path):
    node, fake = mig_node(tmp_path)
    gpu = fake.gpus[0]
    node.sample(T0 + 10)
    assert len(fake.gpm_buffers) == 2 * 4, "two sample buffers per MIG device"

    gpu.migs.pop()  # the last 1g.10gb destroyed
    node.sample(T0 + 20)
    assert len(fake.gpm_buffers) == 2 * 3

    node.backend.close()
    assert fake.gpm_buffers == {} and fake.init_count == 0


def test_it_measures_no_gpm_across_a_lost_gpu():
    gpu = h200()
    gpu.gpm.run(sm_active=50.0)
    node = Node(FakeNvml([gpu]))
    node.sample(T0 + 10)
    gpu.lost = True
    assert node.sample(T0 + 20)[gpu.uuid]["sm_active"] is None
    gpu.lost = False

    back = node.sample(T0 + 30)[gpu.uuid]
    again = node.sample(T0 + 40)[gpu.uuid]

    assert back["sm_active"] is None, "the counters may have restarted: no delta across the loss"
    assert again["sm_active"] == pytest.approx(50.0)


# ------------------------------------------------------------------ inventory and lifecycle


def test_it_describes_the_node_in_its_inventory():
    fake = FakeNvml([h200(0), h100_mig(1), l40s(2)], cuda_version=12080)
    node = Node(fake)

    inventory = node.backend.inventory()

    check_inventory(inventory)
    assert inventory["host"] == "gpu-node-01"
    assert inventory["agent_version"] == agents.__version__
    assert (inventory["driver_version"], inventory["cuda_version"]) == ("590.48.01", "12.8")
    h200_gpu, h100_gpu, l40s_gpu = inventory["gpus"]
    assert h200_gpu == {
        "index": 0, "uuid": fake.gpus[0].uuid, "name": "NVIDIA H200", "memory_mib": 143771,
        "pci_bus_id": "00000000:83:00.0", "mig_mode": False, "mig_instances": [],
    }
    assert (h100_gpu["name"], h100_gpu["memory_mib"], h100_gpu["pci_bus_id"]) == (
        "NVIDIA H100 80GB HBM3", 81559, "00000000:0A:00.0",
    )
    assert h100_gpu["mig_mode"] is True
    assert h100_gpu["mig_instances"] == [
        {"uuid": mig.uuid, "profile": profile, "gi_id": gi, "ci_id": 0, "memory_mib": mib, "slices": slices,
         "total_slices": 7, "sm_count": sms}
        for mig, (profile, gi, mib, slices, sms) in zip(
            fake.gpus[1].migs,
            [("3g.40gb", 2, 40448, 3, 60), ("2g.20gb", 3, 20096, 2, 32), ("1g.10gb", 9, 9984, 1, 16),
             ("1g.10gb", 10, 9984, 1, 16)],
            strict=True,
        )
    ]
    assert (l40s_gpu["mig_mode"], l40s_gpu["mig_instances"]) == (False, [])


def test_it_reports_cuda_as_major_dot_minor():
    assert Node(FakeNvml([h200()])).backend.inventory()["cuda_version"] == "13.1"  # 13010, as on 590.48.01


def test_it_falls_back_to_the_profile_name_for_mig_slices():
    fake = FakeNvml([h100_mig()])
    for mig in fake.gpus[0].migs:
        mig.fail("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_NOT_SUPPORTED)

    instances = Node(fake).backend.inventory()["gpus"][0]["mig_instances"]

    assert [i["slices"] for i in instances] == [3, 2, 1, 1]
    assert [i["sm_count"] for i in instances] == [None] * 4, "no attributes: SM count unknown, not 0"


def test_it_shuts_nvml_down_once_on_close():
    fake = FakeNvml([h200()])
    node = Node(fake)
    assert fake.init_count == 1

    node.backend.close()
    node.backend.close()

    assert fake.init_count == 0
    assert fake.calls.count("nvmlEventSetFree") == 1 and fake.calls.count("nvmlShutdown") == 1


def test_it_imports_without_django():
    code = "import sys; sys.modules['django'] = None; import agents.backends.nvml, agents.backends.cgroup"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ the fake stays faithful to pynvml


def nvml_functions_the_backend_calls() -> set[str]:
    """Every ``nvml.nvml…`` / ``self._nvml.nvml…`` name (and ``"nvml…"`` looked up by name) in the backend's
    source and its GPM module's that is not a constant."""
    source = Path(nvml_module.__file__).read_text() + Path(gpm_module.__file__).read_text()
    names = set(re.findall(r"nvml\.(nvml\w+)", source)) | set(re.findall(r"\"(nvml\w+)\"", source))
    return {name for name in names if not hasattr(pynvml, name) or callable(getattr(pynvml, name))}


def test_it_calls_only_functions_that_pynvml_has_and_the_fake_implements():
    called = nvml_functions_the_backend_calls()
    assert "nvmlDeviceGetSamples" in called and "nvmlEventSetWait" in called
    assert {"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
            "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet"} <= called
    fake = FakeNvml([h200()])
    for name in sorted(called):
        assert inspect.isfunction(getattr(pynvml, name)), f"pynvml has no function {name}"
        assert callable(getattr(fake, name)), f"the fake lacks {name}"


def test_it_fakes_pynvml_functions_with_their_real_signatures():
    fake = FakeNvml([h200()])
    faked = [name for name in dir(FakeNvml) if name.startswith("nvml") and callable(getattr(FakeNvml, name))]
    assert len(faked) > 20
    for name in faked:
        real = inspect.signature(getattr(pynvml, name))
        ours = inspect.signature(getattr(fake, name))
        assert [(p.name, p.default) for p in ours.parameters.values()] == [
            (p.name, p.default) for p in real.parameters.values()
        ], name
    with pytest.raises(AttributeError, match="does not implement"):
        fake.nvmlDeviceGetFanSpeed  # noqa: B018 - the attribute access is the test
    assert fake.NVML_ERROR_NOT_FOUND == pynvml.NVML_ERROR_NOT_FOUND
    assert fake.NVMLError_NotFound is pynvml.NVMLError_NotFound


# ------------------------------------------------------------------ captures from a real GPU


CAPTURES = sorted(FIXTURES.glob("nvml-*.json"))


@pytest.mark.parametrize(
    "path",
    CAPTURES
    or [
        pytest.param(
            None,
            marks=pytest.mark.skip(
                reason="no real NVML capture yet: tests/agents/fixtures/README.md says how to make "
                "nvml-h200-<date>.json on a machine with a GPU"
            ),
        )
    ],
    ids=lambda path: path.name if path else "none",
)
def test_it_parses_a_capture_from_a_real_gpu(path):
    capture = json.loads(path.read_text())
    inventory, body = capture["inventory"], capture["samples"]
    check_inventory(inventory)
    assert inventory["gpus"], "the capture saw no GPU"
    assert {"spool_id", "records", "last_seq", "more", "dropped_total"} <= set(body)
    records = body["records"]
    mig_uuids = frozenset(i["uuid"] for gpu in inventory["gpus"] for i in gpu["mig_instances"])
    gpu_uuids = {gpu["uuid"] for gpu in inventory["gpus"]}
    for record in records:
        check_record(record, spooled=True, mig_uuids=mig_uuids)
    seqs = [record["seq"] for record in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert {record["gpu_uuid"] for record in records} <= gpu_uuids | mig_uuids
    by_gpu: dict[str, list[dict]] = {}
    for record in records:
        by_gpu.setdefault(record["gpu_uuid"], []).append(record)
    assert set(by_gpu) >= gpu_uuids, "every GPU of the inventory has records"
    for uuid, series in by_gpu.items():
        assert len(series) >= 2, f"{uuid}: a capture of a minute has several intervals"
        stamps = [record["ts"] for record in series]
        assert stamps == sorted(set(stamps)), f"{uuid}: one record per interval, in order"
        assert all((b - a) % series[0]["interval_s"] == 0 for a, b in itertools.pairwise(stamps))
    memory = {gpu["uuid"]: gpu["memory_mib"] for gpu in inventory["gpus"]}
    for record in records:
        if record["gpu_uuid"] in memory and record["mem_total_mib"] is not None:
            assert record["mem_total_mib"] == memory[record["gpu_uuid"]]
        if record["power_w"] is not None:
            assert 0 <= record["power_w"] < 2000
        if record["temp_c"] is not None:
            assert 0 < record["temp_c"] < 120
