"""The GPM maths of agents/backends/gpm.py: which NVML metric fills which record field, how a metric's
value becomes a field, when two samples measure an interval. The backend's use of it (support, samples,
MIG) is tested in test_nvml_backend.py."""

from __future__ import annotations

import subprocess
import sys

import pynvml
import pytest

from agents.backends import gpm
from agents.records import FLOAT_RANGES, GPM_FIELDS
from tests.agents.agent_helpers import ROOT
from tests.agents.fake_pynvml import FakeNvml, h200


def test_it_maps_each_gpm_field_to_the_nvml_metric_named_for_it():
    assert gpm.METRICS == {
        pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active",
        pynvml.NVML_GPM_METRIC_FP64_UTIL: "fp64_active",
        pynvml.NVML_GPM_METRIC_FP32_UTIL: "fp32_active",
        pynvml.NVML_GPM_METRIC_FP16_UTIL: "fp16_active",
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: "pcie_tx_mibs",
        pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: "pcie_rx_mibs",
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: "nvlink_rx_mibs",
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: "nvlink_tx_mibs",
    }
    assert sorted(gpm.METRICS.values()) == sorted(GPM_FIELDS), "every GPM field, once"
    assert gpm.METRICS_GET_VERSION == pynvml.NVML_GPM_METRICS_GET_VERSION
    assert pynvml.NVML_SUCCESS == gpm.NVML_SUCCESS


def test_it_turns_metrics_into_fields_and_keeps_the_others_when_one_fails():
    metrics = [(2, 0, 62.5), (3, 0, 31.0), (5, pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0), (10, 0, 55.123456),
               (20, 0, 1200.0), (21, 0, 3400.5), (60, pynvml.NVML_ERROR_UNKNOWN, 7.0), (61, 0, 0.0), (1, 0, 99.0)]

    fields, failed = gpm.fields_from_metrics(metrics)

    assert fields == {
        "sm_active": 62.5, "sm_occupancy": 31.0, "tensor_active": None, "dram_active": 55.123,
        "fp16_active": None, "fp32_active": None, "fp64_active": None,  # not asked for: unknown
        "pcie_tx_mibs": 1200.0, "pcie_rx_mibs": 3400.5, "nvlink_rx_mibs": None, "nvlink_tx_mibs": 0.0,
    }
    assert failed == {"tensor_active": pynvml.NVML_ERROR_NOT_SUPPORTED, "nvlink_rx_mibs": pynvml.NVML_ERROR_UNKNOWN}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("sm_active", 0.0, 0.0),
        ("sm_active", 100.0, 100.0),
        ("sm_active", 100.4, 100.0),  # rounding at full load
        ("sm_active", 109.9, 100.0),
        ("sm_active", 111.0, None),  # garbage, not "fully busy"
        ("sm_occupancy", 4294967295.0, None),
        ("tensor_active", -0.5, None),
        ("dram_active", float("nan"), None),
        ("fp32_active", float("inf"), None),
        ("pcie_rx_mibs", 25_600.123456, 25_600.123),
        ("nvlink_tx_mibs", 1.05e9, 1e9),
        ("nvlink_tx_mibs", 5e9, None),
    ],
)
def test_it_keeps_values_in_the_record_range_and_drops_garbage(name, value, expected):
    assert gpm.clean(name, value) == expected
    if expected is not None:
        low, high = FLOAT_RANGES[name]
        assert low <= expected <= high


@pytest.mark.parametrize(
    ("span_s", "interval_s", "verdict"),
    [
        (0.05, 10, gpm.TOO_SOON),  # under NVML's 100 ms
        (0.09, 1, gpm.TOO_SOON),
        (4.9, 10, gpm.TOO_SOON),  # the sampler catching up a boundary
        (5.0, 10, gpm.MEASURE),
        (10.0, 10, gpm.MEASURE),
        (20.0, 10, gpm.MEASURE),  # a boundary sampled late
        (20.1, 10, gpm.STALE),  # the agent stalled: not this interval's activity
        (0.6, 1, gpm.MEASURE),
    ],
)
def test_it_measures_only_spans_that_describe_the_interval(span_s, interval_s, verdict):
    assert gpm.span_verdict(span_s, interval_s) == verdict


def test_it_sets_the_request_version_that_the_binding_leaves_unset():
    assert pynvml.c_nvmlGpmMetricsGet_t().version == 0, "if the binding sets it now, this workaround can go"
    fake = FakeNvml([h200()])
    fake.nvmlInit()
    gpu = fake.gpus[0]
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    first, second = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    clock = iter([100.0, 110.0])
    fake.clock = lambda: next(clock)
    gpu.gpm.run(sm_active=25.0, pcie_tx_mibs=512.0)
    fake.nvmlGpmSampleGet(handle, first)
    fake.nvmlGpmSampleGet(handle, second)
    unversioned = pynvml.c_nvmlGpmMetricsGet_t()
    unversioned.numMetrics, unversioned.sample1, unversioned.sample2 = 1, first, second
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        fake.nvmlGpmMetricsGet(unversioned)

    metrics = dict((metric_id, (code, value)) for metric_id, code, value in gpm.metrics_get(fake, first, second))

    assert metrics[pynvml.NVML_GPM_METRIC_SM_UTIL] == (0, pytest.approx(25.0))
    assert metrics[pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC] == (0, pytest.approx(512.0))
    assert set(metrics) == set(gpm.METRICS)


def test_it_imports_without_pynvml():
    code = "import sys; sys.modules['pynvml'] = None; import agents.backends.gpm"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
