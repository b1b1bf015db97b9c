"""The team page's figure dicts (issue 15): the efficiency trend keeps today's partial day off its line, and
the quota burn-down shows the used and forecast days at a readable scale with its expiry marked or named."""

from datetime import date, timedelta

import pandas as pd

from accounting.quotas.rules import burn_forecast
from accounting.team_pages import charts as team_charts
from accounting.team_pages.charts import TeamChartText

CARD_HOUR = 840_000 * 3600  # ticks
TODAY = date(2026, 11, 20)


# ---- efficiency trend --------------------------------------------------------------------------------------------

def trend(*rows):
    return pd.DataFrame([{"day": day, "efficiency": value, "partial": day == TODAY} for day, value in rows])


def test_todays_partial_day_is_a_marker_of_its_own_not_a_dip_of_the_line():
    df = trend((date(2026, 11, 17), 0.8), (date(2026, 11, 18), None), (date(2026, 11, 19), 0.9), (TODAY, 0.0))
    text = TeamChartText(efficiency="效率", today_so_far="今天截至目前")
    figure = team_charts.efficiency_figure(df, title="t", text=text)
    line, today = figure["data"]
    # The line ends yesterday; the day with nothing allocated is a gap, not 0 %.
    assert line["x"] == ["2026-11-17", "2026-11-18", "2026-11-19"] and line["y"] == [80.0, None, 90.0]
    assert line["connectgaps"] is False
    # Today so far: one hollow marker, joined to nothing, named as today so far in the viewer's language.
    assert (today["meta"]["role"], today["mode"], today["x"], today["y"]) == ("partial", "markers", ["2026-11-20"], [0.0])
    assert today["marker"]["symbol"] == "circle-open"
    assert "今天截至目前" in today["name"] and today.get("showlegend", True)
    assert not any("lines" in trace["mode"] and "2026-11-20" in trace["x"] for trace in figure["data"])


def test_a_today_with_nothing_allocated_yet_draws_nothing():
    df = trend((date(2026, 11, 19), 0.5), (TODAY, None))
    (line,) = team_charts.efficiency_figure(df, title="t")["data"]
    assert line["x"] == ["2026-11-19"] and line["y"] == [50.0]


# ---- quota burn-down ---------------------------------------------------------------------------------------------

def burndown(*, period_start, expires, quota_card_hours, daily_card_hours, text=None):
    """The figure of a quota used ``daily_card_hours`` a day from its start up to yesterday (nothing today)."""
    quota_ticks = quota_card_hours * CARD_HOUR
    days = [period_start + timedelta(days=n) for n in range((TODAY - period_start).days + 1)]
    daily = {day: daily_card_hours * CARD_HOUR for day in days if day < TODAY}
    forecast = burn_forecast(daily_ticks=daily, quota_ticks=quota_ticks, used_ticks=sum(daily.values()),
                             today=TODAY, expires=expires, period_start=period_start)
    left, remaining = quota_ticks, []
    for day in days:
        left -= daily.get(day, 0)
        remaining.append(left)
    figure = team_charts.burndown_figure(
        pd.DataFrame({"day": days, "remaining_ticks": remaining}), quota_ticks=quota_ticks,
        remaining_ticks=forecast.remaining_ticks, burn_ticks_per_day=forecast.burn_ticks_per_day, today=TODAY,
        expires=expires, title="q", text=text or TeamChartText())
    return figure, forecast


def test_a_years_quota_shows_the_last_month_and_the_run_out_not_the_whole_year():
    # 1,000 card-hours from 1 January, 3 a day: 3 x 323 = 969 used by the 20th of November, 31 left: out in 11 days.
    figure, forecast = burndown(period_start=date(2026, 1, 1), expires=date(2027, 1, 1), quota_card_hours=1000,
                                daily_card_hours=3, text=TeamChartText(expires="过期时间"))
    assert forecast.run_out == date(2026, 12, 1)
    x_from, x_to = (date.fromisoformat(end) for end in figure["layout"]["xaxis"]["range"])
    assert date(2026, 10, 14) <= x_from <= date(2026, 10, 21)  # 30 days back, a few days' margin
    assert date(2026, 12, 1) < x_to <= date(2026, 12, 8)  # the run-out day, a few days' margin
    assert figure["layout"]["yaxis"]["range"][0] == 0 and figure["layout"]["yaxis"]["range"][1] >= 1000
    # The expiry is past the shown days: a note at the right edge says when it is.
    (note,) = figure["layout"]["annotations"]
    assert (note["xref"], note["x"], note["xanchor"]) == ("paper", 1, "right")
    assert "过期时间" in note["text"] and "2027-01-01" in note["text"]


def test_a_months_quota_shows_its_whole_period_with_the_expiry_line():
    # 300 card-hours for November, 5 a day: it lasts past its expiry, so the forecast ends on 1 December.
    figure, _forecast = burndown(period_start=date(2026, 11, 1), expires=date(2026, 12, 1), quota_card_hours=300,
                                 daily_card_hours=5)
    x_from, x_to = (date.fromisoformat(end) for end in figure["layout"]["xaxis"]["range"])
    assert date(2026, 10, 28) <= x_from < date(2026, 11, 1) and date(2026, 12, 1) < x_to <= date(2026, 12, 4)
    (line,) = figure["layout"]["shapes"]
    assert line["x0"] == line["x1"] == "2026-12-01" and line["yref"] == "paper"
    (label,) = figure["layout"]["annotations"]
    assert (label["xref"], label["x"], label["text"]) == ("x", "2026-12-01", "Expires 2026-12-01")


def test_a_quota_burning_nothing_shows_a_month_ahead_not_its_whole_year():
    figure, _forecast = burndown(period_start=date(2026, 11, 16), expires=date(2027, 11, 16), quota_card_hours=50,
                                 daily_card_hours=0)
    x_from, x_to = (date.fromisoformat(end) for end in figure["layout"]["xaxis"]["range"])
    assert x_from < date(2026, 11, 16) and date(2026, 12, 20) <= x_to <= date(2026, 12, 31)
    (note,) = figure["layout"]["annotations"]
    assert note["xref"] == "paper" and "2027-11-16" in note["text"]


def test_an_overrun_quota_keeps_its_negative_days_in_view():
    figure, _forecast = burndown(period_start=date(2026, 11, 10), expires=date(2026, 12, 1), quota_card_hours=20,
                                 daily_card_hours=4)
    remaining = next(t for t in figure["data"] if t["meta"]["role"] == "remaining")
    assert min(remaining["y"]) == -20.0
    assert figure["layout"]["yaxis"]["range"][0] <= -20.0

