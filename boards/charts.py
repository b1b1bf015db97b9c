"""Plotly figure dicts for the daily board (issue 14): pure functions of the selectors' DataFrames, no ORM
and no request (STYLE.md 6). The view passes the words (already translated) and the display zone; the
page's ``static/js/charts.js`` hands the dicts to the local plotly.js with the page's locale.

Times go to plotly as wall-clock *strings* of the display zone (plotly reads a string as written, while
it would shift epoch milliseconds into the browser's zone)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from html import escape

import numpy as np
import pandas as pd

from accounting.usage.states import BUSY, DOWN, IDLE, UNALLOCATED, UNMEASURED
from boards.maths import (
    BANDS,
    CELL_KINDS,
    MEASURED,
    NODE_ROWS,
    OTHER_TEAMS,
    SERIES,
    band_label,
    band_shares,
    cell_kinds,
    total_bands,
)
from cluster.jobs.kpis import percent
from cluster.telemetry.charts import NO_DATA_COLOUR, UTIL_SCALE
from core.units import TICKS_PER_CARD_HOUR

COLOURS = {
    BUSY: "#2e9e5b", IDLE: "#f0a202", UNMEASURED: NO_DATA_COLOUR, OTHER_TEAMS: "#8da0cb",
    UNALLOCATED: "#eceef2", DOWN: "#b03a2e",
}
# The heatmap's one trace encodes what is not a utilization below 0 (its colour bar names them):
CODES = {UNMEASURED: -56, OTHER_TEAMS: -42, DOWN: -28, UNALLOCATED: -14}
BANDS_OF_CODES = {  # apart, so that their labels on the colour bar never overlap each other or "0 %"
    UNMEASURED: (-62, -50), OTHER_TEAMS: (-48, -36), DOWN: (-34, -22), UNALLOCATED: (-20, -8),
}
Z_MIN, Z_MAX = -62, 100
TIMELINE, HEATMAP, BANDS_CHART = "timeline", "heatmap", "bands"


@dataclass(frozen=True)
class BoardText:
    """Every word the board's charts show; the view passes translated ones (English defaults for tests)."""

    series: Mapping[str, str] = None  # series key → label
    card_hours_axis: str = "Card-hours"
    share_axis: str = "Share of allocated measured card-hours (%)"
    utilization: str = "Utilization"
    partial: str = "still filling"
    no_data: str = "No usage computed for this day yet"
    no_holder: str = "not held"
    teams_in_band: str = "By team"
    gpus: str = "GPUs"
    node_axis: str = "Node"
    pool_axis: str = "Pool"
    open_node: str = "Click: the node's GPUs"
    open_pool: str = "Click: the pool's nodes"

    def label(self, key: str) -> str:
        defaults = {BUSY: "Busy", IDLE: "Idle", UNMEASURED: "Unmeasured", OTHER_TEAMS: "Other teams",
                    UNALLOCATED: "Unallocated", DOWN: "Down"}
        return (self.series or {}).get(key, defaults[key])


def wall_clock(moment: datetime, zone: tzinfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")


def _hour_span(hour: datetime, day_end: datetime, zone: tzinfo) -> str:
    end = min(hour.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1), day_end)
    return f"{hour.astimezone(zone):%H:%M}–{end.astimezone(zone):%H:%M}"


def base_layout(**extra) -> dict:
    """The boards' chart layout (margins, a horizontal legend under the plot), with ``extra`` on top."""
    layout = {
        "margin": {"l": 56, "r": 16, "t": 16, "b": 40}, "hovermode": "closest", "showlegend": True,
        "legend": {"orientation": "h", "y": -0.18}, "shapes": [], "annotations": [],
    }
    layout.update(extra)
    return layout


