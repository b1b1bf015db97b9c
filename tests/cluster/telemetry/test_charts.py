"""The telemetry chart dicts, without a browser: the line charts (traces per GPU, epoch-ms x, gaps, ranges,
partial edge) and the node page's GPU × time heatmaps (cells, no data, rows, wall-clock columns)."""

import json
from zoneinfo import ZoneInfo

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_utilization_is_fixed_at_0_to_100():
    util = charts.utilization_figure(frame(full("GPU 0", [0])), title="u")
    assert util["layout"]["yaxis"]["range"] == [0, 100]
    assert util["layout"]["yaxis"]["fixedrange"] is True


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
    figure = charts.utilization_figure(frame(full("GPU 0", [0, 1])), title="m", partial_after_ms=T0_MS + 10 * MINUTE)
    assert role(figure, charts.STILL_FILLING) == []
    assert figure["layout"]["shapes"] == []


def test_an_empty_day_says_so_in_the_words_given():
    empty = frame([])
    text = charts.ChartText(empty="当天没有样本")
    figure = charts.utilization_figure(empty, title="t", text=text, x_range_ms=(T0_MS, T0_MS + 86_400_000))
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


# --- the node page's heatmaps -------------------------------------------------------------------------

DAY_MS = (T0_MS, T0_MS + 86_400_000)
BUCKET = 10 * MINUTE


def heat(figure):
    (trace,) = figure["data"]
    assert trace["type"] == "heatmap" and trace["meta"]["role"] == charts.HEATMAP
    return trace


def test_a_cell_is_the_mean_of_its_minutes_and_an_empty_bucket_is_none_not_zero():
    rows = [("GPU 0", m, float(10 * m), 100.0, 1024, 1.0) for m in range(10)]  # bucket 0: 0, 10, … 90
    rows += [("GPU 0", 20, 30.0, 40.0, 1024, 1.0), ("GPU 0", 23, 60.0, 70.0, 1024, 0.5)]  # bucket 2
    rows += [("GPU 0", 31, None, None, 1024, 1.0)]  # bucket 3: a minute without a utilization
    figure = charts.utilization_heatmap(frame(rows), title="u", day_ms=DAY_MS, until_ms=T0_MS + 5 * BUCKET)
    trace = heat(figure)
    assert trace["z"] == [[45.0, None, 45.0, None, None]]
    assert trace["text"][0][0] == "00:00–00:10 45.0 % (10/10 min measured)"
    assert trace["text"][0][2] == "00:20–00:30 45.0 % (2/10 min measured)"
    assert trace["text"][0][1] == "00:10–00:20 no data"
    assert trace["text"][0][3] == "00:30–00:40 no data"  # a minute without a utilization is not 0 %
    assert trace["hoverongaps"] is True and trace["zmin"] == 0 and trace["zmax"] == 100
    assert figure["layout"]["plot_bgcolor"] == charts.NO_DATA_COLOUR  # what a None cell shows
    assert charts.NO_DATA_COLOUR not in {colour for _stop, colour in trace["colorscale"]}
    json.dumps(figure, allow_nan=False)


def test_rows_come_in_the_order_given_with_a_row_for_a_gpu_without_minutes():
    df = frame(full("GPU 1", [0]) + full("GPU 0 · 1g.10gb", [0]) + full("GPU 9", [0]))
    trace = heat(charts.utilization_heatmap(
        df, title="u", day_ms=DAY_MS, rows=["GPU 0", "GPU 0 · 1g.10gb", "GPU 1"], until_ms=T0_MS + BUCKET,
    ))
    assert trace["y"] == ["GPU 0", "GPU 0 · 1g.10gb", "GPU 1", "GPU 9"]  # unknown labels go last
    assert trace["z"] == [[None], [50.0], [50.0], [50.0]]
    assert len(trace["y"]) == len(trace["z"])


def test_columns_are_the_buckets_of_the_day_in_wall_clock_strings():
    shanghai = ZoneInfo("Asia/Shanghai")
    day = (T0_MS - 8 * 3_600_000, T0_MS + 16 * 3_600_000)  # 2 November in Shanghai
    figure = charts.utilization_heatmap(frame(full("GPU 0", [0])), title="u", day_ms=day, display_zone=shanghai)
    trace = heat(figure)
    assert len(trace["x"]) == 144 and len(trace["z"][0]) == 144
    assert trace["x"][:2] == ["2026-11-02 00:05:00", "2026-11-02 00:15:00"]  # bucket centres
    assert figure["layout"]["xaxis"]["range"] == ["2026-11-02 00:00:00", "2026-11-03 00:00:00"]
    assert figure["layout"]["xaxis"]["tickformat"] == "%H:%M"
    assert trace["z"][0][48] == 50.0  # T0 is 08:00 in Shanghai: the 49th bucket
    assert trace["text"][0][48].startswith("08:00–08:10 ")


