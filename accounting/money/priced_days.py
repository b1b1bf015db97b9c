"""Priced days (issue 18): each business day's usage priced once and kept (``PricedDay``), so the close, the
team page's month-to-date cost, the finance page and the priced usage report read a month of priced rows
instead of grouping and pricing a month of daily aggregates on every view.

- **What a row is**: a day's allocated usage (busy, idle, unmeasured, unplaced usage as unmeasured) and energy
  of one team, project and GPU model, priced as a close prices it before quota overflow
  (:func:`accounting.money.pricing.priced_rows`). Overflow depends on the whole quota period, so it is
  applied where the rows are read (:func:`accounting.money.pricing.entries_of`).
- **Kept current by the database**: triggers drop a day's rows and its ``PricedDayDone`` in the transaction
  that changes what they were priced from (its daily usage, unplaced usage or energy, which the aggregation
  rewrites when a mark or an open day makes it redo the day; a rate card or tariff; the charge policy; a
  GPU's model). The aggregation prices again the days it redid (:func:`price_days`, called by
  ``usage_process``); a read prices any day still missing, so a reader never sees a stale day.
- **Two writers of one day take their turn**: pricing a day takes the aggregation's lock of that day
  (``cardhour.usage.<day>``), so it cannot read a day's old aggregates while the aggregation writes new ones
  and leave priced rows that no trigger will drop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from accounting.models import (
    ChargePolicy,
    DailyEnergy,
    DailyUnplacedUsage,
    DailyUsage,
    EnergyTariff,
    PricedDay,
    PricedDayDone,
    RateCard,
)
from accounting.money.pricing import Policy, PricedRow, Rate, priced_rows
from accounting.usage.states import ALLOCATED_STATES, UNMEASURED
from cluster.models import Gpu
from core.locks import wait_turn

_PRICED, _DONE = PricedDay._meta.db_table, PricedDayDone._meta.db_table
_COLUMNS = ("day", "team_id", "project_id", "gpu_model_id", "kind", "price", "rate", "rate_valid_from", "ticks", "amount")
# The month's rows and which of its days are priced, in one statement (a done day with no usage has no row).
_READ_SQL = f"""
SELECT {", ".join(_COLUMNS)} FROM {_PRICED} WHERE day >= %(first)s AND day < %(following)s
UNION ALL
SELECT day, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM {_DONE} WHERE day >= %(first)s AND day < %(following)s
"""  # noqa: S608 (table names from model metadata; values are bound)
_USAGE_SQL = f"""
SELECT d.day, d.team_id, d.project_id, g.model_id, d.state, sum(d.ticks)
FROM {DailyUsage._meta.db_table} d JOIN {Gpu._meta.db_table} g ON g.id = d.gpu_id
WHERE d.day = ANY(%(days)s) AND d.team_id IS NOT NULL AND d.state = ANY(%(states)s)
GROUP BY 1, 2, 3, 4, 5
"""  # noqa: S608 (table names from model metadata; values are bound)


@dataclass(frozen=True)
class PricedRead:
    """The priced rows of business days ``[first, following)``."""

    first: date
    following: date
    rows: list[PricedRow]

    @property
    def team_ids(self) -> list[int]:
        """The teams with allocated usage (priced or not), in order."""
        return sorted({row.team_id for row in self.rows if row.kind != "energy"})


def priced_read(first: date, following: date, *, now: datetime | None = None) -> PricedRead:
    """The priced rows of the business days ``[first, following)``, pricing first any day that is not (one
    query when every day is priced)."""
    rows, done = _read(first, following)
    missing = [first + timedelta(days=n) for n in range((following - first).days)]
    missing = [day for day in missing if day not in done]
    if missing and price_days(missing, now=now):
        rows, _done = _read(first, following)
    return PricedRead(first=first, following=following, rows=rows)


def _read(first: date, following: date) -> tuple[list[PricedRow], set[date]]:
    rows, done = [], set()
    with connection.cursor() as cursor:
        cursor.execute(_READ_SQL, {"first": first, "following": following})
        for values in cursor.fetchall():
            if values[1] is None:
                done.add(values[0])
            else:
                rows.append(PricedRow(*values))
    return rows, done


def price_days(days: Iterable[date], *, now: datetime | None = None) -> int:
    """Price each of ``days`` that is not priced (see the module docstring); returns how many were. Rerunnable:
    a day priced meanwhile by another reader is left alone."""
    days = sorted(set(days))
    if not days:
        return 0
    with transaction.atomic():
        for day in days:  # in day order, as the aggregation takes them: no two writers wait on each other
            wait_turn(f"cardhour.usage.{day.isoformat()}")
        done = set(PricedDayDone.objects.filter(day__in=days).values_list("day", flat=True))
        days = [day for day in days if day not in done]
        if not days:
            return 0
        rows = priced_rows(usage=_usage(days), energy=_energy(days), rates=rate_cards(days[0], days[-1] + timedelta(days=1)),
                           tariffs=_tariffs(days), policy=current_policy(), currency=settings.CARDHOUR_CURRENCY)
        PricedDay.objects.bulk_create([PricedDay(**dict(zip(_COLUMNS, _values(row), strict=True))) for row in rows],
                                      batch_size=5000)
        now = now or timezone.now()
        PricedDayDone.objects.bulk_create([PricedDayDone(day=day, priced_at=now) for day in days])
    return len(days)


def _values(row: PricedRow) -> tuple:
    return (row.day, row.team_id, row.project_id, row.gpu_model_id, row.kind, row.price, row.rate,
            row.rate_valid_from, row.ticks, row.amount)


def _usage(days: list[date]) -> dict[tuple, int]:
    """Allocated ticks per (day, team, project, GPU model, state), unplaced usage as unmeasured; usage held by
    no team (unattributed processes) is the platform's and is not billed."""
    usage: dict[tuple, int] = defaultdict(int)
    with connection.cursor() as cursor:
        cursor.execute(_USAGE_SQL, {"days": days, "states": list(ALLOCATED_STATES)})
        for day, team_id, project_id, model_id, state, ticks in cursor.fetchall():
            usage[(day, team_id, project_id, model_id, state)] += int(ticks)
    for day, team_id, project_id, model_id, ticks in (
        DailyUnplacedUsage.objects.filter(day__in=days)
        .values_list("day", "team_id", "project_id", "gpu_model_id").annotate(total=Sum("ticks")).order_by()
    ):
        usage[(day, team_id, project_id, model_id, UNMEASURED)] += ticks
    return dict(usage)


