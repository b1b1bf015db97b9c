"""The threshold backtest's charts (issue 19), pure functions of the report (no ORM, STYLE.md 6): the GPUs each rule
set would have held over time beside what was actually held and the demand, and the per-rule-set figures as bars.

A month of minutes is 44,640 points a line: the lines are sent as their change points only (a step line,
``shape: hv``; a rule's GPUs change at its scale events alone), and a line that still has more than
:data:`MAX_POINTS` is reduced to the peak of each span of minutes (the peaks are what a capacity chart must not
hide). Times are epoch milliseconds whose UTC reading is the display zone's wall clock (STYLE.md 6)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

import numpy as np

from boards.charts import base_layout, with_note
from cluster.telemetry.charts import wall_clock_ms
from core.timeutils import epoch_ms

MAX_POINTS = 3000
ACTUAL_COLOUR, DEMAND_COLOUR = "#1f3b73", "#b03a2e"
RULE_COLOURS = ("#2e9e5b", "#f0a202", "#8da0cb", "#e78ac3")


@dataclass(frozen=True)
class BacktestText:
    """Every word the charts show (English defaults for tests; the view passes them translated)."""

    gpus_axis: str = "GPUs"
    actual: str = "Actually held"
    demand: str = "Demand (in use + queued)"
    no_data: str = "No recorded minutes in this period"
    saved: str = "Card-hours saved"
    under: str = "Hours under-provisioned"
    events: str = "Scale events"
    longest_cut: str = "Longest cut (minutes)"


def step_points(values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(minute indexes, values) of a step line through ``values``: where it changes, and its last minute; with more
    than ``max_points`` changes, each span of minutes reduced to its peak."""
    values = np.asarray(values)
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64), values
    changes = np.flatnonzero(np.diff(values)) + 1
    index = np.concatenate(([0], changes, [n - 1])) if n > 1 else np.array([0])
    if len(index) > max_points:
        width = -(-n // max_points)
        padded = np.concatenate((values, np.full(-n % width, values[-1])))
        peaks = padded.reshape(-1, width).max(axis=1)
        return np.arange(len(peaks)) * width, peaks
    return index, values[index]


def _x(start: datetime, minutes: np.ndarray, zone: tzinfo) -> list[int]:
    base = epoch_ms(start)
    # the zone's offset can change within the period (daylight saving): converted point by point
    return [wall_clock_ms(base + int(m) * 60_000, zone) for m in minutes]


def _line(name: str, start: datetime, values, zone: tzinfo, *, colour: str, dash: str | None = None,
          width: int = 2, role: str) -> dict:
    minutes, ys = step_points(values)
    line = {"color": colour, "shape": "hv", "width": width}
    if dash:
        line["dash"] = dash
    return {"type": "scatter", "mode": "lines", "name": name, "x": _x(start, minutes, zone),
            "y": [int(y) for y in ys], "line": line, "meta": {"role": role}}


def held_figure(*, start: datetime, end: datetime, actual, demand, rules: Sequence[tuple[str, Sequence[int]]],
                zone: tzinfo = UTC, text: BacktestText = BacktestText()) -> dict:
    """Step lines of GPUs over time: actually held, demand (dashed), and each rule set's GPUs."""
    layout = base_layout(hovermode="x unified",
                         xaxis={"type": "date", "range": [wall_clock_ms(epoch_ms(start), zone),
                                                          wall_clock_ms(epoch_ms(end), zone)]},
                         yaxis={"title": {"text": text.gpus_axis}, "rangemode": "tozero"})
    if len(actual) == 0 or not (np.any(actual) or np.any(demand)):
        return {"data": [], "layout": with_note(layout, text.no_data)}
    data = [_line(text.actual, start, actual, zone, colour=ACTUAL_COLOUR, width=3, role="actual"),
            _line(text.demand, start, demand, zone, colour=DEMAND_COLOUR, dash="dot", role="demand")]
    for index, (name, gpus) in enumerate(rules):
        data.append(_line(name, start, np.asarray(gpus), zone, colour=RULE_COLOURS[index % len(RULE_COLOURS)],
                          role="rule"))
    return {"data": data, "layout": layout}


def figures_figure(columns: Sequence[tuple[str, float, float, int, int]], *, text: BacktestText = BacktestText()) -> dict:
    """Four small bar charts side by side, one bar per rule set (``columns``: name, card-hours saved, hours
    under-provisioned, scale events, longest cut in minutes)."""
    titles = (text.saved, text.under, text.events, text.longest_cut)
    layout = base_layout(grid={"rows": 1, "columns": 4, "pattern": "independent"}, showlegend=False,
                         margin={"l": 48, "r": 16, "t": 36, "b": 64})
    data = []
    for panel, title in enumerate(titles, start=1):
        suffix = "" if panel == 1 else str(panel)
        data.append({"type": "bar", "name": title, "x": [c[0] for c in columns],
                     "y": [float(c[panel]) for c in columns], "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                     "marker": {"color": [RULE_COLOURS[i % len(RULE_COLOURS)] for i in range(len(columns))]},
                     "hovertemplate": f"%{{x}}<br>{title}: %{{y}}<extra></extra>"})
        layout["annotations"].append({"text": title, "xref": f"x{suffix} domain", "yref": f"y{suffix} domain",
                                      "x": 0.5, "y": 1.12, "showarrow": False, "font": {"size": 13}})
        layout[f"yaxis{suffix}"] = {"rangemode": "tozero", "zeroline": True}
    return {"data": data, "layout": layout}
