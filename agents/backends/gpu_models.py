"""What the simulated GPUs look like: one entry per model the simulator knows.

Values come from the real nvidia-smi captures in shared/data/nvidia-smi/ where they hold them:

- H200 (``…nvidia-h200__590.48.01.txt``): memory, power limit, idle 77 W / 28 °C / 345 MHz, 100 % load
  630 W / 53 °C / 1980 MHz.
- H200 with MIG (``…nvidia-h200-mig__590.48.01.txt``): the layout below, GI/CI ids, profile names, memory,
  memory used with nothing running, SMs per compute instance (``-q``'s "Device Attributes / Shared /
  Multiprocessor count").
- H100 with MIG (``…nvidia-h100-mig__590.48.01.txt``): memory, power limit, idle 70 W / 42 °C / 345 MHz,
  the MIG layout, its memory and SMs.
- A100-SXM4-80GB (``a100-sxm4-v12.xml``, MIG on, nothing running): power limit 500 W, idle 67 W / 27 °C,
  SM clock 1275 MHz (max 1410), the MIG layout, its memory and SMs.
- L40S (``…nvidia-l40s__595.80.txt``): power limit 350 W, max SM clock 2520 MHz, idle as dmon shows it
  once the clocks are down: 37 W, 54–57 °C, 210 MHz.

The rest (the full-load power and temperature of the H100, A100 and L40S) are estimates, marked as such below.
"""

from __future__ import annotations

from dataclasses import dataclass

TOTAL_SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100, H200)


@dataclass(frozen=True)
class MigProfile:
    """One MIG device of a layout, i.e. one compute instance as NVML lists it: its profile name, GPU
    and compute instance ids, the GPU instance's slices and memory (MiB; the compute instances of one
    GPU instance share both), the memory the GPU instance uses with nothing running (driver
    reservations), and the compute instance's own SMs."""

    profile: str
    gi_id: int
    ci_id: int
    slices: int
    memory_mib: int
    base_used_mib: int
    sm_count: int


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as NVML names and measures it. ``gpm``: NVML GPM metrics (SM activity, tensor and
    pipe activity, NVLink and PCIe traffic) work on it: Hopper and newer."""

    name: str
    short_name: str
    memory_mib: int
    power_limit_w: float
    idle_w: float  # no context, clocks down
    full_load_w: float  # 100 % utilization, e.g. gpu_burn
    idle_temp_c: float
    full_load_temp_c: float
    idle_sm_clock_mhz: int
    max_sm_clock_mhz: int
    mig_layout: tuple[MigProfile, ...] = ()
    gpm: bool = False


# The H100 capture's layout: 3g + 2g + 1g + 1g of 7 slices, GI ids as the driver numbered them.
_H100_MIG = (
    MigProfile("3g.40gb", gi_id=2, ci_id=0, slices=3, memory_mib=40448, base_used_mib=26, sm_count=60),
    MigProfile("2g.20gb", gi_id=3, ci_id=0, slices=2, memory_mib=20096, base_used_mib=17, sm_count=32),
    MigProfile("1g.10gb", gi_id=9, ci_id=0, slices=1, memory_mib=9984, base_used_mib=9, sm_count=16),
    MigProfile("1g.10gb", gi_id=10, ci_id=0, slices=1, memory_mib=9984, base_used_mib=9, sm_count=16),
)
# The H200 capture's layout: a 3g GPU instance split into two compute instances (1c: 16 SMs, 2c: 32 SMs,
# sharing the GI's 71424 MiB, so both report its memory), then 2g + 1g + 1g: five MIG devices.
_H200_MIG = (
    MigProfile("1c.3g.71gb", gi_id=2, ci_id=0, slices=3, memory_mib=71424, base_used_mib=22, sm_count=16),
    MigProfile("2c.3g.71gb", gi_id=2, ci_id=1, slices=3, memory_mib=71424, base_used_mib=22, sm_count=32),
    MigProfile("2g.35gb", gi_id=3, ci_id=0, slices=2, memory_mib=33280, base_used_mib=17, sm_count=32),
    MigProfile("1g.18gb", gi_id=9, ci_id=0, slices=1, memory_mib=16384, base_used_mib=9, sm_count=16),
    MigProfile("1g.18gb", gi_id=10, ci_id=0, slices=1, memory_mib=16384, base_used_mib=9, sm_count=16),
)
# The A100 capture's layout: four GPU instances of 14 SMs and 19968 MiB (a quarter of the memory), GI 3–6.
# The XML names no profile; 1 compute slice with 2 of the 8 memory slices is the A100 80GB's 1g.20gb.
_A100_MIG = tuple(
    MigProfile("1g.20gb", gi_id=gi, ci_id=0, slices=1, memory_mib=19968, base_used_mib=12, sm_count=14)
    for gi in (3, 4, 5, 6)
)

MODELS: dict[str, GpuSpec] = {
    spec.short_name: spec
    for spec in (
        GpuSpec("NVIDIA H200", "H200", 143771, 700, 77, 630, 28, 53, 345, 1980, _H200_MIG, gpm=True),
        # Full-load power and temperature estimated (the capture's load ran on 60 of 132 SMs).
        GpuSpec("NVIDIA H100 80GB HBM3", "H100", 81559, 700, 70, 640, 42, 66, 345, 1980, _H100_MIG, gpm=True),
        # Full-load power and temperature estimated. The capture is of a GPU in MIG mode with persistence
        # mode off: its "idle" SM clock is the application clock (1275 MHz), kept here as captured.
        GpuSpec("NVIDIA A100-SXM4-80GB", "A100", 81920, 500, 67, 460, 27, 62, 1275, 1410, _A100_MIG),
        # Full-load power and temperature estimated (the capture's load is NVENC video, 108 W at 53 °C).
        GpuSpec("NVIDIA L40S", "L40S", 46068, 350, 37, 330, 55, 80, 210, 2520),
    )
}


def find_model(name: str) -> GpuSpec | None:
    """A model by short name (``H200``, case-insensitive) or full NVML name (``NVIDIA H200``)."""
    for spec in MODELS.values():
        if name.lower() in (spec.short_name.lower(), spec.name.lower()):
            return spec
    return None
