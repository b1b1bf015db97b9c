"""The plan page and its API (issue 19) by role: a team's members see its plan, another team's is a 404 like a
missing team, finance and admins see every team's; the page and the API show the same figures."""

import pytest
from django.urls import reverse
from django.utils import timezone

from accounting.plans import rules
from tests.accounting.plans.conftest import NOW, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.clock]


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def page_url(team, **query):
    url = reverse("accounting:team-plan", args=[team.slug])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def api_url(team):
    return reverse("team-plan", args=[team.slug])


@pytest.mark.parametrize("who", ["lead_a", "engineer_a", "finance_user", "admin_user"])
def test_members_finance_and_admins_see_the_plan_with_deviations_highlighted(client, request, who, plan_month, team_a):
    client.force_login(request.getfixturevalue(who))
    response = client.get(page_url(team_a))
    assert response.status_code == 200
    html = response.content.decode()
    assert response.context["period"] == "2026-11"
    for testid in ("plan-open", "plan-finished", "plan-weeks", "plan-waited", "plan-chart"):
        assert f'data-testid="{testid}"' in html
    over = f'<tr class="deviation-over" data-deviation="over" data-job="{plan_month["over"].pk}">'
    under = f'<tr class="deviation-under" data-deviation="under" data-job="{plan_month["under"].pk}">'
    assert over in html and under in html
    assert '<tr class="deviation-over" data-deviation="over" data-week="2026-11-16">' in html
    assert "beta" not in [row.job.name for row in response.context["plan"].finished_jobs]
    assert 'data-testid="plan-pending"' in html  # the jobs just written are still to be counted


@pytest.mark.parametrize("who", ["lead_b", "engineer_b"])
def test_another_teams_plan_is_a_404_like_a_missing_team(client, request, who, plan_month, team_a):
    client.force_login(request.getfixturevalue(who))
    assert client.get(page_url(team_a)).status_code == 404
    assert client.get(reverse("accounting:team-plan", args=["no-such-team"])).status_code == 404


def test_anonymous_is_sent_to_sign_in(client, team_a):
    response = client.get(page_url(team_a))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_another_month_and_a_bad_one(client, lead_a, plan_month, team_a):
    client.force_login(lead_a)
    october = client.get(page_url(team_a, period="2026-10"))
    assert october.status_code == 200 and october.context["period"] == "2026-10"
    assert [row.job.name for row in october.context["plan"].finished_jobs] == ["october"]
    bad = client.get(page_url(team_a, period="2026-13"))
    assert bad.status_code == 400 and 'data-testid="period-error"' in bad.content.decode()
    assert bad.context["period"] == "2026-11"  # this month shown under the error


def test_the_team_page_links_to_its_plan(client, lead_a, team_a):
    client.force_login(lead_a)
    html = client.get(reverse("accounting:team-detail", args=[team_a.slug])).content.decode()
    assert f'href="{page_url(team_a)}" data-testid="plan-link"' in html


def test_the_query_count_does_not_grow_with_jobs(client, lead_a, plan_month, team_a, django_assert_num_queries):
    client.force_login(lead_a)
    client.get(page_url(team_a))
    with django_assert_num_queries(QUERIES):
        assert client.get(page_url(team_a)).status_code == 200
    for n in range(15):
        make_job(team_a, f"more-{n}", state="completed", start=NOW.replace(day=3), end=NOW.replace(day=4),
                 unplaced=1, estimate="30")
    with django_assert_num_queries(QUERIES):
        assert client.get(page_url(team_a)).status_code == 200


QUERIES = 13  # session, user and its groups (3), team, jobs, allocations, daily usage, unplaced usage, rollup
# watermark and nodes (data complete to), pending work, and the menu's memberships and unread notifications (2)


# ---- the API ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("who", ["lead_a", "engineer_a", "finance_user", "admin_user"])
def test_the_api_gives_the_figures_the_page_shows(api, client, request, who, plan_month, team_a):
    user = request.getfixturevalue(who)
    response = api.as_user(user).get(api_url(team_a), {"period": "2026-11"})
    assert response.status_code == 200
    body = response.json()
    assert body["team"] == "alpha" and body["period"] == "2026-11" and body["deviation_pct"] == 30
    open_jobs = {row["name"]: row for row in body["open_jobs"]}
    assert [row["name"] for row in body["open_jobs"]] == ["queued-high", "waiting", "over", "queued-none"]
    assert (open_jobs["over"]["card_hours_used"], open_jobs["over"]["ratio_pct"], open_jobs["over"]["deviation"]) == (
        "20.00", "200.0", rules.OVER)
    assert open_jobs["queued-none"]["estimated_card_hours"] is None and open_jobs["queued-none"]["ratio_pct"] is None
    finished = {row["name"]: (row["card_hours_used"], row["ratio_pct"], row["deviation"]) for row in body["finished_jobs"]}
    assert finished["under"] == ("5.00", "50.0", rules.UNDER)
    assert [(w["first_day"], w["planned_card_hours"], w["actual_card_hours"], w["deviation"]) for w in body["weeks"]][2:4] == [
        ("2026-11-09", "14.00", "9.00", rules.UNDER), ("2026-11-16", "18.40", "29.00", rules.OVER)]
    assert [(row["name"], row["card_hours_held"], row["still_waiting"]) for row in body["waited_for_data"]] == [
        ("waiting", "2.00", True), ("under", "1.00", False)]
    assert (body["planned_card_hours"], body["actual_card_hours"], body["waited_card_hours"]) == ("36.40", "42.00", "3.00")
    client.force_login(user)
    page = client.get(page_url(team_a)).context["plan"]
    assert [str(w.actual_card_hours) for w in page.weeks if w.actual is not None] == [
        w["actual_card_hours"] for w in body["weeks"] if w["actual_card_hours"] is not None]


@pytest.mark.parametrize("who", ["lead_b", "engineer_b"])
def test_the_api_answers_another_team_404_like_a_missing_one(api, request, who, plan_month, team_a):
    api.as_user(request.getfixturevalue(who))
    other, missing = api.get(api_url(team_a)), api.get(reverse("team-plan", args=["no-such-team"]))
    assert other.status_code == missing.status_code == 404
    assert other.json() == missing.json()


def test_the_api_refuses_a_bad_period_and_anonymous(api, lead_a, team_a):
    assert api.get(api_url(team_a)).status_code == 401
    response = api.as_user(lead_a).get(api_url(team_a), {"period": "November"})
    assert response.status_code == 400 and "period" in response.json()["detail"]
