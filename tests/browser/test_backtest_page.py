"""The backtest page in Chromium at 1366×768 (issue 19): a lead runs the preset-like comparison on the recorded day,
both charts draw, the table shows the rule sets side by side, and the page reads in Chinese too; no script error."""

import pytest
from playwright.sync_api import expect

from tests.boards.backtest.conftest import history  # noqa: F401 (the recorded day, a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.clock]
QUERY = ("team=alpha&gpu_model=H200&start=2026-10-05&end=2026-10-05"
         "&r1-name=Eager&r1-metric=utilization&r1-up=80&r1-down=20&r1-group=2&r1-min=0&r1-max=8&r1-cooldown=30"
         "&r2-name=Kept&r2-metric=memory&r2-up=70&r2-down=10&r2-group=2&r2-min=2&r2-max=8&r2-cooldown=60"
         "&r2-buffer=120&r2-headroom=0")


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


def test_a_lead_compares_rule_sets_with_charts_in_english_and_chinese(page, live_server, login, lead_a, history):  # noqa: F811
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    login(page, live_server, lead_a.username)
    page.locator("a[data-nav=backtest]").click()
    expect(page.locator("h1")).to_contain_text("Threshold backtest")
    page.goto(f"{live_server.url}/boards/backtest/?{QUERY}")
    columns = page.get_by_test_id("backtest-column")
    expect(columns).to_have_count(3)
    expect(columns.nth(1)).to_have_text("Eager")
    expect(page.get_by_test_id("row-card-hours")).to_contain_text("5.00")
    held = page.get_by_test_id("backtest-held-chart")
    expect(held.locator("svg.main-svg").first).to_be_visible()
    expect(held.locator("g.trace.scatter")).to_have_count(4)  # actual, demand, two rule sets
    bars = page.get_by_test_id("backtest-bars-chart")
    expect(bars.locator("g.trace.bars")).to_have_count(4)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1366, f"the page scrolls sideways at 1366 px ({width} px)"

    page.locator("#language").select_option("zh-hans")  # submits on change
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    page.goto(f"{live_server.url}/boards/backtest/?{QUERY}")
    expect(page.get_by_test_id("backtest-held-chart").locator("svg.main-svg").first).to_be_visible()
    expect(page.get_by_test_id("backtest-bars-chart").locator("g.trace.bars")).to_have_count(4)
    expect(page.get_by_test_id("backtest-table")).to_be_visible()
    assert problems == []
