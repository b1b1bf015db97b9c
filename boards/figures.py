"""The daily board's headline tiles and per-team table (issue 14), read from the daily aggregates: one
GROUP BY over the day and the seven days before it gives every tile and its comparison, and the team
table of the day. A week or a month (issue 15) is the same read over a span of business days against the
span before it (:attr:`boards.scope.BoardScope.compared_spans`): card-hours are sums of the days, ratios
ratios of the sums, capacity GPUs the most in service on one day; the idle cost and usage cost are priced here at the rate cards (DESIGN.md §5).

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
from datetime import date, time, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Count, F, Q, Sum, Value
from django.db.models.functions import JSONObject

from accounting.models import DailyModelCapacity, DailyModelUsage, DailyUnplacedUsage, DailyUsage
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
from boards.scope import BoardScope, Span
from cluster.bookings.guarantees import weekly_ranges
from cluster.bookings.models import GuaranteeDays, guarantee_hours_label
from cluster.jobs.kpis import percent
from core.money import MINOR_UNITS
from core.timeutils import business_day_bounds, business_zone, days_through
from core.units import TICKS_PER_CARD_HOUR, TICKS_PER_GPU_SECOND
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
class GuaranteeFigure:
    """A guaranteed share over the board's span: its label (``2 × H100, always``), the card-hours it
    guaranteed (its GPUs × the hours it applied, up to now) and the card-hours the team held on that model
    over the span's days; what is guaranteed and not used is idle capacity with a name."""

    label: str
    guaranteed: Decimal
    used: Decimal


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
    guarantees: tuple[GuaranteeFigure, ...] = ()  # the team's guaranteed shares beside its use (issue 19)


@dataclass(frozen=True)
class Headline:
    tiles: list[Tile]
    teams: list[TeamRow]
    unplaced_card_hours: Decimal
    unpriced: bool  # some idle or usage had no rate card: costs leave it out
    currency: str
    sees_costs: bool
    sees_all_costs: bool


@dataclass(frozen=True)
class SpanDetail:
    """What a week's or a month's page shows beyond the headline, from the same reads: each day's state ticks
    (:data:`OTHER_TEAMS` too) and GPUs, each team's allocated ticks per day (unplaced too), each GPU model's
    allocated ticks per state of the teams in scope (unplaced as unmeasured), and each model's idle and usage
    cost of the teams whose costs the viewer sees."""

    states_by_day: dict[date, Counter]
    gpus_by_day: dict[date, int]
    team_days: Counter  # (team, day) → allocated ticks
    team_ticks: Counter  # (team, state) → allocated ticks of the span, unplaced as unmeasured
    model_ticks: Counter  # (model, state) → ticks
    model_idle_cost: dict
    model_cost: dict


@dataclass
class _Read:
    days: dict[date, _Day] = field(default_factory=lambda: defaultdict(_Day))  # the span's and the compared
    team_ticks: Counter = field(default_factory=Counter)  # the span's (team, state) → ticks
    unplaced: Counter = field(default_factory=Counter)  # the span's unplaced ticks per team
    priced: dict = field(default_factory=lambda: defaultdict(int))  # (day, team, project, model, state) → ticks
    team_days: Counter = field(default_factory=Counter)
    model_ticks: Counter = field(default_factory=Counter)


def _read_days(scope: BoardScope) -> _Read:
    """The span's and the compared spans' days, the span's team × state ticks, unplaced ticks per team and
    allocated ticks per (day, team, project, model, state) for pricing. Three queries, whatever the span."""
    read = _Read()
    first, last = scope.span
    days = Q(day__gte=scope.compared_from, day__lte=last)
    if scope.narrowed_to_gpus:  # a pool or a node: the GPUs' own rows
        rows = (DailyUsage.objects.filter(scope.gpu_q(), days)
                .values_list("day", "state", "team_id", "project_id", "gpu__model_id").annotate(total=Sum("ticks")))
        counts = DailyUsage.objects.filter(scope.gpu_q(), days).values_list("day").annotate(gpus=Count("gpu", distinct=True))
    else:  # the same sums kept by GPU model (accounting.usage.detail.write_model_sums): a row per model, not per GPU
        by_model = Q(gpu_model_id=scope.gpu_model_id) if scope.gpu_model_id is not None else Q()
        rows = (DailyModelUsage.objects.filter(days, by_model)
                .values_list("day", "state", "team_id", "project_id", "gpu_model_id").annotate(total=Sum("ticks")))
        counts = DailyModelCapacity.objects.filter(days, by_model).values_list("day").annotate(gpus=Sum("gpus"))
    rows = rows.order_by()
    for day, state, team_id, project_id, model_id, total in rows:
        entry = read.days[day]
        other = scope.team_id is not None and state in ALLOCATED_STATES and team_id != scope.team_id
        entry.ticks[OTHER_TEAMS if other else state] += total
        if state == IDLE and not other:
            entry.idle_by_team_model[(team_id, model_id)] += total
        if first <= day <= last and state in ALLOCATED_STATES:
            read.team_ticks[(team_id, state)] += total
            read.team_days[(team_id, day)] += total
            if not other:
                read.model_ticks[(model_id, state)] += total
            if team_id is not None:
                read.priced[(day, team_id, project_id, model_id, state)] += total
    for day, gpus in counts.order_by():
        read.days[day].gpus = gpus
    if not scope.narrowed_to_gpus:
        query = DailyUnplacedUsage.objects.filter(day__gte=first, day__lte=last)
        if scope.gpu_model_id is not None:
            query = query.filter(gpu_model_id=scope.gpu_model_id)
        for day, team_id, project_id, model_id, total in (
            query.values_list("day", "team_id", "project_id", "gpu_model_id").annotate(total=Sum("ticks")).order_by()
        ):
            read.unplaced[team_id] += total
            read.team_days[(team_id, day)] += total
            if scope.team_id is None or team_id == scope.team_id:
                read.model_ticks[(model_id, UNMEASURED)] += total
            read.priced[(day, team_id, project_id, model_id, UNMEASURED)] += total
    return read


