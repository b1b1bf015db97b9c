"""Plotly figure dicts for the telemetry charts: pure functions of tidy DataFrames (STYLE.md 6).

No ORM and no request here: the selector gives the rows, the view gives the words (already
translated) and the zone to draw in, and ``static/js/charts.js`` hands the dict to plotly.js.

The line charts' series come as true epoch milliseconds. plotly.js draws a date axis without any zone,
so their x values are the epoch milliseconds of the *display zone's wall clock* (with
``display_zone=UTC``, the bucket times themselves); gaps and the still-filling edge are decided on true
time first, then shifted. The heatmaps (GPU × time bucket, one trace over a matrix) send their few
columns as wall-clock *strings*: plotly.js reads a string as written, but epoch ms in the browser's zone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from html import escape

import pandas as pd
from django.utils.translation import gettext

MINUTE_MS = 60_000
MIB_PER_GIB = 1024
# plotly's default colourway, fixed here so a GPU's dashed and marker traces share its line's colour.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)
MUTED = "#5d6677"

# What each trace is, in its ``meta``: tests and the page's JS can tell them apart without names.
LINE, STILL_FILLING, PARTLY_COVERED, HEATMAP = "line", "still_filling", "partly_covered", "heatmap"


@dataclass(frozen=True)
class ChartText:
    """Every word a chart shows; the view passes translated ones (English defaults for tests)."""

    empty: str = "No samples for this day"
    no_values: str = "No values reported for this day"
    utilization_axis: str = "Utilization (%)"
    memory_axis: str = "Memory used (GiB)"
    gib: str = "GiB"
    peak: str = "max"
    coverage: str = "coverage"
    still_filling: str = "still filling"
    partly_covered: str = "partly covered minute"
    no_data: str = "no data"
    minutes_measured: str = "min measured"


@dataclass(frozen=True)
class _Measure:
    column: str
    divisor: float
    decimals: int
    hover: str  # hovertemplate for the line trace; customdata = [coverage %, peak]


def utilization_figure(
    df: pd.DataFrame, *, title: str, partial_after_ms: int | None = None,
    x_range_ms: tuple[int, int] | None = None, display_zone: tzinfo = UTC, text: ChartText = ChartText(),
) -> dict:
    """Mean utilization per GPU and minute, one line per GPU, y fixed at 0–100 %.

    ``df``: rows of :func:`cluster.telemetry.selectors.node_day_series`. Minutes at or after
    ``partial_after_ms`` (true epoch ms) are still filling and drawn dashed under a shaded band."""
    measure = _Measure(
        "util_mean", 1, 1,
        f"%{{y:.1f}} % · {text.peak} %{{customdata[1]:.0f}} %<br>{text.coverage} %{{customdata[0]:.0f}} %",
    )
    return _figure(
        df, measure, title=title, y_axis={"title": {"text": text.utilization_axis}, "range": [0, 100]},
        peak_column="util_max", partial_after_ms=partial_after_ms, x_range_ms=x_range_ms,
        display_zone=display_zone, text=text,
    )


IDLE_THRESHOLD = "idle_threshold"


def job_utilization_figure(
    df: pd.DataFrame, *, title: str, idle_threshold_pct: float, threshold_label: str,
    run_ms: tuple[int, int] | None = None, partial_after_ms: int | None = None, display_zone: tzinfo = UTC,
    text: ChartText = ChartText(),
) -> dict:
    """A job's GPUs' mean utilization per minute over its run (``run_ms``, true epoch ms), as
    :func:`utilization_figure` draws it, with the idle threshold as a dashed line: allocated minutes
    below it count idle (DESIGN.md §4). ``df``: rows of :func:`cluster.jobs.selectors.job_usage`."""
    figure = utilization_figure(
        df, title=title, partial_after_ms=partial_after_ms, x_range_ms=run_ms, display_zone=display_zone, text=text,
    )
    layout = figure["layout"]
    line = {
        "type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": idle_threshold_pct,
        "y1": idle_threshold_pct, "line": {"color": MUTED, "width": 1, "dash": "dash"}, "layer": "below",
        "name": IDLE_THRESHOLD,
    }
    label = {
        "text": threshold_label, "xref": "paper", "yref": "y", "x": 0, "y": idle_threshold_pct, "xanchor": "left",
        "yanchor": "bottom", "showarrow": False, "font": {"size": 11, "color": MUTED},
    }
    return {
        "data": figure["data"],
        "layout": {**layout, "shapes": [*layout["shapes"], line], "annotations": [*layout["annotations"], label]},
    }


def wall_clock_ms(epoch_ms: int, zone: tzinfo) -> int:
    """The epoch ms whose UTC reading is the wall-clock time of ``epoch_ms`` in ``zone``."""
    offset = datetime.fromtimestamp(epoch_ms / 1000, zone).utcoffset()
    return epoch_ms + int(offset.total_seconds() * 1000) if offset else epoch_ms


def _figure(
    df, measure: _Measure, *, title, y_axis, peak_column, partial_after_ms, x_range_ms, display_zone, text,
) -> dict:
    layout = _layout(title, y_axis, x_range_ms, display_zone)
    if df.empty:
        return {"data": [], "layout": _with_note(layout, text.empty)}
    data, filling_until = [], None
    for position, (label, rows) in enumerate(df.groupby("gpu", sort=False)):
        series = _series(rows, measure, peak_column, partial_after_ms, display_zone)
        colour = PALETTE[position % len(PALETTE)]
        data.extend(_traces(escape(str(label), quote=False), colour, series, measure, text))
        if series.filling:
            filling_until = max(filling_until or 0, series.filling[-1][0] + MINUTE_MS)
    if not any(y is not None for trace in data for y in trace["y"]):
        layout = _with_note(layout, text.no_values)
    if filling_until is not None:
        layout = _with_filling_band(layout, wall_clock_ms(partial_after_ms, display_zone), filling_until, text)
    return {"data": data, "layout": layout}


@dataclass
class _Series:
    """One GPU's points as (x wall-clock ms, y, customdata); a gap is a point with y None."""

    done: list
    filling: list
    partly_covered: list


