"""Statements as rows (issue 7, DESIGN.md §5): the lines of a statement, a period's net across its
statements and the priced usage report, all in the export columns (:data:`COLUMNS`), role-scoped.

**Rows.** One row per statement line (accounting.money.pricing.lines_of: per team, project, GPU model, kind,
rate and rate interval, reversals apart from new usage), then a totals row after each team's lines.

- ``period`` is the month, ``2026-11``; ``team``, ``cost_centre``, ``project`` (the project's name) and
  ``gpu_model`` (the model's short name) are names, resolved in a fixed number of queries; an empty
  ``project`` or ``gpu_model`` is usage with none.
- ``ticks`` is the line's exact usage, an integer (1/840,000 GPU-second each; millijoules on ``energy``
  lines). ``card_hours`` (kWh on ``energy`` lines) is the ticks converted once, half-up to 4 places
  (pricing.card_hours). ``amount`` (the currency's minor unit) is the line's exact ticks × its exact rate
  rounded once (pricing.line_amount). ``exact_rate`` is that rate per card-hour (energy: per kWh) after
  factors (idle, overflow), as booked, at least 4 places; ``rate`` is it rounded half-up to 4 places for
  display only. So every line can be checked from its row: ``amount = round(ticks / 3,024,000,000 ×
  exact_rate)`` to the minor unit, half away from zero (energy: ``/ 3,600,000,000`` mJ per kWh). A
  reversal is a row of its own with negative ticks, card-hours and amount, placed just before the new
  usage of the same key.
- The **totals row** has kind ``total``; ``amount`` is the sum of the team's line amounts (Σ a team's
  amounts = its totals row = pricing.team_totals, and Σ totals rows = the statement total); ``ticks`` is
  the sum of its lines' ticks, energy's millijoules left out, and ``card_hours`` is those ticks converted
  once, exactly as the usage report converts a team's ticks (accounting.usage.figures: the total rounded
  half-up), so the team's card-hours on the statement and in the usage report by team agree to the last
  place (with the "shared" unallocated policy the statement's also hold the team's share of unallocated
  capacity). The lines' card-hours, each rounded on its own, may sum to a few 0.0001 more or less than
  the total; their ticks sum to it exactly. The row keeps ``period``, ``team``, ``cost_centre`` and
  ``currency`` (so a spreadsheet filter on a team keeps its total); ``project``, ``gpu_model``,
  ``rate_valid_from``, ``rate`` and ``exact_rate`` are empty.
- Order: team name, then project name and GPU model (none last), kind (in LedgerKind's order: busy,
  idle, unmeasured, overflow, energy, unallocated), rate interval, rate, reversal before new usage.
- :func:`grand_total_row` is the row a download ends with: the sums of the totals rows.

**Scoping** (DESIGN.md §2): ``user=None`` (the command line) sees every team; admin and finance too.
A lead sees the lines of the teams they lead. Statements are costs, which engineers do not see: they
see no line here, and the API answers them 403 (see :func:`sees_costs`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from accounting.models import LedgerEntry, LedgerKind, Statement, StatementStatus
from accounting.money.close import priced_entries
from accounting.money.exports import total_row
from accounting.money.pricing import ENERGY, Entry, Line, card_hours, lines_of
from cluster.models import GpuModel
from core.money import MINOR_UNITS
from core.timeutils import month_days
from teams.models import Project, Team
from teams.roles import sees_all_teams

COLUMNS = [
    "period", "team", "cost_centre", "project", "gpu_model", "kind", "rate_valid_from", "card_hours", "ticks", "rate",
    "exact_rate", "amount", "currency",
]
TOTALLED = ("card_hours", "ticks", "amount")  # the columns a grand total sums (a sum of rates means nothing)
TOTAL_KIND = "total"
RATE_DISPLAY = Decimal("0.0001")
_KIND_ORDER = {kind: index for index, kind in enumerate(LedgerKind.values)}


# ---- pure ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Names:
    """What rows show for ids: team id → (name, cost-centre code), project id → name, model id → short name."""

    teams: Mapping[int, tuple[str, str]]
    projects: Mapping[int, str] = field(default_factory=dict)
    models: Mapping[int, str] = field(default_factory=dict)


def period_label(period: date) -> str:
    """2026-11-01 → ``2026-11``."""
    return f"{period.year:04d}-{period.month:02d}"


def display_rate(rate: Decimal) -> Decimal:
    """The rate as shown: half-up to 4 places (amounts are computed from the exact rate)."""
    return rate.quantize(RATE_DISPLAY, rounding=ROUND_HALF_UP)


def exact_rate(rate: Decimal) -> Decimal:
    """The rate as booked (the ledger keeps 12 places), without trailing zeros past the 4th place:
    ``9.000000000000`` → ``9.0000``, ``6.110888890000`` → ``6.11088889``."""
    trimmed = rate.normalize()
    return trimmed if trimmed.as_tuple().exponent < RATE_DISPLAY.as_tuple().exponent else rate.quantize(RATE_DISPLAY)


def _last(name: str | None) -> tuple:
    """Sort key putting a missing name (no project, no model) last."""
    return (name is None, (name or "").casefold(), name or "")


def rows_from_lines(lines: Iterable[Line], *, names: Names, period: date, currency: str) -> list[dict]:
    """Statement lines as export rows, with a totals row after each team's lines (see the module docstring)."""
    by_team: dict[int, list[Line]] = defaultdict(list)
    for line in lines:
        by_team[line.team_id].append(line)
    label = period_label(period)
    rows: list[dict] = []
    for team_id in sorted(by_team, key=lambda pk: (_last(names.teams[pk][0]), pk)):
        team, cost_centre = names.teams[team_id]
        base = {"period": label, "team": team, "cost_centre": cost_centre, "currency": currency}

        def order(line: Line) -> tuple:
            return (_last(names.projects.get(line.project_id)), _last(names.models.get(line.gpu_model_id)),
                    _KIND_ORDER.get(line.kind, len(_KIND_ORDER)), line.kind, line.rate_valid_from, line.rate,
                    not line.reversal)

        team_lines = sorted(by_team[team_id], key=order)
        for line in team_lines:
            rows.append({
                **base, "project": names.projects.get(line.project_id), "gpu_model": names.models.get(line.gpu_model_id),
                "kind": line.kind, "rate_valid_from": line.rate_valid_from, "card_hours": line.card_hours,
                "ticks": line.ticks, "rate": display_rate(line.rate), "exact_rate": exact_rate(line.rate),
                "amount": line.amount,
            })
        ticks = sum(line.ticks for line in team_lines if line.kind != ENERGY)
        rows.append({
            **base, "project": None, "gpu_model": None, "kind": TOTAL_KIND, "rate_valid_from": None,
            "card_hours": card_hours(ticks), "ticks": ticks, "rate": None, "exact_rate": None,
            "amount": sum((line.amount for line in team_lines[1:]), team_lines[0].amount),
        })
    return [{column: row[column] for column in COLUMNS} for row in rows]


