"""The daily board's selectors and charts on a hand-made day (tests/boards/board_day.py): the heatmap cell
is the mean of its minutes, the timeline adds up to capacity, the ranking holds bookings and unplaced jobs
and equals a brute-force sum, long idle counts whole days across a month boundary, unmeasured stays
unmeasured, and the tiles agree with the team table."""

from collections import Counter
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.models import DailyUsage
from accounting.usage.services import aggregate_day
from boards.charts import CODES, heatmap_figure, timeline_figure
from boards.daily import board_json, daily_board
from boards.hours import SERIES
from boards.movers import always_full, always_full_top, long_idle
from boards.ranking import idle_ranking, top_idle
from boards.scope import BoardScope
from cluster.models import HourRollup, MinuteRollup, NodeStatusPeriod
from core.units import TICKS_PER_CARD_HOUR
from tests.accounting.usage.usage_day import GPU, at, job
from tests.boards.board_day import DAY, NOW, SECRET_JOB, roll_up_hours

pytestmark = pytest.mark.django_db
SCOPE = BoardScope(day=DAY, now=NOW)


def minutes(gpu, start_h, values):
    MinuteRollup.objects.bulk_create([
        MinuteRollup(gpu=gpu, bucket=at(start_h) + timedelta(minutes=m), util_mean=v, util_max=v, covered_s=60,
                     util_covered_s=60, sample_count=6)
        for m, v in enumerate(values)
    ])


def refresh():
    roll_up_hours()
    aggregate_day(day=DAY, now=NOW)


def cell(board, label, hour_h):
    heatmap = board_json(board)["heatmap"]
    r, c = heatmap["gpus"].index(label), heatmap["hours"].index(at(hour_h).isoformat().replace("+00:00", "Z"))
    return {"gpu": label, "hour": heatmap["hours"][c], **{key: heatmap[key][r][c] for key in ("kind", "util_pct", "teams", "holders")}}


def test_a_heatmap_cell_is_the_mean_of_its_minutes(board_day, team_a, admin_user):
    job(team_a, board_day["g0"], 20, 21, name="a-ramp")
    minutes(board_day["g0"], 20, [float(m) for m in range(60)])  # 0, 1, … 59 %: mean 29.5
    refresh()
    board = daily_board(SCOPE, user=admin_user)
    assert cell(board, "n1/0", 20) == {
        "gpu": "n1/0", "hour": "2026-11-02T20:00:00Z", "kind": "measured", "util_pct": 29.5, "teams": ["Team Alpha"],
        "holders": ["a-ramp-20"]}
    figure = heatmap_figure(board.hours)
    (trace,) = figure["data"]  # one trace over the matrix, not one per GPU
    assert trace["type"] == "heatmap" and len(trace["z"]) == 3 and all(len(row) == 24 for row in trace["z"])
    assert trace["y"] == ["n1/0", "n1/1", "n2/0"]
    assert trace["z"][0][20] == 29.5 and trace["z"][0][1] == 50.0


def test_unmeasured_stays_unmeasured(board_day, team_a, admin_user):
    job(team_a, board_day["g0"], 21, 22, name="a-silent")  # held, no sample at all
    NodeStatusPeriod.objects.create(node=board_day["g2"].node, status="maintenance", started_at=at(22), ended_at=at(23))
    refresh()
    board = daily_board(SCOPE, user=admin_user)
    assert cell(board, "n1/0", 21)["kind"] == "unmeasured" and cell(board, "n1/0", 21)["util_pct"] is None
    (trace,) = heatmap_figure(board.hours)["data"]
    assert trace["z"][0][21] == CODES["unmeasured"] < 0  # its own colour below the scale, never 0 %
    assert "Unmeasured" in trace["text"][0][21]
    assert cell(board, "n2/0", 22)["kind"] == "down" and trace["z"][2][22] == CODES["down"]
    assert cell(board, "n1/1", 20)["kind"] == "unallocated" and trace["z"][1][20] == CODES["unallocated"]


@pytest.mark.parametrize("team", [None, "a", "b"])
def test_the_timeline_adds_up_to_capacity_in_every_bucket(board_day, admin_user, team_a, team_b, team):
    team_id = {None: None, "a": team_a.pk, "b": team_b.pk}[team]
    scope = BoardScope(day=DAY, now=NOW, team_id=team_id)
    board = daily_board(scope, user=admin_user)
    timeline = board.timeline
    assert len(timeline) == 24
    for row in timeline.itertuples(index=False):
        assert sum(getattr(row, s) for s in SERIES) == row.capacity == 3 * TICKS_PER_CARD_HOUR
        assert not row.partial
    day_ticks = Counter()
    for state, ticks in DailyUsage.objects.filter(day=DAY).values_list("state", "ticks"):
        day_ticks[state] += ticks
    assert int(timeline["unallocated"].sum()) == day_ticks["unallocated"]
    assert int(timeline["down"].sum()) == day_ticks["down"]
    if team is not None:
        assert int(timeline["other_teams"].sum()) > 0
    figure = timeline_figure(timeline, day_bounds=scope.bounds)
    per_x = Counter()
    for trace in figure["data"]:
        for x, y in zip(trace["x"], trace["y"], strict=True):
            per_x[x] += y
    assert len(per_x) == 24 and all(total == pytest.approx(3.0) for total in per_x.values())


