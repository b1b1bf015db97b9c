"""The week and month views of the daily board (issue 15, boards/periods/summary.py): the week's tiles are its
days' daily-board figures summed (one selector), each against the week before; the team and model tables
scoped to each role, with a sparkline per team; a month; CSV downloads with a total row; refused parameters;
query counts that do not grow with the number of days or GPUs."""

import csv
import io
from collections import Counter
from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.models import DailyHolderUsage, DailyUnplacedUsage, DailyUsage
from accounting.money.pricing import line_amount
from accounting.usage.detail import write_model_sums
from accounting.usage.states import BUSY, IDLE
from boards.figures import headline, span_headline
from boards.maths import SERIES, card_hours_by_state
from boards.periods.charts import days_figure, sparkline_points, sparkline_svg
from boards.periods.summary import WEEK, last_full_week, period_summary
from boards.scope import BoardScope
from cluster.models import Gpu, Node
from core.timeutils import week_days
from tests.boards.board_day import DAY, NOW, SECRET_JOB, SECRET_USER

pytestmark = pytest.mark.django_db
LATER = NOW + timedelta(days=7)  # 2026-11-10 01:00: the week of DAY (Mon 2 – Sun 8 November) is over
MONDAY, SUNDAY = date(2026, 11, 2), date(2026, 11, 8)
COPIES = (date(2026, 11, 4), date(2026, 11, 6))  # DAY's usage again on these days
ALPHA_PROJECT = "Alpha pretraining"
CARD_HOUR_KEYS = ("idle_card_hours", "unmeasured_card_hours", "unallocated_card_hours", "down_card_hours")


@pytest.fixture
def later():
    with time_machine.travel(LATER, tick=False):
        yield


def copy_day(to: date, *, swap_busy_idle: bool = False) -> None:
    """DAY's aggregates again on ``to`` (busy and idle swapped when asked, so the days differ)."""
    swap = {BUSY: IDLE, IDLE: BUSY} if swap_busy_idle else {}
    DailyUsage.objects.bulk_create([
        DailyUsage(day=to, gpu_id=r.gpu_id, state=swap.get(r.state, r.state), team_id=r.team_id,
                   project_id=r.project_id, ticks=r.ticks)
        for r in DailyUsage.objects.filter(day=DAY, gpu__node__hostname__in=("n1", "n2"))
    ])
    DailyUnplacedUsage.objects.bulk_create([
        DailyUnplacedUsage(day=to, team_id=r.team_id, project_id=r.project_id, gpu_model_id=r.gpu_model_id,
                           ticks=r.ticks)
        for r in DailyUnplacedUsage.objects.filter(day=DAY)
    ])
    write_model_sums(day=to)  # as aggregate_day does after writing a day


@pytest.fixture
def week_data(board_day):
    copy_day(COPIES[0])
    copy_day(COPIES[1], swap_busy_idle=True)
    return board_day


def week_scope(**filters) -> BoardScope:
    return BoardScope(day=MONDAY, last=SUNDAY, now=LATER, **filters)


def tiles(head) -> dict:
    return {tile.key: tile for tile in head.tiles}


def test_the_week_is_monday_to_sunday_and_defaults_to_the_last_full_one():
    assert week_days(date(2026, 11, 4)) == (MONDAY, SUNDAY)
    assert week_days(SUNDAY) == (MONDAY, SUNDAY)
    assert last_full_week(date(2026, 11, 10)) == MONDAY and last_full_week(date(2026, 11, 8)) == date(2026, 10, 26)
    scope = week_scope()
    assert scope.compared_spans == [(date(2026, 10, 26), date(2026, 11, 1))]
    month = BoardScope(day=date(2026, 11, 1), last=date(2026, 11, 30), now=LATER)
    assert month.compared_spans == [(date(2026, 10, 1), date(2026, 10, 31))]
    assert BoardScope(day=DAY, now=NOW).compared_from == DAY - timedelta(days=7)


