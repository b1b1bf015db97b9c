"""The plan page's chart (issue 19): planned against actual card-hours per week, a pure function of a tidy
DataFrame (STYLE.md 6). No ORM and no request: the view gives the rows (:func:`weeks_frame`) and the words
(already translated); ``static/js/charts.js`` draws the dict.

Planned weeks are grey bars, actual ones coloured by their deviation (over red, under amber, on plan green);
a week still running is hatched; a week not begun has no actual bar.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from accounting.plans import rules

PLANNED_COLOUR = "#a7adba"
DEVIATION_COLOURS = {rules.OVER: "#d62728", rules.UNDER: "#e8a33d", rules.ON_PLAN: "#2ca02c",
                     rules.NO_ESTIMATE: "#1f77b4"}
MUTED = "#5d6677"
PLANNED, ACTUAL = "planned", "actual"
WEEK_COLUMNS = ["week", "planned", "actual", "deviation", "partial"]


@dataclass(frozen=True)
class PlanChartText:
    """Every word the chart shows; the view passes translated ones (English defaults for tests)."""

    planned: str = "Planned"
    actual: str = "Actual"
    card_hours_axis: str = "Card-hours"
    week_axis: str = "Week from"
    so_far: str = "so far"
    empty: str = "Nothing planned or used this month"


def weeks_frame(weeks) -> pd.DataFrame:
    """The plan's weeks (:class:`accounting.plans.selectors.PlanWeek`) as :data:`WEEK_COLUMNS`: ``week`` its
    first day (ISO), card-hours as floats (``actual`` None for a week not begun)."""
    return pd.DataFrame([
        {"week": week.first.isoformat(), "planned": float(week.planned_card_hours),
         "actual": None if week.actual is None else float(week.actual_card_hours),
         "deviation": week.deviation, "partial": week.partial}
        for week in weeks
    ], columns=WEEK_COLUMNS)


def plan_figure(df: pd.DataFrame, *, title: str, text: PlanChartText = PlanChartText()) -> dict:
    """Grouped bars per week: planned, and actual coloured by its deviation."""
    layout = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": {"type": "category", "title": {"text": text.week_axis}},
        "yaxis": {"title": {"text": text.card_hours_axis}, "rangemode": "tozero", "fixedrange": True},
        "legend": {"orientation": "h", "y": -0.25},
        "margin": {"l": 56, "r": 16, "t": 40, "b": 48},
        "height": 320, "barmode": "group", "hovermode": "x unified", "showlegend": True,
        "shapes": [], "annotations": [],
    }
    has_values = not df.empty and (df["planned"].fillna(0).any() or df["actual"].fillna(0).any())
    if not has_values:
        note = {"text": text.empty, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
                "font": {"size": 14, "color": MUTED}}
        return {"data": [], "layout": {**layout, "annotations": [note]}}
    weeks = list(df["week"])
    actual = [None if value is None or pd.isna(value) else round(float(value), 2) for value in df["actual"]]
    data = [
        {"type": "bar", "name": text.planned, "x": weeks, "y": [round(float(v), 2) for v in df["planned"]],
         "marker": {"color": PLANNED_COLOUR}, "meta": {"role": PLANNED},
         "hovertemplate": f"%{{y:.2f}}<extra>{text.planned}</extra>"},
        {"type": "bar", "name": text.actual, "x": weeks, "y": actual, "meta": {"role": ACTUAL},
         "customdata": list(df["deviation"]),
         "marker": {"color": [DEVIATION_COLOURS[d] for d in df["deviation"]],
                    "pattern": {"shape": ["/" if partial else "" for partial in df["partial"]]}},
         "hovertemplate": f"%{{y:.2f}}<extra>{text.actual}</extra>"},
    ]
    return {"data": data, "layout": layout}
