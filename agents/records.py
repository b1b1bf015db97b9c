"""The sample record: the one data contract between the agent and the server (DESIGN.md §3).

A record is a plain dict (JSON object) for one GPU (or MIG instance) and one sample interval:

    seq            int     spool sequence number (assigned by the spool; absent before spooling)
    ts             int     end of the interval, epoch seconds UTC (a multiple of interval_s when sampled;
                           a replayed row keeps its own second)
    gpu_uuid       str     NVML UUID (``GPU-…`` or ``MIG-…``)
    interval_s     int     length of the interval the record covers: (ts - interval_s, ts]
    util_gpu       float?  mean GPU utilization over the interval, 0–100; null = unknown (never 0)
    util_gpu_max   float?  max utilization over the interval, 0–100
    util_mem       float?  mean memory-controller utilization, 0–100
    mem_used_mib   int?    max memory used in the interval
    mem_total_mib  int?
    power_w        float?  mean power draw
    energy_j       float?  energy used in the interval (from NVML's cumulative counter, resets handled)
    temp_c         int?
    sm_clock_mhz   int?
    xid_count      int?    new XID events in the interval
    ecc_dbe_count  int?    new double-bit ECC errors in the interval
    sm_active      float?  SM activity over the interval, 0–100 (NVML GPM SM_UTIL, DCGM_FI_PROF_SM_ACTIVE × 100)
    sm_occupancy   float?  SM occupancy: resident warps ÷ the most the SMs hold, 0–100 (GPM SM_OCCUPANCY)
    tensor_active  float?  any tensor pipe active, 0–100 (GPM ANY_TENSOR_UTIL, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    dram_active    float?  DRAM bandwidth used ÷ peak, 0–100 (GPM DRAM_BW_UTIL, DCGM_FI_PROF_DRAM_ACTIVE)
    fp16_active    float?  FP16 pipe active, 0–100 (GPM FP16_UTIL)
    fp32_active    float?  FP32 pipe active, 0–100 (GPM FP32_UTIL)
    fp64_active    float?  FP64 pipe active, 0–100 (GPM FP64_UTIL)
    nvlink_rx_mibs float?  NVLink received, MiB/s over the interval (GPM NVLINK_TOTAL_RX_PER_SEC)
    nvlink_tx_mibs float?  NVLink sent, MiB/s (GPM NVLINK_TOTAL_TX_PER_SEC)
    pcie_rx_mibs   float?  PCIe received, MiB/s (GPM PCIE_RX_PER_SEC)
    pcie_tx_mibs   float?  PCIe sent, MiB/s (GPM PCIE_TX_PER_SEC)
    processes      list?   [{pid, user, used_mib, job_ref, gi_id, ci_id}]: [] when none run, null when the
                           agent cannot tell (NVML refused the list)

The GPM fields (``sm_active`` … ``pcie_tx_mibs``, :data:`GPM_FIELDS`) come from two NVML GPM samples, the
interval's first and last (Hopper and newer; ``nvmlGpmMigSampleGet`` for a MIG instance). They are null on
a device without GPM support (L40S, A100, an older driver), where NVML refuses (permissions), for a
metric whose own return code is an error, and on the first interval after the agent starts (one sample
only). Never 0 for unknown.

A field the GPU cannot give is null (None), never 0. Utilization of a MIG instance is null. The ranges
the collector accepts are :data:`FLOAT_RANGES`, :data:`INT_RANGES` and :data:`INTERVAL_S_RANGE`.
"""

from __future__ import annotations

from typing import Any, Protocol

Record = dict[str, Any]

# The schema, once: the agent builds records from it and the collector (cluster/telemetry/ingest.py)
# validates and stores them from it. A test holds the two together (tests/cluster/telemetry/test_ingest.py).

INT_MAX = 2**31 - 1  # a PostgreSQL integer

# Fields every record carries, never null, with their JSON type.
REQUIRED_FIELDS: dict[str, type] = {"ts": int, "gpu_uuid": str, "interval_s": int}
INTERVAL_S_RANGE = (1, 3600)  # whole seconds; the collector rejects a record outside it
# The measurements, each null when unknown, with the range the collector accepts: (low, high), inclusive.
FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "util_gpu": (0, 100), "util_gpu_max": (0, 100), "util_mem": (0, 100), "power_w": (0, 100_000),
    "energy_j": (0, 1e12),
    # NVML GPM (percentages 0–100, bandwidths MiB/s); null where the device has no GPM
    "sm_active": (0, 100), "sm_occupancy": (0, 100), "tensor_active": (0, 100), "dram_active": (0, 100),
    "fp16_active": (0, 100), "fp32_active": (0, 100), "fp64_active": (0, 100),
    "nvlink_rx_mibs": (0, 1e9), "nvlink_tx_mibs": (0, 1e9), "pcie_rx_mibs": (0, 1e9), "pcie_tx_mibs": (0, 1e9),
}
GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp16_active", "fp32_active",
              "fp64_active", "nvlink_rx_mibs", "nvlink_tx_mibs", "pcie_rx_mibs", "pcie_tx_mibs")
INT_RANGES: dict[str, tuple[int, int]] = {
    "mem_used_mib": (0, INT_MAX), "mem_total_mib": (0, INT_MAX), "temp_c": (-100, 200),
    "sm_clock_mhz": (0, 100_000), "xid_count": (0, INT_MAX), "ecc_dbe_count": (0, INT_MAX),
}
FLOAT_FIELDS = tuple(FLOAT_RANGES)
INT_FIELDS = tuple(INT_RANGES)
PROCESS_FIELDS = ("pid", "user", "used_mib", "job_ref", "gi_id", "ci_id")  # of each entry of ``processes``
# What a backend's record holds, in this order; the spool adds SPOOL_FIELDS when it stores one.
RECORD_FIELDS = (*REQUIRED_FIELDS, *FLOAT_FIELDS, *INT_FIELDS, "processes")
SPOOL_FIELDS = ("seq",)


def empty_record(*, ts: int, gpu_uuid: str, interval_s: int) -> Record:
    """A record with every measurement unknown; backends fill in what the GPU can give."""
    record: Record = {"ts": ts, "gpu_uuid": gpu_uuid, "interval_s": interval_s}
    for name in (*FLOAT_FIELDS, *INT_FIELDS):
        record[name] = None
    record["processes"] = []
    return record


class Backend(Protocol):
    """What the sampler needs from a source of GPU measurements (nvml, sim, replay)."""

    def inventory(self) -> dict[str, Any]:
        """Host facts and GPUs, the body of ``GET /v1/inventory``:
        ``{"host", "agent_version", "driver_version", "cuda_version", "gpus": [{"index", "uuid", "name",
        "memory_mib", "pci_bus_id", "mig_mode", "mig_instances": [{"uuid", "profile", "gi_id", "ci_id",
        "memory_mib", "slices", "total_slices", "sm_count"}]}]}``; unknown values are null. ``slices`` are
        the GPU instance's (every compute instance of one GPU instance reports the same), ``sm_count`` the
        compute instance's own SMs (``1c.3g.71gb`` 16 and ``2c.3g.71gb`` 32 of a 3g instance's 48), by which
        the server splits the GPU instance's share between its compute instances."""

    def sample(self, *, ts: int, interval_s: int) -> list[Record]:
        """One record per GPU and MIG instance for the interval ``(ts - interval_s, ts]``.

        Called once per interval, just after ``ts`` (on the agent's clock). Must not raise for one
        GPU's failure: that GPU's fields are null and the others are still sampled."""

    def close(self) -> None:
        """Release handles (NVML shutdown, open files)."""
