"""The board's charts drawn from hand-made frames, without a database or a browser."""

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pandas as pd

from boards.charts import BANDS_OF_CODES, CODES, Z_MAX, Z_MIN, _scale, bands_figure, heatmap_figure
from boards.hours import HOUR_COLUMNS

START = datetime(2026, 11, 2, tzinfo=UTC)
H = 840_000 * 3600


def test_the_colour_scale_keeps_the_codes_apart_from_the_utilizations():
    scale = _scale()
    positions = [position for position, _colour in scale]
    assert positions == sorted(positions) and positions[0] == 0 and positions[-1] == 1
    for kind, code in CODES.items():
        lo, hi = BANDS_OF_CODES[kind]
        assert lo < code < hi < 0  # flat band below 0 %: never read as a utilization
    ticks = sorted([*CODES.values(), 0])
    assert min(b - a for a, b in pairwise(ticks)) >= 0.08 * (Z_MAX - Z_MIN)  # labels do not overlap


def row(label, node, hour, util=None, **ticks):
    values = {"busy": 0, "idle": 0, "unmeasured": 0, "other_teams": 0, "unallocated": 0, "down": 0, **ticks}
    return {"gpu_id": 1, "node": node, "label": label, "hour": START + timedelta(hours=hour), **values, "util": util,
            "teams": ["Team <A>"], "holders": ["job <1>"], "partial": False}


def test_the_heatmap_is_one_trace_grouped_by_node_with_escaped_hover():
    frame = pd.DataFrame([
        row("n1/0", "n1", 0, util=40.0, busy=H), row("n1/0", "n1", 1, unmeasured=H),
        row("n2/0", "n2", 0, down=H), row("n2/0", "n2", 1, util=2.0, idle=H // 2, unallocated=H // 2),
    ], columns=HOUR_COLUMNS)
    figure = heatmap_figure(frame)
    (trace,) = figure["data"]
    assert trace["z"] == [[40.0, CODES["unmeasured"]], [CODES["down"], 2.0]]  # a tie of measured and unallocated: measured
    assert "Team &lt;A&gt;" in trace["text"][0][0] and "job &lt;1&gt;" in trace["text"][0][0]
    assert [shape["y0"] for shape in figure["layout"]["shapes"]] == [0.5]  # one line between the two nodes


def test_the_bands_show_each_teams_share_on_hover():
    figure = bands_figure({1: [1, 0, 0, 0, 3], 2: [0, 0, 4, 0, 0]}, team_names={1: "Alpha", 2: "Beta"})
    (trace,) = figure["data"]
    assert trace["x"] == [12.5, 0.0, 50.0, 0.0, 37.5]
    assert "Alpha: 25.0 %" in trace["hovertext"][0] and "Beta: 100.0 %" in trace["hovertext"][2]
    assert bands_figure({}, team_names={})["data"] == []
