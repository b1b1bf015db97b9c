"""The booking calendar (DESIGN.md §6) against the real services and PostgreSQL: the week as each viewer
sees it (mine, my team's, other teams' by team name only, maintenance, down), and its shaping maths."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cluster.bookings.calendar import (
    BlockKind,
    DownRow,
    GpuRow,
    HoldRow,
    position,
    shape_calendar,
    week_bounds,
)
from tests.cluster.bookings.pages.helpers import (
    CALENDAR,
    CALENDAR_QUERIES,
    NEW,
    NOW,
    at,
    book,
    gpu,
    kinds,
    lanes,
)
from tests.conftest import T0

pytestmark = pytest.mark.django_db


# --- the calendar


def test_the_calendar_shows_an_engineer_mine_my_teams_and_other_teams(client, engineer_a, week):
    client.force_login(engineer_a)
    response = client.get(CALENDAR, {"week": "2026-11-04"})  # any day of the week

    assert response.status_code == 200
    assert response.context["week"].start == T0 and response.context["week"].end == at(168)
    shown = lanes(response)
    assert list(shown) == ["h200-a/0", "h200-a/1", "h200-b/0", "h200-b/1", "l40s-a/0", "l40s-a/1"]
    mine, maintenance = shown["h200-a/0"].blocks
    assert (mine.kind, mine.label, mine.booking_id) == (BlockKind.MINE, "Mine · Alpha pretraining", week["mine"].pk)
    assert (mine.left_pct, mine.width_pct) == (round(34 / 168 * 100, 4), round(4 / 168 * 100, 4))
    assert (maintenance.kind, maintenance.label, maintenance.booking_id) == (BlockKind.MAINTENANCE, "Maintenance", None)
    team, _maintenance = shown["h200-a/1"].blocks
    assert (team.kind, team.label, team.booking_id) == (BlockKind.TEAM, "lena-lead-a", week["team"].pk)
    other = shown["h200-b/0"].blocks[-1]
    assert (other.kind, other.label, other.booking_id) == (BlockKind.OTHER, "Team Beta", None)
    body = response.content.decode()
    assert 'class="block block-other"' in body and ">Team Beta</span>" in body
    for private in ("bea-eng-b", "private purpose", "Beta vision", f'data-booking="{week["other"].pk}"'):
        assert private not in body
    assert f'data-booking="{week["mine"].pk}"' in body


def test_a_hold_across_the_weeks_end_is_clipped_to_it(client, engineer_a, week):
    client.force_login(engineer_a)
    across = lanes(client.get(CALENDAR, {"week": "2026-11-02"}))["h200-b/1"].blocks[-1]
    assert (across.left_pct, across.width_pct) == (round(166 / 168 * 100, 4), round(2 / 168 * 100, 4))
    assert (across.start, across.end) == (at(166), at(170))  # the hold's own times, for its tooltip

    following = lanes(client.get(CALENDAR, {"week": "2026-11-09"}))["h200-b/1"].blocks
    assert [(b.kind, b.left_pct, b.width_pct) for b in following] == [("other", 0.0, round(2 / 168 * 100, 4))]


def test_down_periods_and_a_node_in_maintenance_are_down(client, engineer_a, week):
    client.force_login(engineer_a)
    shown = lanes(client.get(CALENDAR, {"week": "2026-11-02"}))

    downs = [(b.label, b.left_pct, b.width_pct) for b in shown["h200-b/0"].blocks if b.kind == BlockKind.DOWN]
    assert downs == [
        ("Unreachable", round(2 / 168 * 100, 4), round(4 / 168 * 100, 4)),
        ("Unreachable", round(7 / 168 * 100, 4), round(1 / 168 * 100, 4)),  # still open: down until now
    ]
    assert kinds(shown["h200-b/1"])[:2] == [BlockKind.DOWN, BlockKind.DOWN]
    for name in ("l40s-a/0", "l40s-a/1"):
        assert [(b.kind, b.label, b.left_pct, b.width_pct) for b in shown[name].blocks] == [
            (BlockKind.DOWN, "Maintenance", 0.0, 100.0)
        ]
        assert not shown[name].bookable
    assert all(shown[name].bookable for name in ("h200-a/0", "h200-b/0"))


def test_the_calendar_page_has_days_now_legend_and_links(client, engineer_a, week):
    client.force_login(engineer_a)
    response = client.get(CALENDAR)  # this week

    week_view = response.context["week"]
    assert [column.day.isoformat() for column in week_view.days][:2] == ["2026-11-02", "2026-11-03"]
    assert week_view.now_pct == round(8 / 168 * 100, 4)
    body = response.content.decode()
    assert 'data-testid="now-line"' in body
    assert [entry.kind for entry in response.context["legend"]] == ["mine", "team", "other", "maintenance", "down"]
    assert response.context["previous_url"] == f"{CALENDAR}?week=2026-10-26"
    assert response.context["next_url"] == f"{CALENDAR}?week=2026-11-09"
    assert f'href="{NEW}?node=h200-a"' in body and f'href="{NEW}?node=l40s-a"' not in body
    assert f'{NEW}?gpus={gpu("h200-a/0").pk}&amp;hours=2' in body
    assert f'{NEW}?gpus={gpu("l40s-a/0").pk}' not in body  # a GPU in maintenance is not offered
    assert 'data-testid="book-gpus"' in body


def test_the_next_week_has_no_now_line(client, engineer_a, week):
    client.force_login(engineer_a)
    response = client.get(CALENDAR, {"week": "2026-11-10"})
    assert response.context["week"].start == at(168) and response.context["week"].now_pct is None
    assert 'data-testid="now-line"' not in response.content.decode()


def test_a_week_that_is_not_a_date_shows_this_week(client, engineer_a, week):
    client.force_login(engineer_a)
    assert client.get(CALENDAR, {"week": "last tuesday"}).context["week"].start == T0


def test_rows_by_gpu_model(client, engineer_a, week):
    client.force_login(engineer_a)
    response = client.get(CALENDAR, {"week": "2026-11-02", "group": "model"})

    groups = response.context["week"].groups
    assert [(g.heading, [lane.name for lane in g.lanes]) for g in groups] == [
        ("H200", ["h200-a/0", "h200-a/1", "h200-b/0", "h200-b/1"]),
        ("L40S", ["l40s-a/0", "l40s-a/1"]),
    ]
    assert kinds(groups[0].lanes[0]) == [BlockKind.MINE, BlockKind.MAINTENANCE]
    assert f'href="{NEW}?model=H200"' in response.content.decode()


def test_a_lead_of_the_other_team_sees_team_a_by_name(client, lead_b, week):
    client.force_login(lead_b)
    shown = lanes(client.get(CALENDAR, {"week": "2026-11-02"}))
    first = shown["h200-a/0"].blocks[0]
    assert (first.kind, first.label, first.booking_id) == ("other", "Team Alpha", None)
    assert shown["h200-b/0"].blocks[-1].kind == BlockKind.TEAM


def test_cancelled_bookings_leave_the_calendar(client, engineer_a, week):
    from cluster.bookings.services import booking_cancel

    booking_cancel(user=engineer_a, booking=week["mine"], now=NOW)
    client.force_login(engineer_a)
    assert kinds(lanes(client.get(CALENDAR, {"week": "2026-11-02"}))["h200-a/0"]) == [BlockKind.MAINTENANCE]


def test_the_calendar_reads_in_a_fixed_number_of_queries(client, engineer_a, lead_a, team_a, week,
                                                         django_assert_num_queries):
    client.force_login(engineer_a)
    client.get(CALENDAR)  # warm the session
    with django_assert_num_queries(CALENDAR_QUERIES):
        response = client.get(CALENDAR, {"week": "2026-11-02"})
    assert response.status_code == 200 and len(lanes(response)["h200-a/0"].blocks) == 2
    for day in range(2, 6):
        book(lead_a, team_a, start=at(24 * day + 12), end=at(24 * day + 14), gpus=[gpu("h200-a/0"), gpu("h200-a/1")])
    with django_assert_num_queries(CALENDAR_QUERIES):
        response = client.get(CALENDAR, {"week": "2026-11-02", "group": "model"})
    assert response.status_code == 200 and len(lanes(response)["h200-a/0"].blocks) == 6


def test_signing_in_is_required(client, week):
    response = client.get(CALENDAR)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


# --- the shaping, without the database


ZONE = ZoneInfo("UTC")
ROWS = [GpuRow(1, 10, "n1", 0, "H200", "up"), GpuRow(2, 10, "n1", 1, "H200", "up")]


def shape(holds=(), downs=(), *, gpus=ROWS, now=NOW, viewer_id=7, teams=(3,)):
    return shape_calendar(
        week_start=T0, week_end=at(168), gpus=gpus, holds=holds, downs=downs, viewer_id=viewer_id,
        viewer_team_ids=teams, group="node", now=now, zone=ZONE,
    )


def test_position_is_a_percentage_of_the_week_clipped_to_it():
    assert position(at(84), at(96), T0, at(168)) == (50.0, round(12 / 168 * 100, 4))
    assert position(at(-10), at(4), T0, at(168)) == (0.0, round(4 / 168 * 100, 4))
    assert position(at(160), at(200), T0, at(168)) == (round(160 / 168 * 100, 4), round(8 / 168 * 100, 4))
    assert position(at(-50), at(500), T0, at(168)) == (0.0, 100.0)
    assert position(at(168), at(170), T0, at(168)) is None  # [start, end): touching the end is outside
    assert position(at(-2), T0, T0, at(168)) is None


def test_holds_are_classified_for_the_viewer():
    holds = [
        HoldRow(1, at(1), at(2), "booking", booking_id=11, team_id=3, team_name="Alpha", booker_id=7,
                booker_name="me", project_name=""),
        HoldRow(1, at(3), at(4), "booking", booking_id=12, team_id=3, team_name="Alpha", booker_id=8,
                booker_name="mate"),
        HoldRow(2, at(1), at(2), "booking", booking_id=13, team_id=4, team_name="Beta", booker_id=9,
                booker_name="stranger", project_name="secret"),
        HoldRow(2, at(5), at(6), "maintenance"),
        HoldRow(99, at(1), at(2), "booking", booking_id=14, team_id=4, team_name="Beta", booker_id=9),  # no lane
    ]
    week = shape(holds)
    first, second = week.groups[0].lanes
    assert [(b.kind, b.label, b.booking_id) for b in first.blocks] == [("mine", "Mine", 11), ("team", "mate", 12)]
    assert [(b.kind, b.label, b.booking_id) for b in second.blocks] == [
        ("other", "Beta", None), ("maintenance", "Maintenance", None),
    ]


def test_a_node_taken_out_of_service_is_down_all_week_and_not_bookable():
    gpus = [GpuRow(1, 10, "n1", 0, "H200", "maintenance"), GpuRow(2, 11, "n2", 0, "H200", "retired")]
    downs = [DownRow(10, at(1), at(2), "unreachable")]
    week = shape(downs=downs, gpus=gpus)
    for group in week.groups:
        assert not group.bookable
        (lane,) = group.lanes
        assert [(b.kind, b.left_pct, b.width_pct) for b in lane.blocks] == [("down", 0.0, 100.0)]


def test_an_open_down_period_lasts_until_now():
    week = shape(downs=[DownRow(10, at(-30), None, "agent_error")], now=at(12))
    block = week.groups[0].lanes[0].blocks[0]
    assert (block.kind, block.label, block.left_pct, block.width_pct) == ("down", "Agent error", 0.0,
                                                                          round(12 / 168 * 100, 4))
    assert shape(downs=[DownRow(10, at(-30), None, "agent_error")], now=at(-1)).groups[0].lanes[0].blocks == ()


def test_a_week_is_monday_to_monday_in_the_display_zone():
    berlin = ZoneInfo("Europe/Berlin")
    start, end = week_bounds(date(2026, 10, 22), berlin)  # the week summer time ends
    assert start == datetime(2026, 10, 18, 22, 0, tzinfo=UTC)
    assert end == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)
    assert end - start == timedelta(hours=169)
    week = shape_calendar(week_start=start, week_end=end, gpus=ROWS, holds=[], downs=[], viewer_id=1,
                          viewer_team_ids=[], group="node", now=NOW, zone=berlin)
    assert [c.day.isoformat() for c in week.days] == [f"2026-10-{d}" for d in range(19, 26)]
    assert week.days[-1].width_pct == round(25 / 169 * 100, 4)  # Sunday has 25 hours


def test_the_calendar_writes_its_days_the_chinese_way_in_chinese(client, engineer_a, team_a, week):
    """Seen in the demo: "星期一 30 十一月" (the English order in Chinese words)."""
    book(engineer_a, team_a, gpus=[gpu("h200-a/1")], start=at(10), end=at(12))
    client.force_login(engineer_a)
    english = client.get(CALENDAR).content.decode()
    assert ">Mon 2 Nov</div>" in english and "Week of Mon 2 Nov 2026 to Sun 8 Nov 2026" in english
    assert "Mon 2 Nov 10:00–Mon 2 Nov 12:00" in english
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": CALENDAR})
    chinese = client.get(CALENDAR).content.decode()
    assert ">11月2日 星期一</div>" in chinese and "2026年11月2日 星期一" in chinese
    assert "11月2日 星期一 10:00–11月2日 星期一 12:00" in chinese
    assert "十一月" not in chinese
