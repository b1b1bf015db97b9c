"""The telemetry chart dicts, without a browser: traces per GPU, epoch-ms x, gaps, ranges, partial edge."""

import json
from zoneinfo import ZoneInfo

import pandas as pd
import pytest

from cluster.telemetry import charts
from cluster.telemetry.selectors import SERIES_COLUMNS
from core.timeutils import epoch_ms
from tests.conftest import T0

T0_MS = epoch_ms(T0)
MINUTE = charts.MINUTE_MS


def frame(rows):
    """rows: (gpu, minute offset from T0, util_mean, util_max, mem_used_max_mib, coverage)."""
    return pd.DataFrame(
        [(gpu, T0_MS + minute * MINUTE, mean, peak, mib, cov) for gpu, minute, mean, peak, mib, cov in rows],
        columns=SERIES_COLUMNS,
    )


def full(gpu, minutes, util=50.0, mib=2048):
    return [(gpu, m, util, util + 10, mib, 1.0) for m in minutes]


def lines(figure):
    return [t for t in figure["data"] if t["meta"]["role"] == charts.LINE]


def role(figure, name):
    return [t for t in figure["data"] if t["meta"]["role"] == name]


def test_it_draws_one_line_per_gpu_in_series_order():
    df = frame(full("GPU 0", range(3)) + full("GPU 1", range(3)) + full("GPU 1 · 1g.10gb", range(3)))
    figure = charts.utilization_figure(df, title="Utilization")
    assert [t["name"] for t in lines(figure)] == ["GPU 0", "GPU 1", "GPU 1 · 1g.10gb"]
    assert all(t["type"] == "scatter" and t["connectgaps"] is False for t in lines(figure))
    assert len({t["line"]["color"] for t in lines(figure)}) == 3
    assert figure["layout"]["title"]["text"] == "Utilization"


def test_x_values_are_epoch_milliseconds_on_a_date_axis():
    figure = charts.utilization_figure(frame(full("GPU 0", range(3))), title="u")
    (line,) = lines(figure)
    assert line["x"] == [T0_MS, T0_MS + MINUTE, T0_MS + 2 * MINUTE]
    assert all(isinstance(x, int) for x in line["x"])
    assert figure["layout"]["xaxis"]["type"] == "date"


def test_x_values_read_as_the_display_zones_wall_clock():
    shanghai = ZoneInfo("Asia/Shanghai")
    figure = charts.utilization_figure(
        frame(full("GPU 0", [0])), title="u", display_zone=shanghai, x_range_ms=(T0_MS, T0_MS + 86_400_000)
    )
    eight_hours = 8 * 3600 * 1000
    assert lines(figure)[0]["x"] == [T0_MS + eight_hours]
    assert figure["layout"]["xaxis"]["range"] == [T0_MS + eight_hours, T0_MS + 86_400_000 + eight_hours]


def test_a_missing_minute_breaks_the_line_with_none():
    df = frame(full("GPU 0", [0, 1, 5, 6]))
    (line,) = lines(charts.utilization_figure(df, title="u"))
    assert line["x"] == [T0_MS, T0_MS + MINUTE, T0_MS + 2 * MINUTE, T0_MS + 5 * MINUTE, T0_MS + 6 * MINUTE]
    assert line["y"] == [50.0, 50.0, None, 50.0, 50.0]


def test_a_null_utilization_is_none_never_nan():
    df = frame([("GPU 0 · 1g.10gb", 0, None, None, 1024, 1.0), ("GPU 0 · 1g.10gb", 1, float("nan"), None, None, 1.0)])
    figure = charts.utilization_figure(df, title="u")
    assert lines(figure)[0]["y"] == [None, None]
    json.dumps(figure, allow_nan=False)  # NaN would be invalid JSON for the browser's JSON.parse
    assert figure["layout"]["annotations"][0]["text"] == "No values reported for this day"


