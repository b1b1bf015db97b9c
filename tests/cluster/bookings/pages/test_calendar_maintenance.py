"""A maintenance window is drawn once on the booking calendar: where a node's status says maintenance during
its planned window (an admin set it, or the demo's history says so), the window's block is the one drawn;
the status shows as down only outside it."""

import pytest

from cluster.bookings.calendar import BlockKind, DownRow, GpuRow, HoldRow, uncovered
from cluster.models import NodeStatusPeriod
from tests.cluster.bookings.pages.helpers import CALENDAR, at, lanes
from tests.cluster.bookings.pages.test_calendar import shape  # two GPUs of node 10, up


def drawn(lane) -> list[tuple]:
    return [(b.kind, b.label, b.start, b.end) for b in lane.blocks]


def test_a_maintenance_status_is_drawn_only_outside_the_gpus_maintenance_windows():
    holds = [HoldRow(1, at(2), at(4), "maintenance"), HoldRow(1, at(6), at(7), "maintenance")]
    downs = [DownRow(10, at(1), at(5), "maintenance"), DownRow(10, at(6), at(7), "unreachable")]
    first, second = shape(holds, downs).groups[0].lanes
    assert drawn(first) == [
        ("down", "Maintenance", at(1), at(2)), ("maintenance", "Maintenance", at(2), at(4)),
        ("down", "Maintenance", at(4), at(5)),
        ("down", "Unreachable", at(6), at(7)), ("maintenance", "Maintenance", at(6), at(7)),  # not the same fact
    ]
    assert drawn(second) == [("down", "Maintenance", at(1), at(5)), ("down", "Unreachable", at(6), at(7))]  # no window


def test_a_node_in_maintenance_for_its_whole_window_is_drawn_as_the_window():
    gpus = [GpuRow(1, 10, "n1", 0, "H200", "maintenance"), GpuRow(2, 10, "n1", 1, "H200", "maintenance"),
            GpuRow(3, 11, "n2", 0, "H200", "retired")]
    holds = [HoldRow(1, at(-24), at(200), "maintenance"), HoldRow(2, at(0), at(100), "maintenance"),
             HoldRow(3, at(0), at(100), "maintenance")]
    lanes_ = {lane.gpu_id: lane for group in shape(holds, gpus=gpus).groups for lane in group.lanes}
    assert drawn(lanes_[1]) == [("maintenance", "Maintenance", at(-24), at(200))]
    assert drawn(lanes_[2]) == [("maintenance", "Maintenance", at(0), at(100)), ("down", "Maintenance", at(100), at(168))]
    assert [b.kind for b in lanes_[3].blocks] == ["down", "maintenance"]  # retired is not maintenance
    assert not any(lane.bookable for lane in lanes_.values())


def test_uncovered_leaves_the_parts_no_window_covers():
    assert uncovered(at(0), at(10), []) == [(at(0), at(10))]
    assert uncovered(at(0), at(10), [(at(2), at(4)), (at(3), at(5)), (at(8), at(12))]) == [
        (at(0), at(2)), (at(5), at(8))]
    assert uncovered(at(0), at(10), [(at(-5), at(20))]) == []
    assert uncovered(at(0), at(10), [(at(10), at(12)), (at(-3), at(0))]) == [(at(0), at(10))]


@pytest.mark.django_db
def test_a_node_put_in_maintenance_for_its_window_shows_the_window_once(client, engineer_a, week, small_cluster):
    window = week["maintenance"]  # h200-a, at(96)–at(102)
    NodeStatusPeriod.objects.create(node=small_cluster["nodes"][0], status="maintenance", started_at=at(96),
                                    ended_at=at(103), reason="firmware")
    client.force_login(engineer_a)
    shown = lanes(client.get(CALENDAR, {"week": "2026-11-02"}))
    for name in ("h200-a/0", "h200-a/1"):
        window_blocks = [(b.kind, b.start, b.end) for b in shown[name].blocks if b.start < at(103) and at(96) < b.end]
        assert window_blocks == [(BlockKind.MAINTENANCE, window.start, window.end),
                                 (BlockKind.DOWN, at(102), at(103))]  # the hour it overran
