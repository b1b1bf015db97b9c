"""A simulated GPU node: N GPUs of one model running a changing mix of jobs (sim_workloads.py).

Every value is a pure function of (seed, host, GPU, interval), so the sampler may ask for any past
interval (an accelerated clock catching up, a restarted agent filling its gap) and always gets the
same record. Optionally GPU 0 is MIG-partitioned as in the model's capture (gpu_models.py: the H100's
3g + 2g + 1g + 1g, the H200's 3g split into two compute instances + 2g + 1g + 1g): the GPU's record
then has null utilization (and no processes), and each MIG device (compute instance) has its own
record with null utilization, power, temperature and clock, the processes running in it, and the
memory of its GPU instance (compute instances of one GPU instance share it and report the same), as
the nvml backend reports them. A node in maintenance (``maintenance=True``) runs no workload.

GPM (records.GPM_FIELDS) on GPM-capable models (H100, H200): a whole GPU's readings from its job
(sim_workloads.gpm_at). Under MIG, as the nvml backend reports it: the parent's GPM null like its
utilization; each MIG device carries its GPU instance's percentages (nvmlGpmMigSampleGet samples GPU
instances: the compute instances of one report the same values, the SM-weighted mean of their jobs'),
with NVLink and PCIe null here (NVLink is off in MIG mode, as the H200 MIG capture says, and the PCIe
link is the whole GPU's). Null on the A100 and L40S. The real agent's first interval after a start has
null GPM (one sample only); the simulator does not copy that, as its records are a pure function of the
interval and may be asked for in any order.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import agents
from agents.backends.gpu_models import TOTAL_SLICES, GpuSpec, MigProfile, find_model
from agents.backends.sim_workloads import MEM_UTIL_RATIO, Job, gpm_at, job_at, mix, text_key, unit, util_at
from agents.records import GPM_FIELDS, Record, empty_record

# The same namespace and key layout as demo/cluster.py's demo_gpu_uuid, so a simulated node with
# seed 0 reports the very GPUs the demo data set registered for that hostname.
UUID_NAMESPACE = uuid.UUID("6f1c3a52-8f0e-4c1e-9a53-2b7d7e0c9d11")
DRIVER_VERSION, CUDA_VERSION = "590.48.01", "13.1"  # as in the captures
MAX_POINTS = 10  # sub-samples per interval: a mean and a max need a few, not one per second


def sim_gpu_uuid(hostname: str, index: int, seed: int = 0, mig_slot: int | None = None) -> str:
    """NVML-shaped UUID of simulated GPU ``index`` (or of its MIG instance number ``mig_slot``):
    ``GPU-`` / ``MIG-`` + uuid5(UUID_NAMESPACE, "<hostname>/<index>[/mig<slot>][/seed<seed>]")."""
    key = f"{hostname}/{index}" + ("" if mig_slot is None else f"/mig{mig_slot}") + (f"/seed{seed}" if seed else "")
    return f"{'GPU' if mig_slot is None else 'MIG'}-{uuid.uuid5(UUID_NAMESPACE, key)}"


def sim_pci_bus_id(index: int) -> str:
    """PCI bus ids spaced as on an 8-GPU HGX board (the demo data set uses the same)."""
    return f"00000000:{0x18 + index * 0x10:02X}:00.0"


@dataclass(frozen=True)
class _Instance:
    """A MIG device (compute instance) of a simulated GPU: its profile, UUID and workload key, and its
    part of its GPU instance by SMs (``sm_part``: 1 for a GPU instance with one compute instance)."""

    slot: int
    uuid: str
    key: int
    profile: MigProfile
    sm_part: float

    @property
    def gpu_fraction(self) -> float:
        """The share of the whole GPU it runs on (power is drawn by it)."""
        return self.profile.slices / TOTAL_SLICES * self.sm_part

    @property
    def memory_part_mib(self) -> int:
        """The memory its jobs may hold: its SMs' part of the GPU instance's (shared) memory."""
        return int(self.profile.memory_mib * self.sm_part)


@dataclass(frozen=True)
class _Gpu:
    index: int
    uuid: str
    key: int
    instances: tuple[_Instance, ...]


class SimBackend:
    """The ``sim`` backend (agents.records.Backend): any past interval can be computed, so it may run
    on an accelerated clock that starts in the past."""

    def __init__(self, *, hostname: str, gpus: int = 8, model: str = "H200", seed: int = 0, mig: bool = False,
                 maintenance: bool = False) -> None:
        """``maintenance``: the node is in maintenance and its GPUs run no workload (0 % utilization, no
        processes, idle power), as a drained node's do."""
        spec = find_model(model)
        if spec is None:
            raise ValueError(f"unknown GPU model {model!r}")
        if mig and not spec.mig_layout:
            raise ValueError(f"{spec.name} has no MIG")
        self.hostname, self.spec, self.seed, self.maintenance = hostname, spec, seed, maintenance
        host_key = mix(seed, text_key(hostname))
        self._gpus = []
        for index in range(gpus):
            key = mix(host_key, index)
            instances = ()
            if mig and index == 0:
                gi_sms: dict[int, int] = {}
                for profile in spec.mig_layout:
                    gi_sms[profile.gi_id] = gi_sms.get(profile.gi_id, 0) + profile.sm_count
                instances = tuple(
                    _Instance(slot, sim_gpu_uuid(hostname, index, seed, slot), mix(key, 1000 + slot), profile,
                              profile.sm_count / gi_sms[profile.gi_id])
                    for slot, profile in enumerate(spec.mig_layout)
                )
            self._gpus.append(_Gpu(index, sim_gpu_uuid(hostname, index, seed), key, instances))

    def inventory(self) -> dict[str, Any]:
        return {
            "host": self.hostname,
            "agent_version": agents.__version__,
            "driver_version": DRIVER_VERSION,
            "cuda_version": CUDA_VERSION,
            "gpus": [
                {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "name": self.spec.name,
                    "memory_mib": self.spec.memory_mib,
                    "pci_bus_id": sim_pci_bus_id(gpu.index),
                    "mig_mode": bool(gpu.instances),
                    "mig_instances": [
                        {
                            "uuid": inst.uuid,
                            "profile": inst.profile.profile,
                            "gi_id": inst.profile.gi_id,
                            "ci_id": inst.profile.ci_id,
                            "memory_mib": inst.profile.memory_mib,
                            "slices": inst.profile.slices,
                            "total_slices": TOTAL_SLICES,
                            "sm_count": inst.profile.sm_count,
                        }
                        for inst in gpu.instances
                    ],
                }
                for gpu in self._gpus
            ],
        }

    def sample(self, *, ts: int, interval_s: int) -> list[Record]:
        count = max(1, min(MAX_POINTS, interval_s))
        points = [ts - interval_s + (k + 1) * interval_s / count for k in range(count)]
        records: list[Record] = []
        for gpu in self._gpus:
            if gpu.instances:
                records.extend(self._sample_mig(gpu, ts, interval_s, points))
            else:
                records.append(self._sample_whole(gpu, ts, interval_s, points))
        return records

    def close(self) -> None:
        pass

    def _job_at(self, key: int, t: float) -> Job | None:
        return None if self.maintenance else job_at(key, t)

    # -- whole GPUs ---------------------------------------------------------------------------

    def _sample_whole(self, gpu: _Gpu, ts: int, interval_s: int, points: list[float]) -> Record:
        spec = self.spec
        utils, mem_utils, powers, gpms, jobs = [], [], [], [], {}
        for t in points:
            job = self._job_at(gpu.key, t)
            util = util_at(job, gpu.key, t) if job else 0.0
            utils.append(util)
            mem_utils.append(util * MEM_UTIL_RATIO[job.kind] if job else 0.0)
            powers.append(_power(spec, [(1.0, util, job is not None)], gpu.key, t))
            if spec.gpm:
                gpms.append(gpm_at(job, gpu.key, t, util))
            if job:
                jobs[job.pid] = job
        record = empty_record(ts=ts, gpu_uuid=gpu.uuid, interval_s=interval_s)
        record.update(_mean_gpm(gpms, GPM_FIELDS))
        processes = [_process(job, spec.memory_mib) for job in jobs.values()]
        record.update(
            util_gpu=round(sum(utils) / len(utils), 1),
            util_gpu_max=round(max(utils), 1),
            util_mem=round(sum(mem_utils) / len(mem_utils), 1),
            mem_used_mib=sum(p["used_mib"] for p in processes),
            mem_total_mib=spec.memory_mib,
            processes=processes,
        )
        self._fill_power(record, gpu, ts, interval_s, powers, busy=bool(jobs))
        return record

    def _fill_power(self, record: Record, gpu: _Gpu, ts: int, interval_s: int, powers: list[float], *, busy: bool) -> None:
        spec = self.spec
        power = round(sum(powers) / len(powers), 1)
        heat = (power - spec.idle_w) / (spec.full_load_w - spec.idle_w)
        record.update(
            power_w=power,
            energy_j=round(power * interval_s, 1),  # mean power × interval, exactly as reported
            temp_c=round(spec.idle_temp_c + (spec.full_load_temp_c - spec.idle_temp_c) * max(0.0, heat)),
            sm_clock_mhz=spec.max_sm_clock_mhz if busy else spec.idle_sm_clock_mhz,
            # Rare, but present, so alerts have something to show: about one XID a GPU-quarter.
            xid_count=1 if unit(gpu.key, ts, 7) < 1e-6 else 0,
            ecc_dbe_count=1 if unit(gpu.key, ts, 8) < 1e-7 else 0,
        )

    # -- MIG ----------------------------------------------------------------------------------

    def _sample_mig(self, gpu: _Gpu, ts: int, interval_s: int, points: list[float]) -> list[Record]:
        spec = self.spec
        powers: list[float] = []
        used_max = {inst.profile.gi_id: 0 for inst in gpu.instances}  # by GPU instance: its CIs share it
        jobs: dict[int, dict[int, Job]] = {inst.slot: {} for inst in gpu.instances}
        gpms: dict[int, list[list[float]]] = {gi: [] for gi in used_max}  # by GPU instance, per point
        for t in points:
            loads, used, readings = [], {}, {}
            for inst in gpu.instances:
                job = self._job_at(inst.key, t)
                util = util_at(job, inst.key, t) if job else 0.0
                loads.append((inst.gpu_fraction, util, job is not None))
                gi = inst.profile.gi_id
                used[gi] = used.get(gi, inst.profile.base_used_mib) + (_job_memory(job, inst.memory_part_mib) if job else 0)
                if spec.gpm:  # the GPU instance's: its compute instances' readings weighted by their SMs
                    reading = readings.setdefault(gi, [0.0] * len(_MIG_GPM_FIELDS))
                    for i, part in enumerate(gpm_at(job, inst.key, t, util)[: len(_MIG_GPM_FIELDS)]):
                        reading[i] += inst.sm_part * part
                if job:
                    jobs[inst.slot][job.pid] = job
            for gi, mib in used.items():
                used_max[gi] = max(used_max[gi], mib)
            for gi, reading in readings.items():
                gpms[gi].append(reading)
            powers.append(_power(spec, loads, gpu.key, t))
        instance_records = []
        for inst in gpu.instances:
            # As the nvml backend does: each process is listed once, on the record of the MIG
            # instance it runs in (gi_id/ci_id say which), not again on the parent's.
            processes = [
                {**_process(job, inst.memory_part_mib), "gi_id": inst.profile.gi_id, "ci_id": inst.profile.ci_id}
                for job in jobs[inst.slot].values()
            ]
            record = empty_record(ts=ts, gpu_uuid=inst.uuid, interval_s=interval_s)
            record.update(mem_used_mib=used_max[inst.profile.gi_id], mem_total_mib=inst.profile.memory_mib,
                          processes=processes)
            record.update(_mean_gpm(gpms[inst.profile.gi_id], _MIG_GPM_FIELDS))
            instance_records.append(record)
        # The whole GPU: NVML gives no utilization under MIG; memory is the GPU instances' sum.
        parent = empty_record(ts=ts, gpu_uuid=gpu.uuid, interval_s=interval_s)
        parent.update(mem_used_mib=sum(used_max.values()), mem_total_mib=spec.memory_mib)
        busy = any(instance["processes"] for instance in instance_records)
        self._fill_power(parent, gpu, ts, interval_s, powers, busy=busy)
        return [parent, *instance_records]