def test_utilization_is_fixed_at_0_to_100_and_memory_is_in_gib():
    df = frame(full("GPU 0", [0], mib=3 * 1024 + 512))
    util = charts.utilization_figure(df, title="u")
    assert util["layout"]["yaxis"]["range"] == [0, 100]
    assert util["layout"]["yaxis"]["fixedrange"] is True
    memory = charts.memory_figure(df, title="m", y_max_gib=140.4)
    assert lines(memory)[0]["y"] == [3.5]
    assert memory["layout"]["yaxis"]["range"] == [0, 140.4]
    assert "GiB" in lines(memory)[0]["hovertemplate"]


def test_partly_covered_minutes_show_their_coverage():
    df = frame([("GPU 0", 0, 40.0, 90.0, 1024, 1.0), ("GPU 0", 1, 20.0, 30.0, 1024, 0.25)])
    figure = charts.utilization_figure(df, title="u")
    (line,) = lines(figure)
    assert line["customdata"] == [[100.0, 90.0], [25.0, 30.0]]  # coverage %, peak %
    assert "coverage %{customdata[0]:.0f} %" in line["hovertemplate"]
    (marked,) = role(figure, charts.PARTLY_COVERED)
    assert marked["x"] == [T0_MS + MINUTE]
    assert marked["showlegend"] is False and marked["legendgroup"] == "GPU 0"


def test_the_still_filling_minute_is_dashed_and_shaded():
    df = frame([*full("GPU 0", [0, 1, 2]), ("GPU 0", 3, 70.0, 80.0, 1024, 0.5), *full("GPU 1", [0, 1])])
    figure = charts.utilization_figure(df, title="u", partial_after_ms=T0_MS + 3 * MINUTE)
    gpu0, gpu1 = lines(figure)
    assert gpu0["x"][-1] == T0_MS + 2 * MINUTE  # the solid line stops before the filling minute
    (filling,) = role(figure, charts.STILL_FILLING)
    assert filling["line"]["dash"] == "dot"
    assert filling["line"]["color"] == gpu0["line"]["color"]
    assert filling["x"] == [T0_MS + 2 * MINUTE, T0_MS + 3 * MINUTE]  # joined to the solid line
    assert filling["y"] == [50.0, 70.0]
    assert role(figure, charts.PARTLY_COVERED) == []  # a filling minute is partial by nature, not flagged
    (band,) = figure["layout"]["shapes"]
    assert (band["x0"], band["x1"]) == (T0_MS + 3 * MINUTE, T0_MS + 4 * MINUTE)
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["still filling"]
    assert gpu1["x"] == [T0_MS, T0_MS + MINUTE]


def test_no_filling_marker_when_every_minute_is_complete():
    figure = charts.memory_figure(frame(full("GPU 0", [0, 1])), title="m", partial_after_ms=T0_MS + 10 * MINUTE)
    assert role(figure, charts.STILL_FILLING) == []
    assert figure["layout"]["shapes"] == []


@pytest.mark.parametrize("build", [charts.utilization_figure, charts.memory_figure])
def test_an_empty_day_says_so_in_the_words_given(build):
    empty = frame([])
    text = charts.ChartText(empty="当天没有样本")
    figure = build(empty, title="t", text=text, x_range_ms=(T0_MS, T0_MS + 86_400_000))
    assert figure["data"] == []
    (note,) = figure["layout"]["annotations"]
    assert note["text"] == "当天没有样本"
    assert figure["layout"]["xaxis"]["range"] == [T0_MS, T0_MS + 86_400_000]
    json.dumps(figure, allow_nan=False)


def test_gpu_labels_are_escaped_for_plotlys_pseudo_html():
    figure = charts.utilization_figure(frame(full("GPU 0 · <b>x</b>", [0])), title="u")
    assert lines(figure)[0]["name"] == "GPU 0 · &lt;b&gt;x&lt;/b&gt;"


def test_a_day_of_minutes_for_eight_gpus_stays_small():
    df = frame([rec for gpu in range(8) for rec in full(f"GPU {gpu}", range(1440))])
    payload = json.dumps(charts.utilization_figure(df, title="u"), allow_nan=False)
    assert len(payload) < 1_000_000
