"""NVML GPM (GPU Performance Monitoring, Hopper and newer) for the nvml backend: the record's GPM fields
(``agents.records.GPM_FIELDS``) from two GPM samples.

GPM works on samples: ``nvmlGpmSampleGet(device, sample)`` (``nvmlGpmMigSampleGet(parent, gpu_instance_id,
sample)`` for a MIG GPU instance) copies a device's performance counters into a buffer from
``nvmlGpmSampleAlloc``; ``nvmlGpmMetricsGet`` turns two samples into metrics over the time between them,
each metric with its own return code. :class:`GpmReader` keeps two buffers per device and takes one sample
per interval, so an interval's values come from the previous interval's sample and this one's.

The choices, where NVML leaves one open:

- Support: ``nvmlGpmQueryDeviceSupport(gpu).isSupportedDevice``, asked once per GPU and logged once; a MIG
  device follows its GPU. False, an NVML error (``NotSupported``, ``NoPermission``, ``FunctionNotFound``
  from an older driver) or an nvidia-ml-py without the GPM functions: the GPM fields are null, and
  nothing else in the record changes.
- The span between the two samples (the agent's monotonic clock), judged as the energy counter's is:
  under ``max(0.1 s, interval / 2)`` null with the older sample kept as the baseline (NVML needs 100 ms
  between samples; the sampler catching up a boundary); over two intervals null with a new baseline (the
  agent was stalled). The first interval after start (one sample) and after a failed sample: null.
- A metric whose own ``nvmlReturn`` is an error: that field null (logged once), the others kept.
- Values: NaN, infinite or negative: null. Above the record's range by at most 10 %: the range's top
  (rounding at full load); further above: null (garbage, not "fully busy"). Rounded to 3 decimals.
- A MIG compute instance's record carries its GPU instance's values (GPM samples GPU instances).

No pynvml import: the NVML module is passed in (tests give ``tests/agents/fake_pynvml.py``).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agents.records import FLOAT_RANGES, GPM_FIELDS

log = logging.getLogger(__name__)

# NVML_GPM_METRIC_* id → the record field it fills (percentages 0–100, bandwidths MiB/s).
METRICS: dict[int, str] = {
    2: "sm_active",  # SM_UTIL
    3: "sm_occupancy",  # SM_OCCUPANCY
    5: "tensor_active",  # ANY_TENSOR_UTIL
    10: "dram_active",  # DRAM_BW_UTIL
    11: "fp64_active",  # FP64_UTIL
    12: "fp32_active",  # FP32_UTIL
    13: "fp16_active",  # FP16_UTIL
    20: "pcie_tx_mibs",  # PCIE_TX_PER_SEC
    21: "pcie_rx_mibs",  # PCIE_RX_PER_SEC
    60: "nvlink_rx_mibs",  # NVLINK_TOTAL_RX_PER_SEC
    61: "nvlink_tx_mibs",  # NVLINK_TOTAL_TX_PER_SEC
}
NVML_SUCCESS = 0
METRICS_GET_VERSION = 1  # NVML_GPM_METRICS_GET_VERSION: the binding leaves ``version`` 0, which NVML refuses
MIN_SPAN_S = 0.1  # NVML: samples less than 100 ms apart give no valid metrics
OVERSHOOT = 1.1  # up to 10 % above a range's top is rounding; beyond it, garbage
FUNCTIONS = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
             "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t")
MEASURE, TOO_SOON, STALE = "measure", "too soon", "stale"


def null_fields() -> dict[str, float | None]:
    return dict.fromkeys(GPM_FIELDS)


def clean(name: str, value: float | None) -> float | None:
    """A metric's value as the record takes it: in the field's range, or null for garbage."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    _low, high = FLOAT_RANGES[name]
    if value > high * OVERSHOOT:
        return None
    return round(min(float(value), high), 3)


