"""Pricing with no ORM (DESIGN.md §5): which rate applies on a day, what each kind of usage costs, how
ledger entries become statement lines, and the one rounding step.

A line's amount is its exact usage (ticks) × rate, rounded once, half-up (away from zero, so a reversal
is the exact negative of what it reverses), to the currency's minor unit; team totals and the statement
total are sums of rounded lines, so Σ lines = team totals = statement total exactly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from fractions import Fraction

from core.money import MINOR_UNITS
from core.units import TICKS_PER_CARD_HOUR

MILLIJOULES_PER_KWH = 3_600_000_000
CARD_HOUR_PLACES = 4
_NO_CARD_HOURS = Decimal(0).scaleb(-CARD_HOUR_PLACES)  # 0.0000, as card_hours(0) would give
ENERGY = "energy"


def units_per_priced_unit(kind: str) -> int:
    """Entries hold integers: ticks (priced per card-hour), or millijoules for energy (priced per kWh)."""
    return MILLIJOULES_PER_KWH if kind == ENERGY else TICKS_PER_CARD_HOUR


@dataclass(frozen=True)
class Rate:
    """A rate card as the pricing sees it: ``[valid_from, valid_until)`` business days (None: open)."""

    gpu_model_id: int
    valid_from: date
    valid_until: date | None
    price: Decimal


def rate_on(rates: Sequence[Rate], gpu_model_id: int | None, day: date) -> Rate | None:
    """The rate card of ``gpu_model_id`` valid on ``day`` (validity never overlaps), or None."""
    for rate in rates:
        if rate.gpu_model_id == gpu_model_id and rate.valid_from <= day and (rate.valid_until is None or day < rate.valid_until):
            return rate
    return None


@dataclass(frozen=True)
class Entry:
    """A ledger entry as plain data: one day's usage of a kind at one rate."""

    day: date
    team_id: int
    project_id: int | None
    gpu_model_id: int | None
    kind: str
    rate: Decimal
    rate_valid_from: date
    ticks: int

    @property
    def key(self) -> tuple:
        return (self.day, self.team_id, self.project_id, self.gpu_model_id, self.kind, self.rate, self.rate_valid_from)


@dataclass(frozen=True)
class Line:
    """A statement line: a team's usage of one project, GPU model and kind at one rate interval."""

    team_id: int
    project_id: int | None
    gpu_model_id: int | None
    kind: str
    rate: Decimal
    rate_valid_from: date
    ticks: int
    card_hours: Decimal
    amount: Decimal
    reversal: bool = False


def round_half_up(value: Fraction, places: int) -> Decimal:
    """``value`` to ``places`` decimals, ties away from zero, computed exactly."""
    scaled = abs(value) * 10**places
    whole = int(scaled + Fraction(1, 2))
    sign = -1 if value < 0 else 1
    return Decimal(sign * whole).scaleb(-places)


def line_amount(ticks: int, rate: Decimal, currency: str, kind: str = "busy") -> Decimal:
    """Exact usage × rate (per card-hour; energy: per kWh), rounded once to the currency's minor unit, ties
    away from zero: :func:`round_half_up` of the exact product, in integer arithmetic (the board prices
    thousands of allocations a request)."""
    numerator, denominator = rate.as_integer_ratio()
    places = MINOR_UNITS[currency]
    scaled, divisor = abs(ticks * numerator) * 10**places, denominator * units_per_priced_unit(kind)
    whole = (2 * scaled + divisor) // (2 * divisor)
    return Decimal(-whole if ticks * numerator < 0 else whole).scaleb(-places)


def card_hours(ticks: int, kind: str = "busy") -> Decimal:
    """The quantity a line shows: card-hours, or kWh for energy; half away from zero, in integer
    arithmetic (the board's ranking converts thousands of them a request)."""
    if not ticks:
        return _NO_CARD_HOURS  # most refinements of most rows (issue 16): a shared zero
    unit, scale = units_per_priced_unit(kind), 10**CARD_HOUR_PLACES
    units = (2 * abs(ticks) * scale + unit) // (2 * unit)
    return Decimal(-units if ticks < 0 else units).scaleb(-CARD_HOUR_PLACES)


def lines_of(entries: Iterable[Entry], currency: str) -> list[Line]:
    """Entries grouped into lines per (team, project, GPU model, kind, rate, rate interval), reversals
    (negative entries) apart from new usage, each line priced once."""
    ticks: dict[tuple, int] = defaultdict(int)
    for entry in entries:
        key = (entry.team_id, entry.project_id, entry.gpu_model_id, entry.kind, entry.rate, entry.rate_valid_from,
               entry.ticks < 0)
        ticks[key] += entry.ticks
    lines = [
        Line(team, project, model, kind, rate, valid_from, total, card_hours(total, kind),
             line_amount(total, rate, currency, kind), reversal)
        for (team, project, model, kind, rate, valid_from, reversal), total in ticks.items()
    ]
    return sorted(lines, key=lambda ln: (ln.team_id, ln.project_id or 0, ln.gpu_model_id or 0, ln.kind, ln.rate_valid_from,
                                         ln.rate, not ln.reversal))


