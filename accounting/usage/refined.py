"""Beyond the duty cycle (DESIGN.md §4, issue 16): the refinements of busy and idle summed over any daily
usage rows (``DailyUsage``, ``DailyHolderUsage``, ``DailyModelUsage``), in one aggregate query. The team page
and the daily board show them from here, so both say the same.

*Shallow busy* is a share of the busy card-hours that have SM data (NVML GPM), never of all busy ones: a
busy GPU without GPM (an L40S, an older driver) is "no SM data", not 0 % shallow."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import BigIntegerField, Q, QuerySet, Sum
from django.db.models.functions import Cast, Coalesce

from accounting.money.pricing import card_hours
from accounting.usage.states import BUSY, IDLE
from cluster.jobs.kpis import percent_of


@dataclass(frozen=True)
class Refined:
    """Ticks: busy, of which with SM data (``sm``), of which shallow; busy at idle power; idle, of which
    with memory held."""

    busy: int = 0
    sm: int = 0
    shallow: int = 0
    low_power: int = 0
    idle: int = 0
    memory_held: int = 0

    @property
    def no_sm_data(self) -> bool:
        """Busy, but none of it with an SM activity: shallow busy is unknown."""
        return self.busy > 0 and self.sm == 0

    @property
    def shallow_card_hours(self) -> Decimal | None:
        return None if self.no_sm_data else card_hours(self.shallow)

    @property
    def shallow_share(self) -> Decimal | None:
        """Shallow busy in percent of the busy card-hours with SM data."""
        return percent_of(self.shallow, self.sm)

    @property
    def sm_coverage(self) -> Decimal | None:
        """The busy card-hours with SM data in percent of all busy ones."""
        return percent_of(self.sm, self.busy)

    @property
    def low_power_card_hours(self) -> Decimal:
        return card_hours(self.low_power)

    @property
    def memory_held_card_hours(self) -> Decimal:
        return card_hours(self.memory_held)

    @property
    def empty_idle_card_hours(self) -> Decimal:
        return card_hours(self.idle - self.memory_held)

    @property
    def memory_held_share(self) -> Decimal | None:
        return percent_of(self.memory_held, self.idle)


def _sum(column: str, condition: Q | None = None):
    return Cast(Coalesce(Sum(column, filter=condition), 0), BigIntegerField())


def refined_totals(rows: QuerySet) -> Refined:
    """The refinements of ``rows`` (a queryset of daily usage rows with ``state``, ``ticks`` and the refined
    columns), summed in one query."""
    sums = rows.aggregate(busy=_sum("ticks", Q(state=BUSY)), idle=_sum("ticks", Q(state=IDLE)), sm=_sum("sm_ticks"),
                          shallow=_sum("shallow_ticks"), low_power=_sum("low_power_ticks"),
                          memory_held=_sum("memory_held_ticks"))
    return Refined(**sums)
