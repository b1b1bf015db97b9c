"""Role scoping (DESIGN.md §2): a lead or engineer of team A never sees team B's rows; admin and
finance see every team. Later issues add their list pages and endpoints to the tables below."""

from datetime import timedelta

import pytest
from django.urls import reverse

from accounting.models import Quota
from cluster.bookings.services import booking_create
from cluster.jobs.services import JobInput, job_upsert
from cluster.models import Booking, Gpu, Job
from teams.models import Membership, Project, Team
from tests.conftest import T0

pytestmark = pytest.mark.django_db

# (API list endpoint, how a row names its team)
API_LISTS = [
    ("/api/v1/teams/", lambda row: row["slug"]),
    ("/api/v1/projects/", lambda row: row["team"]),
    ("/api/v1/memberships/", lambda row: row["team"]),
    ("/api/v1/jobs/", lambda row: row["team"]),
    ("/api/v1/bookings/", lambda row: row["team"]),
    ("/api/v1/quotas/", lambda row: row["team"]),
]
# (page, the context list of team rows, how a row names its team)
PAGE_LISTS = [
    ("accounting:team-list", "teams", lambda team: team.slug),
    ("cluster:job-list", "jobs", lambda job: job.team.slug),
]


def objects_of(team):
    """Detail URLs of a team's objects, for pages and the API."""
    project = Project.objects.filter(team=team).first()
    membership = Membership.objects.filter(team=team).first()
    job = Job.objects.filter(team=team).first()
    booking = Booking.objects.filter(team=team).first()
    quota = Quota.objects.filter(team=team).first()
    return [
        reverse("accounting:team-detail", args=[team.slug]),
        f"/api/v1/teams/{team.slug}/",
        f"/api/v1/projects/{project.pk}/",
        f"/api/v1/memberships/{membership.pk}/",
        f"/api/v1/jobs/{job.pk}/",
        reverse("cluster:job-detail", args=[job.pk]),
        f"/api/v1/bookings/{booking.pk}/",
        f"/api/v1/quotas/{quota.pk}/",
    ]


@pytest.fixture
def both_teams(lead_a, engineer_a, lead_b, engineer_b, small_cluster):
    teams = Team.objects.get(slug="alpha"), Team.objects.get(slug="beta")
    pairs = ((lead_a, engineer_a), (lead_b, engineer_b))
    for index, (team, (lead, engineer)) in enumerate(zip(teams, pairs, strict=True)):
        job_upsert(JobInput(source="slurm", external_id=f"{team.slug}-1", start_time=T0, team=team))
        gpu = Gpu.objects.get(node__hostname="h200-a", index=index)
        booking_create(user=lead, team=team, booker=engineer, gpus=[gpu], start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=2),
                       now=T0)
        Quota.objects.create(team=team, period_start=T0.date(), expires=T0.date() + timedelta(days=30), card_hours=10)
    return teams


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
@pytest.mark.parametrize(("url", "team_of"), API_LISTS)
def test_api_lists_hold_no_row_of_another_team(api, both_teams, request, who, url, team_of):
    response = api.as_user(request.getfixturevalue(who)).get(url)
    assert response.status_code == 200
    teams = {team_of(row) for row in response.json()["results"]}
    assert teams == {"alpha"}


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
@pytest.mark.parametrize(("name", "context_key", "team_of"), PAGE_LISTS)
def test_list_pages_hold_no_row_of_another_team(client, both_teams, request, who, name, context_key, team_of):
    client.force_login(request.getfixturevalue(who))
    response = client.get(reverse(name))
    assert response.status_code == 200
    assert {team_of(row) for row in response.context[context_key]} == {"alpha"}
    assert "Team Beta" not in response.content.decode()


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_another_teams_objects_are_404(api, client, both_teams, request, who):
    user = request.getfixturevalue(who)
    client.force_login(user)
    api.as_user(user)
    _alpha, beta = both_teams
    for url in objects_of(beta):
        getter = api if url.startswith("/api/") else client
        assert getter.get(url).status_code == 404, url


@pytest.mark.parametrize("who", ["admin_user", "finance_user"])
def test_admin_and_finance_see_every_team(api, client, both_teams, request, who):
    user = request.getfixturevalue(who)
    for url, team_of in API_LISTS:
        rows = api.as_user(user).get(url).json()["results"]
        assert {team_of(row) for row in rows} == {"alpha", "beta"}, url
    client.force_login(user)
    _alpha, beta = both_teams
    for url in objects_of(beta):
        getter = api if url.startswith("/api/") else client
        assert getter.get(url).status_code == 200, url


def test_a_lead_creates_projects_only_in_their_own_team(api, both_teams, lead_a):
    client = api.as_user(lead_a)
    created = client.post("/api/v1/projects/", {"team": "alpha", "name": "New idea", "slug": "new-idea"})
    assert created.status_code == 201, created.json()
    refused = client.post("/api/v1/projects/", {"team": "beta", "name": "Sneaky", "slug": "sneaky"})
    assert refused.status_code == 400
    assert "team" in refused.json()
    assert not Project.objects.filter(slug="sneaky").exists()


def test_an_engineer_cannot_create_projects(api, both_teams, engineer_a):
    response = api.as_user(engineer_a).post("/api/v1/projects/", {"team": "alpha", "name": "X", "slug": "x"})
    assert response.status_code == 403
    assert not Project.objects.filter(slug="x").exists()


def test_only_admins_write_teams(api, both_teams, lead_a, finance_user, admin_user):
    payload = {"name": "Gamma", "slug": "gamma", "cost_centre": "CC-G3"}
    assert api.as_user(lead_a).post("/api/v1/teams/", payload).status_code == 403
    assert api.as_user(finance_user).post("/api/v1/teams/", payload).status_code == 403
    assert api.as_user(admin_user).post("/api/v1/teams/", payload).status_code == 201


def test_team_validation_names_the_field_and_rule(api, admin_user):
    response = api.as_user(admin_user).post(
        "/api/v1/teams/", {"name": "Delta", "slug": "delta", "cost_centre": "=cmd|' /C calc'!A0"}
    )
    assert response.status_code == 400
    body = response.json()
    assert "cost_centre" in body
    assert body["detail"].startswith("cost_centre: A cost-centre code is 1 to 32 letters")


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_my_bookings_page_holds_no_booking_of_another_team(client, both_teams, request, who):
    client.force_login(request.getfixturevalue(who))
    response = client.get(reverse("cluster:booking-mine"))
    assert response.status_code == 200
    rows = [booking for table in response.context["tables"] for booking in table["rows"]]
    assert rows and {booking.team.slug for booking in rows} == {"alpha"}
    assert "Team Beta" not in response.content.decode()
