"""A week or a month of the daily board (issue 15): the same headline (:func:`boards.figures.span_headline`,
one number, one source) over a span of business days against the span before, the five states day by day,
the team table with each team's allocated card-hours per day, a table per GPU model, and the GPUs idle for
days in a row up to the span's last day shown (:func:`boards.movers.long_idle`). A fixed handful of queries
whatever the number of days or GPUs.

**Costs** per GPU model are shown to those who see every team's costs only (admin, finance): a model row
sums every team's usage, so a lead would otherwise read other teams' costs out of it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from accounting.money.pricing import card_hours
from accounting.usage.figures import row_figures
from boards.figures import Headline, span_headline, zero_money
from boards.maths import SERIES, efficiency
from boards.movers import LongIdle, long_idle
from boards.scope import BoardScope
from cluster.jobs.kpis import percent
from cluster.models import GpuModel
from core.timeutils import business_today, days_through, month_days, week_days

WEEK, MONTH = "week", "month"
DAY_COLUMNS = ["day", *SERIES, "capacity", "partial"]


@dataclass(frozen=True)
class TableRow:
    """A team's or a GPU model's span: card-hours (4 places), efficiency (%), costs (None: not the viewer's to
    see) and, for a team, its allocated card-hours per day shown (``daily``, for the sparkline)."""

    key: int | None
    name: str
    allocated: Decimal
    busy: Decimal
    idle: Decimal
    unmeasured: Decimal
    efficiency: Decimal | None
    idle_cost: Decimal | None
    cost: Decimal | None
    daily: tuple[Decimal, ...] = ()


@dataclass(frozen=True)
class PeriodSummary:
    """The span of ``scope`` (``kind``: week or month): ``shown`` its days up to today, ``bars`` one row per
    shown day (ticks per series of :data:`boards.maths.SERIES`, capacity, ``partial`` for a day still filling)."""

    kind: str
    scope: BoardScope
    shown: list[date]
    headline: Headline
    teams: list[TableRow]
    models: list[TableRow]
    team_total: TableRow
    model_total: TableRow
    bars: pd.DataFrame
    long_idle: list[LongIdle]

    @property
    def partial(self) -> bool:
        return self.scope.live


def last_full_week(today: date) -> date:
    """The Monday of the last week that has ended before ``today``."""
    return week_days(today)[0] - timedelta(days=7)


def month_span(first: date) -> tuple[date, date]:
    return first, month_days(first)[1] - timedelta(days=1)


def _row(key, name, ticks: Counter, *, idle_cost, cost, daily=()) -> TableRow:
    figures = row_figures(ticks, gpu_level=False)
    return TableRow(key=key, name=name, allocated=figures["card_hours_allocated"], busy=figures["card_hours_busy"],
                    idle=figures["card_hours_idle"], unmeasured=figures["card_hours_unmeasured"],
                    efficiency=percent(efficiency(ticks)), idle_cost=idle_cost, cost=cost, daily=tuple(daily))


def _total(name: str, rows: list[TableRow], ticks: Counter, *, costs: bool) -> TableRow:
    def money(attr):
        if not costs or any(getattr(r, attr) is None for r in rows):
            return None
        return sum((getattr(r, attr) for r in rows), zero_money())

    return _row(None, name, ticks, idle_cost=money("idle_cost"), cost=money("cost"))  # costs: every row's seen


def period_summary(scope: BoardScope, *, user, kind: str, total_name: str = "Total") -> PeriodSummary:
    """The week or month of ``scope`` (``scope.day`` its first day, ``scope.last`` its last) as ``user`` may see
    it. Queries: the headline's seven, one for the model names, long idle's five at most."""
    head, detail = span_headline(scope, user=user)
    today = business_today(now=scope.now)
    shown = [d for d in days_through(*scope.span) if d <= today]
    teams = [
        TableRow(key=row.team_id, name=row.name, allocated=row.allocated, busy=row.busy, idle=row.idle,
                 unmeasured=row.unmeasured, efficiency=row.efficiency, idle_cost=row.idle_cost, cost=row.cost,
                 daily=tuple(card_hours(detail.team_days.get((row.team_id, d), 0)) for d in shown))
        for row in head.teams
    ]
    models_ticks: dict[int | None, Counter] = {}
    for (model_id, state), ticks in detail.model_ticks.items():
        models_ticks.setdefault(model_id, Counter())[state] += ticks
    names = dict(GpuModel.objects.filter(pk__in=[m for m in models_ticks if m is not None])
                 .values_list("pk", "short_name"))
    all_costs = head.sees_all_costs
    models = [
        _row(model_id, names.get(model_id, ""), ticks,
             idle_cost=detail.model_idle_cost.get(model_id, zero_money()) if all_costs else None,
             cost=detail.model_cost.get(model_id, zero_money()) if all_costs else None)
        for model_id, ticks in models_ticks.items()
    ]
    models.sort(key=lambda r: (-r.allocated, r.key is None, r.name.casefold()))
    model_sum: Counter = Counter()
    for ticks in models_ticks.values():
        model_sum.update(ticks)
    team_sum: Counter = Counter()
    shown_teams = {row.team_id for row in head.teams}
    for (team_id, state), ticks in detail.team_ticks.items():
        if team_id in shown_teams:
            team_sum[state] += ticks
    return PeriodSummary(
        kind=kind, scope=scope, shown=shown, headline=head, teams=teams, models=models,
        team_total=_total(total_name, teams, team_sum, costs=head.sees_costs),
        model_total=_total(total_name, models, model_sum, costs=all_costs),
        bars=_bars(detail, shown, today), long_idle=long_idle(replace(scope, day=shown[-1], last=None), user=user)
        if shown else [],
    )


def _bars(detail, shown: list[date], today: date) -> pd.DataFrame:
    rows = []
    for day in shown:
        ticks = detail.states_by_day.get(day, Counter())
        rows.append({"day": day, **{key: int(ticks.get(key, 0)) for key in SERIES},
                     "capacity": int(sum(ticks.values())), "partial": day >= today})
    return pd.DataFrame(rows, columns=DAY_COLUMNS)


__all__ = ["MONTH", "WEEK", "PeriodSummary", "TableRow", "last_full_week", "month_span", "period_summary"]
