"""The monthly resource profile in a browser (issue 15): a lead and finance see October's tables, the chart of
GPUs held against capacity draws, and plotly's own button downloads it as a PNG with no network."""

from datetime import UTC, datetime, timedelta

from playwright.sync_api import expect

from accounting.models import DailyUsage, HourlyUsage
from accounting.usage.detail import write_model_sums
from cluster.models import Gpu
from core.units import TICKS_PER_CARD_HOUR

OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)


def october(team_a, team_b, small_cluster):
    """Two H200s through October: one held by team A from 08:00 to 20:00 each day, one by team B all day."""
    g0, g1 = Gpu.objects.filter(model=small_cluster["h200"], mig_parent__isnull=True).order_by("pk")[:2]
    hourly, daily = [], {}
    hour = OCTOBER
    while hour.month == 10:
        a_holds = 8 <= hour.hour < 20
        for gpu, state, team in ((g0, "busy" if a_holds else "unallocated", team_a if a_holds else None),
                                 (g1, "idle", team_b)):
            hourly.append(HourlyUsage(day=hour.date(), hour=hour, gpu=gpu, state=state, team=team,
                                      ticks=TICKS_PER_CARD_HOUR))
            key = (hour.date(), gpu.pk, state, team.pk if team else None)
            daily[key] = daily.get(key, 0) + TICKS_PER_CARD_HOUR
        hour += timedelta(hours=1)
    HourlyUsage.objects.bulk_create(hourly)
    DailyUsage.objects.bulk_create([DailyUsage(day=day, gpu_id=gpu, state=state, team_id=team, ticks=ticks)
                                    for (day, gpu, state, team), ticks in daily.items()])
    for day in {day for day, _gpu, _state, _team in daily}:
        write_model_sums(day=day)  # as aggregate_day does after writing a day's hourly usage


def test_a_lead_and_finance_see_the_profile_and_download_its_chart(page, live_server, login, screenshot, lead_a,
                                                                  finance_user, team_a, team_b, small_cluster,
                                                                  tmp_path):
    october(team_a, team_b, small_cluster)
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))

    login(page, live_server, lead_a.username)
    page.goto(f"{live_server.url}/board/profile/?month=2026-10")
    models = page.get_by_test_id("profile-models")
    expect(models.get_by_test_id("model-row").first).to_contain_text("H200")
    expect(page.get_by_test_id("profile-teams")).to_contain_text(team_a.name)
    chart = page.get_by_test_id("profile-chart")
    expect(chart.locator("svg.main-svg").first).to_be_visible()
    with page.expect_download() as download_info:
        chart.hover()
        chart.locator(".modebar-btn[data-title='Download plot as a PNG']").click()
    download = download_info.value
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    assert download.suggested_filename.endswith(".png") and saved.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as download_info:
        chart.hover()
        chart.locator(".modebar-btn[data-title='Download plot as an SVG']").click()
    svg = tmp_path / "chart.svg"
    download_info.value.save_as(svg)
    assert download_info.value.suggested_filename == "fig-profile.svg" and b"<svg" in svg.read_bytes()[:200]
    screenshot(page, "monthly-profile")

    page.context.clear_cookies()  # signed out: finance signs in afresh
    login(page, live_server, finance_user.username)
    page.goto(f"{live_server.url}/board/profile/?month=2026-10")
    expect(page.get_by_test_id("profile-teams")).to_contain_text(team_b.name)
    expect(page.get_by_test_id("need")).to_be_visible()
    assert problems == []