def _series(rows: pd.DataFrame, measure: _Measure, peak_column, partial_after_ms, zone) -> _Series:
    ms = rows["bucket_ms"].to_list()
    values = rows[measure.column].to_list()
    coverage = rows["coverage"].to_list()
    peaks = rows[peak_column].to_list() if peak_column else [None] * len(ms)
    series = _Series([], [], [])
    previous = None
    for bucket, value, covered, peak in zip(ms, values, coverage, peaks, strict=True):
        target = series.done if partial_after_ms is None or bucket < partial_after_ms else series.filling
        if previous is not None and bucket - previous > MINUTE_MS:
            # A minute with no rollup: a None point breaks the line (plotly's connectgaps is off).
            target.append((wall_clock_ms(previous + MINUTE_MS, zone), None, None))
        y = _number(value, measure.divisor, measure.decimals)
        custom = [_number(covered * 100, 1, 0), _number(peak, 1, 0)]
        point = (wall_clock_ms(int(bucket), zone), y, custom)
        target.append(point)
        if covered < 1 and y is not None and target is series.done:
            series.partly_covered.append(point)  # a still-filling minute is partial by nature: not flagged
        previous = bucket
    if series.done and series.filling and series.filling[0][1] is not None and series.done[-1][1] is not None:
        series.filling.insert(0, series.done[-1])  # the dashed segment starts where the solid line ends
    return series


def _traces(name: str, colour: str, series: _Series, measure: _Measure, text: ChartText) -> list[dict]:
    line = {
        "type": "scatter", "mode": "lines", "name": name, "legendgroup": name, "connectgaps": False,
        "line": {"color": colour, "width": 1.5}, "hovertemplate": measure.hover, "meta": {"role": LINE},
        **_columns(series.done),
    }
    traces = [line]
    if series.filling:
        traces.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{name} · {text.still_filling}",
            "legendgroup": name, "showlegend": False, "connectgaps": False,
            "line": {"color": colour, "width": 1.5, "dash": "dot"}, "marker": {"size": 4, "color": colour},
            "hovertemplate": f"{measure.hover}<br>{text.still_filling}", "meta": {"role": STILL_FILLING},
            **_columns(series.filling),
        })
    if series.partly_covered:
        traces.append({
            "type": "scatter", "mode": "markers", "name": f"{name} · {text.partly_covered}",
            "legendgroup": name, "showlegend": False, "hoverinfo": "skip",
            "marker": {"symbol": "circle-open", "size": 6, "color": colour}, "meta": {"role": PARTLY_COVERED},
            **_columns(series.partly_covered),
        })
    return traces


def _columns(points: Sequence[tuple]) -> dict:
    return {
        "x": [x for x, _y, _c in points],
        "y": [y for _x, y, _c in points],
        "customdata": [c for _x, _y, c in points],
    }