def test_a_bucket_not_yet_computed_is_partial(board_day, admin_user):
    from accounting.models import UsageAggregateState

    UsageAggregateState.objects.filter(id=1).update(aggregated_to=at(12))
    timeline = daily_board(SCOPE, user=admin_user).timeline
    assert list(timeline["partial"]) == [False] * 12 + [True] * 12


def test_the_ranking_holds_bookings_and_unplaced_jobs_and_equals_a_brute_force_sum(board_day, admin_user):
    ranking = idle_ranking(SCOPE, user=admin_user)
    kinds = Counter(row.kind for row in ranking)
    assert kinds == {"job": 4, "booking": 1}  # a-train, b-eval, b-mig, a-unplaced and the booking (its job inside: none)
    by_label = {row.label.split(" ·")[0]: row for row in ranking}
    assert by_label["a-unplaced-5"].unplaced and by_label["a-unplaced-5"].idle_ticks == 0
    assert by_label["a-unplaced-5"].allocated_card_hours == Decimal("4.0000")
    # brute force: a-train's idle minutes are the minute rollups under 5 % inside its allocation
    idle_seconds = sum(covered for util, covered in MinuteRollup.objects.filter(
        gpu=board_day["g0"], bucket__gte=at(1), bucket__lt=at(3)).values_list("util_mean", "util_covered_s") if util < 5)
    train = by_label["a-train-1"]
    assert train.idle_ticks == idle_seconds * GPU
    assert train.label == f"a-train-1 · {SECRET_JOB}" and train.project == "Alpha pretraining"
    assert train.idle_cost == Decimal("9.83")  # 29.5 min at 20.00 CNY a card-hour
    assert ranking[0] == train  # most idle first
    assert [row.idle_ticks for row in ranking] == sorted((row.idle_ticks for row in ranking), reverse=True)


@pytest.mark.parametrize("viewer", ["admin_user", "lead_b"])
def test_the_top_of_the_ranking_is_the_head_of_the_whole_ranking(board_day, team_b, request, viewer):
    user = request.getfixturevalue(viewer)
    whole = idle_ranking(SCOPE, user=user)
    assert len(whole) >= 3
    for limit in range(1, len(whole) + 2):
        rows, total = top_idle(SCOPE, user=user, limit=limit)
        assert rows == whole[:limit] and total == len(whole)
    assert top_idle(SCOPE, user=user) == (whole, len(whole))


def test_ties_at_the_cut_are_broken_by_label_as_in_the_whole_ranking(board_day, team_b, admin_user):
    # held an hour each where nothing else is and never sampled: no idle, the same allocated ticks
    for name, gpu, hour in (("b-tie-z", "g0", 21), ("b-tie-a", "g2", 16), ("b-tie-m", "g2", 17)):
        job(team_b, board_day[gpu], hour, hour + 1, name=name)
    refresh()
    whole = idle_ranking(SCOPE, user=admin_user)
    ties = [row.label for row in whole if row.label.startswith("b-tie")]
    assert ties == sorted(ties) and len(ties) == 3
    first = next(n for n, row in enumerate(whole) if row.label.startswith("b-tie"))
    for limit in (first + 1, first + 2):
        assert top_idle(SCOPE, user=admin_user, limit=limit)[0] == whole[:limit]


def test_long_idle_counts_whole_days_across_a_month_boundary(board_day, team_a, admin_user):
    g1 = board_day["g1"]
    later = date(2026, 11, 4)
    for day in (date(2026, 10, 30), date(2026, 10, 31), date(2026, 11, 1)):
        DailyUsage.objects.filter(day=day, gpu=g1).delete()
        DailyUsage.objects.create(day=day, gpu=g1, state="idle", team=team_a, ticks=GPU * 86400)
    # Nov 2 is g1's busy day (the booking and team B's job): the run before it ends on Nov 1
    run = {row.label: row for row in long_idle(BoardScope(day=date(2026, 11, 1), now=NOW), user=admin_user)}
    assert run["n1/1"].since == date(2026, 10, 30) and run["n1/1"].days == 3
    assert run["n1/1"].holders.teams == []  # no holder rows were written for the hand-made days
    # two resting days are not enough for the default of three
    DailyUsage.objects.filter(day=date(2026, 10, 30), gpu=g1).delete()
    assert "n1/1" not in {row.label for row in long_idle(BoardScope(day=date(2026, 11, 1), now=NOW), user=admin_user)}
    assert {row.label for row in long_idle(BoardScope(day=date(2026, 11, 1), now=NOW), user=admin_user,
                                           min_days=2)} >= {"n1/1"}
    assert long_idle(BoardScope(day=later, now=NOW), user=admin_user) == []  # no usage that day: nothing rests


