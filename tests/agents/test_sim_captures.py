"""The simulated GPUs are the captured ones: MIG layouts, memory, power limits and idle readings read
from the real nvidia-smi captures in shared/data/nvidia-smi/ (next to this repository), not retyped."""

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agents.backends.gpu_models import MODELS, TOTAL_SLICES
from agents.backends.sim import SimBackend

CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "nvidia-smi"
H200 = "linux-x86_64__nvidia-h200__590.48.01.txt"
H200_MIG = "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
L40S = "linux-x86_64__nvidia-l40s__595.80.txt"
A100_XML = "a100-sxm4-v12.xml"
T0 = 1_793_577_600

pytestmark = pytest.mark.skipif(not CAPTURES.is_dir(), reason=f"no nvidia-smi captures at {CAPTURES}")


def sections(name: str) -> dict[str, str]:
    """A text capture's sections by title (``idle :: query (-q)``): the lines under each ``####`` header."""
    found: dict[str, list[str]] = {}
    current = None
    for line in (CAPTURES / name).read_text(encoding="utf-8").splitlines():
        header = re.fullmatch(r"# (\w+ :: .+)", line)
        if header:
            current = found.setdefault(header.group(1).strip(), [])
        elif current is not None and not line.startswith(("# $", "####")):
            current.append(line)
    return {title: "\n".join(lines) for title, lines in found.items()}


def value(text: str, pattern: str) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not in the capture"
    return match.group(1)


def mig_devices(name: str) -> list[dict]:
    """The MIG devices of a text capture, in device order: profile (``nvidia-smi -L``), then GI and CI
    ids, SMs, memory and memory used with nothing running (the idle ``-q``)."""
    parts = sections(name)
    profiles = re.findall(r"^\s+MIG (\S+)\s+Device\s+(\d+):", parts["capabilities :: list (-L)"], re.MULTILINE)
    devices = []
    for block in parts["idle :: query (-q)"].split("\n    MIG Device\n")[1:]:
        block = "\n".join(re.match(r"(?:\s{8}.*\n?)*", block + "\n").group(0).splitlines())  # its own lines
        memory = re.search(r"Shared FB Memory Usage\n\s+Total\s+: (\d+) MiB\n\s+Reserved\s+: \d+ MiB\n\s+Used\s+: (\d+) MiB",
                           block)
        devices.append({
            "index": int(value(block, r"^\s+Index\s+: (\d+)")),
            "gi_id": int(value(block, r"GPU Instance ID\s+: (\d+)")),
            "ci_id": int(value(block, r"Compute Instance ID\s+: (\d+)")),
            "sm_count": int(value(block, r"Multiprocessor count\s+: (\d+)")),
            "memory_mib": int(memory.group(1)), "idle_used_mib": int(memory.group(2)),
        })
    assert [int(index) for _profile, index in profiles] == [d["index"] for d in devices]
    for device, (profile, _index) in zip(devices, profiles, strict=True):
        device["profile"] = profile
        device["slices"] = int(re.search(r"(\d+)g\.", profile).group(1))  # 1c.3g.71gb: the GI's 3
    return devices


def idle_dmon(name: str) -> dict[str, list[int]]:
    """The idle ``dmon`` columns that every capture has: power (W), GPU temperature (°C), SM clock (MHz)."""
    rows = [line.split() for line in sections(name)["idle :: dmon (per-device monitor, incl. PCIe rx/tx)"].splitlines()
            if line.strip() and not line.startswith("#")]
    return {"power": [int(r[1]) for r in rows], "temp": [int(r[2]) for r in rows], "clock": [int(r[11]) for r in rows]}


def sim_mig(model: str) -> tuple[dict, list[dict]]:
    gpu0 = SimBackend(hostname="gpu-mig-01", gpus=1, model=model, mig=True).inventory()["gpus"][0]
    return gpu0, gpu0["mig_instances"]


def idle_records(model: str, *, mig: bool = False) -> list[dict]:
    """Records of a simulated GPU that runs nothing (a node in maintenance), over an hour."""
    backend = SimBackend(hostname="gpu-idle-01", gpus=1, model=model, mig=mig, maintenance=True)
    return [r for ts in range(T0, T0 + 3600, 300) for r in backend.sample(ts=ts, interval_s=10)]