def fields_from_metrics(metrics: Iterable[tuple[int, int, float]]) -> tuple[dict[str, float | None], dict[str, int]]:
    """``(metric id, nvmlReturn, value)`` triples → (every GPM field, null where unknown; the fields whose
    metric failed, with its return code)."""
    fields = null_fields()
    failed: dict[str, int] = {}
    for metric_id, code, value in metrics:
        name = METRICS.get(metric_id)
        if name is None:
            continue
        if code != NVML_SUCCESS:
            failed[name] = code
            continue
        fields[name] = clean(name, value)
    return fields, failed


def span_verdict(span_s: float, interval_s: int) -> str:
    """Whether two samples ``span_s`` apart measure an interval: MEASURE, TOO_SOON (keep the older
    sample as the baseline) or STALE (start afresh from the newer one)."""
    if span_s < max(MIN_SPAN_S, interval_s / 2):
        return TOO_SOON
    if span_s > 2 * interval_s:
        return STALE
    return MEASURE


def metrics_get(nvml: Any, sample1: Any, sample2: Any) -> list[tuple[int, int, float]]:
    """``nvmlGpmMetricsGet`` for :data:`METRICS` between two samples: ``(metric id, nvmlReturn, value)``."""
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", METRICS_GET_VERSION)
    request.numMetrics = len(METRICS)
    request.sample1, request.sample2 = sample1, sample2
    for slot, metric_id in enumerate(METRICS):
        request.metrics[slot].metricId = metric_id
    result = nvml.nvmlGpmMetricsGet(request)
    return [(int(m.metricId), int(m.nvmlReturn), float(m.value)) for m in result.metrics[: len(METRICS)]]


@dataclass
class _Stream:
    """One device's samples: two NVML buffers used in turn, and which holds the baseline, taken when."""

    gpu_uuid: str
    buffers: list[Any] = field(default_factory=list)  # empty: allocation failed, no GPM for this device
    baseline: tuple[int, float] | None = None  # (buffer index, monotonic time)


