"""What the simulated GPUs look like: one entry per model the simulator knows.

Values come from the real nvidia-smi captures in shared/data/nvidia-smi/ where they hold them
(H200: memory, power limit, idle 77 W / 28 °C / 345 MHz, 100 % load 630 W / 53 °C / 1980 MHz;
H100 with MIG: memory, power limit, idle 70 W / 42 °C, the MIG layout and its memory); the rest
(A100, L40S, the H100's full-load power, the H200 and A100 MIG memory) are the vendors' published
figures or scaled estimates, marked as such below.
"""

from __future__ import annotations

from dataclasses import dataclass

TOTAL_SLICES = 7  # compute slices of a MIG-capable GPU (A100, H100, H200)


@dataclass(frozen=True)
class MigProfile:
    """One MIG instance of a layout: NVML profile name, GPU instance id, slices, memory (MiB), and
    the memory it uses with nothing running (driver reservations)."""

    profile: str
    gi_id: int
    slices: int
    memory_mib: int
    base_used_mib: int


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as NVML names and measures it."""

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


# The H100 capture's layout: 3g + 2g + 1g + 1g of 7 slices, GI ids as the driver numbered them.
_H100_MIG = (
    MigProfile("3g.40gb", 2, 3, 40448, 26),
    MigProfile("2g.20gb", 3, 2, 20096, 17),
    MigProfile("1g.10gb", 9, 1, 9984, 9),
    MigProfile("1g.10gb", 10, 1, 9984, 9),
)
# H200: the same slice layout under the H200's profile names; memory scaled from the H100's
# (estimate: no H200 MIG capture).
_H200_MIG = (
    MigProfile("3g.71gb", 2, 3, 71296, 26),
    MigProfile("2g.35gb", 3, 2, 35424, 17),
    MigProfile("1g.18gb", 9, 1, 17600, 9),
    MigProfile("1g.18gb", 10, 1, 17600, 9),
)

MODELS: dict[str, GpuSpec] = {
    spec.short_name: spec
    for spec in (
        GpuSpec("NVIDIA H200", "H200", 143771, 700, 77, 630, 28, 53, 345, 1980, _H200_MIG),
        # Full-load power and temperature estimated (the capture's load ran on 60 of 132 SMs).
        GpuSpec("NVIDIA H100 80GB HBM3", "H100", 81559, 700, 70, 640, 42, 66, 345, 1980, _H100_MIG),
        # A100 and L40S: datasheet limits and clocks, idle/load power estimated. The A100 80GB's MIG
        # profiles share the H100's names; its memory per instance is taken to match (estimate).
        GpuSpec("NVIDIA A100-SXM4-80GB", "A100", 81920, 400, 60, 380, 32, 62, 210, 1410, _H100_MIG),
        GpuSpec("NVIDIA L40S", "L40S", 46068, 350, 35, 330, 30, 68, 210, 2520),
    )
}


def find_model(name: str) -> GpuSpec | None:
    """A model by short name (``H200``, case-insensitive) or full NVML name (``NVIDIA H200``)."""
    for spec in MODELS.values():
        if name.lower() in (spec.short_name.lower(), spec.name.lower()):
            return spec
    return None
