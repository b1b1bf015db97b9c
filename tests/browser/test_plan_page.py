"""A lead opens the team's plan (issue 19): the deviations are highlighted, the weekly chart draws, the page fits
1366×768 without scrolling sideways, in English and in Chinese."""

from datetime import timedelta

from playwright.sync_api import expect

from cluster.models import Gpu
from tests.accounting.plans.conftest import make_job
from tests.browser.conftest import NOW


def plan_of(team_a, small_cluster):
    gpus = list(Gpu.objects.filter(model=small_cluster["h200"]).order_by("pk"))
    over = make_job(team_a, "train-over", state="running", gpus=gpus[:1], start=NOW - timedelta(hours=4),
                    estimate="1", priority=10)
    make_job(team_a, "queued-next", state="pending", estimate="16", priority=50, gpu_count=2)
    under = make_job(team_a, "eval-under", state="completed", gpus=gpus[1:2], start=NOW - timedelta(hours=9),
                     end=NOW - timedelta(hours=8), estimate="10", data_ready_at=NOW - timedelta(hours=8, minutes=30))
    return over, under


def test_a_lead_sees_the_plan_with_its_deviations_in_english_and_chinese(page, live_server, login, screenshot, lead_a,
                                                                        team_a, small_cluster):
    over, under = plan_of(team_a, small_cluster)
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.set_viewport_size({"width": 1366, "height": 768})
    login(page, live_server, lead_a.username)
    page.goto(f"{live_server.url}/teams/{team_a.slug}/")
    page.get_by_test_id("plan-link").click()

    expect(page).to_have_url(f"{live_server.url}/teams/{team_a.slug}/plan/")
    open_rows = page.get_by_test_id("plan-open").locator("tbody tr")
    expect(open_rows).to_have_count(2)
    expect(open_rows.first).to_contain_text("queued-next")  # priority 50 before 10
    expect(page.locator(f'[data-testid=plan-open] tr[data-job="{over.pk}"]')).to_have_attribute("data-deviation", "over")
    expect(page.locator(f'[data-testid=plan-open] tr[data-job="{over.pk}"]')).to_contain_text("400.0 %")
    flagged = page.locator(f'[data-testid=plan-finished] tr[data-job="{under.pk}"]')
    expect(flagged).to_have_attribute("data-deviation", "under")
    expect(flagged.locator(".deviation")).to_be_visible()
    colour = flagged.locator("td").first.evaluate("cell => getComputedStyle(cell).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), colour  # the row is highlighted, not only tagged
    expect(page.get_by_test_id("plan-waited").locator(f'tr[data-job="{under.pk}"]')).to_contain_text("0.50")
    chart = page.get_by_test_id("plan-chart")
    expect(chart.locator("svg.main-svg").first).to_be_visible()
    expect(chart.locator(".legend .legendtext", has_text="Planned")).to_have_count(1)
    widths = page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"horizontal scroll at 1366 px: the page is {widths[0]} px wide"
    screenshot(page, "plan-1366")

    page.locator("#language").select_option("zh-hans")  # submits on change, back to the plan
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page).to_have_url(f"{live_server.url}/teams/{team_a.slug}/plan/")
    expect(page.locator(f'[data-testid=plan-open] tr[data-job="{over.pk}"]')).to_have_attribute("data-deviation", "over")
    expect(page.get_by_test_id("plan-chart").locator("svg.main-svg").first).to_be_visible()
    widths = page.evaluate("() => [document.scrollingElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"horizontal scroll at 1366 px in Chinese: the page is {widths[0]} px wide"
    screenshot(page, "plan-zh-1366")
    assert problems == []