def test_the_weeks_tiles_are_the_sum_of_its_days(week_data, admin_user):
    week = tiles(span_headline(week_scope(), user=admin_user)[0])
    days = [tiles(headline(BoardScope(day=MONDAY + timedelta(days=n), now=LATER), user=admin_user)) for n in range(7)]
    ticks = Counter()
    for state, total in DailyUsage.objects.filter(day__gte=MONDAY, day__lte=SUNDAY).values_list("state", "ticks"):
        ticks[state] += total
    exact = card_hours_by_state(ticks)
    for key in CARD_HOUR_KEYS:
        state = key.removesuffix("_card_hours")
        assert week[key].value == exact[state], key  # the sum of the ticks, rounded once
        daily_sum = sum((d[key].value for d in days if d[key].value is not None), Decimal(0))
        assert abs(week[key].value - daily_sum) <= Decimal("0.0001") * 3, key  # each day rounds to 4 places
    assert week["capacity_gpus"].value == max(
        d["capacity_gpus"].value for d in days if d["capacity_gpus"].value is not None)
    assert week["capacity_gpus"].card_hours == sum(exact.values(), Decimal(0))
    # idle cost: each team's and model's idle over the week at the day's rate card, rounded once
    idle = Counter()
    for team, total in DailyUsage.objects.filter(day__gte=MONDAY, day__lte=SUNDAY, state=IDLE).values_list("team", "ticks"):
        idle[team] += total
    expected = sum((line_amount(t, Decimal("20.00"), "CNY") for t in idle.values()), Decimal("0.00"))
    assert week["idle_cost"].value == expected
    daily_costs = sum((d["idle_cost"].value for d in days if d["idle_cost"].value is not None), Decimal(0))
    assert abs(week["idle_cost"].value - daily_costs) <= Decimal("0.01") * 3


def test_each_tile_is_against_the_week_before(week_data, admin_user):
    week = tiles(span_headline(week_scope(), user=admin_user)[0])
    before = tiles(span_headline(replace(week_scope(), day=date(2026, 10, 26), last=date(2026, 11, 1)),
                                 user=admin_user)[0])
    assert before["capacity_gpus"].value is not None  # 1 November was aggregated
    for key, tile in week.items():
        assert tile.change.mean == before[key].value, key
        if before[key].value is None:  # nothing allocated on 1 November: no efficiency to compare
            assert tile.change.delta is None, key
        else:
            assert tile.change.delta == tile.value - before[key].value, key
    assert week["idle_card_hours"].change.direction == "up"


def test_the_team_table_adds_up_and_has_a_sparkline_per_team(week_data, admin_user):
    summary = period_summary(week_scope(), user=admin_user, kind=WEEK)
    assert [d.isoformat() for d in summary.shown][:1] == ["2026-11-02"] and len(summary.shown) == 7
    alpha = next(r for r in summary.teams if r.name == "Team Alpha")
    assert len(alpha.daily) == 7 and alpha.daily[0] == alpha.daily[2] == alpha.daily[4] > 0 and alpha.daily[1] == 0
    assert sum(alpha.daily) == alpha.allocated
    total = summary.team_total
    assert abs(total.allocated - sum(r.allocated for r in summary.teams)) <= Decimal("0.0001") * len(summary.teams)
    assert total.idle_cost == sum(r.idle_cost for r in summary.teams)
    models = summary.models
    assert [m.name for m in models] == ["H200"]
    assert models[0].allocated == summary.model_total.allocated
    assert models[0].idle_cost == tiles(summary.headline)["idle_cost"].value


def test_the_page_for_admin_shows_every_team_and_cost(week_data, later, client, admin_user):
    client.force_login(admin_user)
    response = client.get("/board/week/", {"week": "2026-11-05"})
    assert response.status_code == 200
    html = response.content.decode()
    summary = period_summary(week_scope(), user=admin_user, kind=WEEK)
    alpha = next(r for r in summary.teams if r.name == "Team Alpha")
    assert "Team Alpha" in html and "Team Beta" in html and str(alpha.cost) in html and str(alpha.idle_cost) in html
    assert html.count('class="sparkline"') == len(summary.teams) and "<polyline" in html
    assert 'data-testid="period-nav"' in html and "?week=2026-10-26" in html and "?week=2026-11-09" in html
    assert 'id="fig-days"' in html