def _energy(days: list[date]) -> dict[tuple, int]:
    rows = (DailyEnergy.objects.filter(day__in=days, team__isnull=False)
            .values_list("day", "team_id", "project_id", "gpu__model_id").annotate(total=Sum("millijoules")).order_by())
    return {(day, team_id, project_id, model_id): total for day, team_id, project_id, model_id, total in rows}


def rate_cards(first: date, following: date) -> list[Rate]:
    """The rate cards valid on some business day of ``[first, following)``, as the pricing sees them."""
    cards = RateCard.objects.filter(valid_from__lt=following).filter(Q(valid_until__isnull=True) | Q(valid_until__gt=first))
    return [Rate(card.gpu_model_id, card.valid_from, card.valid_until, card.price_per_card_hour) for card in cards]


def _tariffs(days: list[date]) -> list[Rate]:
    return [Rate(0, t.valid_from, t.valid_until, t.price_per_kwh)
            for t in EnergyTariff.objects.filter(valid_from__lt=days[-1] + timedelta(days=1))]


def current_policy() -> Policy:
    """The charge policy in force (the settings' defaults until finance saves one)."""
    row = ChargePolicy.objects.filter(id=1).first()
    if row is None:
        return Policy(Decimal(settings.CHARGE_IDLE_FACTOR), Decimal(settings.CHARGE_OVERFLOW_MULTIPLIER))
    return Policy(row.idle_charge_factor, row.overflow_multiplier)
