"""The weekly report e-mail (issue 15, boards/periods/weekly.py): last week's figures per recipient (a lead their
teams', admin and finance the cluster's), the same numbers as the week view, sent once a week per person from
Monday's digest time on, never to the opted out, inactive or address-less, with a text and an HTML part."""

from datetime import date, datetime, timedelta

import pytest
import time_machine
from django.core import mail

from accounting.models import WeeklyReportOptOut, WeeklyReportSent
from accounting.money.idle_ranking import rank_idle
from boards.figures import span_headline
from boards.periods.summary import WEEK, period_summary
from boards.periods.tasks import weekly_reports
from boards.periods.weekly import report_week, send_weekly_reports, weekly_report_for
from boards.scope import BoardScope
from tests.boards.board_day import SECRET_JOB, SECRET_USER
from tests.conftest import T0

pytestmark = pytest.mark.django_db
MONDAY, SUNDAY = date(2026, 11, 2), date(2026, 11, 8)  # the week of the board day (T0)
DUE = T0 + timedelta(days=7, hours=8, minutes=30)  # Monday 9 November, 08:30 UTC: the digest time
WEEK_URL = "http://127.0.0.1:8000/board/week/?week=2026-11-02"


@pytest.fixture
def cast(board_day, team_a, team_b, lead_a, lead_b, engineer_a, admin_user, finance_user):
    for user in (lead_a, lead_b, engineer_a, admin_user, finance_user):
        user.email = f"{user.username}@example.com"
        user.save(update_fields=["email"])
    return {"lead_a": lead_a, "lead_b": lead_b, "engineer_a": engineer_a, "admin": admin_user,
            "finance": finance_user}


def scope() -> BoardScope:
    return BoardScope(day=MONDAY, last=SUNDAY, now=DUE)


def mails_to(user) -> list:
    return [m for m in mail.outbox if m.to == [user.email]]


def test_it_is_due_from_mondays_digest_time_for_last_week(settings):
    assert settings.NOTIFY_DIGEST_LOCAL_TIME == "08:30" and settings.TIME_ZONE == "UTC"
    assert report_week(DUE - timedelta(minutes=1)) is None
    assert report_week(DUE) == MONDAY
    assert report_week(DUE + timedelta(days=3)) == MONDAY  # missed on Monday: still sent that week
    assert report_week(DUE + timedelta(days=7)) == MONDAY + timedelta(days=7)  # next Monday: the next week


def test_it_waits_while_last_weeks_sunday_still_runs_in_the_business_zone(settings):
    settings.TIME_ZONE, settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai", "America/Los_Angeles"
    shanghai_monday = datetime(2026, 11, 9, 1, 0, tzinfo=T0.tzinfo)  # 09:00 Shanghai; Sunday 17:00 in Los Angeles
    assert report_week(shanghai_monday) is None
    assert report_week(shanghai_monday + timedelta(hours=8)) == MONDAY


def test_it_gives_a_lead_only_their_teams_figures_and_top_idle(cast, team_a):
    lead = cast["lead_a"]
    report = weekly_report_for(lead, MONDAY, DUE)
    assert report.cluster is None and [t.team for t in report.teams] == [team_a]
    team = report.teams[0]
    row = next(r for r in period_summary(scope(), user=lead, kind=WEEK).headline.teams if r.team_id == team_a.pk)
    assert (team.efficiency, team.idle_card_hours, team.idle_cost) == (row.efficiency, row.idle, row.idle_cost)
    assert team.idle_card_hours > 0 and team.idle_cost is not None
    top, count = rank_idle(MONDAY, SUNDAY, user=lead, team_id=team_a.pk, limit=5)
    assert team.top_idle == top and team.idle_allocations == count and top
    assert [s.quota.team_id for s in team.quotas] == [team_a.pk]
    assert team.url == "http://127.0.0.1:8000/teams/alpha/"


def test_admin_and_finance_get_the_week_views_tiles_and_team_table(cast):
    for key in ("admin", "finance"):
        report = weekly_report_for(cast[key], MONDAY, DUE)
        assert report.teams == [] and report.cluster is not None
        head = span_headline(scope(), user=cast[key])[0]
        assert report.cluster.headline.tiles == head.tiles
        assert report.cluster.teams == period_summary(scope(), user=cast[key], kind=WEEK).teams
        assert len(report.cluster.teams) >= 2


def test_its_figures_are_the_week_pages(cast, client):
    report = weekly_report_for(cast["admin"], MONDAY, DUE)
    client.force_login(cast["admin"])
    with time_machine.travel(DUE, tick=False):
        response = client.get("/board/week/", {"week": "2026-11-02"})
    page = response.context["summary"]
    assert page.headline.tiles == report.cluster.headline.tiles and page.teams == report.cluster.teams