@pytest.mark.parametrize(("capture", "model"), [(H200_MIG, "H200"), (H100_MIG, "H100")])
def test_the_mig_layout_is_the_captures(capture, model):
    devices = mig_devices(capture)
    gpu0, instances = sim_mig(model)
    fields = ("profile", "gi_id", "ci_id", "memory_mib", "slices", "sm_count")
    assert [tuple(i[f] for f in fields) for i in instances] == [tuple(d[f] for f in fields) for d in devices]
    assert {i["total_slices"] for i in instances} == {TOTAL_SLICES}
    query = sections(capture)["idle :: query (-q)"]
    assert gpu0["name"] == value(query, r"Product Name\s+: (.+)$")
    assert gpu0["memory_mib"] == int(value(query, r"^    FB Memory Usage\n\s+Total\s+: (\d+) MiB"))
    # With nothing running, each MIG device uses what the capture shows (its GPU instance's reservations).
    uuids = [i["uuid"] for i in instances]
    for record in idle_records(model, mig=True):
        if record["gpu_uuid"] in uuids:
            device = devices[uuids.index(record["gpu_uuid"])]
            assert (record["mem_used_mib"], record["mem_total_mib"]) == (device["idle_used_mib"], device["memory_mib"])


def test_the_h200_splits_a_gpu_instance_into_two_compute_instances_as_captured():
    devices = mig_devices(H200_MIG)
    assert len(devices) == 5  # the capture: 1c.3g + 2c.3g (one GPU instance) + 2g + 1g + 1g
    _gpu0, instances = sim_mig("H200")
    shared = [i for i in instances if i["gi_id"] == 2]
    assert [(i["profile"], i["ci_id"], i["sm_count"]) for i in shared] == [("1c.3g.71gb", 0, 16), ("2c.3g.71gb", 1, 32)]


def test_the_a100_mig_layout_and_readings_are_the_xml_captures():
    gpu = ET.parse(CAPTURES / A100_XML).getroot().find("gpu")  # noqa: S314 (our own capture)

    def number(path, element=gpu):
        return float(element.findtext(path).split()[0])

    devices = [(int(number("gpu_instance_id", d)), int(number("compute_instance_id", d)),
                int(number("fb_memory_usage/total", d)), int(number("device_attributes/shared/multiprocessor_count", d)))
               for d in gpu.find("mig_devices")]
    gpu0, instances = sim_mig("A100")
    assert [(i["gi_id"], i["ci_id"], i["memory_mib"], i["sm_count"]) for i in instances] == devices
    spec = MODELS["A100"]
    assert gpu0["name"] == gpu.findtext("product_name") == spec.name
    assert spec.memory_mib == number("fb_memory_usage/total")
    assert spec.power_limit_w == number("gpu_power_readings/current_power_limit") == 500
    assert spec.idle_temp_c == number("temperature/gpu_temp")
    assert spec.idle_w == pytest.approx(number("gpu_power_readings/power_draw"), abs=1)
    assert spec.idle_sm_clock_mhz == number("clocks/sm_clock")
    assert spec.max_sm_clock_mhz == number("max_clocks/sm_clock")
    for record in idle_records("A100"):
        assert record["temp_c"] == 27 and record["sm_clock_mhz"] == 1275
        assert record["power_w"] == pytest.approx(67.03, rel=0.02)


@pytest.mark.parametrize(("capture", "model"), [(H200, "H200"), (H200_MIG, "H200"), (H100_MIG, "H100"), (L40S, "L40S")])
def test_power_limit_clocks_and_idle_readings_are_the_captures(capture, model):
    spec = MODELS[model]
    query = sections(capture)["idle :: query (-q)"]
    assert spec.name == value(query, r"Product Name\s+: (.+)$")
    assert spec.power_limit_w == float(value(query, r"Current Power Limit\s+: ([\d.]+) W"))
    assert spec.max_sm_clock_mhz == int(value(query, r"Max Clocks\n.*\n\s+SM\s+: (\d+) MHz"))
    dmon = idle_dmon(capture)
    # Idle: the clocks down (the last dmon rows, once the L40S has settled), within the captured readings.
    assert spec.idle_sm_clock_mhz == dmon["clock"][-1]
    assert min(dmon["temp"]) <= spec.idle_temp_c <= max(dmon["temp"])
    assert min(dmon["power"]) - 1 <= spec.idle_w <= max(dmon["power"]) + 1
    for record in idle_records(model):
        assert min(dmon["temp"]) <= record["temp_c"] <= max(dmon["temp"])
        assert record["sm_clock_mhz"] == dmon["clock"][-1]


def test_the_l40s_idles_warm_as_captured():
    dmon = idle_dmon(L40S)
    assert (min(dmon["temp"]), max(dmon["temp"])) == (54, 57)
    assert {r["temp_c"] for r in idle_records("L40S")} <= set(range(54, 58))
