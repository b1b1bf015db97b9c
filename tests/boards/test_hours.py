"""The board's hours and utilization bands (boards/hours.py, read column-wise with numpy) against a
brute force over the ORM: every GPU-hour's ticks per series, its utilization and teams, each cell's
holders, and the bands, with and without a team filter and narrowed to a node."""

from collections import Counter, defaultdict
from datetime import timedelta

import pytest

from accounting.models import HourlyUsage
from boards.hours import day_hours, read_day, utilization_bands
from boards.maths import BANDS, OTHER_TEAMS, band_of
from boards.scope import BoardScope
from cluster.models import Allocation, Booking, HourRollup, Node
from tests.boards.board_day import DAY, NOW

pytestmark = pytest.mark.django_db
ALLOCATED = ("busy", "idle", "unmeasured")


def hour_of(moment):
    return moment.replace(minute=0, second=0, microsecond=0)


def brute_hours(scope: BoardScope) -> dict:
    """(label, hour) → series ticks, util, team names: summed row by row through the ORM."""
    rows = HourlyUsage.objects.filter(day=scope.day).select_related("gpu__node", "team")
    if scope.node_id is not None:
        rows = rows.filter(gpu__node_id=scope.node_id)
    util = {(r.gpu_id, r.bucket): r.util_mean for r in HourRollup.objects.filter(util_covered_s__gt=0)}
    cells: dict = defaultdict(lambda: {"ticks": Counter(), "teams": set(), "util": None})
    for row in rows:
        cell = cells[(f"{row.gpu.node.hostname}/{row.gpu.index}", row.hour)]
        other = scope.team_id is not None and row.state in ALLOCATED and row.team_id != scope.team_id
        cell["ticks"][OTHER_TEAMS if other else row.state] += row.ticks
        if row.state in ALLOCATED and row.team is not None:
            cell["teams"].add(row.team.name)
        cell["util"] = util.get((row.gpu_id, hour_of(row.hour)))
    return cells


def frame_cells(frame) -> dict:
    return {
        (row.label, row.hour.to_pydatetime()): {
            "ticks": Counter({s: int(getattr(row, s)) for s in ("busy", "idle", "unmeasured", OTHER_TEAMS,
                                                                  "unallocated", "down") if getattr(row, s)}),
            "teams": set(row.teams), "util": None if row.util != row.util else row.util,
        }
        for row in frame.itertuples(index=False)
    }


@pytest.mark.parametrize("narrow", [None, "team_a", "team_b", "node"])
def test_every_gpu_hour_equals_a_brute_force_sum(board_day, team_a, team_b, admin_user, narrow):
    scope = BoardScope(day=DAY, now=NOW, team_id={"team_a": team_a.pk, "team_b": team_b.pk}.get(narrow),
                       node_id=Node.objects.get(hostname="n2").pk if narrow == "node" else None)
    frame = day_hours(scope, user=admin_user)
    got, expected = frame_cells(frame), brute_hours(scope)
    assert got == {key: {**cell, "ticks": +cell["ticks"]} for key, cell in expected.items()}
    labels = list(dict.fromkeys(frame["label"]))
    assert labels == sorted(labels)  # grouped by node, then GPU index
    assert all(list(frame[frame["label"] == label]["hour"]) == sorted(frame[frame["label"] == label]["hour"])
               for label in labels)
    # the teams of a cell come sorted by name
    assert all(list(teams) == sorted(teams) for teams in frame["teams"])


def test_the_holders_of_each_hour_are_the_allocations_and_bookings_that_meet_it(board_day, admin_user):
    frame = day_hours(BoardScope(day=DAY, now=NOW), user=admin_user)
    spans = defaultdict(set)
    for allocation in Allocation.objects.filter(gpu__isnull=False).select_related("job", "gpu"):
        physical = allocation.gpu.mig_parent_id or allocation.gpu_id
        spans[physical].add((allocation.start, allocation.end, allocation.job.external_id))
    for booking in Booking.objects.prefetch_related("holds"):
        for hold in booking.holds.all():
            spans[hold.gpu_id].add((hold.during.lower, hold.during.upper, f"#{booking.pk}"))
    checked = 0
    for row in frame.itertuples(index=False):
        hour = row.hour.to_pydatetime()
        expected = {name for lo, hi, name in spans[row.gpu_id] if lo < hour + timedelta(hours=1) and hi > hour}
        assert {label.split(" ·")[0] for label in row.holders} == expected, (row.label, hour)
        checked += bool(expected)
    assert checked >= 5  # the day has held hours on every GPU


@pytest.mark.parametrize("team", [None, "team_a", "team_b"])
def test_the_bands_pool_each_measured_allocated_gpu_hour_by_its_utilization(board_day, team_a, team_b, team):
    team_id = {"team_a": team_a.pk, "team_b": team_b.pk}.get(team)
    scope = BoardScope(day=DAY, now=NOW, team_id=team_id)
    util = {(r.gpu_id, r.bucket): r.util_mean for r in HourRollup.objects.filter(util_covered_s__gt=0)}
    expected: dict = defaultdict(lambda: [0] * len(BANDS))
    for row in HourlyUsage.objects.filter(day=DAY, state__in=("busy", "idle")):
        if team_id is not None and row.team_id != team_id:
            continue
        value = util.get((row.gpu_id, hour_of(row.hour)))
        if value is not None:
            expected[row.team_id][band_of(value)] += row.ticks
    bands = utilization_bands(scope)
    assert bands == dict(expected) and sum(map(sum, bands.values())) > 0
    assert utilization_bands(scope, day=read_day(scope)) == bands  # one read serves the hours and the bands


def test_a_day_with_no_usage_has_no_hours_and_no_bands(db, admin_user):
    scope = BoardScope(day=DAY, now=NOW)
    assert day_hours(scope, user=admin_user).empty and utilization_bands(scope) == {}


def test_always_full_candidates_ignore_an_hour_cut_by_the_days_edge():
    import numpy as np

    from boards.hours import DayRows
    from boards.movers import full_hours

    start = NOW.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(minutes=30)  # a day starting at :30
    end = start + timedelta(days=1)
    first = start.timestamp() - 1800  # the UTC hour the day starts inside
    hours = np.array([first + 3600 * n for n in range(25)], dtype=np.int64)
    util = {  # GPU rank → its hours' means (NaN: not measured)
        0: [10.0] + [97.0] * 23 + [10.0],  # low only in the cut hours: a candidate
        1: [97.0] * 12 + [80.0] + [97.0] * 12,  # one whole hour under: not
        2: [np.nan] * 25,  # never measured: not
    }
    cells = np.array([g * len(hours) + c for g in util for c in range(len(hours))], dtype=np.int64)
    day = DayRows(gpus=[(11, "n", 0), (12, "n", 1), (13, "n", 2)], gpu_ids=np.array([11, 12, 13]),
                  code=np.zeros(1, dtype=np.int64), team=np.zeros(1, dtype=np.int64), ticks=np.ones(1, dtype=np.int64),
                  hours=hours, cells=cells, cell_of=np.zeros(1, dtype=np.int64),
                  cell_util=np.array([u for g in util for u in util[g]]))
    assert full_hours(day, threshold=95.0, start=start, end=end) == [11]