# A MIG device's GPM: its GPU instance's percentages (sm_active … fp64_active); NVLink and PCIe null.
_MIG_GPM_FIELDS = GPM_FIELDS[:7]


def _mean_gpm(readings: Sequence[Sequence[float]], fields: tuple[str, ...]) -> dict[str, float]:
    """The interval's GPM ``fields`` from per-point readings (in the order of ``fields``): the means, as
    two GPM samples at the interval's ends give them. Empty (the record keeps nulls) without readings."""
    if not readings:
        return {}
    return {name: round(sum(r[i] for r in readings) / len(readings), 1) for i, name in enumerate(fields)}


def _job_memory(job: Job, total_mib: int) -> int:
    return int(job.mem_frac * total_mib)


def _process(job: Job, total_mib: int) -> dict[str, Any]:
    return {
        "pid": job.pid, "user": job.user, "used_mib": _job_memory(job, total_mib),
        "job_ref": job.job_ref, "gi_id": None, "ci_id": None,
    }


def _power(spec: GpuSpec, loads: list[tuple[float, float, bool]], key: int, t: float) -> float:
    """Board power (W) at ``t`` for loads of (share of the GPU, SM utilization %, holds a context).
    A context alone lifts the board out of its idle state; utilization adds power a bit more than
    linearly (clocks and voltage rise with load)."""
    dynamic = spec.full_load_w - spec.idle_w
    power = spec.idle_w
    for share, util, active in loads:
        if active:
            power += share * dynamic * (0.06 + 0.94 * (util / 100) ** 1.2)
    return power * (1 + 0.01 * (2 * unit(key, int(t), 3) - 1))
