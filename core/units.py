"""Usage units (DESIGN.md §4).

Usage is counted in integer *ticks* of 1/840,000 GPU-second: sevenths (MIG), eighths and thousandths
of a GPU are all whole numbers of ticks, so every sum is exact. A GPU's *share* is the ticks it earns
per second of wall time: a whole GPU 840,000, a 1g slice of a 7-slice GPU 120,000.
"""

from fractions import Fraction

TICKS_PER_GPU_SECOND = 840_000
WHOLE_GPU_SHARE = TICKS_PER_GPU_SECOND
TICKS_PER_CARD_HOUR = TICKS_PER_GPU_SECOND * 3600  # one GPU held for one hour


def share_from_fraction(fraction: Fraction | int | str) -> int:
    """Share (ticks per second) of a fraction of a GPU; refuses fractions that ticks cannot hold exactly."""
    value = Fraction(fraction)
    if not 0 < value <= 1:
        raise ValueError(f"a GPU fraction must be in (0, 1], not {value}")
    share = value * TICKS_PER_GPU_SECOND
    if share.denominator != 1:
        raise ValueError(f"{value} of a GPU is not a whole number of ticks (1/{TICKS_PER_GPU_SECOND} GPU-second)")
    return int(share)


def fraction_from_share(share: int) -> Fraction:
    return Fraction(share, TICKS_PER_GPU_SECOND)