def test_an_engineer_gets_none(cast):
    assert weekly_report_for(cast["engineer_a"], MONDAY, DUE) is None


def test_it_is_sent_once_when_run_twice(cast):
    assert send_weekly_reports(now=DUE) == 4  # two leads, admin, finance
    assert send_weekly_reports(now=DUE + timedelta(minutes=15)) == 0
    assert sorted(m.to[0] for m in mail.outbox) == sorted(
        cast[k].email for k in ("lead_a", "lead_b", "admin", "finance"))
    assert WeeklyReportSent.objects.filter(week_start=MONDAY).count() == 4
    assert not mails_to(cast["engineer_a"])


def test_nothing_goes_before_mondays_digest_time(cast):
    assert send_weekly_reports(now=DUE - timedelta(minutes=1)) == 0
    assert mail.outbox == [] and not WeeklyReportSent.objects.exists()


def test_the_task_sends_at_the_clocks_now(cast):
    with time_machine.travel(DUE + timedelta(hours=1), tick=False):
        weekly_reports()
    assert len(mail.outbox) == 4


def test_the_opted_out_inactive_and_address_less_get_nothing(cast):
    WeeklyReportOptOut.objects.create(user=cast["lead_a"], created_at=T0)
    cast["lead_b"].is_active = False
    cast["lead_b"].save(update_fields=["is_active"])
    cast["finance"].email = ""
    cast["finance"].save(update_fields=["email"])
    assert send_weekly_reports(now=DUE) == 1
    assert [m.to for m in mail.outbox] == [[cast["admin"].email]]


def test_the_mail_has_text_and_html_with_the_week_link(cast):
    send_weekly_reports(now=DUE)
    (message,) = mails_to(cast["lead_a"])
    html, mimetype = message.alternatives[0]
    assert mimetype == "text/html" and "2026-11-02" in message.subject
    for body in (message.body, html):
        assert WEEK_URL in body and "http://127.0.0.1:8000/teams/alpha/" in body
        assert "Team Alpha" in body and SECRET_JOB in body
    assert "<html" in html and "<html" not in message.body
    (admin_message,) = mails_to(cast["admin"])
    assert WEEK_URL in admin_message.body and "Team Beta" in admin_message.body


def test_another_teams_lead_reads_nothing_of_team_a(cast):
    send_weekly_reports(now=DUE)
    (message,) = mails_to(cast["lead_b"])
    for body in (message.body, message.alternatives[0][0]):
        assert "Team Alpha" not in body and SECRET_JOB not in body and SECRET_USER not in body


def test_the_site_url_setting_builds_the_links(cast, settings):
    settings.CARDHOUR_SITE_URL = "https://cardhour.example.org"
    report = weekly_report_for(cast["lead_a"], MONDAY, DUE)
    assert report.week_url == "https://cardhour.example.org/board/week/?week=2026-11-02"


def test_a_failed_send_is_logged_and_tried_again(cast, monkeypatch, caplog):
    from django.core.mail import EmailMultiAlternatives

    original = EmailMultiAlternatives.send

    def failing(self, *args, **kwargs):
        if self.to == [cast["admin"].email]:
            raise OSError("smtp down")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(EmailMultiAlternatives, "send", failing)
    assert send_weekly_reports(now=DUE) == 3
    assert "the weekly report for user" in caplog.text
    assert not WeeklyReportSent.objects.filter(user=cast["admin"]).exists()
    monkeypatch.setattr(EmailMultiAlternatives, "send", original)
    assert send_weekly_reports(now=DUE + timedelta(minutes=15)) == 1
    assert len(mails_to(cast["admin"])) == 1


def test_the_notifications_page_turns_it_off_and_on(cast, client):
    lead = cast["lead_a"]
    client.force_login(lead)
    page = client.get("/notifications/").content.decode()
    assert 'data-testid="weekly-report-toggle"' in page and 'value="off"' in page
    assert client.post("/notifications/", {"weekly_report": "off"}).status_code == 302
    assert WeeklyReportOptOut.objects.filter(user=lead).exists()
    assert 'value="on"' in client.get("/notifications/").content.decode()
    assert send_weekly_reports(now=DUE) == 3 and not mails_to(lead)
    client.post("/notifications/", {"weekly_report": "on"})
    assert not WeeklyReportOptOut.objects.filter(user=lead).exists()
    assert send_weekly_reports(now=DUE + timedelta(minutes=15)) == 1 and len(mails_to(lead)) == 1


def test_a_missed_week_goes_out_later_that_week_for_that_week(cast):
    assert send_weekly_reports(now=DUE + timedelta(days=2)) == 4
    assert set(WeeklyReportSent.objects.values_list("week_start", flat=True)) == {MONDAY}
    (message,) = mails_to(cast["admin"])
    assert "2026-11-02" in message.subject and "2026-11-08" in message.subject
