"""The threshold backtest's report (issue 19): the recorded minutes of a scope (``inputs.py``) replayed under each
rule set (``simulate.py``), beside what was actually held, with the card-hours and their cost saved.

Card-hours saved = actual card-hours held − the rule's (negative: the rule would have held more). They are priced
day by day at the rate card of the GPU model valid on that business day (``accounting/money/pricing.py``'s
:func:`rate_on`, the cards :func:`rate_cards` reads, as the close prices usage), summed exactly and rounded once to
the currency's minor unit; a day with no rate card is left unpriced and named."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import numpy as np
from django.conf import settings
from django.utils.translation import gettext

from accounting.money.priced_days import rate_cards
from accounting.money.pricing import rate_on, round_half_up
from boards.backtest.inputs import MINUTE_S, Recorded, Scope, recorded
from boards.backtest.simulate import Outcome, RuleSet, actual_outcome, simulate
from core.money import MINOR_UNITS
from core.timeutils import business_day_bounds, business_days

CARD_HOUR_PLACES = 2
CSV_COLUMNS = [
    "rule_set", "metric", "up_pct", "down_pct", "group_gpus", "min_gpus", "max_gpus", "cooldown_minutes",
    "buffer_minutes", "headroom_gpus", "card_hours", "card_hours_saved", "cost_saved", "currency", "mean_gpus",
    "peak_gpus", "under_provisioned_minutes", "scale_ups", "scale_downs", "scale_events", "jobs_cut",
    "cut_minutes", "longest_cut_minutes", "bound_minutes",
]


@dataclass(frozen=True)
class Figures:
    """One column of the side-by-side table: the actual history, or a rule set's replay."""

    name: str
    rule: RuleSet | None  # None: what was actually held
    outcome: Outcome
    card_hours: Decimal
    saved_card_hours: Decimal
    saved_cost: Decimal | None  # None: no day of the period was priced
    mean_gpus: Decimal
    peak_gpus: int

    @property
    def under_hours(self) -> Decimal:
        return _hours(self.outcome.under_minutes)


@dataclass(frozen=True)
class Backtest:
    """Every rule set's figures over one scope, the recorded series they were replayed on, and the prices used."""

    scope: Scope
    recorded: Recorded
    actual: Figures
    rules: list[Figures]
    currency: str
    unpriced_days: list[date]
    seconds: float

    @property
    def columns(self) -> list[Figures]:
        return [self.actual, *self.rules]

    @property
    def empty(self) -> bool:
        return not self.recorded.minutes or not (self.recorded.held.any() or self.recorded.demand.any())


def _hours(minutes: int | Fraction) -> Decimal:
    return round_half_up(Fraction(minutes) / 60, CARD_HOUR_PLACES)


def day_slices(start: datetime, minutes: int) -> list[tuple[date, int, int]]:
    """(business day, first minute, end minute) of each business day the minutes touch."""
    out = []
    if not minutes:
        return out
    end = start.timestamp() + minutes * MINUTE_S
    for day in business_days(start, datetime.fromtimestamp(end, start.tzinfo)):
        lo, hi = business_day_bounds(day)
        first = max(0, int((lo - start).total_seconds()) // MINUTE_S)
        last = min(minutes, int((hi - start).total_seconds()) // MINUTE_S)
        if first < last:
            out.append((day, first, last))
    return out


def _figures(name: str, rule: RuleSet | None, outcome: Outcome, actual_minutes: int, saved_by_day, rates,
             model_id: int, currency: str) -> tuple[Figures, list[date]]:
    saved = actual_minutes - outcome.gpu_minutes
    cost, unpriced, priced_any = Fraction(0), [], False
    for day, saved_minutes in saved_by_day:
        rate = rate_on(rates, model_id, day)
        if rate is None:
            unpriced.append(day)
            continue
        priced_any = True
        cost += Fraction(saved_minutes, 60) * Fraction(rate.price)
    gpus = np.asarray(outcome.gpus, dtype=np.int64)
    minutes = len(gpus)
    return Figures(
        name=name, rule=rule, outcome=outcome, card_hours=_hours(outcome.gpu_minutes), saved_card_hours=_hours(saved),
        saved_cost=round_half_up(cost, MINOR_UNITS[currency]) if priced_any else None,
        mean_gpus=round_half_up(Fraction(outcome.gpu_minutes, minutes), 2) if minutes else Decimal("0.00"),
        peak_gpus=int(gpus.max()) if minutes else 0,
    ), unpriced


def run_backtest(scope: Scope, rules: list[RuleSet], *, now: datetime) -> Backtest:
    """Read the scope's minutes once and replay them under each rule set."""
    started = time.perf_counter()
    minutes = recorded(scope, now=now)
    currency = settings.CARDHOUR_CURRENCY
    days = day_slices(minutes.start, minutes.minutes)
    rates = rate_cards(days[0][0], days[-1][0] + timedelta(days=1)) if days else []
    series = {metric: minutes.series(metric) for metric in {rule.metric for rule in rules}}
    any_series = next(iter(series.values())) if series else minutes.series("memory")
    actual = actual_outcome(any_series)
    held = minutes.held
    actual_minutes = int(held.sum())
    actual_figures, unpriced = _figures("actual", None, actual, actual_minutes,
                                        [(day, 0) for day, _f, _l in days], rates, scope.gpu_model_id, currency)
    out = []
    for rule in rules:
        outcome = simulate(series[rule.metric], rule)
        gpus = np.asarray(outcome.gpus, dtype=np.int64)
        by_day = [(day, int(held[first:last].sum() - gpus[first:last].sum())) for day, first, last in days]
        figures, _unpriced = _figures(rule.name, rule, outcome, actual_minutes, by_day, rates, scope.gpu_model_id,
                                      currency)
        out.append(figures)
    return Backtest(scope=scope, recorded=minutes, actual=actual_figures, rules=out, currency=currency,
                    unpriced_days=unpriced, seconds=time.perf_counter() - started)


def csv_row(figures: Figures, currency: str) -> dict:
    """One column of the side-by-side table as a CSV row (the page's CSV and the command's)."""
    rule, out = figures.rule, figures.outcome
    row = {"rule_set": gettext("Actually held") if rule is None else figures.name, "card_hours": figures.card_hours,
           "card_hours_saved": figures.saved_card_hours, "cost_saved": figures.saved_cost, "currency": currency,
           "mean_gpus": figures.mean_gpus, "peak_gpus": figures.peak_gpus,
           "under_provisioned_minutes": out.under_minutes, "scale_ups": out.scale_ups, "scale_downs": out.scale_downs,
           "scale_events": out.scale_events, "jobs_cut": out.cuts if rule else None, "cut_minutes": out.cut_minutes,
           "longest_cut_minutes": out.longest_cut_minutes, "bound_minutes": out.bound_minutes if rule else None}
    if rule is not None:
        row |= {"metric": rule.metric, "up_pct": rule.up_pct, "down_pct": rule.down_pct, "group_gpus": rule.group,
                "min_gpus": rule.minimum, "max_gpus": rule.maximum, "cooldown_minutes": rule.cooldown_minutes,
                "buffer_minutes": rule.buffer_minutes, "headroom_gpus": rule.headroom}
    return row


def csv_rows(report: Backtest) -> list[dict]:
    return [csv_row(figures, report.currency) for figures in report.columns]
