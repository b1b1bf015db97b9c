"""The week and month views in a browser (issue 15): a lead and finance see the week's tiles, its stacked
day bars and the team table, move to the month view and back to the day through the period row."""

from datetime import timedelta

from playwright.sync_api import expect

from accounting.models import DailyUsage
from accounting.usage.detail import write_model_sums
from cluster.models import Gpu
from core.timeutils import business_day_of
from core.units import TICKS_PER_CARD_HOUR
from tests.browser.conftest import NOW


def last_week(team_a, team_b, small_cluster):
    """The full week before NOW's: an H200 busy 10 h a day for team A, another idle 4 h a day for team B."""
    today = business_day_of(NOW)
    monday = today - timedelta(days=today.weekday() + 7)
    g0, g1 = Gpu.objects.filter(model=small_cluster["h200"], mig_parent__isnull=True).order_by("pk")[:2]
    rows = []
    for n in range(7):
        day = monday + timedelta(days=n)
        rows += [DailyUsage(day=day, gpu=g0, state="busy", team=team_a, ticks=10 * TICKS_PER_CARD_HOUR),
                 DailyUsage(day=day, gpu=g0, state="unallocated", ticks=14 * TICKS_PER_CARD_HOUR),
                 DailyUsage(day=day, gpu=g1, state="idle", team=team_b, ticks=4 * TICKS_PER_CARD_HOUR),
                 DailyUsage(day=day, gpu=g1, state="unallocated", ticks=20 * TICKS_PER_CARD_HOUR)]
    DailyUsage.objects.bulk_create(rows)
    for n in range(7):
        write_model_sums(day=monday + timedelta(days=n))  # as aggregate_day does after writing a day
    return monday


def test_a_lead_and_finance_read_the_week_and_the_month(page, live_server, login, screenshot, lead_a, finance_user,
                                                      team_a, team_b, small_cluster):
    monday = last_week(team_a, team_b, small_cluster)
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))

    login(page, live_server, lead_a.username)
    page.goto(f"{live_server.url}/board/week/?week={monday.isoformat()}")
    expect(page.get_by_test_id("period-tiles")).to_be_visible()
    days = page.get_by_test_id("period-days")
    expect(days.locator("svg.main-svg").first).to_be_visible()
    expect(days.locator(".barlayer .trace").first).to_be_visible()
    teams = page.get_by_test_id("period-teams")
    expect(teams.get_by_test_id("team-row").filter(has_text=team_a.name)).to_contain_text("70.0")
    expect(teams.locator("svg").first).to_be_visible()  # the team's sparkline
    screenshot(page, "week-board")
    page.get_by_test_id("nav-month").click()
    expect(page.get_by_test_id("period-label")).to_be_visible()
    page.get_by_test_id("nav-day").click()
    expect(page.get_by_test_id("board-tiles")).to_be_visible()

    page.context.clear_cookies()  # signed out: finance signs in afresh
    login(page, live_server, finance_user.username)
    page.goto(f"{live_server.url}/board/week/?week={monday.isoformat()}")
    expect(page.get_by_test_id("period-teams").get_by_test_id("team-row")).to_have_count(2)
    expect(page.get_by_test_id("period-models")).to_contain_text("H200")
    assert problems == []
