"""The board's team table shows each guaranteed share beside the team's use of that model (issue 19): the
card-hours it guaranteed over the day and those the team held, and a row for a team whose guarantee went
unused (no usage at all), so idle capacity has a name."""

from datetime import time
from decimal import Decimal

import pytest
import time_machine

from cluster.models import GuaranteeDays, TeamGuarantee
from teams.models import Team
from tests.boards.board_day import DAY, NOW

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def test_the_team_table_shows_guarantees_beside_use_and_an_unused_one(board_day, frozen, client, admin_user,
                                                                        team_a, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    model = board_day["g0"].model
    gamma = Team.objects.create(name="Team Gamma", slug="gamma", cost_centre="CC-G3")
    TeamGuarantee.objects.create(team=team_a, gpu_model=model, gpus=1)
    TeamGuarantee.objects.create(team=gamma, gpu_model=model, gpus=2, days=GuaranteeDays.WEEKDAYS,
                                 start_time=time(9), end_time=time(18))  # DAY is a Monday: 9 hours
    client.force_login(admin_user)
    response = client.get("/", {"date": DAY.isoformat()})
    assert response.status_code == 200
    rows = {row.name: row for row in response.context["board"].headline.teams}

    (alpha,) = rows["Team Alpha"].guarantees
    assert alpha.label == f"1 × {model.short_name}, always"
    assert alpha.guaranteed == Decimal("24.0000")
    assert alpha.used == rows["Team Alpha"].allocated  # the day's only model: all its use
    (unused,) = rows["Team Gamma"].guarantees
    assert (unused.label, unused.guaranteed, unused.used) == (
        f"2 × {model.short_name}, Monday to Friday 09:00–18:00", Decimal("18.0000"), Decimal("0.0000"))
    assert rows["Team Gamma"].allocated == 0 and rows["Team Beta"].guarantees == ()
    html = response.content.decode()
    assert f"2 × {model.short_name}, Monday to Friday 09:00–18:00: 0.0 of 18.0 card-h" in html
    assert html.count('data-testid="team-guarantee"') == 2


def test_a_team_filter_keeps_only_its_guarantee(board_day, frozen, client, admin_user, team_a, team_b):
    model = board_day["g0"].model
    TeamGuarantee.objects.create(team=team_b, gpu_model=model, gpus=1)
    client.force_login(admin_user)
    response = client.get("/", {"date": DAY.isoformat(), "team": "alpha"})
    assert response.status_code == 200
    assert [row.name for row in response.context["board"].headline.teams] == ["Team Alpha"]
