"""Card-hours that add up (DESIGN.md §4): a row's integer ticks per state as ``Decimal`` card-hours with
4 places. Pure maths, no ORM; the usage report and the team page both use it.

Ticks convert once (1 card-hour = 840,000 × 3,600 ticks) by :func:`apportion` (largest remainder), so
that each row adds up exactly: the row's exact total (capacity for GPU rows, allocated for team and
project rows) is rounded half-up, and its parts each lie within 0.0001 of their exact value and sum to
it; allocated is busy + idle + unmeasured of the rounded parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from accounting.usage.states import ALLOCATED_STATES, STATES
from core.units import TICKS_PER_CARD_HOUR

PLACES = 4


def apportion(ticks_by_part: Mapping[str, int], places: int = PLACES, *,
              ticks_per_unit: int = TICKS_PER_CARD_HOUR) -> dict[str, Decimal]:
    """Each part's ticks in card-hours to ``places`` decimals, adding up exactly to the total rounded half-up.

    Largest remainder: every part gets its floored value, then one last-place unit goes to the parts with
    the largest remainders (ties: in the order given) until they sum to the rounded total. Each part ends
    within one unit of its exact value. Ticks are whole and not negative."""
    if any(ticks < 0 for ticks in ticks_by_part.values()):
        raise ValueError("ticks must not be negative")
    scale = 10**places
    floors = {part: ticks * scale // ticks_per_unit for part, ticks in ticks_by_part.items()}
    remainders = {part: ticks * scale % ticks_per_unit for part, ticks in ticks_by_part.items()}
    total = sum(ticks_by_part.values())
    rounded_total = (2 * total * scale + ticks_per_unit) // (2 * ticks_per_unit)
    extra = rounded_total - sum(floors.values())
    for part in sorted(floors, key=lambda p: -remainders[p])[:extra]:
        floors[part] += 1
    return {part: Decimal(units).scaleb(-places) for part, units in floors.items()}


def row_figures(ticks: Mapping[str, int], *, gpu_level: bool) -> dict[str, Decimal | None]:
    """The card-hour columns of one row from its ticks per state (see the module docstring)."""
    if gpu_level:
        parts = apportion({state: ticks.get(state, 0) for state in STATES})
        capacity = sum(parts.values(), Decimal(0))
    else:
        parts = apportion({state: ticks.get(state, 0) for state in ALLOCATED_STATES})
        parts.update({"unallocated": None, "down": None})
        capacity = None
    return {
        "card_hours_allocated": sum((parts[state] for state in ALLOCATED_STATES), Decimal(0)),
        **{f"card_hours_{state}": parts[state] for state in STATES},
        "capacity_card_hours": capacity,
    }
