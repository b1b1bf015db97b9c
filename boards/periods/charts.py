"""The resource profile's chart, and the week and month views' day bars and sparklines (issue 15): concurrent GPUs held per hour over the month, per GPU model and
for the cluster, with the cluster's capacity line. A pure function of the selector's DataFrame
(:attr:`boards.periods.profile.MonthProfile.series`), no ORM (STYLE.md 6); the view passes the words
(translated) and the display zone. Times are wall-clock strings of the display zone, as on the daily board."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from html import escape

import pandas as pd

from boards.charts import BoardText, base_layout, state_bars, wall_clock, with_note

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
    layout = base_layout(hovermode="x unified",
                         xaxis={"type": "date", "range": [wall_clock(start, zone), wall_clock(end, zone)]},
                         yaxis={"title": {"text": text.held_axis}, "rangemode": "tozero"})
    if series.empty:
        return {"data": [], "layout": with_note(layout, text.no_data)}
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


# ---- week and month views ----------------------------------------------------------------------------------

SPARK_WIDTH, SPARK_HEIGHT, SPARK_PAD = 96, 24, 2


def sparkline_points(values: Sequence[float], *, width: int = SPARK_WIDTH, height: int = SPARK_HEIGHT,
                     pad: int = SPARK_PAD) -> str:
    """The ``points`` of an SVG polyline through ``values`` (one a day, left to right), scaled to the box with
    0 at the bottom and the largest value at the top (all 0: a flat line at the bottom); "" with no value."""
    if not values:
        return ""
    top = max(max(float(v) for v in values), 0.0)
    step = (width - 2 * pad) / (len(values) - 1) if len(values) > 1 else 0
    points = []
    for n, value in enumerate(values):
        x = pad + step * n if len(values) > 1 else width / 2
        y = height - pad - ((float(value) / top) * (height - 2 * pad) if top > 0 else 0)
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)


def sparkline_svg(values: Sequence[float], *, title: str = "", width: int = SPARK_WIDTH,
                  height: int = SPARK_HEIGHT) -> str:
    """A tiny inline SVG of ``values`` (no script): a polyline, and a dot where one value alone has no line;
    ``title`` (escaped) is what a pointer or a screen reader reads."""
    points = sparkline_points(values, width=width, height=height)
    label = escape(title, quote=True)
    if not points:
        return ""
    mark = (f'<polyline fill="none" stroke="{TOTAL_COLOUR}" stroke-width="1.5" points="{points}"/>'
            if len(values) > 1 else
            f'<circle r="2" fill="{TOTAL_COLOUR}" cx="{points.split(",")[0]}" cy="{points.split(",")[1]}"/>')
    return (f'<svg class="sparkline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{label}"><title>{label}</title>{mark}</svg>')


def days_figure(bars: pd.DataFrame, *, text: BoardText | None = None, day_axis: str = "Business day") -> dict:
    """Stacked bars of card-hours per business day and state (``bars``:
    :attr:`boards.periods.summary.PeriodSummary.bars`), adding up to each day's capacity; a day still filling
    is hatched and says so on hover (as the daily board's timeline marks an hour)."""
    text = text or BoardText()
    layout = base_layout(barmode="stack", bargap=0.15, xaxis={"type": "category", "title": {"text": day_axis}},
                         yaxis={"title": {"text": text.card_hours_axis}, "rangemode": "tozero"})
    if bars.empty or not bars["capacity"].any():
        return {"data": [], "layout": with_note(layout, text.no_data)}
    days = [d.isoformat() for d in bars["day"]]
    return {"data": state_bars(bars, x=days, labels=days, text=text, role="days"), "layout": layout}