def _number(value, divisor: float, decimals: int) -> float | None:
    """A JSON-safe rounded float: NaN and None (no value) become None, never NaN (invalid JSON)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return round(float(value) / divisor, decimals)


def _layout(title: str, y_axis: dict, x_range_ms, zone) -> dict:
    x_axis = {"type": "date", "showgrid": True}
    if x_range_ms is not None:
        x_axis["range"] = [wall_clock_ms(x_range_ms[0], zone), wall_clock_ms(x_range_ms[1], zone)]
    return {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": x_axis,
        "yaxis": {**y_axis, "fixedrange": True},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.18},
        "margin": {"l": 56, "r": 16, "t": 40, "b": 40},
        "height": 320,
        "showlegend": True,
        "shapes": [],
        "annotations": [],
    }


def _with_note(layout: dict, note: str) -> dict:
    annotation = {
        "text": note, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
        "font": {"size": 14, "color": MUTED},
    }
    return {**layout, "annotations": [*layout["annotations"], annotation]}


def _with_filling_band(layout: dict, x0, end, text: ChartText, layer: str = "below") -> dict:
    """Shade the still-filling minutes (STYLE.md 6: a partial last bucket is marked as partial)."""
    band = {
        "type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": end, "y0": 0, "y1": 1,
        "fillcolor": MUTED, "opacity": 0.12, "line": {"width": 0}, "layer": layer,
        "name": STILL_FILLING,
    }
    label = {
        "text": text.still_filling, "xref": "x", "yref": "paper", "x": end, "y": 1, "xanchor": "right",
        "yanchor": "bottom", "showarrow": False, "font": {"size": 11, "color": MUTED},
    }
    return {**layout, "shapes": [*layout["shapes"], band], "annotations": [*layout["annotations"], label]}


# --- the node page's heatmaps: GPU × time bucket ------------------------------------------------------

NO_DATA_COLOUR = "#c9ced8"  # the plot's background: a cell without a measurement shows it, never 0 %'s colour
UTIL_SCALE = [[0, "#fff8d2"], [0.25, "#c2e5b0"], [0.5, "#4db8c2"], [0.75, "#2563a8"], [1, "#0d2a7a"]]
MEMORY_SCALE = [[0, "#f6f2fa"], [0.5, "#9e86c8"], [1, "#4a1f8a"]]


@dataclass(frozen=True)
class _Cells:
    column: str
    how: str  # the pandas aggregation of a bucket's minutes: "mean" or "max"
    divisor: float
    unit: str
    scale: list
    z_max: float
    axis: str  # the colour bar's title


def utilization_heatmap(df: pd.DataFrame, *, title: str, text: ChartText = ChartText(), **options) -> dict:
    """One heatmap trace: a row per GPU (``rows`` in order, then any other ``gpu`` of ``df``), a column per
    ``bucket_minutes`` of the day ``day_ms`` (true epoch ms) up to ``until_ms`` (now); a cell is the mean of
    its minutes' ``util_mean`` that have one. A bucket with none is None: drawn as the grey background with
    "no data" on hover, never as 0 %. ``df``: rows of :func:`cluster.telemetry.selectors.node_day_series`;
    ``options``: those of :func:`_heatmap`."""
    cells = _Cells("util_mean", "mean", 1, "%", UTIL_SCALE, 100, text.utilization_axis)
    return _heatmap(df, cells, title=title, text=text, **options)


def memory_heatmap(
    df: pd.DataFrame, *, title: str, y_max_gib: float, text: ChartText = ChartText(), **options
) -> dict:
    """As :func:`utilization_heatmap`, a cell being the peak memory used (GiB) of its minutes, coloured from
    0 to ``y_max_gib`` (the largest GPU's memory)."""
    cells = _Cells("mem_used_max_mib", "max", MIB_PER_GIB, text.gib, MEMORY_SCALE, round(y_max_gib, 1), text.memory_axis)
    return _heatmap(df, cells, title=title, text=text, **options)


def bucket_matrix(
    df: pd.DataFrame, column: str, how: str, *, rows: Sequence[str], start_ms: int, columns: int, step_ms: int,
) -> tuple[list[list[float | None]], list[list[int]]]:
    """(values, minutes with a value): ``rows`` × ``columns`` matrices; bucket ``c`` is the minutes whose
    start lies in ``[start_ms + c·step_ms, start_ms + (c + 1)·step_ms)``. A bucket without values is None."""
    values = [[None] * columns for _row in rows]
    counts = [[0] * columns for _row in rows]
    measured = df[df[column].notna() & df["gpu"].isin(rows)]
    col = (measured["bucket_ms"] - start_ms) // step_ms
    measured = measured[(col >= 0) & (col < columns)]
    if measured.empty:
        return values, counts
    grouped = measured[column].groupby([measured["gpu"], col[measured.index]]).agg([how, "count"])
    row_of = {label: position for position, label in enumerate(rows)}
    for (gpu, bucket), value, count in zip(grouped.index, grouped[how], grouped["count"], strict=True):
        values[row_of[gpu]][int(bucket)] = float(value)
        counts[row_of[gpu]][int(bucket)] = int(count)
    return values, counts


def wall_clock_text(epoch_ms: int, zone: tzinfo) -> str:
    """``2026-11-02 10:05:00``: the wall-clock time of ``epoch_ms`` in ``zone``, as plotly reads a date."""
    return datetime.fromtimestamp(epoch_ms / 1000, zone).strftime("%Y-%m-%d %H:%M:%S")


def _heatmap(
    df, cells: _Cells, *, title: str, text: ChartText, day_ms: tuple[int, int], rows: Sequence[str] = (),
    until_ms: int | None = None, partial_after_ms: int | None = None, bucket_minutes: int = 10,
    display_zone: tzinfo = UTC,
) -> dict:
    (start, end), zone = day_ms, display_zone
    step = bucket_minutes * MINUTE_MS
    until = end if until_ms is None else max(start, min(end, until_ms))
    columns = -(-(until - start) // step)
    labels = list(dict.fromkeys([*rows, *df["gpu"].unique().tolist()]))
    layout = _heatmap_layout(title, wall_clock_text(start, zone), wall_clock_text(end, zone), labels)
    if df.empty:
        return {"data": [], "layout": _with_note(layout, text.empty)}
    values, counts = bucket_matrix(df, cells.column, cells.how, rows=labels, start_ms=start, columns=columns, step_ms=step)
    z = [[_number(v, cells.divisor, 1) for v in row] for row in values]
    spans = [_span(start + c * step, min(start + (c + 1) * step, end), zone) for c in range(columns)]
    filling = [partial_after_ms is not None and start + (c + 1) * step > partial_after_ms for c in range(columns)]
    hover = [  # one string a cell: plotly's hover cannot say "no data" for a gap or show a bucket's start
        [
            f"{spans[c]} " + (f"{value:.1f} {cells.unit} ({count}/{bucket_minutes} {text.minutes_measured})" if value is not None else text.no_data)
            + (f" {text.still_filling}" if filling[c] else "")
            for c, (value, count) in enumerate(zip(row, count_row, strict=True))
        ]
        for row, count_row in zip(z, counts, strict=True)
    ]
    trace = {
        "type": "heatmap", "x": [wall_clock_text(start + c * step + step // 2, zone) for c in range(columns)],
        "y": [escape(label, quote=False) for label in labels], "z": z, "text": hover,
        "hovertemplate": "%{y}<br>%{text}<extra></extra>", "hoverongaps": True, "zmin": 0, "zmax": cells.z_max,
        "colorscale": cells.scale, "ygap": 1, "colorbar": {"title": {"text": cells.axis, "side": "right"}, "thickness": 12},
        "meta": {"role": HEATMAP},
    }
    if not any(v is not None for row in z for v in row):
        layout = _with_note(layout, text.no_values)
    if until < end:  # the rest of today is not a lack of data: drawn blank, not grey
        layout["shapes"].append({
            "type": "rect", "xref": "x", "yref": "paper", "x0": wall_clock_text(until, zone), "y0": 0, "y1": 1,
            "x1": wall_clock_text(end, zone), "fillcolor": "#ffffff", "line": {"width": 0}, "layer": "below",
        })
    first_filling = next((c for c, flag in enumerate(filling) if flag), None)
    if first_filling is not None:
        x0, x1 = wall_clock_text(start + first_filling * step, zone), wall_clock_text(until, zone)
        layout = _with_filling_band(layout, x0, x1, text, layer="above")  # over the cells, not under them
    return {"data": [trace], "layout": layout}


def _span(lo_ms: int, hi_ms: int, zone: tzinfo) -> str:
    return "–".join(f"{datetime.fromtimestamp(ms / 1000, zone):%H:%M}" for ms in (lo_ms, hi_ms))


def _heatmap_layout(title: str, x0: str, x1: str, labels: Sequence[str]) -> dict:
    return {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": {"type": "date", "range": [x0, x1], "tickformat": "%H:%M", "showgrid": False},
        "yaxis": {"type": "category", "autorange": "reversed", "fixedrange": True, "showgrid": False},
        "plot_bgcolor": NO_DATA_COLOUR,
        # Room for the longest row label (plotly's automargin would draw the figure twice: half its time).
        "margin": {"l": 16 + 7 * max((len(label) for label in labels), default=6), "r": 16, "t": 40, "b": 40},
        "height": max(200, 110 + 22 * len(labels)),  # 22 px a row, whatever the GPU count
        "shapes": [],
        "annotations": [],
    }


def chart_text(*, empty: str | None = None, no_values: str | None = None) -> ChartText:
    """The chart words in the request's language; ``empty``/``no_values`` for what a page charts."""
    return ChartText(
        empty=empty or gettext("No samples for this day"),
        no_values=no_values or gettext("No values reported for this day"),
        utilization_axis=gettext("Utilization (%)"),
        memory_axis=gettext("Memory used (GiB)"),
        gib=gettext("GiB"),
        peak=gettext("max"),
        coverage=gettext("coverage"),
        still_filling=gettext("still filling"),
        partly_covered=gettext("partly covered minute"),
        no_data=gettext("no data"),
        minutes_measured=gettext("min measured"),
    )
