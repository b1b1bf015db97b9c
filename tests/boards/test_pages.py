"""The daily board page, its live JSON and its API (issue 14): scoped to each role (no other team's job
name, user, project or cost anywhere in the HTML or the JSON), the same figures on the page and in the API,
parameters refused with the parameter and the rule, and each page's query count pinned."""

import json
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.boards.board_day import DAY, NOW, SECRET_JOB, SECRET_USER

pytestmark = pytest.mark.django_db
ALPHA_PROJECT = "Alpha pretraining"
ALPHA_COSTS = ("9.83", "160.00")  # team A's idle and usage cost of the day
BETA_COST = "27.14"


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def page(client, user, path="/", **params):
    client.force_login(user)
    response = client.get(path, {"date": DAY.isoformat(), **params})
    assert response.status_code == 200
    return response.content.decode()


def api_body(api, user, **params):
    response = api.as_user(user).get("/api/v1/boards/daily/", {"date": DAY.isoformat(), **params})
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize("role", ["lead_b", "engineer_b"])
def test_another_team_sees_no_job_user_project_or_cost_of_team_a(board_day, frozen, client, api, request, role):
    user = request.getfixturevalue(role)
    html = page(client, user) + page(client, user, "/board/idle/") + page(client, user, "/board/live/")
    body = json.dumps(api_body(api, user))
    for text in (html, body):
        for secret in (SECRET_JOB, SECRET_USER, ALPHA_PROJECT, "a-train", "a-unplaced", *ALPHA_COSTS):
            assert secret not in text, (role, secret)
        assert "Team Alpha" in text  # the holder's team name is a cluster-wide figure
    allocations = json.loads(body)["idle_allocations"]
    alpha = [row for row in allocations if row["team"] == "Team Alpha"]
    assert alpha == [{"kind": "team", "id": None, "label": None, "team": "Team Alpha", "project": None, "user": None,
                      "gpus": None, "allocations": 3, "card_hours_idle": "0.4917", "card_hours_allocated": "8.0000",
                      "idle_share_pct": "6.1", "idle_cost": None, "unplaced": False,
                      "card_hours_idle_memory_held": "0.0000", "card_hours_shallow_busy": None, "shallow_busy_cost": None}]
    teams = {row["team"]: row for row in json.loads(body)["teams"]}
    assert teams["Team Alpha"]["idle_cost"] is None and teams["Team Alpha"]["quota_used_pct"] is None


def test_the_lead_sees_the_own_team_in_full_and_its_costs_only(board_day, frozen, client, api, lead_a):
    html = page(client, lead_a)
    assert SECRET_JOB in html and SECRET_USER in html and ALPHA_PROJECT in html and "9.83" in html
    assert BETA_COST not in html and "b-eval" not in html
    body = api_body(api, lead_a)
    teams = {row["team"]: row for row in body["teams"]}
    assert teams["Team Alpha"]["usage_cost"] == "160.00" and teams["Team Beta"]["usage_cost"] is None
    assert body["tiles"]["idle_cost"]["value"] == "9.83"


def test_an_engineer_sees_the_own_jobs_but_no_costs(board_day, frozen, client, api, engineer_a):
    html = page(client, engineer_a)
    assert SECRET_JOB in html and "Idle cost" not in html and "9.83" not in html and "160.00" not in html
    body = api_body(api, engineer_a)
    assert "idle_cost" not in body["tiles"]
    assert all(row["idle_cost"] is None and row["usage_cost"] is None for row in body["teams"])
    assert all(row["idle_cost"] is None for row in body["idle_allocations"])


@pytest.mark.parametrize("role", ["admin_user", "finance_user"])
def test_admin_and_finance_see_every_team(board_day, frozen, client, api, request, role):
    user = request.getfixturevalue(role)
    html = page(client, user)
    assert SECRET_JOB in html and "b-eval-13" in html and BETA_COST in html and "160.00" in html
    body = api_body(api, user)
    assert {row["team"] for row in body["teams"]} == {"Team Alpha", "Team Beta"}


def test_the_page_and_the_api_show_the_same_figures(board_day, frozen, client, api, admin_user):
    html = page(client, admin_user)
    body = api_body(api, admin_user)
    assert body["tiles"]["idle_cost"]["value"] == "9.83" and "9.83 CNY" in html
    assert body["tiles"]["efficiency"]["value"] in html
    (train,) = [row for row in body["idle_allocations"] if row["label"] and SECRET_JOB in row["label"]]
    assert f'href="/jobs/{train["id"]}/"' in html


