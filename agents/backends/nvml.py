"""The ``nvml`` backend: GPU measurements from NVIDIA's management library (DESIGN.md §3).

Stdlib and ``pynvml`` (the ``nvidia-ml-py`` package) only: the node agent runs without Django. The NVML
module is a constructor parameter, so tests give it ``tests/agents/fake_pynvml.py``.

What each record field comes from, and the choices made where NVML leaves one open:

- ``util_gpu`` / ``util_gpu_max``: mean and max of the ``nvmlDeviceGetSamples(…,
  NVML_GPU_UTILIZATION_SAMPLES, last_seen)`` buffer over the interval. The last timestamp consumed is
  kept per GPU and sampling type; samples at or before the interval start are skipped, samples after
  its end are left for the next interval. ``NVMLError_NotFound`` means "no new sample": the utilization
  is unknown (null), never 0 (DESIGN.md §7). Sample values outside 0-100 (NVML occasionally returns
  garbage such as 4294967295) are dropped. NVML documents the sample timestamps as CPU time in µs; some
  drivers are reported to use time since boot, so the interval is mapped into whichever of the two
  clocks (``time.time`` / ``time.monotonic``) the newest sample is closer to.
- ``util_mem``: the mean of the ``NVML_MEMORY_UTILIZATION_SAMPLES`` buffer, the same way.
- ``mem_used_mib`` / ``mem_total_mib``: ``nvmlDeviceGetMemoryInfo`` version 2 (``used`` excludes the
  memory the driver reserves, as nvidia-smi shows it), version 1 where v2 is missing; read once per
  interval, so the "max" is that one reading.
- ``power_w``: the mean over the interval from the energy counter (Δ``nvmlDeviceGetTotalEnergyConsumption``
  ÷ elapsed seconds) where it can be used, otherwise the one ``nvmlDeviceGetPowerUsage`` reading (mW → W).
- ``energy_j``: the mean power between this interval's counter reading and the previous one (Δ of the
  cumulative mJ counter ÷ the seconds between the readings, on the monotonic clock) times
  ``interval_s``: the counter's Δ itself when the readings are one interval apart, as they are when the
  sampler keeps time, and still the interval's share when a boundary was sampled late. First reading:
  null (no baseline). Counter lower than before (driver reload, GPU reset): a reset, and that interval's
  energy is null (the part used before the reset is unknown; reporting only the part after it would look
  like a drop in power); the new reading is the next baseline. Readings less than half an interval apart
  (the sampler catching up a missed boundary): null, the old baseline kept. More than two intervals
  apart (the agent was stalled): null, and a new baseline.
- ``temp_c``: ``nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)``; ``sm_clock_mhz``:
  ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``.
- ``xid_count``: events of one event set (``nvmlEventSetCreate``; ``nvmlDeviceRegisterEvents`` with
  ``nvmlEventTypeXidCriticalError`` per GPU), drained each interval with ``nvmlEventSetWait(set, 0)``
  until ``NVMLError_Timeout`` and counted per GPU by the event's device handle. A GPU whose registration
  failed (``NotSupported``…) has null; 0 means registered and nothing happened.
- ``ecc_dbe_count``: Δ ``nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)``; first reading null; a
  counter lower than before (it is reset with the driver) counts its new value, as every error it holds
  happened after the reset, which was after the previous reading (a lower bound that never hides an error).
- ``processes``: ``nvmlDeviceGetComputeRunningProcesses`` (v3: pid, usedGpuMemory, gpuInstanceId,
  computeInstanceId; not-available values → null), the unix user of ``<proc_root>/<pid>/status``'s real
  Uid and ``job_ref`` from ``<proc_root>/<pid>/cgroup`` (``agents.backends.cgroup``); a pid the agent cannot
  see (another pid namespace) has user and job_ref null. NVML failing to list processes gives ``[]``
  (the record contract has no "unknown" for the list).
- GPM fields (``sm_active`` … ``pcie_tx_mibs``): ``agents.backends.gpm`` (support asked once per GPU with
  ``nvmlGpmQueryDeviceSupport``, one ``nvmlGpmSampleGet`` per interval, ``nvmlGpmMetricsGet`` between it and
  the previous one; null on the first interval, on a GPU without GPM and where NVML refuses).

MIG: a GPU in MIG mode gives its own record (util and GPM null, as NVML reports no utilization for it;
memory, power, energy, temperature, clock, XID and ECC for the whole GPU) and one record per MIG device
(uuid ``MIG-…``, util null, its memory, its processes, its GPU instance's GPM from ``nvmlGpmMigSampleGet``
on the parent; every other field null: those are the parent's). Inventory: a MIG device's ``sm_count`` is
``nvmlDeviceGetAttributes(mig).multiprocessorCount`` (the v2 call), null where NVML refuses. Each
process is in exactly one record: the MIG device whose GPU/compute instance ids it carries, or the
parent's when none matches. Without root NVML refuses the aggregate process list of a MIG parent
(``NoPermission``); then each MIG device is asked for its own.

Failures: an ``NVMLError`` reading one field makes that field null. ``GpuIsLost`` / ``ResetRequired`` /
``GpuNotFound`` (or any unexpected exception) while sampling a GPU make that GPU's records all-null
(except ``xid_count``, which the event set still gives: a GPU falling off the bus comes with XID 79), and
the other GPUs are still sampled; a GPU whose handle or UUID cannot be had at start is retried each
interval. Each distinct error (GPU, what, error code) is logged once: ``NotSupported`` and
``NoPermission`` at INFO, others at WARNING.

Long because it wraps one library's device queries in one object: ``NvmlBackend`` holds the NVML
session, each GPU's handles and counters (utilization sample cursors, energy and ECC baselines, the
XID event set) and the once-per-error log, which the inventory and every field's read share. Split
by field, each piece would need all of that state back.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import pwd
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from agents import __version__
from agents.backends.cgroup import job_ref_from_cgroup
from agents.backends.gpm import GpmReader
from agents.records import Record, empty_record

log = logging.getLogger(__name__)

MIB = 1 << 20
NA_UINT = 0xFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE_uint: "no GPU/compute instance"
NA_ULONGLONG = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE_ulonglong
MAX_EVENTS_PER_DRAIN = 10_000
# Errors that mean the whole GPU is gone, not one field.
WHOLE_GPU_ERRORS = ("NVMLError_GpuIsLost", "NVMLError_ResetRequired", "NVMLError_GpuNotFound")
# Errors that mean "this GPU or driver does not offer it": expected, logged at INFO.
UNAVAILABLE_ERRORS = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
# Memory-info v2 missing in this driver: fall back to v1 for that device.
MEMORY_V2_MISSING = ("NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch", "NVMLError_NotSupported")
# nvmlValueType_t → the member of the c_nvmlValue_t union that holds a sample of that type.
VALUE_MEMBERS = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")
_GI_SLICES = re.compile(r"(?:^|\.)(\d+)g\.")


class _GpuGone(Exception):
    """Raised inside the sampling of one GPU when NVML says the whole GPU is gone."""


@dataclass
class _Mig:
    uuid: str
    handle: Any
    gi_id: int | None
    ci_id: int | None


@dataclass
class _Gpu:
    index: int
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    memory_mib: int | None = None
    pci_bus_id: str | None = None
    xid_registered: bool = False
    total_slices: int | None = None
    last_seen: dict[int, int] = field(default_factory=dict)  # sampling type → last NVML timestamp consumed
    energy: tuple[int, float] | None = None  # (counter in mJ, monotonic time it was read at)
    ecc: int | None = None
    migs: list[_Mig] = field(default_factory=list)  # as last enumerated
    mig_static: dict[str, dict[str, Any]] = field(default_factory=dict)  # MIG uuid → profile, slices, memory

    @property
    def label(self) -> str:
        return self.uuid or f"index {self.index}"

    def forget_counters(self) -> None:
        """After the GPU was lost its counters may restart: no deltas across that."""
        self.last_seen.clear()
        self.energy = None
        self.ecc = None


class NvmlBackend:
    """``Backend`` (agents/records.py) over NVML. ``nvml`` defaults to the real ``pynvml`` module."""

    def __init__(
        self,
        *,
        hostname: str | None = None,
        nvml: Any = None,
        proc_root: str | PathLike[str] = "/proc",
        wall_clock: Callable[[], float] = time.time,
        mono_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if nvml is None:
            import pynvml as nvml  # only the nvml backend needs the binding
        self._nvml = nvml
        self.hostname = hostname or socket.gethostname()
        self._proc = Path(proc_root)
        self._wall = wall_clock
        self._mono = mono_clock
        self._lock = threading.RLock()
        self._reported: set[tuple[str, str, Any]] = set()
        self._whole_gpu = self._errors(WHOLE_GPU_ERRORS)
        self._unavailable = self._errors(UNAVAILABLE_ERRORS)
        self._memory_v2_missing = self._errors(MEMORY_V2_MISSING)
        self._memory_v1_only: set[str] = set()
        self._value_members = {
            getattr(nvml, name): member for name, member in VALUE_MEMBERS.items() if hasattr(nvml, name)
        }
        self._device_index: dict[int, int] = {}  # handle address → GPU index, for events
        self._event_set: Any = None
        self._closed = False
        self._gpm = GpmReader(nvml, field=self._field, mono_clock=mono_clock, gone=(_GpuGone,))
        nvml.nvmlInit()
        try:
            self._event_set = self._call("system", "event set", nvml.nvmlEventSetCreate)
            self._gpus = [_Gpu(index=index) for index in range(nvml.nvmlDeviceGetCount())]
            for gpu in self._gpus:
                self._attach(gpu)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- Backend

    def inventory(self) -> dict[str, Any]:
        nvml = self._nvml
        with self._lock:
            driver = _text(self._call("system", "driver version", nvml.nvmlSystemGetDriverVersion))
            cuda = self._call("system", "CUDA version", nvml.nvmlSystemGetCudaDriverVersion)
            gpus = [self._describe(gpu) for gpu in self._gpus if self._attached(gpu)]
        return {
            "host": self.hostname,
            "agent_version": __version__,
            "driver_version": driver,
            "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
            "gpus": gpus,
        }

    def sample(self, *, ts: int, interval_s: int) -> list[Record]:
        with self._lock:
            xids, xids_known = self._drain_events()
            clocks = (self._wall(), self._mono())
            records: list[Record] = []
            for gpu in self._gpus:
                if not self._attached(gpu):
                    continue
                xid_count = xids.get(gpu.index, 0) if xids_known and gpu.xid_registered else None
                try:
                    records.extend(self._sample_gpu(gpu, ts, interval_s, clocks, xid_count))
                except _GpuGone:
                    records.extend(self._unknown_records(gpu, ts, interval_s, xid_count))
                except Exception:  # a binding surprise on one GPU must not stop the others
                    if self._first_time(gpu.label, "sample", "exception"):
                        log.exception("GPU %s: sampling failed; its records are null", gpu.label)
                    records.extend(self._unknown_records(gpu, ts, interval_s, xid_count))
            return records

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            nvml = self._nvml
            self._gpm.close()
            if self._event_set is not None:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlEventSetFree(self._event_set)
                self._event_set = None
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- GPUs and MIG devices

    def _attach(self, gpu: _Gpu) -> None:
        """Handle, UUID and static facts of one GPU; registers it for XID events."""
        nvml = self._nvml
        try:
            if gpu.handle is None:
                gpu.handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                self._device_index[_address(gpu.handle)] = gpu.index
            if gpu.uuid is None:
                gpu.uuid = _text(nvml.nvmlDeviceGetUUID(gpu.handle))
        except nvml.NVMLError as exc:
            self._note(gpu.label, "handle", exc)
            return
        self._fill_static(gpu)
        with contextlib.suppress(_GpuGone):
            self._gpm.supported(gpu.uuid, gpu.handle)  # decided (and logged) once, at start
        with contextlib.suppress(_GpuGone):
            if not gpu.xid_registered and self._event_set is not None:
                events = nvml.nvmlEventTypeXidCriticalError
                registered = self._field(
                    gpu.label, "XID events", _returns_true(nvml.nvmlDeviceRegisterEvents), gpu.handle, events,
                    self._event_set,
                )
                gpu.xid_registered = bool(registered)

    def _fill_static(self, gpu: _Gpu) -> None:
        """Name, memory size and PCI bus id, read until NVML has given them once."""
        nvml = self._nvml
        with contextlib.suppress(_GpuGone):
            if gpu.name is None:
                gpu.name = _text(self._field(gpu.label, "name", nvml.nvmlDeviceGetName, gpu.handle))
            if gpu.memory_mib is None:
                gpu.memory_mib = self._memory(gpu.label, gpu.handle)[1]
            if gpu.pci_bus_id is None:
                pci = self._field(gpu.label, "PCI info", nvml.nvmlDeviceGetPciInfo, gpu.handle)
                if pci is not None:
                    gpu.pci_bus_id = _text(pci.busId) or _text(pci.busIdLegacy) or None

    def _attached(self, gpu: _Gpu) -> bool:
        if gpu.handle is None or gpu.uuid is None:
            self._attach(gpu)
        return gpu.uuid is not None

    def _mig_mode(self, gpu: _Gpu) -> bool | None:
        """True in MIG mode, False when not (or the GPU cannot do MIG), None when NVML cannot tell."""
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
        except self._whole_gpu as exc:
            raise self._gone(gpu.label, exc) from exc
        except nvml.NVMLError_NotSupported:
            return False
        except nvml.NVMLError as exc:
            self._note(gpu.label, "MIG mode", exc)
            return None
        return current == nvml.NVML_DEVICE_MIG_ENABLE

    def _mig_devices(self, gpu: _Gpu) -> list[_Mig]:
        nvml = self._nvml
        count = self._field(gpu.label, "MIG device count", nvml.nvmlDeviceGetMaxMigDeviceCount, gpu.handle) or 0
        migs = []
        for slot in range(count):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
            except nvml.NVMLError_NotFound:
                continue  # an empty slot
            except self._whole_gpu as exc:
                raise self._gone(gpu.label, exc) from exc
            except nvml.NVMLError as exc:
                self._note(gpu.label, f"MIG device {slot}", exc)
                continue
            label = f"{gpu.label} MIG device {slot}"
            uuid = _text(self._field(label, "UUID", nvml.nvmlDeviceGetUUID, handle))
            if not uuid:
                continue
            gi_id = self._field(uuid, "GPU instance id", nvml.nvmlDeviceGetGpuInstanceId, handle)
            ci_id = self._field(uuid, "compute instance id", nvml.nvmlDeviceGetComputeInstanceId, handle)
            migs.append(_Mig(uuid=uuid, handle=handle, gi_id=_instance_id(gi_id), ci_id=_instance_id(ci_id)))
            self._device_index[_address(handle)] = gpu.index
        gpu.migs = migs
        return migs

    def _describe(self, gpu: _Gpu) -> dict[str, Any]:
        if None in (gpu.name, gpu.memory_mib, gpu.pci_bus_id):
            self._fill_static(gpu)
        try:
            mig_mode = self._mig_mode(gpu)
            instances = [self._describe_mig(gpu, mig) for mig in self._mig_devices(gpu)] if mig_mode else []
        except _GpuGone:
            mig_mode, instances = None, []
        return {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "name": gpu.name,
            "memory_mib": gpu.memory_mib,
            "pci_bus_id": gpu.pci_bus_id,
            "mig_mode": mig_mode,
            "mig_instances": instances,
        }

    def _describe_mig(self, gpu: _Gpu, mig: _Mig) -> dict[str, Any]:
        static = gpu.mig_static.get(mig.uuid)
        if static is None:
            nvml = self._nvml
            profile = _mig_profile(_text(self._field(mig.uuid, "name", nvml.nvmlDeviceGetName, mig.handle)))
            attributes = self._field(mig.uuid, "attributes", nvml.nvmlDeviceGetAttributes, mig.handle)
            slices = int(attributes.gpuInstanceSliceCount) if attributes is not None else _slices(profile)
            memory_mib = self._memory(mig.uuid, mig.handle)[1]
            if memory_mib is None and attributes is not None:
                memory_mib = int(attributes.memorySizeMB)
            sm_count = int(attributes.multiprocessorCount) if attributes is not None else None
            static = {"profile": profile, "memory_mib": memory_mib, "slices": slices, "sm_count": sm_count}
            if None not in static.values():
                gpu.mig_static[mig.uuid] = static
        return {
            "uuid": mig.uuid,
            "profile": static["profile"],
            "gi_id": mig.gi_id,
            "ci_id": mig.ci_id,
            "memory_mib": static["memory_mib"],
            "slices": static["slices"],
            "total_slices": self._total_slices(gpu),
            "sm_count": static["sm_count"],
        }

    def _total_slices(self, gpu: _Gpu) -> int | None:
        """The largest GPU-instance profile's slice count (7 on A100/H100, 4 on A30)."""
        if gpu.total_slices is None:
            nvml = self._nvml
            best = None
            for profile in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
                try:
                    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu.handle, profile)
                except self._whole_gpu as exc:
                    raise self._gone(gpu.label, exc) from exc
                except nvml.NVMLError:
                    continue  # a profile this GPU does not have
                best = max(best or 0, int(info.sliceCount))
            gpu.total_slices = best or None
        return gpu.total_slices

    # ---------------------------------------------------------------- one interval

    def _sample_gpu(
        self, gpu: _Gpu, ts: int, interval_s: int, clocks: tuple[float, float], xid_count: int | None
    ) -> list[Record]:
        nvml, handle, label = self._nvml, gpu.handle, gpu.label
        record = empty_record(ts=ts, gpu_uuid=gpu.uuid, interval_s=interval_s)
        mig_mode = self._mig_mode(gpu)
        if not mig_mode:
            record.update(self._gpm.fields(uuid=gpu.uuid, gpu_uuid=gpu.uuid, handle=handle, interval_s=interval_s))
            window = (ts, interval_s, clocks)
            record["util_gpu"], record["util_gpu_max"] = self._utilization(
                gpu, nvml.NVML_GPU_UTILIZATION_SAMPLES, "utilization samples", window
            )
            record["util_mem"], _max = self._utilization(
                gpu, nvml.NVML_MEMORY_UTILIZATION_SAMPLES, "memory utilization samples", window
            )
        record["mem_used_mib"], record["mem_total_mib"] = self._memory(label, handle)
        self._power_and_energy(gpu, record)
        record["temp_c"] = self._field(label, "temperature", nvml.nvmlDeviceGetTemperature, handle,
                                       nvml.NVML_TEMPERATURE_GPU)
        record["sm_clock_mhz"] = self._field(label, "SM clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        record["xid_count"] = xid_count
        record["ecc_dbe_count"] = self._ecc_delta(gpu)
        if not mig_mode:
            record["processes"] = self._processes(label, handle) or []
            self._gpm.retire(gpu.uuid, keep={gpu.uuid})
            return [record]
        migs = self._mig_devices(gpu)
        instance_records = []
        for mig in migs:
            instance = empty_record(ts=ts, gpu_uuid=mig.uuid, interval_s=interval_s)
            instance.update(self._gpm.fields(uuid=mig.uuid, gpu_uuid=gpu.uuid, handle=handle, interval_s=interval_s,
                                             gi_id=mig.gi_id, mig=True))
            instance["mem_used_mib"], instance["mem_total_mib"] = self._memory(mig.uuid, mig.handle)
            instance_records.append(instance)
        self._gpm.retire(gpu.uuid, keep={mig.uuid for mig in migs})
        processes = self._processes(label, handle)
        if processes is None:  # the aggregate list is refused without root in MIG mode: ask each device
            record["processes"] = []
            for mig, instance in zip(migs, instance_records, strict=True):
                instance["processes"] = self._processes(mig.uuid, mig.handle) or []
        else:
            record["processes"] = []
            for process in processes:
                owner = next(
                    (i for i, mig in enumerate(migs)
                     if mig.gi_id is not None and (mig.gi_id, mig.ci_id) == (process["gi_id"], process["ci_id"])),
                    None,
                )
                (record if owner is None else instance_records[owner])["processes"].append(process)
        return [record, *instance_records]

    def _unknown_records(self, gpu: _Gpu, ts: int, interval_s: int, xid_count: int | None) -> list[Record]:
        """All-null records for a GPU that is gone (and its MIG devices). The XID count is kept: it
        comes from the event set, not from the GPU, and is often why the GPU is gone (XID 79)."""
        gpu.forget_counters()
        self._gpm.forget(gpu.uuid)
        records = [empty_record(ts=ts, gpu_uuid=uuid, interval_s=interval_s)
                   for uuid in (gpu.uuid, *(mig.uuid for mig in gpu.migs))]
        records[0]["xid_count"] = xid_count
        return records

    def _utilization(
        self, gpu: _Gpu, sampling_type: int, what: str, window: tuple[int, int, tuple[float, float]]
    ) -> tuple[float | None, float | None]:
        """(mean, max) of the samples NVML took in the interval; (None, None) when it has none."""
        nvml = self._nvml
        ts, interval_s, clocks = window
        last_seen = gpu.last_seen.get(sampling_type, 0)
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(gpu.handle, sampling_type, last_seen)
        except nvml.NVMLError_NotFound:
            return None, None  # no sample since last_seen: unknown, not 0 (DESIGN.md §7)
        except self._whole_gpu as exc:
            raise self._gone(gpu.label, exc) from exc
        except nvml.NVMLError as exc:
            self._note(gpu.label, what, exc)
            return None, None
        member = self._value_members.get(value_type)
        if member is None:
            self._note_text(gpu.label, what, f"value type {value_type}", "unknown sample value type")
            return None, None
        points = [(int(sample.timeStamp), getattr(sample.sampleValue, member)) for sample in samples]
        if not points:
            return None, None
        start, end = _window_in_sample_clock(max(t for t, _v in points), ts, interval_s, clocks)
        consumed = [t for t, _v in points if t <= end]  # later ones belong to the next interval
        if consumed:
            gpu.last_seen[sampling_type] = max(last_seen, *consumed)
        values = [float(v) for t, v in points if start < t <= end]
        valid = [v for v in values if 0 <= v <= 100]
        if len(valid) < len(values):
            self._note_text(gpu.label, what, "out of range", "samples outside 0-100 dropped")
        if not valid:
            return None, None
        return round(sum(valid) / len(valid), 3), max(valid)

    def _memory(self, label: str, handle: Any) -> tuple[int | None, int | None]:
        """(used, total) MiB."""
        nvml = self._nvml
        info = None
        if label not in self._memory_v1_only and hasattr(nvml, "nvmlMemory_v2"):
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            except self._whole_gpu as exc:
                raise self._gone(label, exc) from exc
            except self._memory_v2_missing:
                self._memory_v1_only.add(label)
            except nvml.NVMLError as exc:
                self._note(label, "memory", exc)
                return None, None
        if info is None:
            info = self._field(label, "memory", nvml.nvmlDeviceGetMemoryInfo, handle)
        if info is None:
            return None, None
        return int(info.used) // MIB, int(info.total) // MIB

    def _power_and_energy(self, gpu: _Gpu, record: Record) -> None:
        nvml, interval_s = self._nvml, record["interval_s"]
        milliwatts = self._field(gpu.label, "power", nvml.nvmlDeviceGetPowerUsage, gpu.handle)
        record["power_w"] = milliwatts / 1000 if milliwatts is not None else None
        counter = self._field(gpu.label, "energy counter", nvml.nvmlDeviceGetTotalEnergyConsumption, gpu.handle)
        read_at = self._mono()
        previous, gpu.energy = gpu.energy, (None if counter is None else (int(counter), read_at))
        if counter is None or previous is None:
            return
        before, before_at = previous
        span = read_at - before_at
        if counter < before:
            log.info("GPU %s: energy counter went back (%d -> %d mJ): reset; energy unknown this interval",
                     gpu.label, before, counter)
        elif span < interval_s / 2:
            gpu.energy = previous  # too soon after the last reading to measure (catching up): keep the baseline
        elif span <= 2 * interval_s:
            watts = (counter - before) / 1000 / span
            record["power_w"] = round(watts, 3)
            record["energy_j"] = round(watts * interval_s, 3)

    def _ecc_delta(self, gpu: _Gpu) -> int | None:
        nvml = self._nvml
        count = self._field(gpu.label, "ECC errors", nvml.nvmlDeviceGetTotalEccErrors, gpu.handle,
                            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
        previous, gpu.ecc = gpu.ecc, count
        if count is None or previous is None:
            return None
        return count - previous if count >= previous else count

    def _drain_events(self) -> tuple[dict[int, int], bool]:
        """XID events since the last drain, per GPU index; False when they could not be read."""
        nvml = self._nvml
        counts: dict[int, int] = {}
        if self._event_set is None:
            return counts, False
        for _ in range(MAX_EVENTS_PER_DRAIN):
            try:
                event = nvml.nvmlEventSetWait(self._event_set, 0)
            except nvml.NVMLError_Timeout:
                return counts, True
            except nvml.NVMLError as exc:
                self._note("system", "XID events", exc)
                return counts, False
            if not event.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            index = self._device_index.get(_address(event.device))
            if index is None:
                self._note_text("system", "XID events", "unknown device", "an event from a device not sampled")
                continue
            counts[index] = counts.get(index, 0) + 1
            xid = int(event.eventData)
            label = self._gpus[index].label
            if self._first_time(label, "XID", xid):
                log.warning("GPU %s: XID %d", label, xid)
        return counts, True  # more remain: the next interval drains them

    # ---------------------------------------------------------------- processes

    def _processes(self, label: str, handle: Any) -> list[dict[str, Any]] | None:
        """The compute processes on a GPU or MIG device; None when NVML refuses to say."""
        raw = self._field(label, "processes", self._nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if raw is None:
            return None
        return [self._process(entry) for entry in raw]

    def _process(self, entry: Any) -> dict[str, Any]:
        pid = int(entry.pid)
        used = entry.usedGpuMemory  # pynvml already maps NVML_VALUE_NOT_AVAILABLE to None
        user, job_ref = self._owner(pid)
        return {
            "pid": pid,
            "user": user,
            "used_mib": None if used is None or used == NA_ULONGLONG else int(used) // MIB,
            "job_ref": job_ref,
            "gi_id": _instance_id(getattr(entry, "gpuInstanceId", None)),
            "ci_id": _instance_id(getattr(entry, "computeInstanceId", None)),
        }

    def _owner(self, pid: int) -> tuple[str | None, str | None]:
        """(unix user, job_ref) of a pid, from ``<proc_root>/<pid>/status`` and ``…/cgroup``."""
        directory = self._proc / str(pid)
        user = None
        try:
            status = (directory / "status").read_text(errors="replace")
        except OSError:
            status = ""
        for line in status.splitlines():
            if line.startswith("Uid:"):
                fields = line.split()
                if len(fields) > 1 and fields[1].isdigit():
                    with contextlib.suppress(KeyError):
                        user = pwd.getpwuid(int(fields[1])).pw_name
                break
        try:
            job_ref = job_ref_from_cgroup((directory / "cgroup").read_text(errors="replace"))
        except OSError:
            job_ref = None
        return user, job_ref

    # ---------------------------------------------------------------- errors

    def _errors(self, names: tuple[str, ...]) -> tuple[type[BaseException], ...]:
        return tuple(getattr(self._nvml, name) for name in names if hasattr(self._nvml, name))

    def _call(self, label: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None (logged once) on any NVMLError."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            self._note(label, what, exc)
            return None

    def _field(self, label: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` for one field of one GPU: None (logged once) on an NVMLError, ``_GpuGone`` when
        the error means the whole GPU is gone."""
        try:
            return fn(*args)
        except self._whole_gpu as exc:
            raise self._gone(label, exc) from exc
        except self._nvml.NVMLError as exc:
            self._note(label, what, exc)
            return None

    def _gone(self, label: str, exc: BaseException) -> _GpuGone:
        self._note(label, "GPU", exc)
        return _GpuGone(label)

    def _first_time(self, label: str, what: str, code: Any) -> bool:
        key = (label, what, code)
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

    def _note(self, label: str, what: str, exc: BaseException) -> None:
        if self._first_time(label, what, getattr(exc, "value", type(exc).__name__)):
            level = logging.INFO if isinstance(exc, self._unavailable) else logging.WARNING
            log.log(level, "GPU %s: %s unavailable: %s (logged once)", label, what, exc)

    def _note_text(self, label: str, what: str, code: str, message: str) -> None:
        if self._first_time(label, what, code):
            log.warning("GPU %s: %s: %s (logged once)", label, what, message)


# -------------------------------------------------------------------- helpers


def _address(handle: Any) -> int:
    """The address an NVML handle points at: two handle objects for one device compare equal by it."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


def _returns_true(fn: Callable[..., Any]) -> Callable[..., bool]:
    def call(*args: Any) -> bool:
        fn(*args)
        return True

    return call


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value


def _instance_id(value: Any) -> int | None:
    """A GPU/compute instance id; NVML's "not available" (0xFFFFFFFF, no MIG) → None."""
    if value is None or int(value) == NA_UINT:
        return None
    return int(value)


def _mig_profile(name: str | None) -> str | None:
    """``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` → ``1g.10gb``."""
    match = _MIG_PROFILE.search(name or "")
    return match.group(1) if match else None


def _slices(profile: str | None) -> int | None:
    """GPU-instance slices from a profile name: ``3g.40gb`` → 3, ``1c.3g.40gb`` → 3."""
    match = _GI_SLICES.search(profile or "")
    return int(match.group(1)) if match else None


def _window_in_sample_clock(
    newest_us: int, ts: int, interval_s: int, clocks: tuple[float, float]
) -> tuple[int, int]:
    """The interval ``(ts - interval_s, ts]`` in µs of the clock NVML stamped its samples with: wall
    time as documented, or time since boot where the newest sample is nearer to that."""
    now_wall, now_mono = clocks
    newest = newest_us / 1_000_000
    if abs(newest - now_wall) <= abs(newest - now_mono):
        return (ts - interval_s) * 1_000_000, ts * 1_000_000
    shift = now_mono - now_wall
    return round((ts - interval_s + shift) * 1_000_000), round((ts + shift) * 1_000_000)
