"""The board at scale (issue 18): past CARDHOUR_BOARD_GPU_ROWS GPUs the heatmap's rows are nodes, past
CARDHOUR_BOARD_NODE_ROWS nodes pools; a node's or pool's row opens its own board (``node=``, ``pool=``), which
is the per-GPU board of that node, scoped to the viewer as every board is. On the usage tests' hand-made day
(two nodes: n1 with two GPUs, n2 with one and a MIG slice), with the thresholds set low."""

import json

import numpy as np
import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st

from boards.daily import board_json, daily_board
from boards.hours import SERIES, day_hours, group_hours
from boards.maths import GPU_ROWS, NODE_ROWS, POOL_ROWS, heatmap_level
from boards.scope import BoardScope
from cluster.models import Node
from tests.boards.board_day import DAY, NOW, SECRET_JOB, SECRET_USER

ALPHA_PROJECT = "Alpha pretraining"


# ---- the rule ------------------------------------------------------------------------------------------------

def test_it_groups_just_past_each_threshold():
    rule = {"max_gpu_rows": 512, "max_node_rows": 300}
    assert heatmap_level(gpus=512, nodes=64, pools=1, **rule) == GPU_ROWS
    assert heatmap_level(gpus=513, nodes=65, pools=1, **rule) == NODE_ROWS
    assert heatmap_level(gpus=2400, nodes=300, pools=4, **rule) == NODE_ROWS
    assert heatmap_level(gpus=2408, nodes=301, pools=4, **rule) == POOL_ROWS
    assert heatmap_level(gpus=10_000, nodes=1250, pools=1, **rule) == NODE_ROWS  # one pool: a row says nothing
    assert heatmap_level(gpus=1024, nodes=1, pools=1, **rule) == GPU_ROWS  # one node: its GPUs


@given(gpus=st.integers(0, 50_000), nodes=st.integers(0, 10_000), pools=st.integers(0, 100),
       max_gpu_rows=st.integers(1, 5000), max_node_rows=st.integers(1, 1000))
def test_the_rows_never_outnumber_the_limit_but_where_nothing_coarser_helps(gpus, nodes, pools, max_gpu_rows,
                                                                          max_node_rows):
    level = heatmap_level(gpus=gpus, nodes=nodes, pools=pools, max_gpu_rows=max_gpu_rows, max_node_rows=max_node_rows)
    rows = {GPU_ROWS: gpus, NODE_ROWS: nodes, POOL_ROWS: pools}[level]
    if level == GPU_ROWS:
        assert rows <= max_gpu_rows or nodes <= 1
    elif level == NODE_ROWS:
        assert gpus > max_gpu_rows and nodes > 1 and (rows <= max_node_rows or pools <= 1)
    else:
        assert gpus > max_gpu_rows and nodes > max_node_rows and pools > 1
    # more GPUs, nodes or pools never make the rows finer
    order = [GPU_ROWS, NODE_ROWS, POOL_ROWS]
    for more in ({"gpus": gpus + 1, "nodes": nodes, "pools": pools}, {"gpus": gpus, "nodes": nodes + 1, "pools": pools},
                 {"gpus": gpus, "nodes": nodes, "pools": pools + 1}):
        coarser = heatmap_level(**more, max_gpu_rows=max_gpu_rows, max_node_rows=max_node_rows)
        assert order.index(coarser) >= order.index(level), more


# ---- the sums per node and pool ------------------------------------------------------------------------------

@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def grouped(settings):
    """Boards of more than one GPU have a row per node, of more than one node a row per pool."""
    settings.CARDHOUR_BOARD_GPU_ROWS = 1
    settings.CARDHOUR_BOARD_NODE_ROWS = 1


