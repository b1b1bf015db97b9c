"""The team page's quota banner and Quotas block agree (issue 15): the banner's "now" figure is the block's,
from one status; the alert beside it keeps the figures of its crossing; the run-out reads right at the edges
(today, already used up, no burn) and the page says over which days the burn is measured."""

from datetime import date, timedelta
from decimal import Decimal

import pytest

from accounting.models import DailyUsage, Quota
from accounting.quotas.watch import quota_alerts
from cluster.models import Alert, Gpu
from tests.accounting.team_pages.test_team_page import CARD_HOUR, NOW, fixed_now, url

__all__ = ["fixed_now"]  # a fixture

pytestmark = pytest.mark.django_db
TODAY = NOW.date()  # 2026-11-20; NOW is noon UTC, 20:00 in the business zone


def burn(team, gpu, card_hours_per_day, days, *, today=0):
    for n in range(1, days + 1):
        DailyUsage.objects.create(day=TODAY - timedelta(days=n), gpu=gpu, state="busy", team=team,
                                  ticks=card_hours_per_day * CARD_HOUR)
    if today:
        DailyUsage.objects.create(day=TODAY, gpu=gpu, state="busy", team=team, ticks=today * CARD_HOUR)


@pytest.fixture
def h200(small_cluster):
    return Gpu.objects.filter(model=small_cluster["h200"]).order_by("pk").first()


def quota_of(team, card_hours):
    return Quota.objects.create(team=team, period_start=date(2026, 11, 1), expires=date(2026, 12, 1),
                                card_hours=Decimal(card_hours))


def block(html: str, testid: str) -> str:
    start = html.index(f'data-testid="{testid}"')
    return html[html.index(">", start) + 1:html.index("</", start)]


def test_the_banner_says_the_blocks_figure_and_the_alert_its_crossing(client, lead_a, team_a, h200, fixed_now):
    quota = quota_of(team_a, "100")
    burn(team_a, h200, 10, 9)  # 90 card-hours by the 19th
    fixed_now(NOW - timedelta(hours=6))
    quota_alerts(now=NOW - timedelta(hours=6))  # crosses 90 % at 90.000
    DailyUsage.objects.create(day=TODAY, gpu=h200, state="busy", team=team_a, ticks=5 * CARD_HOUR)  # 95 now
    fixed_now(NOW)
    quota_alerts(now=NOW)  # a later run marks it seen; its figures stay those of the crossing

    client.force_login(lead_a)
    response = client.get(url(team_a))
    html = response.content.decode()
    rows = [row for row in response.context["banner"] if row.alert.kind == "quota_90"]
    assert len(rows) == 1 and rows[0].status.quota == quota
    assert "90.000 of 100.000 card-hours used (90.0 %)" in rows[0].alert.message
    assert "Now: 95.00 of 100.00 card-hours used (95.0 %)." in html
    assert block(html, "quota-used").strip() == "95.00 (95.0 %)"
    assert f'href="#quota-{quota.pk}"' in html and f'id="quota-{quota.pk}"' in html
    assert Alert.objects.get(kind="quota_90").details["used_card_hours"] == "90.000"


def test_what_is_left_runs_out_today_when_today_burns_it(client, lead_a, team_a, h200, fixed_now):
    """Seen in the demo: 2.92 card-hours left at ~640 a day read "runs out tomorrow"."""
    quota_of(team_a, "100")
    burn(team_a, h200, 14, 7)  # 98 card-hours, 14 a day over the last 7 full days
    fixed_now(NOW)
    client.force_login(lead_a)
    html = client.get(url(team_a)).content.decode()
    assert block(html, "quota-run-out") == "today, at the current burn"
    assert block(html, "quota-burn") == "14.00 card-hours a day, the mean of the last 7 full days"


def test_a_used_up_quota_says_when_it_was_used_up(client, lead_a, team_a, h200, fixed_now):
    quota_of(team_a, "50")
    burn(team_a, h200, 10, 7)  # 10 a day from the 13th: 50 reached on the 17th
    fixed_now(NOW)
    client.force_login(lead_a)
    html = client.get(url(team_a)).content.decode()
    assert block(html, "quota-run-out") == "used up on 2026-11-17"


def test_a_quota_nothing_burns_never_runs_out(client, lead_a, team_a, fixed_now):
    quota_of(team_a, "50")
    fixed_now(NOW)
    client.force_login(lead_a)
    html = client.get(url(team_a)).content.decode()
    assert block(html, "quota-run-out") == "not at the current burn"
    assert block(html, "quota-burn") == "0.00 card-hours a day, the mean of the last 7 full days"


def test_a_quota_alert_links_to_the_team_page_from_the_notifications(client, lead_a, team_a, h200, fixed_now):
    from django.urls import reverse

    from accounting.notify.services import fan_out

    quota_of(team_a, "100")
    burn(team_a, h200, 10, 6)  # 60 %: the 50 % warning
    fixed_now(NOW)
    quota_alerts(now=NOW)
    fan_out(now=NOW)
    client.force_login(lead_a)
    html = client.get(reverse("accounting:notifications")).content.decode()
    assert f'href="{url(team_a)}" data-testid="alert-link"' in html
    assert "Crossed 50 % on " in html


def test_an_alert_reads_in_the_readers_language(client, lead_a, team_a, h200, fixed_now):
    """Alerts are written by a worker in no one's language: each keeps its message in every language and the
    page shows the reader's (issue 15: alert texts in English on the Chinese pages)."""
    from django.utils import translation

    quota_of(team_a, "100")
    burn(team_a, h200, 10, 6)
    fixed_now(NOW)
    quota_alerts(now=NOW)
    alert = Alert.objects.get(kind="quota_50")
    assert alert.message.startswith("Crossed 50 % on ")  # the stored message: the site's language
    with translation.override("zh-hans"):
        assert alert.text.startswith("已于 ") and "越过 50 %" in alert.text
    with translation.override("en"):
        assert alert.text == alert.message
    client.force_login(lead_a)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": url(team_a)})
    html = client.get(url(team_a)).content.decode()
    assert "越过 50 %：已使用 60.000 / 100.000 卡时（60.0 %）" in html and "Crossed 50 %" not in html