def merge_lines(lines: Iterable[Line]) -> list[Line]:
    """Lines of several statements of one period as one set: lines of the same key (reversals still apart)
    add their ticks and their already rounded amounts, so the period's totals are exactly the sums of its
    statements' totals (the booked figures); card-hours are recomputed from the summed ticks."""
    merged: dict[tuple, Line] = {}
    for line in lines:
        key = (line.team_id, line.project_id, line.gpu_model_id, line.kind, line.rate, line.rate_valid_from,
               line.reversal)
        held = merged.get(key)
        merged[key] = line if held is None else replace(held, ticks=held.ticks + line.ticks,
                                                        amount=held.amount + line.amount)
    return [replace(line, card_hours=card_hours(line.ticks, line.kind)) for line in merged.values()]


def total_of(rows: Iterable[Mapping], *, currency: str) -> Decimal:
    """The sum of the totals rows: the statement's total as the rows show it (0 in the currency's places)."""
    return sum((row["amount"] for row in rows if row["kind"] == TOTAL_KIND), _zero(currency))


def grand_total_row(rows: Sequence[Mapping], *, label: str) -> dict:
    """The grand total of the rows' statement: ``label`` (e.g. "Total") in ``period``, the first text column;
    ``card_hours``, ``ticks`` and ``amount`` the exact sums of the team totals rows (so the amount is the
    statement total); the ``currency`` kept; every other column empty."""
    totals = [row for row in rows if row["kind"] == TOTAL_KIND]
    return total_row(COLUMNS, totals, label_column="period", label=label, summed=TOTALLED, kept=("currency",))