def _idle_costs(span: Span, days: dict[date, _Day], rates: list[Rate], currency: str, teams) -> tuple[dict, dict, bool]:
    """Idle cost per team and per GPU model over ``span``, of the teams the viewer may see costs of (``teams``
    None: all): each day's idle at that day's rate card, rounded once per (team, model, rate card)."""
    ticks: Counter = Counter()
    unpriced = False
    for day in days_through(*span):
        entry = days.get(day)
        if entry is None:
            continue
        for (team_id, model_id), idle in entry.idle_by_team_model.items():
            if teams is not None and team_id not in teams:
                continue
            rate = rate_on(rates, model_id, day)
            if rate is None:
                unpriced = True
                continue
            ticks[(team_id, model_id, rate)] += idle
    by_team: dict[int | None, Decimal] = defaultdict(zero_money)
    by_model: dict[int | None, Decimal] = defaultdict(zero_money)
    for (team_id, model_id, rate), idle in ticks.items():
        amount = line_amount(idle, rate.price, currency)
        by_team[team_id] += amount
        by_model[model_id] += amount
    return by_team, by_model, unpriced


def headline(scope: BoardScope, *, user) -> Headline:
    """The tiles and the team table of ``scope`` as ``user`` may see them. Seven queries at most."""
    return span_headline(scope, user=user)[0]


def span_headline(scope: BoardScope, *, user) -> tuple[Headline, SpanDetail]:
    """:func:`headline` of a day or a span of days (``scope.last``), each tile against the mean of
    ``scope.compared_spans``, with the span's :class:`SpanDetail`. The same seven queries at most."""
    currency = settings.CARDHOUR_CURRENCY
    read = _read_days(scope)
    rates = rate_cards(scope.compared_from, scope.last_day + timedelta(days=1))
    cost_teams = cost_team_ids(user)
    sees_costs = cost_teams is None or bool(cost_teams)
    idle_cost_of: dict[Span, Decimal | None] = {}
    for span in scope.compared_spans:
        costs, _by_model, _missing = _idle_costs(span, read.days, rates, currency, cost_teams)
        idle_cost_of[span] = sum(costs.values(), zero_money()) if sees_costs else None
    span_costs, model_idle, unpriced = _idle_costs(scope.span, read.days, rates, currency, cost_teams)
    idle_cost_of[scope.span] = sum(span_costs.values(), zero_money()) if sees_costs else None
    tiles = _tiles(scope, read.days, idle_cost_of)
    entries, unpriced_usage = price_usage(usage=read.priced, rates=rates, policy=current_policy())
    lines = lines_of(entries, currency)  # each line priced once, as a close prices it
    model_use: Counter = Counter()  # (team, model) → the span's allocated ticks
    for (_day, team_id, _project, model_id, _state), total in read.priced.items():
        model_use[(team_id, model_id)] += total
    teams = _team_rows(scope, read.team_ticks, read.unplaced, span_costs, team_totals(lines), cost_teams, user,
                       model_use)
    unplaced_ch = row_figures({UNMEASURED: sum(read.unplaced.values())}, gpu_level=False)["card_hours_unmeasured"]
    model_cost: dict[int | None, Decimal] = defaultdict(zero_money)
    for line in lines:
        if (cost_teams is None or line.team_id in cost_teams) and scope.team_id in (None, line.team_id):
            model_cost[line.gpu_model_id] += line.amount
    shown = days_through(*scope.span)
    detail = SpanDetail(
        states_by_day={d: read.days[d].ticks for d in shown if d in read.days},
        gpus_by_day={d: read.days[d].gpus for d in shown if d in read.days},
        team_days=read.team_days, team_ticks=read.team_ticks + Counter({(t, UNMEASURED): n for t, n in read.unplaced.items()}),
        model_ticks=read.model_ticks, model_idle_cost=dict(model_idle),
        model_cost=dict(model_cost),
    )
    return Headline(tiles=tiles, teams=teams, unplaced_card_hours=unplaced_ch,
                    unpriced=unpriced or bool(unpriced_usage), currency=currency, sees_costs=sees_costs,
                    sees_all_costs=cost_teams is None), detail


