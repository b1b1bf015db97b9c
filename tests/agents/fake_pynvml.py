"""A faithful fake of the ``pynvml`` module (nvidia-ml-py 13.615.71) for the nvml backend's tests.

``FakeNvml(gpus)`` is a module-like object: the NVML functions the backend calls are methods with the
real names and signatures, returning what the real binding returns, built from the binding's own
ctypes classes (``c_nvmlDevice_t`` handles pointing at distinct addresses, ``c_nvmlMemory_t`` /
``c_nvmlMemory_v2_t``, ``c_nvmlSample_t`` arrays with the ``c_nvmlValue_t`` union, the ``nvmlFriendlyObject``s
that ``nvmlDeviceGetComputeRunningProcesses`` makes of ``c_nvmlProcessInfo_v3_t``, ``c_nvmlEventData_t``,
``c_nvmlDeviceAttributes``, ``c_nvmlGpuInstanceProfileInfo_v2_t``, ``nvmlPciInfo_t``), and raising the real
error classes (``pynvml.NVMLError(code)`` maps to ``NVMLError_NotFound``, ``NVMLError_Timeout``, …).
Every other attribute (constants, structures, error classes) is pynvml's own; an NVML function this
fake does not implement raises AttributeError, so a backend calling something new fails loudly here.

A scenario is a list of ``FakeGpu`` (``h200()`` and ``h100_mig()`` carry the values of the nvidia-smi
captures in /work/shared/data/nvidia-smi/, taken under load). Tests change it as they go:
``fake.push_util(0, t_us, 87)``, ``gpu.energy_mj += 6_000_000``, ``fake.emit_xid(0, 79)``,
``gpu.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)``, ``gpu.lost = True``.

Behaviour modelled on NVML's documentation:
- ``nvmlDeviceGetSamples(handle, type, last_seen)`` returns the buffered samples newer than
  ``last_seen`` (oldest first; the buffer is a ring), and raises NOT_FOUND when there are none.
  Timestamps are CPU time in µs. A MIG-mode GPU and MIG devices give NOT_SUPPORTED.
- ``nvmlDeviceGetMemoryInfo`` v1 counts reserved memory in ``used``; v2 (``version=nvmlMemory_v2``)
  reports it apart, as nvidia-smi does.
- Power, energy, temperature, clocks and ECC of a MIG device: NOT_SUPPORTED (they are the parent's).
- A MIG parent's process list holds every instance's processes with their GPU/compute instance ids;
  ``mig_processes_need_root=True`` makes it raise NO_PERMISSION as it does for a non-root caller, and a
  MIG device handle lists only its own processes. Outside MIG the instance ids are 0xFFFFFFFF.
- Events: only those emitted after a device was registered on a set (with that event type) are
  delivered; ``nvmlEventSetWait`` raises TIMEOUT when none is pending.
- ``gpu.lost = True``: every call on that GPU's (or its MIG devices') handles raises GPU_IS_LOST;
  ``gpu.fail(name, code)`` makes one function raise ``code`` for that device.
- Calls before ``nvmlInit`` (or after the last ``nvmlShutdown``) raise UNINITIALIZED.
- GPM (``FakeGpm``, on each GPU and MIG instance): a device's counters are the integral of each metric's
  value over time (percent·s, MiB), which ``gpm.rates`` feed at every sample (rate × seconds since the
  device's last sample, on ``fake.clock``) and a test may also set directly (``gpm.counters[id] = …``).
  ``nvmlGpmSampleGet`` / ``nvmlGpmMigSampleGet(parent, gi_id, sample)`` copy the device's time and counters
  into a buffer from ``nvmlGpmSampleAlloc``; ``nvmlGpmMetricsGet`` gives each metric Δcounter ÷ Δtime of the
  two samples (``gpm.metric_errors[id] = code`` sets one metric's own ``nvmlReturn``). It refuses a request
  whose ``version`` is not ``NVML_GPM_METRICS_GET_VERSION`` (ARGUMENT_VERSION_MISMATCH; the binding does not
  set it), samples of two devices, an unfilled or freed buffer, or samples with no time between them
  (INVALID_ARGUMENT). ``gpm.supported = False`` (the L40S): ``isSupportedDevice`` 0 and NOT_SUPPORTED from
  the sample calls; ``FakeNvml(driver_has_gpm=False)``: every GPM function raises FUNCTION_NOT_FOUND, as
  the binding does on a driver without them. Unverified on a real driver, so left out of what the backend
  relies on: ``nvmlGpmSampleGet`` on a MIG-mode GPU or a MIG device handle gives NOT_SUPPORTED here.
"""

