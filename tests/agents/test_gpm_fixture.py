"""Real-GPU facts about GPM, checked on captures that agents/contrib/gpm_capture.py made on a machine with
an NVIDIA GPU (tests/agents/fixtures/nvml-h200-<date>.json); skipped while there is none. And the capture
script itself, run against the fake NVML, so a device session's one minute is not spent on a broken script."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from agents.contrib import gpm_capture
from agents.records import FLOAT_RANGES, GPM_FIELDS
from tests.agents.fake_pynvml import FakeNvml, h200, l40s
from tests.agents.test_nvml_backend import check_inventory, check_record

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = sorted(FIXTURES.glob("nvml-h200-*.json"))
NO_CAPTURE = pytest.param(None, marks=pytest.mark.skip(
    reason="no GPM capture from a real GPU yet: run `python agents/contrib/gpm_capture.py --out tests/agents/fixtures` "
           "on a machine with an NVIDIA H200 (about a minute) and commit the nvml-h200-<date>.json it writes"))
TOLERANCE = 5.0  # percentage points between two NVML readings of one interval


def captures():
    return [pytest.param(path, id=path.name) for path in CAPTURES] or [NO_CAPTURE]


def series(capture: dict) -> dict[str, list[dict]]:
    by_uuid: dict[str, list[dict]] = {}
    for record in capture["samples"]["records"]:
        by_uuid.setdefault(record["gpu_uuid"], []).append(record)
    return by_uuid


def supported_gpus(capture: dict) -> set[str]:
    return {entry["uuid"] for entry in capture["gpm"]["support"] if entry.get("isSupportedDevice")}


def mean(records: list[dict], name: str) -> float | None:
    values = [record[name] for record in records if record[name] is not None]
    return statistics.fmean(values) if values else None


# ------------------------------------------------------------------ checks any capture must pass


def check_gpm_values(capture: dict) -> None:
    """Every GPM field null or a number in the record's range; the first interval of each device null."""
    for uuid, records in series(capture).items():
        assert all(records[0][name] is None for name in GPM_FIELDS), f"{uuid}: one sample, no GPM"
        for record in records:
            for name in GPM_FIELDS:
                value = record[name]
                assert value is None or (isinstance(value, float | int) and not isinstance(value, bool)), (name, value)
                low, high = FLOAT_RANGES[name]
                assert value is None or low <= value <= high, (uuid, record["ts"], name, value)


def check_gpm_where_supported(capture: dict) -> None:
    """A whole GPU that NVML says has GPM gives SM activity from its second interval on; one without
    GPM gives none, never 0."""
    whole = {gpu["uuid"] for gpu in capture["inventory"]["gpus"] if not gpu["mig_mode"]}
    supported = supported_gpus(capture)
    for uuid, records in series(capture).items():
        if uuid not in whole:
            continue
        later = records[1:]
        if uuid in supported:
            assert all(record["sm_active"] is not None for record in later), f"{uuid}: GPM supported, yet null"
            assert capture["gpm"]["worked"] is True
        else:
            assert all(record[name] is None for record in records for name in GPM_FIELDS), f"{uuid}: no GPM"


# ------------------------------------------------------------------ a real GPU's captures


@pytest.mark.parametrize("path", captures())
def test_a_real_capture_has_gpm_in_range_and_null_on_the_first_interval(path):
    capture = json.loads(path.read_text())
    check_inventory(capture["inventory"])
    for record in capture["samples"]["records"]:
        check_record(record, spooled=True)
    check_gpm_values(capture)
    check_gpm_where_supported(capture)


@pytest.mark.parametrize("path", captures())
def test_on_a_real_gpu_sm_activity_is_at_most_the_duty_cycle_and_load_is_busier_than_idle(path):
    capture = json.loads(path.read_text())
    phases = capture["phases"]
    if not phases["load_ts"]:
        pytest.skip(f"{path.name}: no interval under load ({phases['load'].get('skipped', 'the load did not run')})")
    load_ts, idle_ts = set(phases["load_ts"]), set(phases["idle_ts"])
    checked = 0
    for uuid, records in series(capture).items():
        if uuid not in supported_gpus(capture):
            continue
        loaded = [r for r in records if r["ts"] in load_ts]
        idle = [r for r in records[1:] if r["ts"] in idle_ts]
        sm_load, duty_load = mean(loaded, "sm_active"), mean(loaded, "util_gpu")
        assert sm_load is not None, f"{uuid}: no SM activity under load"
        if duty_load is not None:  # SMs busy ⊂ time a kernel ran: never more than the duty cycle
            assert sm_load <= duty_load + TOLERANCE, (uuid, sm_load, duty_load)
        assert idle, f"{uuid}: no idle interval with GPM"
        assert mean(idle, "sm_active") < sm_load, (uuid, mean(idle, "sm_active"), sm_load)
        tensor_load, tensor_idle = mean(loaded, "tensor_active"), mean(idle, "tensor_active")
        if tensor_load is not None and tensor_idle is not None:  # the load is a bf16 matmul loop
            assert tensor_idle < tensor_load, (uuid, tensor_idle, tensor_load)
        checked += 1
    assert checked, "no GPU with GPM support in the capture"


# ------------------------------------------------------------------ the capture script


def test_the_capture_script_writes_a_capture_these_tests_read(tmp_path):
    fake = FakeNvml([h200(0), l40s(1)])
    fake.gpus[0].gpm.run(sm_active=12.5, tensor_active=3.0, pcie_rx_mibs=100.0)

    code = gpm_capture.main(["--out", str(tmp_path), "--interval", "1", "--idle", "1.5", "--load", "0.5",
                             "--max-seconds", "8"], nvml=fake)

    assert code == 0
    (path,) = tmp_path.glob("nvml-h200-*.json")
    capture = json.loads(path.read_text())
    assert capture["host"]["driver_version"] == "590.48.01" and isinstance(capture["host"]["root"], bool)
    assert [entry["isSupportedDevice"] for entry in capture["gpm"]["support"]] == [True, False]
    assert capture["gpm"]["worked"] is True
    assert capture["gpm"]["fields_with_values"][fake.gpus[0].uuid][0] == "sm_active"
    assert capture["gpm"]["fields_with_values"][fake.gpus[1].uuid] == []
    check_inventory(capture["inventory"])
    for record in capture["samples"]["records"]:
        check_record(record, spooled=True)
    check_gpm_values(capture)
    check_gpm_where_supported(capture)
    assert [r["sm_active"] for r in series(capture)[fake.gpus[0].uuid][1:]] == pytest.approx(
        [12.5] * (len(series(capture)[fake.gpus[0].uuid]) - 1))
    load = capture["phases"]["load"]
    assert load.get("ran") or load.get("skipped"), "the load either ran or says why not"
    assert capture["phases"]["idle_ts"], "idle intervals are marked"
    assert fake.init_count == 0 and fake.gpm_buffers == {}, "NVML shut down, GPM samples freed"


def test_the_capture_script_exits_2_without_a_gpu(tmp_path, capsys):
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise self.NVMLError(self.NVML_ERROR_DRIVER_NOT_LOADED)

    code = gpm_capture.main(["--out", str(tmp_path)], nvml=NoDriver([]))

    assert code == 2
    assert "no NVIDIA GPU or driver here" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [], "nothing written"
    assert gpm_capture.main(["--out", str(tmp_path)], nvml=FakeNvml([])) == 2
    assert "sees no GPU" in capsys.readouterr().err