class GpmReader:
    """The GPM part of ``NvmlBackend``. ``field(label, what, fn, *args)`` is the backend's: ``fn(*args)``,
    None (logged once) on an NVML error, one of ``gone`` (re-raised) when the whole GPU is gone. Any other
    exception (a binding surprise) makes that device's GPM null, logged once: never the whole record."""

    def __init__(self, nvml: Any, *, field: Callable[..., Any], mono_clock: Callable[[], float],
                 gone: tuple[type[BaseException], ...] = ()) -> None:
        self._nvml = nvml
        self._field = field
        self._mono = mono_clock
        self._gone = gone
        self._missing = next((name for name in FUNCTIONS if getattr(nvml, name, None) is None), None)
        self._support: dict[str, bool] = {}  # GPU uuid → GPM supported
        self._streams: dict[str, _Stream] = {}  # record uuid (GPU or MIG device) → its samples
        self._reported: set[tuple[str, str, int]] = set()

    def supported(self, gpu_uuid: str, handle: Any) -> bool:
        """Whether the GPU has GPM: asked once, the answer logged once."""
        if gpu_uuid not in self._support:
            try:
                self._support[gpu_uuid] = self._query_support(gpu_uuid, handle)
            except self._gone:
                raise  # undecided: asked again when the GPU is back
            except Exception:
                self._support[gpu_uuid] = False
                log.exception("GPU %s: GPM support query failed; GPM fields are null", gpu_uuid)
        return self._support[gpu_uuid]

    def _query_support(self, gpu_uuid: str, handle: Any) -> bool:
        if self._missing is not None:
            if not self._support:
                log.info("no GPM: this nvidia-ml-py has no %s; GPM fields are null", self._missing)
            answer = False
        else:
            support = self._field(gpu_uuid, "GPM support", self._nvml.nvmlGpmQueryDeviceSupport, handle)
            answer = bool(support is not None and support.isSupportedDevice)
            if support is not None:
                log.info("GPU %s: GPM %s", gpu_uuid,
                         "supported" if answer else "not supported by the device; GPM fields are null")
        return answer

    def fields(self, *, uuid: str, gpu_uuid: str, handle: Any, interval_s: int,
               gi_id: int | None = None, mig: bool = False) -> dict[str, float | None]:
        """This interval's GPM fields of GPU ``gpu_uuid`` (``handle``), or with ``mig`` of its MIG device
        ``uuid`` in GPU instance ``gi_id``. Called once per interval per device."""
        try:
            return self._fields(uuid, gpu_uuid, handle, interval_s, gi_id, mig)
        except self._gone:
            raise
        except Exception:
            if (uuid, "exception", 0) not in self._reported:
                self._reported.add((uuid, "exception", 0))
                log.exception("GPU %s: GPM sampling failed; its GPM fields are null", uuid)
            if uuid in self._streams:
                self._streams[uuid].baseline = None
            return null_fields()

    def _fields(self, uuid: str, gpu_uuid: str, handle: Any, interval_s: int, gi_id: int | None,
                mig: bool) -> dict[str, float | None]:
        if not self.supported(gpu_uuid, handle) or (mig and gi_id is None):
            return null_fields()
        stream = self._stream(uuid, gpu_uuid)
        if not stream.buffers:
            return null_fields()
        slot = 0 if stream.baseline is None else 1 - stream.baseline[0]
        buffer = stream.buffers[slot]
        if mig:
            taken = self._field(uuid, "GPM sample", self._nvml.nvmlGpmMigSampleGet, handle, gi_id, buffer)
        else:
            taken = self._field(uuid, "GPM sample", self._nvml.nvmlGpmSampleGet, handle, buffer)
        now = self._mono()
        if taken is None:
            stream.baseline = None
            return null_fields()
        previous, stream.baseline = stream.baseline, (slot, now)
        if previous is None:
            return null_fields()  # one sample: nothing to measure yet
        verdict = span_verdict(now - previous[1], interval_s)
        if verdict == TOO_SOON:
            stream.baseline = previous  # the buffer just filled is reused next time
        if verdict != MEASURE:
            return null_fields()
        metrics = self._field(uuid, "GPM metrics", metrics_get, self._nvml, stream.buffers[previous[0]], buffer)
        if metrics is None:
            return null_fields()
        values, failed = fields_from_metrics(metrics)
        for name, code in failed.items():
            self._note_metric(uuid, name, code)
        return values

    def forget(self, gpu_uuid: str) -> None:
        """After the GPU was lost its counters may restart: no metrics across that."""
        for stream in self._streams.values():
            if stream.gpu_uuid == gpu_uuid:
                stream.baseline = None

    def retire(self, gpu_uuid: str, *, keep: set[str]) -> None:
        """Free the samples of the GPU's devices not in ``keep`` (MIG devices destroyed, MIG mode left)."""
        for uuid in [u for u, s in self._streams.items() if s.gpu_uuid == gpu_uuid and u not in keep]:
            self._free(self._streams.pop(uuid))

    def close(self) -> None:
        for stream in self._streams.values():
            self._free(stream)
        self._streams.clear()

    def _stream(self, uuid: str, gpu_uuid: str) -> _Stream:
        stream = self._streams.get(uuid)
        if stream is None:
            stream = self._streams[uuid] = _Stream(gpu_uuid=gpu_uuid)
            buffers = [self._field(uuid, "GPM sample buffer", self._nvml.nvmlGpmSampleAlloc) for _ in range(2)]
            stream.buffers = [b for b in buffers if b is not None]
            if len(stream.buffers) < 2:
                self._free(stream)
        return stream

    def _free(self, stream: _Stream) -> None:
        for buffer in stream.buffers:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlGpmSampleFree(buffer)
        stream.buffers = []
        stream.baseline = None

    def _note_metric(self, uuid: str, name: str, code: int) -> None:
        if (uuid, name, code) in self._reported:
            return
        self._reported.add((uuid, name, code))
        nvml = self._nvml
        expected = (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NO_PERMISSION, nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        log.log(logging.INFO if code in expected else logging.WARNING,
                "GPU %s: GPM %s unavailable: %s (logged once)", uuid, name, nvml.NVMLError(code))