from __future__ import annotations

import ctypes
import time
import types
import uuid as uuidlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 1 << 20
NA_UINT = pynvml.NVML_VALUE_NOT_AVAILABLE_uint.value
NA_ULONGLONG = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
SAMPLE_BUFFER = 120  # samples NVML keeps per type (a ring)
_UUID_NAMESPACE = uuidlib.UUID("7c0f7c4e-5d0e-4b7e-9a57-6b3c2f1a0c11")

# GPU-instance profiles of an H100 80GB (id → name, slices, how many fit, memory MB, SMs).
H100_GI_PROFILES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: ("1g.10gb", 1, 7, 9856, 16),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: ("1g.10gb+me", 1, 1, 9856, 16),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: ("1g.20gb", 1, 4, 20096, 26),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: ("2g.20gb", 2, 3, 20096, 32),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: ("3g.40gb", 3, 2, 40192, 60),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: ("4g.40gb", 4, 1, 40192, 64),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: ("7g.80gb", 7, 1, 80384, 132),
}


# The record's GPM fields → the GPM metric that gives each (the fake's own table, not the backend's).
GPM_METRIC_OF = {
    "sm_active": pynvml.NVML_GPM_METRIC_SM_UTIL, "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_active": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, "dram_active": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp64_active": pynvml.NVML_GPM_METRIC_FP64_UTIL, "fp32_active": pynvml.NVML_GPM_METRIC_FP32_UTIL,
    "fp16_active": pynvml.NVML_GPM_METRIC_FP16_UTIL, "pcie_tx_mibs": pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    "pcie_rx_mibs": pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    "nvlink_rx_mibs": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    "nvlink_tx_mibs": pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
}


def _raise(code: int) -> None:
    raise pynvml.NVMLError(code)


@dataclass
class FakeGpm:
    """A device's GPM counters: ``counters[metric id]`` is ∫ value dt (percent·s or MiB) up to ``time_s``."""

    supported: bool = True
    rates: dict[int, float] = field(default_factory=dict)  # metric id → the value it reads while this holds
    counters: dict[int, float] = field(default_factory=dict)
    time_s: float | None = None  # the fake clock at the device's last sample
    metric_errors: dict[int, int] = field(default_factory=dict)  # metric id → its nvmlReturn in nvmlGpmMetricsGet

    def run(self, **values: float) -> None:
        """From now on the device reads these, by record field name: ``run(sm_active=62.5)``."""
        for name, value in values.items():
            self.rates[GPM_METRIC_OF[name]] = value

    def add(self, name: str, amount: float) -> None:
        """Fabricate counter movement: ``add("sm_active", 625)`` is 62.5 % over 10 s."""
        metric = GPM_METRIC_OF[name]
        self.counters[metric] = self.counters.get(metric, 0.0) + amount

    def fail_metric(self, name: str, code: int) -> None:
        self.metric_errors[GPM_METRIC_OF[name]] = code

    def snapshot(self, now: float) -> tuple[float, dict[int, float]]:
        if self.time_s is not None:
            for metric, rate in self.rates.items():
                self.counters[metric] = self.counters.get(metric, 0.0) + rate * (now - self.time_s)
        self.time_s = now
        return now, dict(self.counters)


@dataclass
class _GpmSample:
    device: FakeGpm
    time_s: float
    counters: dict[int, float]


def fake_uuid(kind: str, key: str) -> str:
    """NVML-shaped, stable: ``GPU-…`` / ``MIG-…``."""
    return f"{kind}-{uuidlib.uuid5(_UUID_NAMESPACE, key)}"


@dataclass
class FakeProcess:
    pid: int
    used_mib: int | None  # None: NVML_VALUE_NOT_AVAILABLE
    gi_id: int | None = None  # None: 0xFFFFFFFF (not in a MIG instance)
    ci_id: int | None = None


