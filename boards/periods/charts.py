"""The resource profile's chart (issue 15): concurrent GPUs held per hour over the month, per GPU model and
for the cluster, with the cluster's capacity line. A pure function of the selector's DataFrame
(:attr:`boards.periods.profile.MonthProfile.series`), no ORM (STYLE.md 6); the view passes the words
(translated) and the display zone. Times are wall-clock strings of the display zone, as on the daily board."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

import pandas as pd

from boards.charts import wall_clock

TOTAL_COLOUR, CAPACITY_COLOUR = "#1f3b73", "#b03a2e"
MODEL_COLOURS = ("#2e9e5b", "#f0a202", "#8da0cb", "#66c2a5", "#e78ac3", "#a6d854", "#ffd92f", "#e5c494")


@dataclass(frozen=True)
class ProfileText:
    """Every word the chart shows (English defaults for tests)."""

    held_axis: str = "GPUs held (concurrent)"
    total: str = "Cluster"
    capacity: str = "Capacity (GPUs in service)"
    partial: str = "hour still running"
    no_data: str = "No hourly usage in this month"


def held_figure(series: pd.DataFrame, *, bounds: tuple[datetime, datetime], zone: tzinfo = UTC,
                text: ProfileText = ProfileText()) -> dict:
    """Lines of GPUs held per hour (one per model, and the cluster's if there is more than one model) and the
    cluster's capacity as a dashed step line."""
    start, end = bounds
    layout = {
        "margin": {"l": 56, "r": 16, "t": 16, "b": 40}, "hovermode": "x unified", "showlegend": True,
        "legend": {"orientation": "h", "y": -0.18}, "annotations": [],
        "xaxis": {"type": "date", "range": [wall_clock(start, zone), wall_clock(end, zone)]},
        "yaxis": {"title": {"text": text.held_axis}, "rangemode": "tozero"},
    }
    if series.empty:
        layout["annotations"].append({"text": text.no_data, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                      "showarrow": False, "font": {"size": 14, "color": "#5d6677"}})
        return {"data": [], "layout": layout}
    data = []
    models = sorted(series["model"].unique())
    for index, model in enumerate(models):
        rows = series[series["model"] == model]
        data.append(_line(rows, zone, name=model, colour=MODEL_COLOURS[index % len(MODEL_COLOURS)], text=text))
    cluster = series.groupby("hour", as_index=False).agg(held=("held", "sum"), capacity=("capacity", "sum"),
                                                         partial=("partial", "any"))
    if len(models) > 1:
        data.append(_line(cluster, zone, name=text.total, colour=TOTAL_COLOUR, text=text, width=3))
    data.append({
        "type": "scatter", "mode": "lines", "name": text.capacity, "x": [wall_clock(h, zone) for h in cluster["hour"]],
        "y": [int(c) for c in cluster["capacity"]], "line": {"color": CAPACITY_COLOUR, "dash": "dash", "shape": "hv"},
        "meta": {"role": "capacity"},
    })
    return {"data": data, "layout": layout}


def _line(rows: pd.DataFrame, zone: tzinfo, *, name: str, colour: str, text: ProfileText, width: int = 2) -> dict:
    return {
        "type": "scatter", "mode": "lines", "name": name, "x": [wall_clock(h, zone) for h in rows["hour"]],
        "y": [round(float(v), 3) for v in rows["held"]], "line": {"color": colour, "width": width, "shape": "hv"},
        "customdata": [text.partial if p else "" for p in rows["partial"]],
        "hovertemplate": "%{y:.2f} %{customdata}", "meta": {"role": "held", "series": name},
    }