def team_totals(lines: Iterable[Line]) -> dict[int, Decimal]:
    totals: dict[int, Decimal] = defaultdict(Decimal)
    for line in lines:
        totals[line.team_id] += line.amount
    return dict(totals)


@dataclass(frozen=True)
class Policy:
    idle_charge_factor: Decimal = Decimal("1.0")
    overflow_multiplier: Decimal = Decimal("1.5")


KIND_OF_STATE = {"busy": "busy", "idle": "idle", "unmeasured": "unmeasured"}


def price_usage(
    *, usage: Mapping[tuple, int], rates: Sequence[Rate], policy: Policy,
    overflow: Mapping[tuple, int] | None = None,
) -> tuple[list[Entry], list[tuple[int | None, date]]]:
    """Entries for ``usage`` — ticks per (day, team, project, GPU model, state) of allocated states —
    and the (GPU model, day) pairs that have usage but no rate. ``overflow`` (same keys) is the part of
    each that went beyond a quota: it is billed as ``overflow`` at rate × overflow multiplier instead.
    Idle is billed at rate × idle charge factor, always as its own kind."""
    overflow = overflow or {}
    entries: list[Entry] = []
    unpriced: set[tuple[int | None, date]] = set()
    for key, ticks in sorted(usage.items(), key=lambda item: tuple(str(part) for part in item[0])):
        day, team_id, project_id, model_id, state = key
        rate = rate_on(rates, model_id, day)
        if rate is None:
            unpriced.add((model_id, day))
            continue
        over = min(overflow.get(key, 0), ticks)
        plain = ticks - over
        if plain:
            factor = policy.idle_charge_factor if state == "idle" else Decimal(1)
            entries.append(Entry(day, team_id, project_id, model_id, KIND_OF_STATE[state], rate.price * factor,
                                 rate.valid_from, plain))
        if over:
            entries.append(Entry(day, team_id, project_id, model_id, "overflow", rate.price * policy.overflow_multiplier,
                                 rate.valid_from, over))
    return entries, sorted(unpriced, key=lambda pair: (pair[1], pair[0] or 0))