@pytest.mark.parametrize("role", ["lead_b", "engineer_b"])
def test_another_teams_viewer_sees_no_job_user_project_or_cost_of_team_a(week_data, later, client, request, role,
                                                                         admin_user):
    user = request.getfixturevalue(role)
    client.force_login(user)
    html = client.get("/board/week/", {"week": "2026-11-02"}).content.decode()
    html += client.get("/board/week/", {"week": "2026-11-02", "format": "csv", "table": "teams"}).content.decode()
    html += client.get("/board/week/", {"week": "2026-11-02", "format": "csv", "table": "models"}).content.decode()
    admin = period_summary(week_scope(), user=admin_user, kind=WEEK)
    alpha = next(r for r in admin.teams if r.name == "Team Alpha")
    for secret in (SECRET_JOB, SECRET_USER, ALPHA_PROJECT, "a-train", str(alpha.cost), str(alpha.idle_cost)):
        assert secret not in html, (role, secret)
    assert "Team Alpha" in html  # team names and card-hours are cluster-wide figures
    mine = period_summary(week_scope(), user=user, kind=WEEK)
    row = next(r for r in mine.teams if r.name == "Team Alpha")
    assert row.idle_cost is None and row.cost is None and row.allocated == alpha.allocated
    assert all(m.cost is None and m.idle_cost is None for m in mine.models)


def test_the_lead_sees_the_own_teams_cost_and_the_team_filter_narrows(week_data, later, client, lead_a, team_a):
    client.force_login(lead_a)
    html = client.get("/board/week/", {"week": "2026-11-02", "team": team_a.slug}).content.decode()
    summary = period_summary(week_scope(team_id=team_a.pk), user=lead_a, kind=WEEK)
    assert [r.name for r in summary.teams] == ["Team Alpha"]
    assert str(summary.teams[0].cost) in html and "Team Beta" not in html.split('data-testid="period-teams"')[1]


def test_a_day_still_filling_is_marked(week_data, admin_user):
    scope = replace(week_scope(), now=NOW)  # 3 November, 01:00: the week is in progress
    summary = period_summary(scope, user=admin_user, kind=WEEK)
    assert summary.partial and summary.shown == [MONDAY, date(2026, 11, 3)]
    assert list(summary.bars["partial"]) == [False, True]
    figure = days_figure(summary.bars)
    assert [t["meta"]["series"] for t in figure["data"]] == [s for s in SERIES if s != "other_teams"]
    busy = figure["data"][0]
    assert busy["marker"]["pattern"]["shape"] == ["", "/"] and "still filling" in busy["hovertext"][1]
    capacity = sum(t["y"][0] for t in figure["data"])
    assert capacity == pytest.approx(float(tiles(headline(BoardScope(day=DAY, now=NOW), user=admin_user))
                                           ["capacity_gpus"].card_hours), abs=1e-3)


def test_the_sparkline_is_a_pure_polyline():
    assert sparkline_points([]) == "" and sparkline_svg([]) == ""
    assert sparkline_points([0, 5, 10], width=24, height=12, pad=2) == "2.0,10.0 12.0,6.0 22.0,2.0"
    assert sparkline_points([0, 0], width=10, height=10, pad=0) == "0.0,10.0 10.0,10.0"
    svg = sparkline_svg([1, 2], title='<a "b">')
    assert svg.startswith("<svg") and "<polyline" in svg and "&lt;a &quot;b&quot;&gt;" in svg and "<script" not in svg
    assert "<circle" in sparkline_svg([3])


