"""A team lead opens the team page: the quota warning shows and the burn-down chart draws its forecast."""

from datetime import timedelta

from playwright.sync_api import expect

from accounting.models import DailyUsage, Quota
from cluster.models import Alert, Gpu
from core.timeutils import business_day_of
from teams.models import Project
from tests.browser.conftest import NOW

CARD_HOUR = 840_000 * 3600  # ticks


def test_a_lead_sees_the_quota_banner_and_the_burndown_forecast(page, live_server, login, screenshot, lead_a, team_a,
                                                                small_cluster):
    now = NOW  # the moment the browser tests are frozen at (conftest)
    today = business_day_of(now)
    gpu = Gpu.objects.filter(model=small_cluster["h200"]).order_by("pk").first()
    project = Project.objects.get(slug="alpha-pre")
    for n in range(1, 11):  # 9 busy card-hours a day over the ten days before today: 90 of 100 used
        DailyUsage.objects.create(day=today - timedelta(days=n), gpu=gpu, state="busy", team=team_a, project=project,
                                  ticks=9 * CARD_HOUR)
    quota = Quota.objects.create(team=team_a, period_start=today - timedelta(days=10), expires=today + timedelta(days=20),
                                 card_hours=100)
    Alert.objects.create(subject_type="quota", subject_id=quota.pk, subject_label=team_a.name, kind="quota_90",
                         tier="warning", message="Team Alpha has used 90 % of its quota.", opened_at=now,
                         last_seen_at=now)
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))

    login(page, live_server, lead_a.username)
    page.goto(f"{live_server.url}/teams/{team_a.slug}/")

    banner = page.get_by_test_id("quota-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Quota 90 % used")
    expect(banner).to_contain_text("Team Alpha has used 90 % of its quota.")
    chart = page.get_by_test_id("burndown-chart")
    expect(chart.locator("svg.main-svg").first).to_be_visible()
    expect(chart.locator(".legend .legendtext", has_text="Forecast")).to_have_count(1)
    expect(chart.locator(".scatterlayer .trace")).to_have_count(2)  # remaining so far, and the forecast
    expect(page.get_by_test_id("month-cost")).to_be_visible()
    screenshot(page, "team-page")
    assert problems == []
