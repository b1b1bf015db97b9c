"""The daily board's headline tiles and per-team table (issue 14), read from the daily aggregates: one
GROUP BY over the day and the seven days before it gives every tile and its comparison, and the team
table of the day; the idle cost and usage cost are priced here at the rate cards (DESIGN.md §5).

**Costs.** Idle cost is idle card-hours at the GPU model's rate card of the day (what the idle time was
worth, whatever share of it a policy bills). A team's *usage cost* is its busy, idle and unmeasured
card-hours priced as a close prices them (idle at rate × idle charge factor), before quota overflow,
shared unallocated capacity and energy, which only the month's statement settles. Each is rounded once
per team and model line (:func:`accounting.money.pricing.line_amount`), and the idle-cost tile is the
sum of the team table's idle costs, so the two always agree. Costs are shown only where the viewer
sees them (:func:`accounting.money.statements.cost_team_ids`): admin and finance all teams', a lead
their teams', an engineer none.

**GPU figures and team figures.** Tiles count GPUs' states: capacity and its five states add up. Jobs
whose GPUs are not known (unplaced) belong to no GPU: they are in the team table (allocated and
unmeasured) and the ranking, not in the tiles; the page says how many card-hours that is.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Sum

from accounting.models import DailyUnplacedUsage, DailyUsage
from accounting.money.close import current_policy, rate_cards
from accounting.money.pricing import Rate, line_amount, lines_of, price_usage, rate_on, team_totals
from accounting.money.statements import cost_team_ids
from accounting.quotas.selectors import QuotaStatus, tightest_quotas
from accounting.usage.figures import row_figures
from accounting.usage.states import ALLOCATED_STATES, DOWN, IDLE, UNALLOCATED, UNMEASURED
from boards.maths import (
    OTHER_TEAMS,
    Change,
    allocation_rate,
    card_hours_by_state,
    change_against,
    efficiency,
)
from boards.scope import COMPARED_DAYS, BoardScope
from cluster.jobs.kpis import percent
from core.money import MINOR_UNITS
from teams.models import Team
from teams.selectors import visible_team_ids


def zero_money() -> Decimal:
    return Decimal(0).scaleb(-MINOR_UNITS[settings.CARDHOUR_CURRENCY])


@dataclass
class _Day:
    ticks: Counter = field(default_factory=Counter)  # states (and OTHER_TEAMS) → ticks
    idle_by_team_model: Counter = field(default_factory=Counter)  # (team, model) → idle ticks
    gpus: int = 0


@dataclass(frozen=True)
class Tile:
    """One headline figure and its change against the mean of the days before (``kind``: gpus, card_hours,
    percent or money; ``value`` None: no figure, shown as "—")."""

    key: str
    value: Decimal | int | None
    change: Change
    kind: str
    card_hours: Decimal | None = None  # capacity: the card-hours beside the GPUs


@dataclass(frozen=True)
class TeamRow:
    """A team's day: card-hours (4 places), efficiency (%), costs (None: not the viewer's to see, or no
    rate), its tightest quota in force (None: none, or not the viewer's) and whether the viewer sees the
    team's jobs."""

    team_id: int | None
    name: str
    slug: str
    allocated: Decimal
    busy: Decimal
    idle: Decimal
    unmeasured: Decimal
    efficiency: Decimal | None
    idle_cost: Decimal | None
    cost: Decimal | None
    quota: QuotaStatus | None
    visible: bool
    idle_ticks: int


@dataclass(frozen=True)
class Headline:
    tiles: list[Tile]
    teams: list[TeamRow]
    unplaced_card_hours: Decimal
    unpriced: bool  # some idle or usage had no rate card: costs leave it out
    currency: str
    sees_costs: bool
    sees_all_costs: bool


def _read_days(scope: BoardScope) -> tuple[dict[date, _Day], Counter, Counter, dict[tuple, int]]:
    """(per day of the comparison, the day's team × state ticks, the day's unplaced ticks per team,
    the day's allocated ticks per (team, project, model, state) for pricing). Three queries."""
    days: dict[date, _Day] = defaultdict(_Day)
    team_ticks: Counter = Counter()
    priced: dict[tuple, int] = defaultdict(int)
    rows = (
        DailyUsage.objects.filter(scope.gpu_q(), day__gte=scope.compared_from, day__lte=scope.day)
        .values_list("day", "state", "team_id", "project_id", "gpu__model_id").annotate(total=Sum("ticks")).order_by()
    )
    for day, state, team_id, project_id, model_id, total in rows:
        entry = days[day]
        other = scope.team_id is not None and state in ALLOCATED_STATES and team_id != scope.team_id
        entry.ticks[OTHER_TEAMS if other else state] += total
        if state == IDLE and not other:
            entry.idle_by_team_model[(team_id, model_id)] += total
        if day == scope.day and state in ALLOCATED_STATES:
            team_ticks[(team_id, state)] += total
            if team_id is not None:
                priced[(day, team_id, project_id, model_id, state)] += total
    counts = (
        DailyUsage.objects.filter(scope.gpu_q(), day__gte=scope.compared_from, day__lte=scope.day)
        .values_list("day").annotate(gpus=Count("gpu", distinct=True)).order_by()
    )
    for day, gpus in counts:
        days[day].gpus = gpus
    unplaced: Counter = Counter()
    if not scope.narrowed_to_gpus:
        query = DailyUnplacedUsage.objects.filter(day=scope.day)
        if scope.gpu_model_id is not None:
            query = query.filter(gpu_model_id=scope.gpu_model_id)
        for team_id, project_id, model_id, total in (
            query.values_list("team_id", "project_id", "gpu_model_id").annotate(total=Sum("ticks")).order_by()
        ):
            unplaced[team_id] += total
            priced[(scope.day, team_id, project_id, model_id, UNMEASURED)] += total
    return days, team_ticks, unplaced, priced


def _idle_costs(day: date, idle: Counter, rates: list[Rate], currency: str, teams) -> tuple[dict, bool]:
    """Idle cost per team the viewer may see costs of (``teams`` None: all), rounded per (team, model)."""
    costs: dict[int | None, Decimal] = defaultdict(zero_money)
    unpriced = False
    for (team_id, model_id), ticks in idle.items():
        if teams is not None and team_id not in teams:
            continue
        rate = rate_on(rates, model_id, day)
        if rate is None:
            unpriced = True
            continue
        costs[team_id] += line_amount(ticks, rate.price, currency)
    return costs, unpriced


def headline(scope: BoardScope, *, user) -> Headline:
    """The tiles and the team table of ``scope`` as ``user`` may see them. Seven queries at most."""
    currency = settings.CARDHOUR_CURRENCY
    days, team_ticks, unplaced, priced = _read_days(scope)
    rates = rate_cards(scope.compared_from, scope.day + timedelta(days=1))
    cost_teams = cost_team_ids(user)
    sees_costs = cost_teams is None or bool(cost_teams)
    idle_cost_of: dict[date, Decimal | None] = {}
    today_costs: dict = {}
    unpriced = False
    for day, entry in days.items():
        costs, missing = _idle_costs(day, entry.idle_by_team_model, rates, currency, cost_teams)
        idle_cost_of[day] = sum(costs.values(), zero_money()) if sees_costs else None
        if day == scope.day:
            today_costs, unpriced = costs, missing
    tiles = _tiles(scope, days, idle_cost_of)
    entries, unpriced_usage = price_usage(usage=priced, rates=rates, policy=current_policy())
    usage_cost = team_totals(lines_of(entries, currency))  # each line priced once, as a close prices it
    teams = _team_rows(scope, team_ticks, unplaced, today_costs, usage_cost, cost_teams, user)
    unplaced_ch = row_figures({UNMEASURED: sum(unplaced.values())}, gpu_level=False)["card_hours_unmeasured"]
    return Headline(tiles=tiles, teams=teams, unplaced_card_hours=unplaced_ch,
                    unpriced=unpriced or bool(unpriced_usage), currency=currency, sees_costs=sees_costs,
                    sees_all_costs=cost_teams is None)


def _tiles(scope: BoardScope, days: dict[date, _Day], idle_cost_of: dict) -> list[Tile]:
    earlier = [scope.day - timedelta(days=n) for n in range(1, COMPARED_DAYS + 1)]
    earlier = [d for d in earlier if d in days and days[d].gpus]

    def figures(day: date) -> dict:
        entry = days.get(day)
        if entry is None or not entry.gpus:
            return {}
        hours = card_hours_by_state(entry.ticks)
        return {
            "capacity_gpus": Decimal(entry.gpus),
            "capacity_card_hours": sum(hours.values(), Decimal(0)),
            "allocation_rate": percent(allocation_rate(entry.ticks)),
            "efficiency": percent(efficiency(entry.ticks)),
            "idle_card_hours": hours[IDLE],
            "idle_cost": idle_cost_of.get(day),
            "unmeasured_card_hours": hours[UNMEASURED],
            "unallocated_card_hours": hours[UNALLOCATED],
            "down_card_hours": hours[DOWN],
        }

    now, before = figures(scope.day), [figures(d) for d in earlier]
    kinds = {
        "capacity_gpus": "gpus", "allocation_rate": "percent", "efficiency": "percent", "idle_cost": "money",
    }
    tiles = []
    for key in ("capacity_gpus", "allocation_rate", "efficiency", "idle_card_hours", "idle_cost",
                "unmeasured_card_hours", "unallocated_card_hours", "down_card_hours"):
        value = now.get(key)
        tiles.append(Tile(
            key=key, value=int(value) if key == "capacity_gpus" and value is not None else value,
            change=change_against(value, [b.get(key) for b in before]), kind=kinds.get(key, "card_hours"),
            card_hours=now.get("capacity_card_hours") if key == "capacity_gpus" else None,
        ))
    return tiles


def _team_rows(scope, team_ticks: Counter, unplaced: Counter, idle_costs: dict, usage_cost: dict, cost_teams,
               user) -> list[TeamRow]:
    ticks: dict[int | None, Counter] = defaultdict(Counter)
    for (team_id, state), total in team_ticks.items():
        ticks[team_id][state] += total
    for team_id, total in unplaced.items():
        ticks[team_id][UNMEASURED] += total
    if scope.team_id is not None:
        ticks = {k: v for k, v in ticks.items() if k == scope.team_id}
    visible = visible_team_ids(user)
    ids = [t for t in ticks if t is not None]
    teams = {t.pk: t for t in Team.objects.filter(pk__in=ids)}
    quotas = tightest_quotas(scope.day, [t for t in ids if visible is None or t in visible], now=scope.now)
    rows = []
    for team_id, state_ticks in ticks.items():
        if team_id is None and visible is not None:
            continue  # usage no team owns: admin and finance only (as in the usage report)
        figures = row_figures(state_ticks, gpu_level=False)
        sees_cost = cost_teams is None or team_id in cost_teams
        team = teams.get(team_id)
        rows.append(TeamRow(
            team_id=team_id, name=team.name if team else "", slug=team.slug if team else "",
            allocated=figures["card_hours_allocated"], busy=figures["card_hours_busy"], idle=figures["card_hours_idle"],
            unmeasured=figures["card_hours_unmeasured"],
            efficiency=percent(efficiency(state_ticks)),
            idle_cost=(idle_costs.get(team_id, zero_money()) if sees_cost else None),
            cost=(usage_cost.get(team_id, zero_money()) if sees_cost and team_id is not None else None),
            quota=quotas.get(team_id), visible=visible is None or team_id in visible, idle_ticks=state_ticks[IDLE],
        ))
    rows.sort(key=lambda r: (-(r.idle_cost or 0), -r.idle_ticks, r.team_id is None, r.name.casefold()))
    return rows