def test_the_month_view_sums_its_days_against_the_month_before(week_data, later, client, admin_user):
    scope = BoardScope(day=date(2026, 11, 1), last=date(2026, 11, 30), now=LATER)
    month = tiles(span_headline(scope, user=admin_user)[0])
    week = tiles(span_headline(week_scope(), user=admin_user)[0])
    first = tiles(headline(BoardScope(day=date(2026, 11, 1), now=LATER), user=admin_user))
    ticks = Counter()
    for state, total in DailyUsage.objects.filter(day__gte=date(2026, 11, 1)).values_list("state", "ticks"):
        ticks[state] += total
    assert month["capacity_gpus"].card_hours == sum(card_hours_by_state(ticks).values(), Decimal(0))
    assert abs(month["capacity_gpus"].card_hours - week["capacity_gpus"].card_hours
               - first["capacity_gpus"].card_hours) <= Decimal("0.0002")
    assert month["idle_card_hours"].change.mean is None  # October has no usage
    client.force_login(admin_user)
    response = client.get("/board/month/", {"month": "2026-11"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="partial-badge"' in html and "?month=2026-10" in html and "?month=2026-12" not in html
    assert client.get("/board/month/").status_code == 200  # the current month by default


def read_csv(response) -> list[dict]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_csv_downloads_have_a_total_row(week_data, later, client, admin_user):
    client.force_login(admin_user)
    response = client.get("/board/week/", {"week": "2026-11-02", "format": "csv", "table": "teams"})
    assert 'filename="week-teams-2026-11-02.csv"' in response["Content-Disposition"]
    rows = read_csv(response)
    *teams, total = rows
    assert total["team"] == "Total" and {r["team"] for r in teams} >= {"Team Alpha", "Team Beta"}
    assert Decimal(total["idle_cost"]) == sum(Decimal(r["idle_cost"]) for r in teams)
    assert abs(Decimal(total["card_hours_allocated"]) - sum(Decimal(r["card_hours_allocated"]) for r in teams)) \
        <= Decimal("0.0001") * len(teams)
    *models, total = read_csv(client.get("/board/week/", {"week": "2026-11-02", "format": "csv", "table": "models"}))
    assert [m["gpu_model"] for m in models] == ["H200"] and total["gpu_model"] == "Total"
    assert total["card_hours_allocated"] == models[0]["card_hours_allocated"]
    *_rows, total = read_csv(client.get("/board/month/", {"month": "2026-11", "format": "csv", "table": "teams"}))
    assert total["team"] == "Total"


def test_csv_is_formula_safe(week_data, later, client, admin_user, team_b):
    team_b.name = "=HYPERLINK(1)"
    team_b.save()
    client.force_login(admin_user)
    rows = read_csv(client.get("/board/week/", {"week": "2026-11-02", "format": "csv", "table": "teams"}))
    assert all(not r["team"].startswith("=") for r in rows)


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/board/week/", {"week": "2026-13-01"}, "week"),
    ("/board/week/", {"week": "2026-11"}, "week"),
    ("/board/week/", {"week": "1999-12-31"}, "week"),
    ("/board/week/", {"week": "2026-11-11"}, "week"),  # after today
    ("/board/month/", {"month": "2026-13"}, "month"),
    ("/board/month/", {"month": "2026-12"}, "month"),
    ("/board/month/", {"month": "2026-11-01"}, "month"),
    ("/board/week/", {"format": "xlsx"}, "format"),
    ("/board/week/", {"format": "csv", "table": "jobs"}, "table"),
    ("/board/month/", {"pool": "nope"}, "pool"),
    ("/board/week/", {"team": "nope"}, "team"),
])
def test_a_bad_parameter_is_refused_naming_it(board_day, later, client, admin_user, path, params, field):
    client.force_login(admin_user)
    response = client.get(path, params)
    assert response.status_code == 400
    html = response.content.decode()
    assert f"{field}: " in html and f"“{field}”" in html


def count_queries(client, path, params) -> int:
    client.get(path, params)  # warm the session and content types
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path, params).status_code == 200
    return len(queries)


def resting_gpus(count: int, hostname: str) -> None:
    """``count`` GPUs unallocated every day of the week (long idle on its last day)."""
    node = Node.objects.create(hostname=hostname)
    model = Gpu.objects.first().model
    for index in range(count):
        gpu = Gpu.objects.create(node=node, index=index, uuid=f"{hostname}-{index}", model=model, memory_mib=1)
        DailyUsage.objects.bulk_create([DailyUsage(day=MONDAY + timedelta(days=n), gpu=gpu, state="unallocated",
                                                   ticks=840_000 * 86_400) for n in range(7)])
    for n in range(7):
        write_model_sums(day=MONDAY + timedelta(days=n))


@pytest.mark.parametrize(("path", "params"), [("/board/week/", {"week": "2026-11-02"}),
                                              ("/board/month/", {"month": "2026-11"})])
def test_query_counts_do_not_grow_with_days_or_gpus(board_day, later, client, admin_user, path, params,
                                                    django_assert_num_queries):
    client.force_login(admin_user)
    resting_gpus(1, "n8")
    few = count_queries(client, path, params)
    copy_day(COPIES[0])
    copy_day(COPIES[1], swap_busy_idle=True)
    copy_day(date(2026, 11, 7))
    resting_gpus(6, "n9")
    assert DailyHolderUsage.objects.exists()
    with django_assert_num_queries(few):
        assert client.get(path, params).status_code == 200
    assert few == {"/board/week/": 24, "/board/month/": 21}[path], few  # pinned: a change means a new read