def corrections(*, booked: Iterable[Entry], wanted: Iterable[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(reversals, new entries) that take the ledger from ``booked`` (everything booked so far for the
    period) to ``wanted``: for each key whose net ticks differ, the booked net is reversed and the
    wanted ticks booked afresh; keys that agree are left alone (closing again adds nothing)."""
    booked_net: dict[tuple, int] = defaultdict(int)
    samples: dict[tuple, Entry] = {}
    for entry in booked:
        booked_net[entry.key] += entry.ticks
        samples[entry.key] = entry
    wanted_net: dict[tuple, int] = defaultdict(int)
    wanted_sample: dict[tuple, Entry] = {}
    for entry in wanted:
        wanted_net[entry.key] += entry.ticks
        wanted_sample[entry.key] = entry
    reversals, fresh = [], []
    for key in sorted(set(booked_net) | set(wanted_net), key=lambda k: tuple(str(part) for part in k)):
        have, want = booked_net.get(key, 0), wanted_net.get(key, 0)
        if have == want:
            continue
        if have:
            sample = samples[key]
            reversals.append(_with_ticks(sample, -have))
        if want:
            fresh.append(_with_ticks(wanted_sample[key], want))
    return reversals, fresh


def _with_ticks(entry: Entry, ticks: int) -> Entry:
    return Entry(entry.day, entry.team_id, entry.project_id, entry.gpu_model_id, entry.kind, entry.rate,
                 entry.rate_valid_from, ticks)


def price_energy(*, energy: Mapping[tuple, int], tariffs: Sequence[Rate]) -> list[Entry]:
    """Energy entries for ``energy`` — millijoules per (day, team, project, GPU model) — at the tariff of
    each day (``tariffs`` as Rates whose ``gpu_model_id`` is ignored); days without a tariff are not billed."""
    entries = []
    for (day, team_id, project_id, model_id), millijoules in sorted(energy.items(),
                                                                     key=lambda item: tuple(str(p) for p in item[0])):
        tariff = next((t for t in tariffs if t.valid_from <= day and (t.valid_until is None or day < t.valid_until)),
                      None)
        if tariff is not None and millijoules:
            entries.append(Entry(day, team_id, project_id, model_id, ENERGY, tariff.price, tariff.valid_from,
                                 millijoules))
    return entries


def share_unallocated(*, unallocated: Mapping[tuple, int], entries: Sequence[Entry], rates: Sequence[Rate]) -> list[Entry]:
    """The "shared" policy: each (day, GPU model)'s unallocated ticks, priced at the model's rate, split
    among the teams in proportion to their allocated cost that day on that model (the exact cost of their
    entries of the kinds of usage), as ``unallocated`` entries without a project. Integer ticks by the
    largest remainder, so the teams' shares add up to the unallocated ticks exactly; a day on which no
    team used the model keeps its unallocated capacity with the platform."""
    cost: dict[tuple, dict[int, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for entry in entries:
        if entry.kind in ("busy", "idle", "unmeasured", "overflow"):
            cost[(entry.day, entry.gpu_model_id)][entry.team_id] += Fraction(entry.ticks) * Fraction(entry.rate)
    shared = []
    for (day, model_id), ticks in sorted(unallocated.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
        rate = rate_on(rates, model_id, day)
        teams = {team: value for team, value in cost.get((day, model_id), {}).items() if value > 0}
        if rate is None or not teams or ticks <= 0:
            continue
        total = sum(teams.values())
        exact = {team: ticks * value / total for team, value in teams.items()}
        parts = {team: int(value) for team, value in exact.items()}
        for team in sorted(exact, key=lambda t: (-(exact[t] - parts[t]), t))[: ticks - sum(parts.values())]:
            parts[team] += 1
        shared += [Entry(day, team, None, model_id, "unallocated", rate.price, rate.valid_from, part)
                   for team, part in sorted(parts.items()) if part]
    return shared


# ---- priced days (issue 18) ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PricedRow:
    """One business day's usage of a team, project, GPU model and kind as stored priced (a ``PricedDay`` row):
    ``price`` the rate card's (tariff's), ``rate`` after the charge policy's factor, ``amount`` the day's
    ticks × rate rounded once; all four None for usage with no rate card."""

    day: date
    team_id: int
    project_id: int | None
    gpu_model_id: int | None
    kind: str
    price: Decimal | None
    rate: Decimal | None
    rate_valid_from: date | None
    ticks: int
    amount: Decimal | None


def priced_rows(*, usage: Mapping[tuple, int], energy: Mapping[tuple, int], rates: Sequence[Rate],
                tariffs: Sequence[Rate], policy: Policy, currency: str) -> list[PricedRow]:
    """``usage`` (ticks per (day, team, project, GPU model, state) of allocated states) and ``energy``
    (millijoules per (day, team, project, GPU model)) priced as a close prices them without overflow
    (:func:`price_usage`, :func:`price_energy`): a row per key, usage with no rate card kept unpriced."""
    rows = []
    entries, _unpriced = price_usage(usage=usage, rates=rates, policy=policy)
    for entry in entries:
        price = rate_on(rates, entry.gpu_model_id, entry.day).price
        rows.append(_row(entry, price, currency))
    priced = {(e.day, e.team_id, e.project_id, e.gpu_model_id, e.kind) for e in entries}
    rows += [PricedRow(day, team_id, project_id, model_id, KIND_OF_STATE[state], None, None, None, ticks, None)
             for (day, team_id, project_id, model_id, state), ticks in usage.items()
             if ticks and (day, team_id, project_id, model_id, KIND_OF_STATE[state]) not in priced]
    rows += [_row(entry, entry.rate, currency) for entry in price_energy(energy=energy, tariffs=tariffs)]
    return rows


def _row(entry: Entry, price: Decimal, currency: str) -> PricedRow:
    return PricedRow(entry.day, entry.team_id, entry.project_id, entry.gpu_model_id, entry.kind, price, entry.rate,
                     entry.rate_valid_from, entry.ticks, line_amount(entry.ticks, entry.rate, currency, entry.kind))


def entries_of(rows: Iterable[PricedRow], *, overflow: Mapping[tuple, int] | None = None,
               policy: Policy = Policy()) -> list[Entry]:
    """The entries a close books for priced ``rows``: :func:`price_usage`'s and :func:`price_energy`'s, with
    the part of each usage row in ``overflow`` (ticks per (day, team, project, GPU model, state)) billed as
    ``overflow`` at the rate card's price × the overflow multiplier. Unpriced rows have no entry."""
    overflow = overflow or {}
    entries = []
    for row in sorted(rows, key=lambda r: (str(r.day), r.team_id, r.project_id or 0, r.gpu_model_id or 0, r.kind)):
        if row.price is None:
            continue
        over = 0 if row.kind == ENERGY else min(overflow.get(
            (row.day, row.team_id, row.project_id, row.gpu_model_id, row.kind), 0), row.ticks)
        if row.ticks - over:
            entries.append(Entry(row.day, row.team_id, row.project_id, row.gpu_model_id, row.kind, row.rate,
                                 row.rate_valid_from, row.ticks - over))
        if over:
            entries.append(Entry(row.day, row.team_id, row.project_id, row.gpu_model_id, "overflow",
                                 row.price * policy.overflow_multiplier, row.rate_valid_from, over))
    return entries


def unpriced_of(rows: Iterable[PricedRow]) -> list[tuple[int | None, date]]:
    """The (GPU model, day) pairs with usage but no rate card, as :func:`price_usage` gives them."""
    return sorted({(row.gpu_model_id, row.day) for row in rows if row.price is None},
                  key=lambda pair: (pair[1], pair[0] or 0))