def with_note(layout: dict, text: str) -> dict:
    """``layout`` with ``text`` written in the middle of the plot (an empty chart says why)."""
    layout["annotations"].append({"text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                  "showarrow": False, "font": {"size": 14, "color": "#5d6677"}})
    return layout


def timeline_figure(df: pd.DataFrame, *, day_bounds: tuple[datetime, datetime], zone: tzinfo = UTC,
                    text: BoardText = BoardText()) -> dict:
    """Stacked bars of card-hours per hour and series (``df``: :func:`boards.hours.timeline`), adding up to
    the capacity of each hour; an hour still filling is hatched and says so on hover."""
    start, end = day_bounds
    layout = base_layout(barmode="stack", bargap=0.08,
                     xaxis={"type": "date", "range": [wall_clock(start, zone), wall_clock(end, zone)], "tickformat": "%H:%M"},
                     yaxis={"title": {"text": text.card_hours_axis}, "rangemode": "tozero"})
    if df.empty:
        return {"data": [], "layout": with_note(layout, text.no_data)}
    hours = list(df["hour"])
    widths = [(min(h.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1), end) - h).total_seconds() * 1000
              for h in hours]
    x = [wall_clock(h + timedelta(milliseconds=w / 2), zone) for h, w in zip(hours, widths, strict=True)]
    data = state_bars(df, x=x, labels=[_hour_span(h, end, zone) for h in hours], text=text, role=TIMELINE,
                      width=[w * 0.92 for w in widths])
    return {"data": data, "layout": layout}


def state_bars(frame: pd.DataFrame, *, x: list, labels: list[str], text: BoardText, role: str,
               width: list | None = None) -> list[dict]:
    """One stacked bar trace per series of :data:`boards.maths.SERIES` (ticks per row of ``frame``, shown in
    card-hours; "other teams" only where it has any), a row still filling (``partial``) hatched and saying so
    on hover after its ``labels``."""
    partial = [bool(p) for p in frame["partial"]]
    data = []
    for key in SERIES:
        values = [round(int(v) / TICKS_PER_CARD_HOUR, 4) for v in frame[key]]
        if key == OTHER_TEAMS and not any(values):
            continue
        hover = [f"{label} · {text.label(key)} {v:.2f}" + (f" ({text.partial})" if p else "")
                 for label, v, p in zip(labels, values, partial, strict=True)]
        data.append({
            "type": "bar", "name": text.label(key), "x": x, "y": values, **({"width": width} if width else {}),
            "marker": {"color": COLOURS[key], "line": {"width": 0},
                       "pattern": {"shape": ["/" if p else "" for p in partial], "fgcolor": "#5d6677", "size": 6}},
            "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>", "meta": {"role": role, "series": key},
        })
    return data


@dataclass(frozen=True)
class HeatmapMatrix:
    """The heatmap's cells: a row per GPU (grouped by node, in the frame's order), a column per hour;
    ``kinds`` indexes :data:`boards.maths.CELL_KINDS` (-1: no row for that GPU-hour), ``util`` is NaN where
    nothing was measured; ``rows`` and ``cols`` place each of the frame's rows."""

    labels: list[str]
    nodes: list[str]
    hours: list[datetime]
    kinds: np.ndarray
    util: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    frame: pd.DataFrame

    def matrix(self, values, fill=None) -> list[list]:
        """``values`` (one per frame row) laid out as rows × hours, ``fill`` where a GPU-hour has no row."""
        out = [[fill] * len(self.hours) for _ in self.labels]
        for r, c, value in zip(self.rows.tolist(), self.cols.tolist(), values, strict=True):
            out[r][c] = value
        return out


def heatmap_matrix(df: pd.DataFrame) -> HeatmapMatrix:
    """The cells of ``df`` (:func:`boards.hours.day_hours`), kinds decided by :func:`boards.maths.cell_kinds`
    column-wise (24,000 GPU-hours at 1,000 GPUs)."""
    labels = pd.unique(df["label"]).tolist()
    hours = sorted(pd.unique(df["hour"]))
    rows = pd.Categorical(df["label"], categories=labels).codes
    cols = pd.Categorical(df["hour"], categories=hours).codes
    util = df["util"].to_numpy(dtype=float)
    kinds_of_rows = cell_kinds(*(df[key].to_numpy() for key in SERIES), ~np.isnan(util))
    kinds = np.full((len(labels), len(hours)), -1)
    kinds[rows, cols] = kinds_of_rows
    cell_util = np.full((len(labels), len(hours)), np.nan)
    cell_util[rows, cols] = util
    nodes = df.drop_duplicates("label")["node"].tolist()
    return HeatmapMatrix(labels=labels, nodes=nodes, hours=[pd.Timestamp(h).to_pydatetime() for h in hours],
                         kinds=kinds, util=cell_util, rows=rows, cols=cols, frame=df)


@dataclass(frozen=True)
class GroupMatrix(HeatmapMatrix):
    """The heatmap's cells at scale: a row per node or pool (``labels``, ``gpus`` GPUs each), a column per
    hour; ``shares`` each series' percentage of the row's card-hours in the hour (series × rows × hours, NaN
    where the group has no row for the hour)."""

    gpus: list[int] = ()
    shares: np.ndarray | None = None


def group_matrix(df: pd.DataFrame) -> GroupMatrix:
    """The cells of ``df`` (:func:`boards.hours.group_hours`). A cell's kind is :func:`boards.maths.cell_kinds`
    over its summed ticks, where busy and idle ticks of GPU-hours with no utilization count as unmeasured
    (as each of those GPU-hours' own cell would show them), so a node's colour means what a GPU's means."""
    labels = pd.unique(df["group"]).tolist()
    hours = sorted(pd.unique(df["hour"]))
    rows = pd.Categorical(df["group"], categories=labels).codes
    cols = pd.Categorical(df["hour"], categories=hours).codes
    ticks = np.stack([df[key].to_numpy(dtype=np.int64) for key in SERIES])
    util_ticks = df["util_ticks"].to_numpy(dtype=np.int64)
    busy, idle, unmeasured, other, unallocated, down = ticks
    kinds_of_rows = cell_kinds(util_ticks, 0, unmeasured + busy + idle - util_ticks, other, unallocated, down,
                               util_ticks > 0)
    kinds = np.full((len(labels), len(hours)), -1)
    kinds[rows, cols] = kinds_of_rows
    util = np.full((len(labels), len(hours)), np.nan)
    util[rows, cols] = df["util"].to_numpy(dtype=float)
    shares = np.full((len(SERIES), len(labels), len(hours)), np.nan)
    total = ticks.sum(axis=0)
    shares[:, rows, cols] = 100 * ticks / np.where(total > 0, total, 1)
    gpus = df.drop_duplicates("group")["gpus"].astype(int).tolist()
    return GroupMatrix(labels=labels, nodes=labels, hours=[pd.Timestamp(h).to_pydatetime() for h in hours], kinds=kinds,
                       util=util, rows=rows, cols=cols, frame=df, gpus=gpus, shares=shares)


def _holding_line(teams, holders, text: BoardText) -> str:
    """A heatmap cell's hover lines after the utilization: the holding teams, then up to three holders."""
    return "<br>" + escape(", ".join(teams) or text.no_holder, quote=False) + (
        "<br>" + "<br>".join(escape(h, quote=False) for h in holders[:3]) if holders else "")


def heatmap_figure(df: pd.DataFrame, *, zone: tzinfo = UTC, text: BoardText = BoardText()) -> dict:
    """One heatmap trace, a row per GPU (grouped by node) and a column per hour (``df``:
    :func:`boards.hours.day_hours`). A cell is the hour's mean utilization where the GPU was mostly
    allocated and measured; else unmeasured, another team's (under a team filter), unallocated or down,
    each its own colour below the utilization scale (:data:`CODES`), so an unmeasured hour never reads
    as 0 %. The hover names the GPU, the hour, the utilization or kind, the teams and the jobs."""
    if df.empty:
        layout = base_layout(xaxis={"type": "category"}, yaxis={})
        return {"data": [], "layout": with_note(layout, text.no_data)}
    cells = heatmap_matrix(df)
    z = np.where(cells.kinds == 0, np.round(cells.util, 1), np.nan)
    for position, kind in enumerate(CELL_KINDS[1:], start=1):
        z = np.where(cells.kinds == position, CODES[kind], z)
    kind_rows = cells.kinds[cells.rows, cells.cols]
    util_rows = cells.util[cells.rows, cells.cols]
    labels_of_kind = [text.label(kind) if kind != MEASURED else "" for kind in CELL_KINDS]
    partial = f" ({text.partial})"
    # GPU-hours share a few lists of teams and holders (boards.hours: one list object per distinct value), so
    # each holding line is written once per distinct pair of lists (found by the lists' identities; both stay
    # alive in ``df`` meanwhile) and each cell's hover is three joined strings.
    lines: list[str] = []  # the distinct holding lines
    line_of: dict[tuple[int, int], int] = {}
    which = []  # each row's line
    for teams, holders in zip(df["teams"].tolist(), df["holders"].tolist(), strict=True):
        key = (id(teams), id(holders))
        line = line_of.get(key)
        if line is None:
            line = line_of[key] = len(lines)
            lines.append(_holding_line(teams, holders, text))
        which.append(line)
    hover_rows = [
        (f"{text.utilization} {u:.1f} %" if k == 0 else labels_of_kind[k]) + lines[w] + (partial if p else "")
        for k, u, w, p in zip(kind_rows.tolist(), util_rows.tolist(), which, df["partial"].tolist(),
                              strict=True)
    ]
    labels = cells.labels
    shown = [key for key in (UNMEASURED, OTHER_TEAMS, DOWN, UNALLOCATED)
             if key != OTHER_TEAMS or (cells.kinds == CELL_KINDS.index(OTHER_TEAMS)).any()]
    trace = {
        "type": "heatmap", "x": [f"{h.astimezone(zone):%H:%M}" for h in cells.hours],
        "y": [escape(label, quote=False) for label in labels],
        "z": [[None if v != v else v for v in row] for row in z.tolist()],  # NaN → null: no row for that hour
        "text": cells.matrix(hover_rows, ""),
        "hovertemplate": "<b>%{y}</b> %{x}<br>%{text}<extra></extra>", "zmin": Z_MIN, "zmax": Z_MAX,
        "colorscale": _scale(), "xgap": 1, "ygap": 1 if len(labels) <= 120 else 0,
        "colorbar": {"thickness": 12, "tickvals": [CODES[key] for key in shown] + [0, 25, 50, 75, 100],
                     "ticktext": [text.label(key) for key in shown] + ["0 %", "25 %", "50 %", "75 %", "100 %"]},
        "meta": {"role": HEATMAP},
    }
    row_px = 18 if len(labels) <= 48 else max(4, 900 // len(labels))
    layout = base_layout(
        showlegend=False, height=max(240, 90 + row_px * len(labels)),
        xaxis={"type": "category", "showgrid": False},
        yaxis={"type": "category", "autorange": "reversed", "fixedrange": True, "showgrid": False,
               "showticklabels": len(labels) <= 120},
        plot_bgcolor=NO_DATA_COLOUR,
        margin={"l": 16 + 7 * max(len(label) for label in labels) if len(labels) <= 120 else 24, "r": 16, "t": 16, "b": 40},
    )
    nodes = cells.nodes
    for n in range(1, len(nodes)):
        if nodes[n] != nodes[n - 1]:  # a line between two nodes' rows
            layout["shapes"].append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": n - 0.5,
                                     "y1": n - 0.5, "line": {"color": "#ffffff", "width": 2}})
    return {"data": [trace], "layout": layout}