def _tiles(scope: BoardScope, days: dict[date, _Day], idle_cost_of: dict) -> list[Tile]:
    def figures(span: Span) -> dict:
        """A span's figures: card-hours summed over its days, ratios of the sums, capacity GPUs the most in
        service on one of its days ({} when no day has usage)."""
        ticks: Counter = Counter()
        gpus = 0
        for day in days_through(*span):
            entry = days.get(day)
            if entry is not None and entry.gpus:
                ticks.update(entry.ticks)
                gpus = max(gpus, entry.gpus)
        if not gpus:
            return {}
        hours = card_hours_by_state(ticks)
        return {
            "capacity_gpus": Decimal(gpus),
            "capacity_card_hours": sum(hours.values(), Decimal(0)),
            "allocation_rate": percent(allocation_rate(ticks)),
            "efficiency": percent(efficiency(ticks)),
            "idle_card_hours": hours[IDLE],
            "idle_cost": idle_cost_of.get(span),
            "unmeasured_card_hours": hours[UNMEASURED],
            "unallocated_card_hours": hours[UNALLOCATED],
            "down_card_hours": hours[DOWN],
        }

    now, before = figures(scope.span), [figures(span) for span in scope.compared_spans]
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
               user, model_use: Counter) -> list[TeamRow]:
    ticks: dict[int | None, Counter] = defaultdict(Counter)
    for (team_id, state), total in team_ticks.items():
        ticks[team_id][state] += total
    for team_id, total in unplaced.items():
        ticks[team_id][UNMEASURED] += total
    if scope.team_id is not None:
        ticks = {k: v for k, v in ticks.items() if k == scope.team_id}
    visible = visible_team_ids(user)
    ids = [t for t in ticks if t is not None]
    # The teams of the rows and those with a guaranteed share (a row even when unused), in one query.
    guaranteed = Q(guarantees__isnull=False)
    if scope.team_id is not None:
        guaranteed &= Q(pk=scope.team_id)
    if scope.gpu_model_id is not None:
        guaranteed &= Q(guarantees__gpu_model_id=scope.gpu_model_id)
    teams = {t.pk: t for t in Team.objects.filter(Q(pk__in=ids) | guaranteed).annotate(shares=ArrayAgg(
        JSONObject(model=F("guarantees__gpu_model_id"), name=F("guarantees__gpu_model__short_name"),
                   gpus=F("guarantees__gpus"), days=F("guarantees__days"), start=F("guarantees__start_time"),
                   end=F("guarantees__end_time")),
        filter=guaranteed, default=Value([]), distinct=True,
    ))}
    for team_id in teams:
        ticks.setdefault(team_id, Counter())
    quotas = tightest_quotas(scope.last_day, [t for t in ids if visible is None or t in visible], now=scope.now)
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
            guarantees=_guarantee_figures(scope, team_id, team.shares if team else [], model_use),
        ))
    rows.sort(key=lambda r: (-(r.idle_cost or 0), -r.idle_ticks, r.team_id is None, r.name.casefold()))
    return rows


def _guarantee_figures(scope, team_id, shares: list[dict], model_use: Counter) -> tuple[GuaranteeFigure, ...]:
    """Each guaranteed share of the team over the span's business days, up to ``scope.now``."""
    lo = business_day_bounds(scope.span[0])[0]
    hi = min(business_day_bounds(scope.span[1])[1], max(scope.now, lo))
    figures = []
    for share in sorted(shares, key=lambda s: s["name"]):
        hours = [time.fromisoformat(share[key]) if share[key] else None for key in ("start", "end")]
        covered = sum((b - a).total_seconds() for a, b in weekly_ranges(
            weekdays=GuaranteeDays(share["days"]).weekdays, start=hours[0], end=hours[1], zone=business_zone(),
            lo=lo, hi=hi,
        ))
        figures.append(GuaranteeFigure(
            label=f"{share['gpus']} × {share['name']}, {guarantee_hours_label(share['days'], *hours)}",
            guaranteed=_card_hours(round(covered) * share["gpus"] * TICKS_PER_GPU_SECOND),
            used=_card_hours(model_use[(team_id, share["model"])]),
        ))
    return tuple(figures)


def _card_hours(ticks: int) -> Decimal:
    return (Decimal(ticks) / TICKS_PER_CARD_HOUR).quantize(Decimal("0.0001"))