def _zero(currency: str) -> Decimal:
    return Decimal(0).scaleb(-MINOR_UNITS[currency])


# ---- scoping -------------------------------------------------------------------------------------------------

def cost_team_ids(user) -> frozenset[int] | None:
    """The teams whose costs ``user`` sees: None for all (the command line, admin, finance), else the
    teams they lead (empty for an engineer). Cached on the user object: a request asks several times."""
    if user is None or sees_all_teams(user):
        return None
    cached = getattr(user, "_cardhour_cost_teams", None)
    if cached is None:
        cached = frozenset(Team.objects.led_by(user).values_list("pk", flat=True)) if user.is_authenticated else frozenset()
        user._cardhour_cost_teams = cached
    return cached


def sees_costs(user) -> bool:
    """Admin, finance and team leads see statements; engineers see usage, not costs (DESIGN.md §2)."""
    teams = cost_team_ids(user)
    return teams is None or bool(teams)


def statements_visible_to(user) -> QuerySet[Statement]:
    """Every statement for admin and finance; for a lead, those with a ledger entry of a team they lead."""
    teams = cost_team_ids(user)
    if teams is None:
        return Statement.objects.all()
    if not teams:
        return Statement.objects.none()
    return Statement.objects.filter(Exists(LedgerEntry.objects.filter(statement=OuterRef("pk"), team_id__in=teams)))


# ---- selectors -----------------------------------------------------------------------------------------------

_ENTRY_FIELDS = ("statement_id", "day", "team_id", "project_id", "gpu_model_id", "kind", "rate", "rate_valid_from",
                 "ticks")


def _entries_by_statement(statement_ids: Sequence[int], teams: frozenset[int] | None) -> dict[int, list[Entry]]:
    """The ledger entries of the statements (of ``teams`` only, unless None), in one query."""
    entries: dict[int, list[Entry]] = defaultdict(list)
    if not statement_ids or teams == frozenset():
        return entries
    query = LedgerEntry.objects.filter(statement_id__in=statement_ids)
    if teams is not None:
        query = query.filter(team_id__in=teams)
    for statement_id, *values in query.order_by().values_list(*_ENTRY_FIELDS):
        entries[statement_id].append(Entry(*values))
    return entries


def names_of(lines: Iterable[Line | Entry]) -> Names:
    """Names of the teams, projects and models the lines refer to: at most three queries."""
    lines = list(lines)
    team_ids = {line.team_id for line in lines}
    project_ids = {line.project_id for line in lines} - {None}
    model_ids = {line.gpu_model_id for line in lines} - {None}
    teams = {pk: (name, cc) for pk, name, cc in Team.objects.filter(pk__in=team_ids).values_list(
        "pk", "name", "cost_centre")} if team_ids else {}
    projects = dict(Project.objects.filter(pk__in=project_ids).values_list("pk", "name")) if project_ids else {}
    models = dict(GpuModel.objects.filter(pk__in=model_ids).values_list("pk", "short_name")) if model_ids else {}
    return Names(teams=teams, projects=projects, models=models)


