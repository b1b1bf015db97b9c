"""The simulated node's workloads: which job holds a GPU (or MIG instance) at a given time and how
busy it keeps it. Everything is a pure function of a 64-bit key (from seed, host and GPU) and the
time, so any past interval can be recomputed and a restarted agent produces the same values.

Time is cut into slots of ``SLOT_S`` (offset per key so GPUs do not all change at once). In each
slot the key and the slot number pick a workload kind; a job of that kind starts a little after
the slot begins and ends somewhat before it ends, leaving the GPU free in between.

:func:`gpm_at` gives what NVML GPM would read on a GPU running a job: SM activity below the duty
cycle (``util_gpu`` counts time with any kernel running, SM activity the share of SMs busy: real
fleets read about 20 points lower, and lower on nearly every GPU), occupancy lower still, tensor pipes
busy for training and moderately for inference, DRAM busier for (memory-bound) inference, FP16 over
FP32 and no FP64 for ML, NVLink only for multi-GPU training, a little PCIe. Each job has its own
ratios, drawn from its key.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

_M64 = (1 << 64) - 1
SLOT_S = 5400  # 90 minutes: several job changes in a two-hour accelerated demo

TRAINING, STARVED, INFERENCE, IDLE, FREE = "training", "starved", "inference", "allocated-idle", "free"
# Cumulative weights: steady training is the bulk of a training cluster's time.
_KIND_CUTS = ((0.35, TRAINING), (0.55, STARVED), (0.70, INFERENCE), (0.80, IDLE), (1.0, FREE))
# Share of total memory a job of each kind holds: (minimum, spread).
_MEMORY = {TRAINING: (0.70, 0.22), STARVED: (0.35, 0.30), INFERENCE: (0.30, 0.25), IDLE: (0.10, 0.35)}
# Memory-controller utilization per unit of SM utilization, by kind.
MEM_UTIL_RATIO = {TRAINING: 0.45, STARVED: 0.30, INFERENCE: 0.55, IDLE: 0.0}
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "wei", "lin")
CHECKPOINT_EVERY_S, CHECKPOINT_S = 1800, 60


def mix(*values: int) -> int:
    """A 64-bit hash of integers (splitmix64 steps): fast, stable across runs and platforms."""
    h = 0x9E3779B97F4A7C15
    for value in values:
        h = ((h ^ (value & _M64)) * 0xBF58476D1CE4E5B9) & _M64
        h = ((h ^ (h >> 31)) * 0x94D049BB133111EB) & _M64
        h ^= h >> 29
    return h


def unit(*values: int) -> float:
    """A number in [0, 1) from integers, deterministically."""
    return mix(*values) / 18446744073709551616.0


def text_key(text: str) -> int:
    """A stable 64-bit integer for a string (Python's own ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Job:
    """One job on one GPU (or MIG instance) over ``[start, end)`` epoch seconds."""

    kind: str
    start: float
    end: float
    mem_frac: float
    pid: int
    user: str
    job_ref: str | None
    period_s: float  # data-starved jobs: the oscillation period
    phase: float
    traits: int = 0  # a 64-bit key for the job's own GPM ratios (:func:`gpm_at`)


@lru_cache(maxsize=16384)
def _slot_job(key: int, slot: int) -> Job | None:
    r = [unit(key, slot, i) for i in range(9)]
    kind = next(name for cut, name in _KIND_CUTS if r[0] < cut)
    if kind == FREE:
        return None
    begin = slot * SLOT_S - key % SLOT_S
    low, spread = _MEMORY[kind]
    return Job(
        kind=kind,
        start=begin + r[1] * 0.25 * SLOT_S,
        end=begin + (0.65 + 0.35 * r[2]) * SLOT_S,
        mem_frac=low + spread * r[3],
        pid=2000 + int(r[4] * 400_000),
        user=USERS[int(r[5] * len(USERS))],
        # Most jobs come through Slurm; some run outside it (a login-node session, a stray container).
        job_ref=None if r[6] < 0.12 else f"job_{100_000 + int(r[7] * 900_000)}",
        period_s=60 + 180 * r[8],
        phase=2 * math.pi * r[3],
        traits=mix(key, slot, 99),
    )


def job_at(key: int, t: float) -> Job | None:
    """The job holding the GPU at time ``t``, or None when it is free."""
    slot = (int(t) + key % SLOT_S) // SLOT_S
    job = _slot_job(key, slot)
    if job is None or not job.start <= t < job.end:
        return None
    return job


def util_at(job: Job, key: int, t: float) -> float:
    """SM utilization (%) of ``job`` at time ``t``; the noise changes once a second."""
    second = int(t)
    noise = 2 * unit(key, second) - 1
    if job.kind == TRAINING:
        since = t - job.start
        if since >= CHECKPOINT_EVERY_S and since % CHECKPOINT_EVERY_S < CHECKPOINT_S:
            return 6 + 4 * noise  # writing a checkpoint: the GPUs wait on storage
        return 93 + 4 * noise
    if job.kind == STARVED:
        wave = math.sin(2 * math.pi * t / job.period_s + job.phase)
        return min(100.0, max(0.0, 62.5 + 30.5 * wave + 2 * noise))
    if job.kind == INFERENCE:
        window = second // 20  # requests arrive in bursts of ~20 s
        if unit(key, window, 1) < 0.35:
            return 55 + 40 * unit(key, window, 2) + 5 * noise
        return 4 + 3 * noise
    return 0.0  # allocated but idle: a process holds memory, the SMs do nothing


# GPM ratios by kind, each (low, spread) of a uniform draw per job: SM activity per point of duty cycle;
# occupancy, tensor, DRAM, FP16 and FP32 activity per point of SM activity. A data-starved job is
# training (its bursts are training steps). A few jobs keep SM activity at the duty cycle (ratio near 1).
_GPM_RATIOS = {
    TRAINING: ((0.45, 0.57), (0.35, 0.30), (0.45, 0.35), (0.30, 0.25), (0.45, 0.30), (0.04, 0.10)),
    INFERENCE: ((0.42, 0.58), (0.25, 0.25), (0.15, 0.25), (0.75, 0.35), (0.15, 0.20), (0.06, 0.12)),
}
_GPM_RATIOS[STARVED] = _GPM_RATIOS[TRAINING]
# Share of the training jobs that span several GPUs (all-reduce over NVLink), by kind.
_MULTI_GPU = {TRAINING: 0.75, STARVED: 0.5}
# PCIe with nothing running, MiB/s: the captures' idle "Rx/Tx Throughput" (337 / 371 KB/s on the H200).
PCIE_IDLE_RX_MIBS, PCIE_IDLE_TX_MIBS = 0.32, 0.35
GPM_IDLE = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, PCIE_IDLE_RX_MIBS, PCIE_IDLE_TX_MIBS)


