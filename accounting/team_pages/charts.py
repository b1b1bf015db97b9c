"""Plotly figure dicts for the team page: pure functions of tidy DataFrames (STYLE.md 6).

No ORM and no request here: ``accounting/team_pages/selectors.py`` gives the rows, the view gives the words (already
translated), and ``static/js/charts.js`` draws the dict. Days are ISO dates (``2026-11-02``): these
series have a point a day, a few hundred at most, and a date needs no time zone.

The burn-down is exact until it is drawn: remaining and burn come in ticks (1/840,000 GPU-second) and
the forecast is computed on fractions, so it reaches zero on exactly the day
:func:`accounting.quotas.rules.burn_forecast` names as the run-out day.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from fractions import Fraction

import pandas as pd

from core.units import TICKS_PER_CARD_HOUR

BUSY_COLOUR, IDLE_COLOUR, UNMEASURED_COLOUR = "#2ca02c", "#e8a33d", "#a7adba"
LINE_COLOUR, FORECAST_COLOUR, MUTED = "#1f77b4", "#d62728", "#5d6677"
# What each trace or shape is, in its ``meta`` or ``name``: tests and the page's JS tell them apart by it.
REMAINING, FORECAST, EXPIRY, PARTIAL = "remaining", "forecast", "expiry", "partial"
# A burn-down shows at most this many days before and after today (a long quota period is a window).
BURNDOWN_PAST_DAYS, BURNDOWN_AHEAD_DAYS = 30, 30


@dataclass(frozen=True)
class TeamChartText:
    """Every word the team charts show; the view passes translated ones (English defaults for tests)."""

    busy: str = "Busy"
    idle: str = "Idle"
    unmeasured: str = "Unmeasured"
    card_hours_axis: str = "Card-hours"
    efficiency_axis: str = "Efficiency (%)"
    efficiency: str = "Efficiency"
    today_so_far: str = "today so far"
    remaining: str = "Remaining"
    forecast: str = "Forecast"
    expires: str = "Expires"
    empty: str = "No usage yet"


def _layout(title: str, y_axis: dict, *, x_axis: dict | None = None, height: int = 320) -> dict:
    return {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": x_axis or {},
        "yaxis": {**y_axis, "fixedrange": True},
        "legend": {"orientation": "h", "y": -0.2},
        "margin": {"l": 56, "r": 16, "t": 40, "b": 40},
        "height": height,
        "showlegend": True,
        "shapes": [],
        "annotations": [],
    }


def _with_note(layout: dict, note: str) -> dict:
    annotation = {"text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
                  "font": {"size": 14, "color": MUTED}}
    return {**layout, "annotations": [*layout["annotations"], annotation]}


def _hours(ticks) -> float:
    return round(float(Fraction(ticks) / TICKS_PER_CARD_HOUR), 3)


# ---- card-hours split -------------------------------------------------------------------------------------------

def split_bar_figure(df: pd.DataFrame, *, title: str, text: TeamChartText = TeamChartText()) -> dict:
    """Busy, idle and unmeasured card-hours stacked per row label (a project or a GPU model).

    ``df``: rows of :func:`accounting.team_pages.selectors.usage_by_project` / ``usage_by_model`` (``label``,
    ``busy``, ``idle``, ``unmeasured`` as ``Decimal`` card-hours)."""
    layout = {**_layout(title, {"title": {"text": text.card_hours_axis}, "rangemode": "tozero"},
                        x_axis={"type": "category"}), "barmode": "stack", "hovermode": "x unified"}
    if df.empty:
        return {"data": [], "layout": _with_note(layout, text.empty)}
    labels = [str(label) for label in df["label"]]
    data = [
        {"type": "bar", "name": name, "x": labels, "y": [round(float(value), 2) for value in df[column]],
         "marker": {"color": colour}, "meta": {"role": column},
         "hovertemplate": f"%{{y:.2f}} {text.card_hours_axis.lower()}<extra>{name}</extra>"}
        for column, name, colour in (("busy", text.busy, BUSY_COLOUR), ("idle", text.idle, IDLE_COLOUR),
                                     ("unmeasured", text.unmeasured, UNMEASURED_COLOUR))
    ]
    return {"data": data, "layout": layout}


# ---- efficiency trend ----------------------------------------------------------------------------------------------

def efficiency_figure(df: pd.DataFrame, *, title: str, text: TeamChartText = TeamChartText()) -> dict:
    """Busy ÷ allocated per day in percent, 0–100, a gap (None) where nothing was allocated. The partial
    last day (today so far) is left out of the line, which would dip on a day not yet over, and drawn as a
    hollow marker of its own (STYLE.md 6).

    ``df``: rows of :func:`accounting.team_pages.selectors.efficiency_trend` (``day``, ``efficiency`` 0–1 or None,
    ``partial``)."""
    layout = _layout(title, {"title": {"text": text.efficiency_axis}, "range": [0, 100]},
                     x_axis={"type": "date"})
    layout["hovermode"] = "x unified"
    if df.empty or df["efficiency"].isna().all():
        return {"data": [], "layout": _with_note(layout, text.empty)}
    points = [(day.isoformat(), None if value is None or pd.isna(value) else round(float(value) * 100, 1), partial)
              for day, value, partial in df[["day", "efficiency", "partial"]].itertuples(index=False)]
    done = [(x, y) for x, y, partial in points if not partial]
    today = [(x, y) for x, y, partial in points if partial and y is not None]
    data = [{
        "type": "scatter", "mode": "lines+markers", "name": text.efficiency, "connectgaps": False,
        "x": [x for x, _y in done], "y": [y for _x, y in done], "meta": {"role": "efficiency"},
        "line": {"color": LINE_COLOUR, "width": 2}, "marker": {"size": 5, "color": LINE_COLOUR},
        "hovertemplate": "%{y:.1f} %",
    }]
    if today:
        data.append({
            "type": "scatter", "mode": "markers", "name": f"{text.efficiency} ({text.today_so_far})",
            "x": [x for x, _y in today], "y": [y for _x, y in today], "meta": {"role": PARTIAL},
            "marker": {"size": 9, "color": LINE_COLOUR, "symbol": "circle-open", "line": {"width": 2}},
            "hovertemplate": f"%{{y:.1f}} % · {text.today_so_far}<extra></extra>",
        })
    return {"data": data, "layout": layout}


# ---- quota burn-down ---------------------------------------------------------------------------------------------

def forecast_points(*, remaining_ticks: int, burn_ticks_per_day: Fraction, today: date,
                    expires: date) -> list[tuple[date, Fraction]]:
    """The forecast of remaining ticks after each day from ``today`` at the trailing burn: down to zero on
    the run-out day (``today + ceil(remaining / burn)``, as the quota forecast says) or to ``expires``,
    whichever comes first; flat to ``expires`` when nothing burns; only today when nothing remains."""
    remaining = Fraction(remaining_ticks)
    if remaining <= 0:
        return [(today, Fraction(0))]
    days_left = max((expires - today).days, 0)
    if burn_ticks_per_day > 0:
        days_left = min(days_left, math.ceil(remaining / burn_ticks_per_day))
    return [(today + timedelta(days=n), max(remaining - burn_ticks_per_day * n, Fraction(0)))
            for n in range(days_left + 1)]


def burndown_window(*, first: date, today: date, forecast_end: date) -> tuple[date, date]:
    """The days a burn-down shows: from the quota's first day (at most :data:`BURNDOWN_PAST_DAYS` before
    today) to where the forecast ends (its run-out day or the expiry, at most :data:`BURNDOWN_AHEAD_DAYS`
    after today), widened by a margin (a twentieth of the span, at least a day) each side."""
    start = max(first, today - timedelta(days=BURNDOWN_PAST_DAYS))
    end = min(forecast_end, today + timedelta(days=BURNDOWN_AHEAD_DAYS))
    margin = timedelta(days=max(1, math.ceil((end - start).days / 20)))
    return start - margin, end + margin


def burndown_figure(df: pd.DataFrame, *, quota_ticks: int, remaining_ticks: int, burn_ticks_per_day: Fraction,
                    today: date, expires: date, title: str, text: TeamChartText = TeamChartText()) -> dict:
    """A quota's remaining card-hours after each day so far (``df``: :func:`accounting.team_pages.selectors.
    burndown_frame`) and the forecast from today at the trailing burn (trace named ``text.forecast``), on an
    x axis that spans what was used and what is forecast (:func:`burndown_window`), not the whole period: a
    year's quota a fortnight in would be a stroke in a corner. A vertical line marks the expiry; when it
    falls outside the shown days, a note at the right edge says when it is."""
    forecast = forecast_points(remaining_ticks=remaining_ticks, burn_ticks_per_day=burn_ticks_per_day,
                               today=today, expires=expires)
    days = [day.isoformat() for day in df["day"]] if not df.empty else []
    remaining = [_hours(ticks) for ticks in df["remaining_ticks"]] if days else []
    first = df["day"].iloc[0] if not df.empty else today
    shown_from, shown_to = burndown_window(first=first, today=today, forecast_end=forecast[-1][0])
    quota = _hours(quota_ticks)
    lowest = min([0.0, *remaining, *(_hours(ticks) for _day, ticks in forecast)])
    x_axis = {"type": "date", "range": [shown_from.isoformat(), shown_to.isoformat()]}
    layout = _layout(title, {"title": {"text": text.card_hours_axis}, "range": [lowest, quota * 1.08 or 1]},
                     x_axis=x_axis)
    layout["hovermode"] = "x unified"
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": text.remaining, "x": days, "y": remaining,
         "meta": {"role": REMAINING}, "line": {"color": LINE_COLOUR, "width": 2},
         "marker": {"size": 4, "color": LINE_COLOUR}, "hovertemplate": f"%{{y:.2f}} {text.card_hours_axis.lower()}"},
        {"type": "scatter", "mode": "lines", "name": text.forecast, "x": [day.isoformat() for day, _t in forecast],
         "y": [_hours(ticks) for _day, ticks in forecast], "meta": {"role": FORECAST},
         "line": {"color": FORECAST_COLOUR, "width": 2, "dash": "dash"},
         "hovertemplate": f"%{{y:.2f}} {text.card_hours_axis.lower()}"},
    ]
    # The line stays in the dict when off the shown days: panning out still finds it.
    expiry = {"type": "line", "xref": "x", "yref": "paper", "x0": expires.isoformat(), "x1": expires.isoformat(),
              "y0": 0, "y1": 1, "line": {"color": MUTED, "width": 1.5, "dash": "dot"}, "name": EXPIRY}
    label = {"text": f"{text.expires} {expires.isoformat()}", "yref": "paper", "y": 1, "yanchor": "bottom",
             "showarrow": False, "font": {"size": 11, "color": MUTED}, "name": EXPIRY}
    if shown_from <= expires <= shown_to:
        label |= {"xref": "x", "x": expires.isoformat(), "xanchor": "right"}
    elif expires > shown_to:
        label |= {"text": f"{label['text']} →", "xref": "paper", "x": 1, "xanchor": "right"}
    else:
        label |= {"text": f"← {label['text']}", "xref": "paper", "x": 0, "xanchor": "left"}
    return {"data": data, "layout": {**layout, "shapes": [expiry], "annotations": [label]}}