@dataclass
class FakeMig:
    profile: str  # "1g.10gb"
    gi_id: int
    ci_id: int
    memory_total_mib: int
    memory_used_mib: int
    slices: int
    profile_memory_mb: int
    multiprocessors: int
    uuid: str = ""
    failures: dict[str, int] = field(default_factory=dict)
    gpm: FakeGpm = field(default_factory=FakeGpm)  # its GPU instance's counters (``supported`` is the GPU's)

    def fail(self, function: str, code: int) -> None:
        self.failures[function] = code


@dataclass
class FakeGpu:
    name: str
    uuid: str
    pci_bus_id: str
    pci_device_id: int
    memory_total_mib: int
    memory_used_mib: int
    memory_reserved_mib: int
    power_mw: int
    energy_mj: int
    temp_c: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    ecc_dbe_volatile: int = 0
    ecc_sbe_volatile: int = 0
    mig_capable: bool = True
    mig_enabled: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    max_mig_devices: int = 7
    gi_profiles: dict[int, tuple[str, int, int, int, int]] = field(default_factory=dict)
    processes: list[FakeProcess] = field(default_factory=list)
    mig_processes_need_root: bool = False
    events_supported: bool = True
    sample_value_type: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    unsupported_samples: set[int] = field(default_factory=set)  # sampling types that give NOT_SUPPORTED
    lost: bool = False
    handle_fails_with: int | None = None  # nvmlDeviceGetHandleByIndex raises this
    failures: dict[str, int] = field(default_factory=dict)
    samples: dict[int, deque[tuple[int, Any]]] = field(default_factory=dict)
    gpm: FakeGpm = field(default_factory=FakeGpm)

    def fail(self, function: str, code: int) -> None:
        """Make ``function`` (an NVML function name) raise ``NVMLError(code)`` for this GPU."""
        self.failures[function] = code

    def heal(self, function: str) -> None:
        self.failures.pop(function, None)


def h200(index: int = 0, *, host: str = "h200-node") -> FakeGpu:
    """An NVIDIA H200 under gpu-burn, as in the H200 capture (driver 590.48.01)."""
    return FakeGpu(
        name="NVIDIA H200",
        uuid=fake_uuid("GPU", f"{host}/{index}"),
        pci_bus_id=f"00000000:{0x83 + index:02X}:00.0",
        pci_device_id=0x233510DE,
        memory_total_mib=143771,
        memory_used_mib=32362,
        memory_reserved_mib=614,
        power_mw=627_320,
        energy_mj=9_876_543_210,
        temp_c=52,
        sm_clock_mhz=1980,
        mem_clock_mhz=3201,
        gi_profiles=dict(H100_GI_PROFILES),
        processes=[
            FakeProcess(10291, 2566),
            FakeProcess(10293, 1542),
            FakeProcess(10309, 28234),
        ],
    )


def h100_mig(index: int = 0, *, host: str = "h100-node") -> FakeGpu:
    """An H100 80GB HBM3 in MIG mode, 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb, as in the H100 capture."""
    gpu = FakeGpu(
        name="NVIDIA H100 80GB HBM3",
        uuid=fake_uuid("GPU", f"{host}/{index}"),
        pci_bus_id=f"00000000:{0x09 + index:02X}:00.0",
        pci_device_id=0x233010DE,
        memory_total_mib=81559,
        memory_used_mib=11125,
        memory_reserved_mib=479,
        power_mw=432_210,
        energy_mj=5_123_456_789,
        temp_c=53,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        mig_enabled=True,
        gi_profiles=dict(H100_GI_PROFILES),
        processes=[
            FakeProcess(21180, 2296, gi_id=2, ci_id=0),
            FakeProcess(21181, 1272, gi_id=2, ci_id=0),
            FakeProcess(21198, 7484, gi_id=2, ci_id=0),
        ],
    )
    layout = [  # profile, GI id, memory total, used, slices, profile memory, SMs
        ("3g.40gb", 2, 40448, 11091, 3, 40192, 60),
        ("2g.20gb", 3, 20096, 17, 2, 20096, 32),
        ("1g.10gb", 9, 9984, 9, 1, 9856, 16),
        ("1g.10gb", 10, 9984, 9, 1, 9856, 16),
    ]
    for slot, (profile, gi_id, total, used, slices, profile_mb, sms) in enumerate(layout):
        gpu.migs.append(
            FakeMig(
                profile=profile, gi_id=gi_id, ci_id=0, memory_total_mib=total, memory_used_mib=used,
                slices=slices, profile_memory_mb=profile_mb, multiprocessors=sms,
                uuid=fake_uuid("MIG", f"{host}/{index}/{slot}"),
            )
        )
    return gpu