@lru_cache(maxsize=16384)
def _gpm_traits(job: Job) -> tuple[tuple[float, ...], float, float]:
    """(the job's ratios in _GPM_RATIOS order, its NVLink MiB/s per direction at 100 % SM activity (0: one
    GPU), its host-to-device PCIe MiB/s at 100 %)."""
    ranges = _GPM_RATIOS.get(job.kind)
    if ranges is None:
        return (0.0,) * 6, 0.0, 0.0
    ratios = tuple(low + spread * unit(job.traits, i) for i, (low, spread) in enumerate(ranges))
    multi = unit(job.traits, 10) < _MULTI_GPU.get(job.kind, 0.0)
    nvlink = 15_000 + 45_000 * unit(job.traits, 11) if multi else 0.0
    pcie = (20 + 180 * unit(job.traits, 12)) if job.kind != INFERENCE else (10 + 70 * unit(job.traits, 12))
    return ratios, nvlink, pcie


def gpm_at(job: Job | None, key: int, t: float, util: float) -> tuple[float, ...]:
    """The GPM readings at ``t`` of a GPU (or MIG instance) running ``job`` at duty cycle ``util`` (%),
    in ``agents.records.GPM_FIELDS`` order: seven percentages, then NVLink rx/tx and PCIe rx/tx in MiB/s.
    Nothing running (no job, or 0 %): all 0 but the PCIe background."""
    if job is None or util <= 0:
        return GPM_IDLE
    (sm_ratio, occupancy, tensor, dram, fp16, fp32), nvlink, pcie = _gpm_traits(job)
    noise = 2 * unit(key, int(t), 11) - 1
    sm = min(100.0, max(0.0, util * sm_ratio + 2 * noise))
    busy = sm / 100
    link = nvlink * busy * (1 + 0.05 * noise)
    rx = pcie * busy * (1 + 0.2 * noise)
    return (
        sm, sm * occupancy, sm * tensor, min(100.0, sm * dram), sm * fp16, sm * fp32, 0.0,
        link, link * (1 - 0.02 * noise), PCIE_IDLE_RX_MIBS + rx, PCIE_IDLE_TX_MIBS + 0.3 * rx,
    )