@pytest.mark.django_db
@pytest.mark.parametrize("by", [NODE_ROWS, POOL_ROWS])
def test_a_group_hour_is_the_sum_of_its_gpu_hours(board_day, admin_user, by):
    Node.objects.filter(hostname="n2").update(pool="infer")
    scope = BoardScope(day=DAY, now=NOW)
    gpus = day_hours(scope, user=admin_user, done=NOW)
    groups = group_hours(scope, by=by, done=NOW)
    key = gpus["node"] if by == NODE_ROWS else gpus["node"].map({"n1": "default", "n2": "infer"})
    expected = gpus.assign(group=key).groupby(["group", "hour"])[list(SERIES)].sum().reset_index()
    got = groups.sort_values(["group", "hour"]).reset_index(drop=True)
    assert got["group"].tolist() == expected["group"].tolist() and got["hour"].tolist() == expected["hour"].tolist()
    for series in SERIES:
        assert got[series].tolist() == expected[series].tolist(), series
    assert groups.groupby("group")["gpus"].first().to_dict() == gpus.assign(group=key).groupby("group")[
        "gpu_id"].nunique().to_dict()
    # the utilization: the GPU-hours' means weighted by their busy and idle ticks
    measured = gpus[gpus["util"].notna()].assign(group=key)
    weight = measured["busy"] + measured["idle"]
    measured = measured.assign(w=weight, wu=weight * measured["util"])
    sums = measured[measured["w"] > 0].groupby(["group", "hour"])[["w", "wu"]].sum()
    for (group, hour), row in sums.iterrows():
        cell = groups[(groups["group"] == group) & (groups["hour"] == hour)].iloc[0]
        assert cell["util_ticks"] == row["w"] and cell["util"] == pytest.approx(row["wu"] / row["w"])
    assert groups["util"].notna().any() and groups["teams"].map(len).max() >= 1


@pytest.mark.django_db
def test_a_team_filter_keeps_other_teams_apart_in_the_groups(board_day, team_a, admin_user):
    scope = BoardScope(day=DAY, now=NOW, team_id=team_a.pk)
    gpus = day_hours(scope, user=admin_user, done=NOW)
    groups = group_hours(scope, by=NODE_ROWS, done=NOW)
    assert groups["other_teams"].sum() == gpus["other_teams"].sum() > 0
    assert groups["busy"].sum() == gpus["busy"].sum()


# ---- the page, the API and the drill-down --------------------------------------------------------------------

def page(client, user, **params):
    client.force_login(user)
    response = client.get("/", {"date": DAY.isoformat(), **params})
    assert response.status_code == 200
    return response


def heatmap_of(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="fig-heatmap" type="application/json">') + len(
        '<script id="fig-heatmap" type="application/json">')
    return json.loads(html[start:html.index("</script>", start)])


@pytest.mark.django_db
def test_the_page_has_a_row_per_node_and_each_opens_the_nodes_gpus(board_day, frozen, grouped, client, admin_user,
                                                                  team_a):
    response = page(client, admin_user, team=team_a.slug)
    assert response.context["board"].level == NODE_ROWS
    html = response.content.decode()
    assert 'data-level="node"' in html and "Node × hour" in html
    (trace,) = heatmap_of(response)["data"]
    assert trace["y"] == ["n1", "n2"] and trace["text"][0][1].startswith("GPUs: 2<br>")
    assert trace["meta"]["drill"] == [f"?date={DAY.isoformat()}&team=alpha&node=n1",
                                      f"?date={DAY.isoformat()}&team=alpha&node=n2"]
    assert 'href="?date=2026-11-02&amp;team=alpha&amp;node=n1" data-testid="drill-link"' in html
    assert SECRET_JOB not in json.dumps(heatmap_of(response))  # a node's row names no job, even to an admin

    node = page(client, admin_user, team=team_a.slug, node="n1")  # the drill-down: n1's GPUs
    assert node.context["board"].level == GPU_ROWS and node.context["scope"].node_id is not None
    (gpus,) = heatmap_of(node)["data"]
    assert gpus["y"] == ["n1/0", "n1/1"]
    assert SECRET_JOB in node.content.decode()  # the admin sees team A's job in full on the GPUs' board