def l40s(index: int = 0, *, host: str = "l40s-node") -> FakeGpu:
    """A GPU that cannot do MIG (NVIDIA L40S): MIG queries give NOT_SUPPORTED."""
    return FakeGpu(
        name="NVIDIA L40S",
        uuid=fake_uuid("GPU", f"{host}/{index}"),
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        pci_device_id=0x26B910DE,
        memory_total_mib=46068,
        memory_used_mib=0,
        memory_reserved_mib=509,
        power_mw=34_000,
        energy_mj=1_000_000,
        temp_c=31,
        sm_clock_mhz=210,
        mem_clock_mhz=405,
        mig_capable=False,
        max_mig_devices=0,
        gpm=FakeGpm(supported=False),  # Ada: no GPM
    )


@dataclass
class _EventSet:
    registrations: dict[int, int] = field(default_factory=dict)  # device address → event type mask
    pending: deque[pynvml.c_nvmlEventData_t] = field(default_factory=deque)


class FakeNvml:
    """A stand-in for the ``pynvml`` module over a list of ``FakeGpu``."""

    def __init__(
        self, gpus: list[FakeGpu], *, driver_version: str = "590.48.01", cuda_version: int = 13010,
        driver_has_gpm: bool = True, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.driver_has_gpm = driver_has_gpm
        self.clock = clock  # the GPUs' time, for GPM samples
        self.gpm_buffers: dict[int, _GpmSample | None] = {}  # allocated sample buffers by address
        self.init_count = 0
        self.calls: list[str] = []
        self._buffers: list[Any] = []  # keeps the memory handles point at alive
        self._devices: dict[int, tuple[FakeGpu, FakeMig | None]] = {}
        self._device_address: dict[int, int] = {}  # id(FakeGpu or FakeMig) → address
        self._event_sets: dict[int, _EventSet] = {}
        for gpu in gpus:
            self._place(gpu, gpu, None)
            for mig in gpu.migs:
                self._place(mig, gpu, mig)

    # -------------------------------------------------------------- everything else is pynvml's

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if isinstance(value, types.FunctionType):
            raise AttributeError(f"fake_pynvml does not implement {name}")
        return value

    # -------------------------------------------------------------- scenario helpers

    def push_util(self, index: int, timestamp_us: int, value: float) -> None:
        self._push(index, pynvml.NVML_GPU_UTILIZATION_SAMPLES, timestamp_us, value)

    def push_mem_util(self, index: int, timestamp_us: int, value: float) -> None:
        self._push(index, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, timestamp_us, value)

    def emit_xid(self, index: int, xid: int = 79, *, gi_id: int | None = None, ci_id: int | None = None) -> None:
        """An XID critical error on GPU ``index``: delivered to every event set that registered it."""
        gpu = self.gpus[index]
        address = self._device_address[id(gpu)]
        for event_set in self._event_sets.values():
            if event_set.registrations.get(address, 0) & pynvml.nvmlEventTypeXidCriticalError:
                data = pynvml.c_nvmlEventData_t()
                data.device = self._handle(gpu)
                data.eventType = pynvml.nvmlEventTypeXidCriticalError
                data.eventData = xid
                data.gpuInstanceId = NA_UINT if gi_id is None else gi_id
                data.computeInstanceId = NA_UINT if ci_id is None else ci_id
                event_set.pending.append(data)

    def add_mig(self, index: int, mig: FakeMig) -> None:
        gpu = self.gpus[index]
        gpu.migs.append(mig)
        self._place(mig, gpu, mig)

    # -------------------------------------------------------------- library

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if gpu.handle_fails_with is not None:
            _raise(gpu.handle_fails_with)
        return self._handle(gpu)

    # -------------------------------------------------------------- identity

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu, mig = self._device("nvmlDeviceGetUUID", handle)
        return mig.uuid if mig else gpu.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu, mig = self._device("nvmlDeviceGetName", handle)
        return f"{gpu.name} MIG {mig.profile}" if mig else gpu.name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> pynvml.nvmlPciInfo_t:
        gpu, _mig = self._device("nvmlDeviceGetPciInfo", handle)
        domain, bus, rest = gpu.pci_bus_id.split(":")
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.pci_bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04x}:{bus}:{rest}".encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        info.pciDeviceId = gpu.pci_device_id
        info.pciSubSystemId = 0x18BE10DE
        return info

    # -------------------------------------------------------------- MIG

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu, mig = self._device("nvmlDeviceGetMigMode", device)
        if mig is not None or not gpu.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu, mig = self._device("nvmlDeviceGetMaxMigDeviceCount", device)
        if mig is not None or not gpu.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        gpu, mig = self._device("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if mig is not None or not gpu.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu.mig_enabled:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= gpu.max_mig_devices:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.migs):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return self._handle(gpu.migs[index])

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        _gpu, mig = self._device("nvmlDeviceGetGpuInstanceId", device)
        if mig is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return mig.gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        _gpu, mig = self._device("nvmlDeviceGetComputeInstanceId", device)
        if mig is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return mig.ci_id

    def nvmlDeviceGetAttributes(self, device: Any) -> pynvml.c_nvmlDeviceAttributes:
        _gpu, mig = self._device("nvmlDeviceGetAttributes", device)
        if mig is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        attributes = pynvml.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = mig.multiprocessors
        attributes.sharedCopyEngineCount = mig.slices
        attributes.sharedDecoderCount = mig.slices
        attributes.sharedJpegCount = mig.slices
        attributes.gpuInstanceSliceCount = mig.slices
        attributes.computeInstanceSliceCount = mig.slices
        attributes.memorySizeMB = mig.profile_memory_mb
        return attributes

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: int, version: int = 2) -> Any:
        gpu, mig = self._device("nvmlDeviceGetGpuInstanceProfileInfo", device)
        if mig is not None or not gpu.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if profile not in gpu.gi_profiles:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED if profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
                   else pynvml.NVML_ERROR_INVALID_ARGUMENT)
        name, slices, count, memory_mb, sms = gpu.gi_profiles[profile]
        if version == 2:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {name}".encode()
        elif version == 1:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
        else:
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = profile
        info.sliceCount = slices
        info.instanceCount = count
        info.multiprocessorCount = sms
        info.memorySizeMB = memory_mb
        return info

    # -------------------------------------------------------------- measurements

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        name = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        gpu, mig = self._device(name, handle)
        total, used, reserved = (
            (mig.memory_total_mib, mig.memory_used_mib, 0)
            if mig else (gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_reserved_mib)
        )
        free = total - used - reserved
        if not version:
            memory = pynvml.c_nvmlMemory_t()
            memory.used = (used + reserved) * MIB  # v1: reserved counts as used
        else:
            if version != pynvml.nvmlMemory_v2:
                _raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            memory = pynvml.c_nvmlMemory_v2_t()
            memory.version = version
            memory.used = used * MIB
            memory.reserved = reserved * MIB
        memory.total = total * MIB
        memory.free = free * MIB
        return memory

    def nvmlDeviceGetSamples(self, device: Any, sampling_type: int, timeStamp: int) -> tuple[int, list[Any]]:
        gpu, mig = self._device("nvmlDeviceGetSamples", device)
        if mig is not None or gpu.mig_enabled or sampling_type in gpu.unsupported_samples:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if sampling_type not in (pynvml.NVML_GPU_UTILIZATION_SAMPLES, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        newer = [(t, v) for t, v in gpu.samples.get(sampling_type, ()) if t > timeStamp]
        if not newer:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)  # "no new sample since timeStamp"
        member = {
            pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
            pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
            pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
        }[gpu.sample_value_type]
        samples = (pynvml.c_nvmlSample_t * len(newer))()
        for sample, (timestamp, value) in zip(samples, newer, strict=True):
            sample.timeStamp = timestamp
            setattr(sample.sampleValue, member, value)
        return gpu.sample_value_type, samples[0 : len(newer)]

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._whole_gpu_only("nvmlDeviceGetPowerUsage", handle)
        return ctypes.c_uint(gpu.power_mw).value

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._whole_gpu_only("nvmlDeviceGetTotalEnergyConsumption", handle)
        return ctypes.c_uint64(gpu.energy_mj).value

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._whole_gpu_only("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temp_c

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._whole_gpu_only("nvmlDeviceGetClockInfo", handle)
        clocks = {pynvml.NVML_CLOCK_GRAPHICS: gpu.sm_clock_mhz, pynvml.NVML_CLOCK_SM: gpu.sm_clock_mhz,
                  pynvml.NVML_CLOCK_MEM: gpu.mem_clock_mhz, pynvml.NVML_CLOCK_VIDEO: 1545}
        if type not in clocks:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return clocks[type]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._whole_gpu_only("nvmlDeviceGetTotalEccErrors", handle)
        if counterType not in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return gpu.ecc_dbe_volatile
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_sbe_volatile
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        gpu, mig = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        if mig is not None:
            listed = [p for p in gpu.processes if (p.gi_id, p.ci_id) == (mig.gi_id, mig.ci_id)]
        elif gpu.mig_enabled and gpu.mig_processes_need_root:
            _raise(pynvml.NVML_ERROR_NO_PERMISSION)
        else:
            listed = list(gpu.processes)
        if not listed:
            return []  # what the binding returns when NVML reports no process
        array = (pynvml.c_nvmlProcessInfo_v3_t * len(listed))()
        for entry, process in zip(array, listed, strict=True):
            entry.pid = process.pid
            entry.usedGpuMemory = NA_ULONGLONG if process.used_mib is None else process.used_mib * MIB
            entry.gpuInstanceId = NA_UINT if process.gi_id is None else process.gi_id
            entry.computeInstanceId = NA_UINT if process.ci_id is None else process.ci_id
        result = []
        for entry in array:  # exactly what pynvml.nvmlDeviceGetComputeRunningProcesses_v3 does
            obj = pynvml.nvmlStructToFriendlyObject(entry)
            if obj.usedGpuMemory == NA_ULONGLONG:
                obj.usedGpuMemory = None
            result.append(obj)
        return result

    # -------------------------------------------------------------- GPM

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> pynvml.c_nvmlGpmSupport_t:
        self._gpm_function("nvmlGpmQueryDeviceSupport")
        gpu, _mig = self._device("nvmlGpmQueryDeviceSupport", device)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.gpm.supported)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._gpm_function("nvmlGpmSampleAlloc")
        self._enter("nvmlGpmSampleAlloc")
        buffer = (ctypes.c_char * 8)()
        self._buffers.append(buffer)
        self.gpm_buffers[ctypes.addressof(buffer)] = None
        return ctypes.cast(ctypes.addressof(buffer), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._gpm_function("nvmlGpmSampleFree")
        self._enter("nvmlGpmSampleFree")
        del self.gpm_buffers[self._gpm_buffer(gpmSample)]

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        self._gpm_function("nvmlGpmSampleGet")
        gpu, mig = self._device("nvmlGpmSampleGet", device)
        if mig is not None or gpu.mig_enabled or not gpu.gpm.supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._gpm_fill(gpmSample, gpu.gpm)
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        self._gpm_function("nvmlGpmMigSampleGet")
        gpu, mig = self._device("nvmlGpmMigSampleGet", device)
        if mig is not None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # the parent's handle and a GPU instance id
        if not gpu.gpm.supported or not gpu.mig_enabled:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        instance = next((m for m in gpu.migs if m.gi_id == gpuInstanceId), None)
        if instance is None:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        if "nvmlGpmMigSampleGet" in instance.failures:
            _raise(instance.failures["nvmlGpmMigSampleGet"])
        self._gpm_fill(gpmSample, instance.gpm)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._gpm_function("nvmlGpmMetricsGet")
        self._enter("nvmlGpmMetricsGet")
        if not isinstance(metricsGet, pynvml.c_nvmlGpmMetricsGet_t):
            raise ctypes.ArgumentError(f"not an nvmlGpmMetricsGet_t: {metricsGet!r}")
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            _raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self.gpm_buffers.get(_address(metricsGet.sample1))
        second = self.gpm_buffers.get(_address(metricsGet.sample2))
        if first is None or second is None or first.device is not second.device:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        elapsed = second.time_s - first.time_s
        if elapsed <= 0 or metricsGet.numMetrics > pynvml.NVML_GPM_METRIC_MAX:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for slot in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[slot]
            code = first.device.metric_errors.get(metric.metricId, pynvml.NVML_SUCCESS)
            if not 0 < metric.metricId < pynvml.NVML_GPM_METRIC_MAX:
                code = pynvml.NVML_ERROR_INVALID_ARGUMENT
            metric.nvmlReturn = code
            metric.value = 0.0 if code != pynvml.NVML_SUCCESS else (
                second.counters.get(metric.metricId, 0.0) - first.counters.get(metric.metricId, 0.0)
            ) / elapsed
        return metricsGet

    # -------------------------------------------------------------- events

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        buffer = (ctypes.c_char * 8)()
        self._buffers.append(buffer)
        self._event_sets[ctypes.addressof(buffer)] = _EventSet()
        return ctypes.cast(ctypes.addressof(buffer), pynvml.c_nvmlEventSet_t)

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu, mig = self._device("nvmlDeviceRegisterEvents", handle)
        if mig is not None or not gpu.events_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        event_set = self._event_set(eventSet)
        address = _address(handle)
        event_set.registrations[address] = event_set.registrations.get(address, 0) | eventTypes

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        self._enter("nvmlEventSetWait")
        event_set = self._event_set(eventSet)
        if not event_set.pending:
            _raise(pynvml.NVML_ERROR_TIMEOUT)
        return event_set.pending.popleft()

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        self._event_set(eventSet)
        del self._event_sets[_address(eventSet)]

    # -------------------------------------------------------------- internals

    def _place(self, owner: FakeGpu | FakeMig, gpu: FakeGpu, mig: FakeMig | None) -> None:
        buffer = (ctypes.c_char * 8)()
        self._buffers.append(buffer)
        address = ctypes.addressof(buffer)
        self._devices[address] = (gpu, mig)
        self._device_address[id(owner)] = address

    def _handle(self, owner: FakeGpu | FakeMig) -> Any:
        """A new handle object each time, pointing at the device's one address, as NVML's are."""
        return ctypes.cast(self._device_address[id(owner)], pynvml.c_nvmlDevice_t)

    def _push(self, index: int, sampling_type: int, timestamp_us: int, value: float) -> None:
        buffer = self.gpus[index].samples.setdefault(sampling_type, deque(maxlen=SAMPLE_BUFFER))
        buffer.append((timestamp_us, value))

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if self.init_count <= 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def _device(self, name: str, handle: Any) -> tuple[FakeGpu, FakeMig | None]:
        self._enter(name)
        if not isinstance(handle, pynvml.c_nvmlDevice_t):
            raise ctypes.ArgumentError(f"{name}: not an nvmlDevice_t handle: {handle!r}")
        found = self._devices.get(_address(handle))
        if found is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu, mig = found
        if gpu.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        failures = mig.failures if mig is not None else gpu.failures
        if name in failures:
            _raise(failures[name])
        return gpu, mig

    def _gpm_function(self, name: str) -> None:
        if not self.driver_has_gpm:  # what pynvml's _nvmlGetFunctionPointer raises for a missing symbol
            self._enter(name)
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _gpm_buffer(self, sample: Any) -> int:
        if not isinstance(sample, pynvml.c_nvmlGpmSample_t):
            raise ctypes.ArgumentError(f"not an nvmlGpmSample_t: {sample!r}")
        address = _address(sample)
        if address not in self.gpm_buffers:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return address

    def _gpm_fill(self, sample: Any, device: FakeGpm) -> None:
        address = self._gpm_buffer(sample)
        now, counters = device.snapshot(self.clock())
        self.gpm_buffers[address] = _GpmSample(device=device, time_s=now, counters=counters)

    def _whole_gpu_only(self, name: str, handle: Any) -> FakeGpu:
        gpu, mig = self._device(name, handle)
        if mig is not None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _event_set(self, handle: Any) -> _EventSet:
        if not isinstance(handle, pynvml.c_nvmlEventSet_t):
            raise ctypes.ArgumentError(f"not an nvmlEventSet_t: {handle!r}")
        event_set = self._event_sets.get(_address(handle))
        if event_set is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return event_set


def _address(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0