def test_the_board_is_the_home_page_and_defaults_to_yesterday(board_day, client, admin_user):
    client.force_login(admin_user)
    with time_machine.travel(NOW + timedelta(days=1), tick=False):  # Nov 4, 01:00: yesterday is Nov 3
        response = client.get("/")
    assert response.status_code == 200
    assert response.context["scope"].day == DAY + timedelta(days=1)
    with time_machine.travel(NOW, tick=False):
        response = client.get("/")
    assert response.context["scope"].day == DAY
    assert client.get("/", follow=False).status_code == 200


def test_today_is_live_and_its_json_refreshes_tiles_timeline_and_health(board_day, frozen, client, admin_user):
    client.force_login(admin_user)
    today = (DAY + timedelta(days=1)).isoformat()
    response = client.get("/", {"date": today})
    assert response.context["scope"].live and 'data-live-url="/board/live/?date=' in response.content.decode()
    live = client.get("/board/live/", {"date": today}).json()
    assert set(live) == {"computed_to", "tiles_html", "health_html", "timeline"}
    assert 'data-tile="allocation_rate"' in live["tiles_html"] and "n1" in live["health_html"]
    assert "data-live-url" not in client.get("/", {"date": DAY.isoformat()}).content.decode()


@pytest.mark.parametrize(("params", "field"), [
    ({"date": "2026-13-01"}, "date"), ({"date": "2026-11-04"}, "date"), ({"date": "1999-12-31"}, "date"),
    ({"team": "nope"}, "team"), ({"gpu_model": "Z9"}, "gpu_model"), ({"node": "n9"}, "node"), ({"pool": "x"}, "pool"),
])
def test_a_bad_parameter_is_refused_naming_it(board_day, frozen, client, api, admin_user, params, field):
    response = api.as_user(admin_user).get("/api/v1/boards/daily/", params)
    assert response.status_code == 400
    assert field in response.json()["detail"]
    client.force_login(admin_user)
    html = client.get("/", params)
    assert html.status_code == 200 and 'data-testid="board-errors"' in html.content.decode()
    assert html.context["scope"].day == DAY  # the default board, with the error shown


def test_signed_out_is_sent_to_sign_in(client):
    assert client.get("/").status_code == 302
    assert client.get("/api/v1/boards/daily/").status_code in (401, 403)


def test_the_api_is_in_the_schema(client, admin_user):
    client.force_login(admin_user)
    schema = client.get("/api/v1/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/boards/daily/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"date", "pool", "gpu_model", "node", "team"}
    assert {"200", "400"} <= set(operation["responses"])


# Fixed whatever the number of GPUs, teams or allocations (each read is one GROUP BY): a change means a new read.
# The page's 42 include two of issue 16: the day's refinements of busy and idle, and the GPUs busy at idle power;
# the page and the idle allocations one more each (issue 19): the input-bound hint of the job rows shown.
@pytest.mark.parametrize(("path", "expected"), [("/", 42), ("/board/live/", 28), ("/board/idle/", 12)])
def test_query_counts_are_pinned(board_day, frozen, client, admin_user, path, expected):
    client.force_login(admin_user)
    client.get(path, {"date": DAY.isoformat()})  # warm the session and content types
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path, {"date": DAY.isoformat()}).status_code == 200
    assert len(queries) == expected, [q["sql"][:120] for q in queries]


def test_node_health_lists_the_nodes_to_look_at_and_counts_the_healthy_ones(board_day, frozen, client, api,
                                                                            admin_user):
    """At 125 nodes the block stays a few rows: the healthy nodes are one line with their largest lag and
    a link to the inventory; the JSON still lists every node."""
    from cluster.models import CollectionState, Node

    for name in ("n3", "n4", "n5"):
        node = Node.objects.create(hostname=name, pool="train")
        CollectionState.objects.create(node=node, last_success_at=NOW, data_complete_to=NOW - timedelta(seconds=20),
                                       lag_s=20.0 if name != "n4" else 45.0)
    for node in Node.objects.filter(hostname__in=("n1", "n2")):
        CollectionState.objects.update_or_create(node=node, defaults={"lag_s": 900.0, "last_success_at": NOW})
    Node.objects.filter(hostname="n5").update(status="maintenance")

    html = page(client, admin_user)
    health = html[html.index('data-testid="node-health"'):]
    health = health[:health.index("</table>")]
    assert [name for name in ("n1", "n2", "n3", "n4", "n5") if f">{name}</a>" in health] == ["n1", "n2", "n5"]
    assert "2 nodes up and collecting (collection lag at most 45 s), with nothing to look at." in health
    assert 'href="/inventory/"' in health
    pooled = page(client, admin_user, pool="train")
    assert 'href="/inventory/?pool=train"' in pooled and "nodes up and collecting (collection lag at most 45 s)" in pooled

    assert sorted(row["node"] for row in api_body(api, admin_user)["nodes"]) == ["n1", "n2", "n3", "n4", "n5"]
