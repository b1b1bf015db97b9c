"""``GET /metrics``: the latest record of each GPU in Prometheus text format, under the names and
labels of NVIDIA's dcgm-exporter, so dashboards built for it work on a Cardhour agent; plus the
agent's own counters (spool, drops, errors).

dcgm-exporter labels a series ``gpu`` (index), ``UUID``, ``device`` (``nvidia<index>``),
``modelName`` and ``Hostname``; a MIG instance's series carry its parent's labels plus
``GPU_I_PROFILE`` and ``GPU_I_ID``. A null field has no series (DCGM leaves out what it cannot read).

The GPM fields (agents/records.py) go out under dcgm-exporter's profiling names, scaled as DCGM
scales them: the percentages as ratios 0–1 (``DCGM_FI_PROF_SM_ACTIVE`` = ``sm_active`` ÷ 100), the
NVLink and PCIe rates in bytes per second (``DCGM_FI_PROF_PCIE_RX_BYTES`` = ``pcie_rx_mibs`` × 2²⁰).
"""

from __future__ import annotations

import threading
from typing import Any

from agents.records import Record

MIB = 1 << 20


def _ratio(name: str):
    """A record percentage (0–100) as DCGM's ratio (0–1); None stays None."""
    return lambda r, t: None if r.get(name) is None else round(r[name] / 100, 6)


def _bytes_per_s(name: str):
    """A record rate in MiB/s as DCGM's bytes per second; None stays None."""
    return lambda r, t: None if r.get(name) is None else round(r[name] * MIB)

# (name, type, help, how to get the value from a record and the running totals)
_DCGM = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda r, t: r["util_gpu"]),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda r, t: r["mem_used_mib"]),
    (
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
        lambda r, t: None if r["mem_total_mib"] is None or r["mem_used_mib"] is None
        else r["mem_total_mib"] - r["mem_used_mib"],
    ),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda r, t: r["power_w"]),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
        "Total energy consumption since the agent started (in mJ).", lambda r, t: t.get("energy_mj"),
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda r, t: r["temp_c"]),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda r, t: r["sm_clock_mhz"]),
    (
        "DCGM_FI_DEV_XID_ERRORS", "gauge",
        "XID errors in the latest sample interval (a count; dcgm-exporter reports the last XID code).",
        lambda r, t: r["xid_count"],
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
        "Double-bit volatile ECC errors since the agent started.", lambda r, t: t.get("ecc_dbe"),
    ),
    # NVML GPM, over the latest sample interval
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "Ratio of SM cycles with at least one warp resident (0-1).",
     _ratio("sm_active")),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "Ratio of resident warps to the most the SMs hold (0-1).",
     _ratio("sm_occupancy")),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles any tensor pipe is active (0-1).",
     _ratio("tensor_active")),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of device memory bandwidth used to its peak (0-1).",
     _ratio("dram_active")),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the FP64 pipe is active (0-1).", _ratio("fp64_active")),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the FP32 pipe is active (0-1).", _ratio("fp32_active")),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the FP16 pipe is active (0-1).", _ratio("fp16_active")),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "NVLink data received (in B/s).", _bytes_per_s("nvlink_rx_mibs")),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "NVLink data sent (in B/s).", _bytes_per_s("nvlink_tx_mibs")),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe data received (in B/s).", _bytes_per_s("pcie_rx_mibs")),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe data sent (in B/s).", _bytes_per_s("pcie_tx_mibs")),
)


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: dict[str, Any]) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs.items()) + "}"


def _value(value: float | int) -> str:
    return str(int(value)) if isinstance(value, int) or float(value).is_integer() else repr(float(value))


def _order(labels: dict[str, Any] | None, uuid: str) -> tuple[int, int, str]:
    """Series in GPU index order, a GPU's MIG instances after it."""
    if not labels or labels["gpu"] == "":
        return (1 << 30, 0, uuid)
    return (int(labels["gpu"]), -1 if labels.get("GPU_I_ID") is None else int(labels["GPU_I_ID"]), uuid)


class Telemetry:
    """The latest record per GPU and running totals since the agent started; updated by the
    sampler thread, read by HTTP threads."""

    def __init__(self, *, hostname: str) -> None:
        self.hostname = hostname
        self._lock = threading.Lock()
        self._latest: dict[str, Record] = {}
        self._totals: dict[str, dict[str, float]] = {}
        self._labels: dict[str, dict[str, Any]] = {}

    def set_inventory(self, inventory: dict[str, Any]) -> None:
        """Learn each GPU's and MIG instance's labels from the backend's inventory."""
        labels = {}
        for gpu in inventory.get("gpus", []):
            index = "" if gpu.get("index") is None else gpu["index"]
            base = {
                "gpu": index, "UUID": gpu["uuid"], "device": f"nvidia{index}" if index != "" else "",
                "modelName": gpu.get("name") or "", "Hostname": self.hostname,
            }
            labels[gpu["uuid"]] = base
            for instance in gpu.get("mig_instances") or []:
                labels[instance["uuid"]] = {
                    **base, "GPU_I_PROFILE": instance.get("profile") or "", "GPU_I_ID": instance.get("gi_id"),
                }
        with self._lock:
            self._labels = labels

    def update(self, records: list[Record]) -> None:
        with self._lock:
            for record in records:
                uuid = record["gpu_uuid"]
                self._latest[uuid] = record
                totals = self._totals.setdefault(uuid, {})
                if record.get("energy_j") is not None:
                    totals["energy_mj"] = totals.get("energy_mj", 0) + round(record["energy_j"] * 1000)
                if record.get("ecc_dbe_count") is not None:
                    totals["ecc_dbe"] = totals.get("ecc_dbe", 0) + record["ecc_dbe_count"]

    def render(self, *, spool_stats: dict[str, int], sampler_errors: int, info: dict[str, str]) -> str:
        with self._lock:
            known = dict(self._labels)
            totals = {uuid: dict(values) for uuid, values in self._totals.items()}
            latest = sorted(self._latest.items(), key=lambda item: _order(known.get(item[0]), item[0]))
        lines: list[str] = []
        for name, kind, help_text, getter in _DCGM:
            samples = []
            for uuid, record in latest:
                value = getter(record, totals.get(uuid, {}))
                if value is not None:
                    labels = known.get(uuid) or {"gpu": "", "UUID": uuid, "device": "", "modelName": "", "Hostname": self.hostname}
                    samples.append(f"{name}{_labels(labels)} {_value(value)}")
            if samples:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
        agent = (
            ("cardhour_agent_spool_records", "gauge", "Records in the spool awaiting collection.", spool_stats["records"]),
            ("cardhour_agent_spool_last_seq", "gauge", "Newest spool sequence number.", spool_stats["last_seq"]),
            ("cardhour_agent_spool_dropped_total", "counter", "Records dropped by the spool's size or age bound.",
             spool_stats["dropped_total"]),
            ("cardhour_agent_spool_bytes", "gauge", "Bytes of the spool file in use.", spool_stats["used_bytes"]),
            ("cardhour_agent_last_record_timestamp_seconds", "gauge", "Time of the newest spooled record.",
             spool_stats["last_ts"]),
            ("cardhour_agent_sampler_errors_total", "counter", "Failed backend samples and spool writes.",
             sampler_errors),
        )
        for name, kind, help_text, value in agent:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{_labels({'Hostname': self.hostname})} {value}"]
        lines += [
            "# HELP cardhour_agent_info The agent's version and backend.", "# TYPE cardhour_agent_info gauge",
            f"cardhour_agent_info{_labels({'Hostname': self.hostname, **info})} 1",
        ]
        return "\n".join(lines) + "\n"