@pytest.mark.django_db
def test_past_the_node_limit_the_rows_are_pools_and_open_the_pools_nodes(board_day, frozen, grouped, client,
                                                                        admin_user):
    Node.objects.filter(hostname="n2").update(pool="infer")
    response = page(client, admin_user)
    assert response.context["board"].level == POOL_ROWS
    (trace,) = heatmap_of(response)["data"]
    assert trace["y"] == ["default", "infer"]
    assert trace["meta"]["drill"] == [f"?date={DAY.isoformat()}&pool=default", f"?date={DAY.isoformat()}&pool=infer"]
    Node.objects.filter(hostname="n2").update(pool="default")
    assert page(client, admin_user, pool="default").context["board"].level == NODE_ROWS  # its two nodes
    Node.objects.filter(hostname="n2").update(pool="infer")
    assert page(client, admin_user, pool="default").context["board"].level == GPU_ROWS  # one node: its GPUs


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["lead_b", "engineer_b"])
def test_another_team_sees_every_nodes_occupancy_but_no_detail_of_team_a(board_day, frozen, grouped, client, api,
                                                                        request, role):
    user = request.getfixturevalue(role)
    grouped_html = page(client, user).content.decode()
    node_html = page(client, user, node="n1").content.decode()
    response = api.as_user(user).get("/api/v1/boards/daily/", {"date": DAY.isoformat()})
    assert response.status_code == 200
    body = response.json()
    for text in (grouped_html, node_html, json.dumps(body)):
        for secret in (SECRET_JOB, SECRET_USER, ALPHA_PROJECT, "a-train", "a-unplaced", "9.83"):
            assert secret not in text, (role, secret)
    assert "Team Alpha" in grouped_html and "Team Alpha" in node_html  # team names are cluster-wide
    heatmap = body["heatmap"]
    assert heatmap["level"] == "node" and heatmap["nodes"] == ["n1", "n2"] and heatmap["gpus"] == [2, 1]
    assert "holders" not in heatmap
    measured = [v for row in heatmap["util_pct"] for v in row if v is not None]
    assert measured, heatmap  # the other team's GPUs' occupancy is shown


@pytest.mark.django_db
def test_the_api_gives_each_states_share_of_a_nodes_hour(board_day, frozen, grouped, api, admin_user):
    response = api.as_user(admin_user).get("/api/v1/boards/daily/", {"date": DAY.isoformat()})
    assert response.status_code == 200
    heatmap = response.json()["heatmap"]
    assert set(heatmap["share_pct"]) == set(SERIES) and len(heatmap["hours"]) == 24
    shares = np.array([[[np.nan if v is None else v for v in row] for row in heatmap["share_pct"][s]] for s in SERIES])
    present = ~np.isnan(shares[0])
    assert present.any()
    assert np.allclose(np.nansum(shares, axis=0)[present], 100, atol=0.35)  # six shares rounded to one place
    assert {k for row in heatmap["kind"] for k in row} >= {"measured", "unallocated"}


@pytest.mark.django_db
def test_a_bad_node_is_refused_naming_it(board_day, frozen, grouped, client, api, admin_user):
    response = api.as_user(admin_user).get("/api/v1/boards/daily/", {"date": DAY.isoformat(), "node": "n1;drop"})
    assert response.status_code == 400
    assert "node" in response.json()["detail"] and "hostname" in response.json()["detail"]
    html = page(client, admin_user, node="nowhere")
    assert 'data-testid="board-errors"' in html.content.decode()
    assert html.context["scope"].node_id is None and html.context["board"].level == NODE_ROWS


@pytest.mark.django_db
def test_the_json_matches_the_page_at_node_level(board_day, frozen, grouped, admin_user):
    board = daily_board(BoardScope(day=DAY, now=NOW), user=admin_user)
    heatmap = board_json(board)["heatmap"]
    frame = board.hours
    n1_busy = frame[frame["group"] == "n1"]
    hour = n1_busy.loc[n1_busy["busy"].idxmax()]
    column = heatmap["hours"].index(hour["hour"].isoformat().replace("+00:00", "Z"))
    total = sum(int(hour[s]) for s in SERIES)
    assert heatmap["share_pct"]["busy"][0][column] == round(100 * int(hour["busy"]) / total, 1)


# Fixed whatever the number of nodes. At node level the board reads no holders (no job is shown): 40 queries,
# the per-GPU board's 42 (tests/boards/test_pages.py) less its two reads of allocations and holds. A node's
# board (the drill-down, a row per GPU) reads 41: the node's lookup, and its tiles sum the per-GPU usage (two
# reads) instead of the sums by GPU model (three), which a node filter cannot use.
@pytest.mark.django_db
@pytest.mark.parametrize(("params", "expected"), [({}, 40), ({"node": "n1"}, 41)])
def test_query_counts_are_pinned(board_day, frozen, grouped, client, admin_user, params, expected):
    client.force_login(admin_user)
    client.get("/", {"date": DAY.isoformat(), **params})  # warm the session and content types
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/", {"date": DAY.isoformat(), **params}).status_code == 200
    assert len(queries) == expected, [q["sql"][:120] for q in queries]