def test_always_full_needs_every_measured_minute(board_day, team_b, admin_user):
    g2 = board_day["g2"]
    job(team_b, g2, 16, 18, name="b-full")
    minutes(g2, 16, [97.0] * 60 + [99.0] * 59 + [94.0])  # the last minute dips under 95 %
    refresh()
    assert always_full(SCOPE, user=admin_user) == []
    MinuteRollup.objects.filter(gpu=g2, util_mean=94.0).update(util_mean=95.0)
    refresh()
    (full,) = always_full(SCOPE, user=admin_user)
    assert (full.label, full.measured_minutes, full.min_util) == ("n2/0", 120, 95.0)
    assert full.holders.teams == ["Team Beta"]


def test_always_full_reads_the_hours_lowest_minute_not_the_minutes(board_day, team_b, admin_user):
    g2 = board_day["g2"]
    job(team_b, g2, 16, 18, name="b-full")
    minutes(g2, 16, [97.0] * 60 + [99.0] * 59 + [95.5])
    refresh()
    # the rollup worker wrote each hour's lowest minute and its minutes with a utilization
    hours = HourRollup.objects.filter(gpu=g2, util_covered_s__gt=0).order_by("bucket")
    assert [(h.util_min_minute, h.util_minutes) for h in hours] == [(97.0, 60), (95.5, 60)]
    with CaptureQueriesContext(connection) as read:
        (full,) = always_full(SCOPE, user=admin_user)
    assert (full.measured_minutes, full.min_util) == (120, 95.5)
    assert not any(MinuteRollup._meta.db_table in query["sql"] for query in read.captured_queries)
    # hours rolled up before the columns existed: their GPU's minutes are read, with the same answer
    hours.filter(bucket__hour=17).update(util_min_minute=None, util_minutes=None)
    with CaptureQueriesContext(connection) as read:
        (again,) = always_full(SCOPE, user=admin_user)
    assert (again.measured_minutes, again.min_util) == (120, 95.5)
    assert any(MinuteRollup._meta.db_table in query["sql"] for query in read.captured_queries)
    # the page shows the first rows and says how many there are in all
    assert always_full_top(SCOPE, user=admin_user, limit=0) == ([], 1)
    assert always_full_top(SCOPE, user=admin_user, limit=5) == ([again], 1)


def test_the_page_says_how_many_movers_it_leaves_out():
    from django.template.loader import render_to_string
    from django.utils import translation

    html = render_to_string("boards/_movers_more.html", {"shown": [1, 2], "total": 2, "testid": "x"})
    assert html.strip() == ""  # all shown: nothing to say
    html = render_to_string("boards/_movers_more.html", {"shown": [1, 2], "total": 400, "testid": "x"})
    assert "The first 2 of 400 GPUs" in html
    with translation.override("zh-hans"):
        html = render_to_string("boards/_movers_more.html", {"shown": [1, 2], "total": 400, "testid": "x"})
    assert "400" in html and "The first" not in html


def test_the_idle_cost_tile_is_the_sum_of_the_team_table(board_day, admin_user):
    body = board_json(daily_board(SCOPE, user=admin_user))
    assert body["tiles"]["idle_cost"]["value"] == str(sum(Decimal(t["idle_cost"]) for t in body["teams"]))
    assert body["tiles"]["idle_card_hours"]["value"] == "0.4917"
    idle = sum(Decimal(t["card_hours_idle"]) for t in body["teams"])
    assert idle == Decimal(body["tiles"]["idle_card_hours"]["value"])
    assert [t["team"] for t in body["teams"]] == ["Team Alpha", "Team Beta"]  # by idle cost
    alpha = body["teams"][0]
    assert alpha["quota_used_pct"] == "8.0" and alpha["usage_cost"] == "160.00"


def test_filters_narrow_the_gpus(board_day, admin_user):
    from cluster.models import Node

    n2 = Node.objects.get(hostname="n2")
    body = board_json(daily_board(BoardScope(day=DAY, now=NOW, node_id=n2.pk), user=admin_user))
    assert body["tiles"]["capacity_gpus"]["value"] == 1
    assert body["heatmap"]["gpus"] == ["n2/0"] and len(body["heatmap"]["hours"]) == 24
    assert [row["node"] for row in body["nodes"]] == ["n2"]
    # a node filter leaves the unplaced job out: its GPUs are not known to be there
    assert all(not row["unplaced"] for row in body["idle_allocations"])