def group_heatmap_figure(df: pd.DataFrame, *, level: str, drill: Mapping[str, str], zone: tzinfo = UTC,
                         text: BoardText = BoardText()) -> dict:
    """The heatmap at scale (``level`` "node" or "pool"; ``df``: :func:`boards.hours.group_hours`): one trace,
    a row per node or pool and a column per hour, coloured as :func:`heatmap_figure` colours a GPU's hour
    (:func:`group_matrix`); the hover gives the share of the row's card-hours in each state and the teams
    holding its GPUs, never a job. ``drill`` maps a row's name to the address of its own board (a node's
    GPUs, a pool's nodes), which ``static/js/charts.js`` opens on a click (the trace's ``meta.drill``)."""
    axis_title = text.node_axis if level == NODE_ROWS else text.pool_axis
    if df.empty:
        layout = base_layout(xaxis={"type": "category"}, yaxis={"title": {"text": axis_title}})
        return {"data": [], "layout": with_note(layout, text.no_data)}
    cells = group_matrix(df)
    z = np.where(cells.kinds == 0, np.round(cells.util, 1), np.nan)
    for position, kind in enumerate(CELL_KINDS[1:], start=1):
        z = np.where(cells.kinds == position, CODES[kind], z)
    labels_of_kind = [text.label(kind) if kind != MEASURED else "" for kind in CELL_KINDS]
    opens = text.open_node if level == NODE_ROWS else text.open_pool
    hover = [["" for _h in cells.hours] for _r in cells.labels]
    teams_of = cells.matrix([", ".join(escape(t, quote=False) for t in teams[:3]) + (" …" if len(teams) > 3 else "")
                             for teams in df["teams"].tolist()], "")
    partial = cells.matrix([f" ({text.partial})" if p else "" for p in df["partial"].tolist()], "")
    shares = cells.shares
    gpus_of = [f"{escape(text.gpus, quote=False)}: {n}" for n in cells.gpus]
    for r, c in zip(cells.rows.tolist(), cells.cols.tolist(), strict=True):
        kind = int(cells.kinds[r, c])
        head = f"{text.utilization} {cells.util[r, c]:.1f} %" if kind == 0 else labels_of_kind[kind]
        parts = " · ".join(f"{text.label(key)} {shares[n, r, c]:.1f} %" for n, key in enumerate(SERIES)
                           if shares[n, r, c] > 0)
        hover[r][c] = (f"{gpus_of[r]}<br>{head}{partial[r][c]}<br>{parts}<br>{teams_of[r][c] or text.no_holder}"
                       f"<br><i>{escape(opens, quote=False)}</i>")
    rows = len(cells.labels)
    shown = [key for key in (UNMEASURED, OTHER_TEAMS, DOWN, UNALLOCATED)
             if key != OTHER_TEAMS or (cells.kinds == CELL_KINDS.index(OTHER_TEAMS)).any()]
    trace = {
        "type": "heatmap", "x": [f"{h.astimezone(zone):%H:%M}" for h in cells.hours],
        "y": [escape(label, quote=False) for label in cells.labels],
        "z": [[None if v != v else v for v in row] for row in z.tolist()], "text": hover,
        "hovertemplate": "<b>%{y}</b> %{x}<br>%{text}<extra></extra>", "zmin": Z_MIN, "zmax": Z_MAX,
        "colorscale": _scale(), "xgap": 1, "ygap": 1 if rows <= 120 else 0,
        "colorbar": {"thickness": 12, "tickvals": [CODES[key] for key in shown] + [0, 25, 50, 75, 100],
                     "ticktext": [text.label(key) for key in shown] + ["0 %", "25 %", "50 %", "75 %", "100 %"]},
        "meta": {"role": HEATMAP, "level": level, "drill": [drill.get(label) for label in cells.labels]},
    }
    row_px = 22 if rows <= 40 else max(4, 900 // rows)
    longest = max(len(y) for y in trace["y"])
    layout = base_layout(
        showlegend=False, height=max(240, 90 + row_px * rows),
        xaxis={"type": "category", "showgrid": False},
        yaxis={"type": "category", "autorange": "reversed", "fixedrange": True, "showgrid": False,
               "showticklabels": rows <= 120, "title": {"text": axis_title}},
        plot_bgcolor=NO_DATA_COLOUR,
        margin={"l": 40 + 7 * longest if rows <= 120 else 40, "r": 16, "t": 16, "b": 40},
    )
    return {"data": [trace], "layout": layout}


def _scale() -> list:
    """The colour scale over [Z_MIN, Z_MAX]: three flat bands for the codes, then the utilization scale."""
    span = Z_MAX - Z_MIN

    def at(z: float) -> float:
        return (z - Z_MIN) / span

    scale = []
    for kind, (lo, hi) in BANDS_OF_CODES.items():
        colour = COLOURS[kind] if kind != UNALLOCATED else "#ffffff"
        scale += [[at(lo), colour], [at(hi), colour]]
    scale += [[at(100 * position), colour] for position, colour in UTIL_SCALE]
    return scale


def bands_figure(per_team: Mapping[int | None, Sequence[int]], *, team_names: Mapping[int | None, str],
                 text: BoardText = BoardText()) -> dict:
    """The share of allocated measured card-hours in each utilization band (pooled by GPU-hours), one bar a
    band; the hover lists each team's share of its own hours in that band."""
    layout = base_layout(showlegend=False, xaxis={"title": {"text": text.share_axis}, "range": [0, 100]},
                     yaxis={"type": "category", "autorange": "reversed"}, margin={"l": 80, "r": 16, "t": 16, "b": 48})
    total = total_bands(per_team)
    if not any(total):
        return {"data": [], "layout": with_note(layout, text.no_data)}
    shares = [float(percent(s) or 0) for s in band_shares(total)]
    team_shares = {team: band_shares(ticks) for team, ticks in per_team.items()}
    hover = []
    for position, band in enumerate(BANDS):
        lines = [f"{escape(team_names.get(team) or '—', quote=False)}: {percent(shares_of[position]) or 0} %"
                 for team, shares_of in sorted(team_shares.items(), key=lambda item: team_names.get(item[0]) or "")]
        hover.append(f"<b>{band_label(band)}</b> {shares[position]:.1f} %<br>{text.teams_in_band}:<br>" + "<br>".join(lines))
    trace = {
        "type": "bar", "orientation": "h", "y": [band_label(b) for b in BANDS], "x": shares,
        "marker": {"color": [UTIL_SCALE[min(n, len(UTIL_SCALE) - 1)][1] for n in range(len(BANDS))],
                   "line": {"color": "#5d6677", "width": 1}},
        "hovertext": hover, "hovertemplate": "%{hovertext}<extra></extra>", "meta": {"role": BANDS_CHART},
        "text": [f"{s:.1f} %" for s in shares], "textposition": "auto",
    }
    return {"data": [trace], "layout": layout}

