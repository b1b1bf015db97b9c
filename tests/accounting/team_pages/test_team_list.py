"""The team list (issue 15): every member of a team counted whoever looks, the team's efficiency this month
to date and its tightest quota's use, in a fixed number of queries."""

import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from accounting.models import DailyUnplacedUsage, DailyUsage, Quota
from cluster.models import Gpu
from teams.models import Membership, Project, Team

CARD_HOUR = 840_000 * 3600  # ticks
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def alpha_in_november(team_a, team_b, lead_b, small_cluster, monkeypatch):
    """Team A this November: 8 busy + 2 idle H200 card-hours on the 10th and 1 unplaced card-hour on the
    15th (72.7 % efficient); a team-wide quota of 120 card-hours (11 used: 9.2 %) and an H200 quota of 20
    (10 used: 50.0 %). Its October (all idle, an October quota overrun) is not this month. Team B: one
    member, no usage and no quota."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    h200 = Gpu.objects.filter(model=small_cluster["h200"]).order_by("pk").first()
    project = Project.objects.get(slug="alpha-pre")
    day = date(2026, 11, 10)
    DailyUsage.objects.create(day=day, gpu=h200, state="busy", team=team_a, project=project, ticks=8 * CARD_HOUR)
    DailyUsage.objects.create(day=day, gpu=h200, state="idle", team=team_a, project=project, ticks=2 * CARD_HOUR)
    DailyUnplacedUsage.objects.create(day=date(2026, 11, 15), team=team_a, gpu_model=small_cluster["l40s"],
                                      ticks=CARD_HOUR)
    DailyUsage.objects.create(day=date(2026, 10, 30), gpu=h200, state="idle", team=team_a, ticks=30 * CARD_HOUR)
    Quota.objects.create(team=team_a, period_start=date(2026, 10, 1), expires=date(2026, 11, 1), card_hours=5)
    Quota.objects.create(team=team_a, period_start=date(2026, 11, 1), expires=date(2026, 12, 1), card_hours=120)
    Quota.objects.create(team=team_a, gpu_model=small_cluster["h200"], period_start=date(2026, 11, 1),
                         expires=date(2026, 12, 1), card_hours=20)
    return team_a


def shown_rows(response) -> dict[str, list[str]]:
    """The list as a person reads it: each team's cells (tags stripped, spaces collapsed), by team name."""
    rows = re.findall(r'<tr data-testid="team-row">(.*?)</tr>', response.content.decode(), flags=re.S)
    cells = [[" ".join(re.sub(r"<[^>]+>", "", cell).split()) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
             for row in rows]
    return {row[0]: row[1:] for row in cells}


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_it_counts_every_member_for_a_member_of_the_team(client, request, who, lead_a, engineer_a,
                                                          alpha_in_november):
    client.force_login(request.getfixturevalue(who))
    response = client.get(reverse("accounting:team-list"))
    assert response.status_code == 200
    # Cost centre, members, projects, efficiency, quota used.
    assert shown_rows(response) == {"Team Alpha": ["CC-A1", "2", "1", "72.7 %", "50.0 %"]}


@pytest.mark.django_db
def test_it_shows_an_admin_every_team_with_its_figures(client, admin_user, lead_a, engineer_a, alpha_in_november):
    client.force_login(admin_user)
    response = client.get(reverse("accounting:team-list"))
    assert shown_rows(response) == {
        "Team Alpha": ["CC-A1", "2", "1", "72.7 %", "50.0 %"],
        "Team Beta": ["CC-B2", "1", "1", "—", "—"],  # nothing allocated this month, no quota in force
    }
    alpha = response.context["rows"][0]
    assert (alpha.efficiency_percent, alpha.quota_used_percent) == (Decimal("72.7"), Decimal("50.0"))


@pytest.mark.django_db
def test_a_team_with_no_member_shows_zero(client, admin_user, db):
    Team.objects.create(name="Team Gamma", slug="gamma", cost_centre="CC-G3")
    client.force_login(admin_user)
    assert shown_rows(client.get(reverse("accounting:team-list"))) == {"Team Gamma": ["CC-G3", "0", "0", "—", "—"]}


@pytest.mark.django_db
def test_the_query_count_is_fixed_whatever_the_number_of_teams(client, admin_user, lead_a, engineer_a,
                                                                 alpha_in_november, small_cluster, make_user,
                                                                 django_assert_num_queries):
    client.force_login(admin_user)
    client.get(reverse("accounting:team-list"))  # warm the session and the per-user caches' first reads
    with django_assert_num_queries(QUERIES):
        assert len(client.get(reverse("accounting:team-list")).context["rows"]) == 2
    h200 = Gpu.objects.filter(model=small_cluster["h200"]).order_by("pk").last()
    for n in range(3):
        team = Team.objects.create(name=f"Team {n}", slug=f"team-{n}", cost_centre=f"CC-{n}")
        Membership.objects.create(user=make_user(f"member-{n}"), team=team)
        DailyUsage.objects.create(day=date(2026, 11, 11), gpu=h200, state="busy", team=team, ticks=CARD_HOUR)
        Quota.objects.create(team=team, period_start=date(2026, 11, 1), expires=date(2026, 12, 1), card_hours=4)
    with django_assert_num_queries(QUERIES):
        response = client.get(reverse("accounting:team-list"))
    assert len(response.context["rows"]) == 5
    assert shown_rows(response)["Team 0"] == ["CC-0", "1", "0", "100.0 %", "25.0 %"]


# Session, user, groups; teams with their counts, placed and unplaced usage, quotas and their two usage reads;
# the page header's memberships and unread notifications.
QUERIES = 11