def closed_statement_id(period: date) -> int | None:
    """The id of the month's closed statement, if any (to tell a new close from a repeated one)."""
    first, _following = month_days(period)
    return Statement.objects.filter(period=first, status=StatementStatus.CLOSED).values_list("pk", flat=True).first()


def statement_rows(statement: Statement, *, user=None) -> list[dict]:
    """The statement's lines and team totals as ``user`` may see them (None: everything)."""
    entries = _entries_by_statement([statement.pk], cost_team_ids(user))[statement.pk]
    lines = lines_of(entries, statement.currency)
    return rows_from_lines(lines, names=names_of(lines), period=statement.period, currency=statement.currency)


def statement_totals(statements: Iterable[Statement], *, user=None) -> dict[int, Decimal]:
    """Each statement's total of the lines ``user`` sees (Σ of rounded lines), in one query."""
    statements = list(statements)
    entries = _entries_by_statement([s.pk for s in statements], cost_team_ids(user))
    totals = {}
    for statement in statements:
        lines = lines_of(entries.get(statement.pk, []), statement.currency)
        totals[statement.pk] = sum((line.amount for line in lines), _zero(statement.currency))
    return totals


def period_rows(period: date, *, user=None) -> list[dict]:
    """The period's net across all its statements (every entry of every revision), as ``user`` may see it:
    lines of the same key add up over revisions (see :func:`merge_lines`), reversals stay rows of their
    own, and each team's totals row is what its statements booked in all. Empty when never closed."""
    first, _following = month_days(period)
    statements = list(Statement.objects.filter(period=first).order_by("revision"))
    if not statements:
        return []
    entries = _entries_by_statement([s.pk for s in statements], cost_team_ids(user))
    lines = merge_lines(line for s in statements for line in lines_of(entries.get(s.pk, []), s.currency))
    currency = statements[-1].currency
    return rows_from_lines(lines, names=names_of(lines), period=first, currency=currency)


@dataclass(frozen=True)
class PricedUsage:
    """The priced usage report: ``rows`` in :data:`COLUMNS` over business days ``[start, end)``, and what
    has usage but no price (``unpriced``, the messages a close would refuse with)."""

    start: date
    end: date
    rows: list[dict]
    unpriced: list[str]
    columns: list[str] = field(default_factory=lambda: list(COLUMNS))


def priced_usage(*, period: date | None = None, start: date | None = None, end: date | None = None,
                 user=None, now: datetime | None = None) -> PricedUsage:
    """What closing would book now for the month of ``period`` (or the business days ``[start, end)``), as
    ``user`` may see it: the full cost of its usage so far (an open month gives its cost to date) priced as
    a close prices it (:func:`priced_entries`), not the difference to what is already booked. Usage is
    read from the daily aggregates, which the periodic aggregation keeps current within minutes. A
    window over several months has rows and team totals per month."""
    if period is not None:
        start, end = month_days(period)
    if start is None or end is None or end <= start:
        raise ValueError("priced_usage needs a period, or start and end with end after start")
    entries, unpriced = priced_entries(start, end, now=now or timezone.now())
    teams = cost_team_ids(user)
    if teams is not None:  # after pricing: a shared unallocated split depends on every team's cost
        entries = [entry for entry in entries if entry.team_id in teams]
    currency = settings.CARDHOUR_CURRENCY
    by_month: dict[date, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_month[month_days(entry.day)[0]].append(entry)
    names = names_of(entries)
    rows = []
    for month in sorted(by_month):
        rows += rows_from_lines(lines_of(by_month[month], currency), names=names, period=month, currency=currency)
    return PricedUsage(start=start, end=end, rows=rows, unpriced=unpriced)


def priced_usage_rows(*, period: date | None = None, start: date | None = None, end: date | None = None,
                      user=None, now: datetime | None = None) -> list[dict]:
    """The rows of :func:`priced_usage`."""
    return priced_usage(period=period, start=start, end=end, user=user, now=now).rows