def test_today_stops_at_now_and_the_rest_of_the_day_is_blank_not_grey():
    figure = charts.utilization_heatmap(
        frame(full("GPU 0", range(25))), title="u", day_ms=DAY_MS, until_ms=T0_MS + 25 * MINUTE,
    )
    assert len(heat(figure)["x"]) == 3  # 00:00, 00:10 and the current 00:20
    (blank,) = figure["layout"]["shapes"]
    assert (blank["x0"], blank["x1"], blank["fillcolor"]) == ("2026-11-02 00:25:00", "2026-11-03 00:00:00", "#ffffff")


def test_still_filling_buckets_are_shaded_over_the_cells_and_say_so():
    figure = charts.utilization_heatmap(
        frame(full("GPU 0", range(25))), title="u", day_ms=DAY_MS, until_ms=T0_MS + 25 * MINUTE,
        partial_after_ms=T0_MS + 14 * MINUTE,
    )
    trace = heat(figure)
    assert not trace["text"][0][0].endswith("still filling")
    assert trace["text"][0][1].endswith(" still filling") and trace["text"][0][2].endswith(" still filling")
    band = [shape for shape in figure["layout"]["shapes"] if shape.get("name") == charts.STILL_FILLING]
    assert [(b["x0"], b["x1"], b["layer"]) for b in band] == [("2026-11-02 00:10:00", "2026-11-02 00:25:00", "above")]
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["still filling"]


def test_memory_cells_are_the_peak_of_their_minutes_in_gib():
    rows = [("GPU 0", 0, 50.0, 60.0, 2048, 1.0), ("GPU 0", 1, 50.0, 60.0, 5120, 1.0), ("GPU 0", 2, 50.0, 60.0, None, 1.0)]
    figure = charts.memory_heatmap(frame(rows), title="m", day_ms=DAY_MS, until_ms=T0_MS + BUCKET, y_max_gib=140.38)
    trace = heat(figure)
    assert trace["z"] == [[5.0]]
    assert trace["zmax"] == 140.4
    assert trace["text"][0][0] == "00:00–00:10 5.0 GiB (2/10 min measured)"


def test_an_empty_day_is_an_empty_heatmap_that_says_so():
    text = charts.ChartText(empty="当天没有样本")
    figure = charts.utilization_heatmap(frame([]), title="t", day_ms=DAY_MS, rows=["GPU 0"], text=text)
    assert figure["data"] == []
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["当天没有样本"]


def test_minutes_without_values_draw_grey_rows_and_say_so():
    df = frame([("GPU 0 · 1g.10gb", 0, None, None, None, 1.0)])
    figure = charts.utilization_heatmap(df, title="u", day_ms=DAY_MS, until_ms=T0_MS + BUCKET)
    assert heat(figure)["z"] == [[None]]
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["No values reported for this day"]
    json.dumps(figure, allow_nan=False)


def test_heatmap_labels_are_escaped_for_plotlys_pseudo_html():
    figure = charts.utilization_heatmap(frame(full("GPU 0 · <b>x</b>", [0])), title="u", day_ms=DAY_MS)
    assert heat(figure)["y"] == ["GPU 0 · &lt;b&gt;x&lt;/b&gt;"]


def test_a_day_of_minutes_for_twelve_gpus_is_one_small_trace():
    df = frame([rec for gpu in range(12) for rec in full(f"GPU {gpu}", range(1440))])
    figure = charts.utilization_heatmap(df, title="u", day_ms=DAY_MS)
    assert len(figure["data"]) == 1 and len(heat(figure)["z"]) == 12
    assert len(json.dumps(figure, allow_nan=False)) < 150_000  # the lines were about 1 MB for 8 GPUs


minutes = st.lists(
    st.tuples(
        st.sampled_from(["GPU 0", "GPU 1", "GPU 1 · 1g.10gb"]), st.integers(0, 59),
        st.one_of(st.none(), st.floats(0, 100, allow_nan=False)),
    ),
    unique_by=lambda row: row[:2],
)


@settings(max_examples=60, deadline=None)
@given(minutes)
def test_bucket_matrix_agrees_with_a_brute_force_mean(rows):
    df = frame([(gpu, minute, util, util, 1024, 1.0) for gpu, minute, util in rows])
    labels = ["GPU 0", "GPU 1", "GPU 1 · 1g.10gb"]
    values, counts = charts.bucket_matrix(
        df, "util_mean", "mean", rows=labels, start_ms=T0_MS, columns=6, step_ms=BUCKET,
    )
    for r, gpu in enumerate(labels):
        for c in range(6):
            measured = [u for g, m, u in rows if g == gpu and m // 10 == c and u is not None]
            assert counts[r][c] == len(measured)
            if measured:
                assert values[r][c] == pytest.approx(sum(measured) / len(measured))
            else:
                assert values[r][c] is None
