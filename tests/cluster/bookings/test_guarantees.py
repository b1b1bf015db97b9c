"""The guaranteed-share rule (issue 19), pure: against a brute-force oracle hour by hour, and as properties of
any sequence of bookings it lets through: the free GPUs always cover every team's unused guarantee, each
team can always book up to its guarantee, and no booking beyond a team's own guarantee takes reserved GPUs.
The weekly hours in a zone with daylight saving."""

from datetime import UTC, datetime, time
from itertools import pairwise
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.bookings.guarantees import (
    Held,
    Share,
    guarantee_in_the_way,
    reserved_for_others,
    segments,
    weekly_ranges,
)

HOURS = 12  # the tests' timeline: hours 0 … 12, one unit a "second"
TEAMS = (1, 2, 3)


def reserved_at(t: int, team: int, capacity: int, holds: list[Held], shares: list[Share]) -> int:
    """Brute force: what ``team``'s guarantee reserves at instant ``t``."""
    guaranteed = sum(s.gpus for s in shares if s.team_id == team and any(a <= t < b for a, b in s.active))
    held = sum(1 for h in holds if h.team_id == team and h.lo <= t < h.hi)
    return max(0, guaranteed - held)


def free_at(t: int, capacity: int, holds: list[Held]) -> int:
    return capacity - sum(1 for h in holds if h.lo <= t < h.hi)


def allowed_brute(team: int, count: int, lo: int, hi: int, capacity: int, holds, shares) -> bool:
    """The rule read instant by instant: beyond the team's own unused guarantee, a booking leaves the free
    GPUs at least what the other teams' guarantees reserve (where ``count`` GPUs are free at all)."""
    for t in range(lo, hi):
        free = free_at(t, capacity, holds)
        if count > free or count <= reserved_at(t, team, capacity, holds, shares):
            continue
        others = sum(reserved_at(t, other, capacity, holds, shares) for other in TEAMS if other != team)
        if free - count < others:
            return False
    return True


def fits(count: int, lo: int, hi: int, capacity: int, holds) -> bool:
    return all(free_at(t, capacity, holds) >= count for t in range(lo, hi))


windows = st.tuples(st.integers(0, HOURS - 1), st.integers(1, HOURS)).map(
    lambda w: (w[0], min(HOURS, w[0] + w[1]))).filter(lambda w: w[0] < w[1])


@st.composite
def cluster(draw, *, within_capacity: bool):
    capacity = draw(st.integers(1, 8))
    shares = []
    room = capacity
    for i, team in enumerate(TEAMS):
        if not draw(st.booleans()):
            continue
        gpus = draw(st.integers(1, max(1, room if within_capacity else capacity)))
        if within_capacity and gpus > room:
            continue
        room -= gpus
        active = tuple(sorted({draw(windows) for _ in range(draw(st.integers(1, 2)))}))
        merged: list[tuple[int, int]] = []
        for a, b in active:  # the weekly ranges never overlap: merge what the draw made
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        shares.append(Share(i + 1, team, gpus, tuple(merged)))
    requests = draw(st.lists(st.tuples(st.sampled_from(TEAMS), st.integers(1, 4), windows), max_size=12))
    return capacity, shares, requests


def book(capacity, shares, requests):
    """Apply each request the rule and the free GPUs allow; (holds, what was refused and why)."""
    holds: list[Held] = []
    for team, count, (lo, hi) in requests:
        if not fits(count, lo, hi, capacity, holds):
            continue
        short = guarantee_in_the_way(lo=lo, hi=hi, capacity=capacity, holds=holds, shares=shares, team_id=team,
                                     count=count)
        assert (short is None) == allowed_brute(team, count, lo, hi, capacity, holds, shares)
        if short is None:
            holds += [Held(lo, hi, team)] * count
        else:
            assert short.share.team_id != team and short.reserved > 0 and lo <= short.lo < short.hi <= hi
    return holds


@settings(max_examples=300, deadline=None)
@given(cluster(within_capacity=True))
def test_free_gpus_always_cover_every_unused_guarantee_and_each_team_reaches_its_own(drawn):
    capacity, shares, requests = drawn
    holds = book(capacity, shares, requests)
    for t in range(HOURS):
        unused = sum(reserved_at(t, team, capacity, holds, shares) for team in TEAMS)
        assert free_at(t, capacity, holds) >= unused
    for share in shares:
        for lo, hi in share.active:
            # The team asks for all its guarantee still reserves over the whole range: always granted.
            want = min(reserved_at(t, share.team_id, capacity, holds, shares) for t in range(lo, hi))
            if want:
                assert fits(want, lo, hi, capacity, holds)
                assert guarantee_in_the_way(lo=lo, hi=hi, capacity=capacity, holds=holds, shares=shares,
                                            team_id=share.team_id, count=want) is None


@settings(max_examples=300, deadline=None)
@given(cluster(within_capacity=False))
def test_a_booking_beyond_its_own_guarantee_never_takes_reserved_gpus(drawn):
    """Even where the guarantees add up to more than the model has (an admin's mistake), the rule agrees
    with the oracle, and a granted booking beyond the booker's guarantee leaves the others' reservations."""
    capacity, shares, requests = drawn
    holds: list[Held] = []
    for team, count, (lo, hi) in requests:
        if not fits(count, lo, hi, capacity, holds):
            continue
        short = guarantee_in_the_way(lo=lo, hi=hi, capacity=capacity, holds=holds, shares=shares, team_id=team,
                                     count=count)
        assert (short is None) == allowed_brute(team, count, lo, hi, capacity, holds, shares)
        if short is not None:
            continue
        before = list(holds)
        holds += [Held(lo, hi, team)] * count
        for t in range(lo, hi):
            if count > reserved_at(t, team, capacity, before, shares):
                others = sum(reserved_at(t, o, capacity, holds, shares) for o in TEAMS if o != team)
                assert free_at(t, capacity, holds) >= others


@settings(max_examples=200, deadline=None)
@given(cluster(within_capacity=False))
def test_reserved_for_others_matches_the_instant_by_instant_sum(drawn):
    capacity, shares, requests = drawn
    holds = [Held(lo, hi, team) for team, count, (lo, hi) in requests for _ in range(count)]
    pieces = reserved_for_others(lo=0, hi=HOURS, capacity=capacity, holds=holds, shares=shares, team_id=1)
    assert pieces[0][0] == 0 and pieces[-1][1] == HOURS
    assert all(a[1] == b[0] for a, b in pairwise(pieces))  # contiguous, no gap
    for lo, hi, reserved in pieces:
        for t in range(lo, hi):
            assert reserved == sum(reserved_at(t, o, capacity, holds, shares) for o in TEAMS if o != 1)


def test_a_hand_computed_case_names_the_guarantee_and_the_hours():
    # 4 GPUs; team 2 guarantees 3 from hour 2 to 6 and holds 1 of them from hour 3; team 1 holds 1 all day.
    shares = [Share(7, 2, 3, ((2, 6),))]
    holds = [Held(0, 12, 1), Held(3, 6, 2)]
    # Hours 0–2: 3 free, nothing reserved: team 1 may take 3.
    assert guarantee_in_the_way(lo=0, hi=2, capacity=4, holds=holds, shares=shares, team_id=1, count=3) is None
    # Hours 2–3: 3 free, 3 reserved: one more GPU for team 1 is refused there.
    short = guarantee_in_the_way(lo=0, hi=4, capacity=4, holds=holds, shares=shares, team_id=1, count=1)
    assert (short.lo, short.hi, short.share.guarantee_id, short.reserved, short.free_after) == (2, 3, 7, 3, 2)
    # Hours 3–6: 2 free, 2 reserved (3 guaranteed, 1 held): still refused.
    short = guarantee_in_the_way(lo=3, hi=6, capacity=4, holds=holds, shares=shares, team_id=1, count=1)
    assert (short.lo, short.hi, short.reserved) == (3, 6, 2)
    # Team 2 takes its own reserved GPUs; an unguaranteed hold does not count as reserved.
    assert guarantee_in_the_way(lo=2, hi=6, capacity=4, holds=holds, shares=shares, team_id=2, count=2) is None
    assert [s.free for s in segments(lo=0, hi=12, capacity=4, holds=holds, shares=shares)] == [3, 3, 2, 3]


def test_guarantees_beyond_the_model_still_let_each_team_book_its_own_while_gpus_are_free():
    # 4 GPUs, two guarantees of 3 (more than the model has): the first team to book its 3 gets them.
    shares = [Share(1, 1, 3, ((0, 12),)), Share(2, 2, 3, ((0, 12),))]
    assert guarantee_in_the_way(lo=0, hi=12, capacity=4, holds=[], shares=shares, team_id=1, count=3) is None
    holds = [Held(0, 12, 1)] * 3
    assert guarantee_in_the_way(lo=0, hi=12, capacity=4, holds=holds, shares=shares, team_id=2, count=1) is None
    # A fourth GPU for team 1 is beyond its guarantee and would take the last one team 2's reserves.
    short = guarantee_in_the_way(lo=0, hi=12, capacity=4, holds=holds, shares=shares, team_id=1, count=1)
    assert (short.share.team_id, short.reserved, short.free_after) == (2, 3, 0)


def test_maintenance_holds_take_capacity_but_reserve_nothing():
    shares = [Share(1, 2, 2, ((0, 12),))]
    holds = [Held(0, 12, None), Held(0, 12, None)]  # two of four GPUs in maintenance
    assert guarantee_in_the_way(lo=0, hi=12, capacity=4, holds=holds, shares=shares, team_id=1, count=1) is not None
    assert guarantee_in_the_way(lo=0, hi=12, capacity=4, holds=holds, shares=shares, team_id=2, count=2) is None


BERLIN = ZoneInfo("Europe/Berlin")


def test_weekday_hours_follow_the_local_clock_across_daylight_saving():
    # The week of Sunday 2026-10-25, when Berlin goes from UTC+2 to UTC+1: Friday 23rd to Tuesday 27th.
    lo, hi = datetime(2026, 10, 23, tzinfo=UTC), datetime(2026, 10, 28, tzinfo=UTC)
    ranges = weekly_ranges(weekdays=frozenset(range(5)), start=time(9), end=time(18), zone=BERLIN, lo=lo, hi=hi)
    assert ranges == [
        (datetime(2026, 10, 23, 7, tzinfo=UTC), datetime(2026, 10, 23, 16, tzinfo=UTC)),  # Friday, UTC+2
        (datetime(2026, 10, 26, 8, tzinfo=UTC), datetime(2026, 10, 26, 17, tzinfo=UTC)),  # Monday, UTC+1
        (datetime(2026, 10, 27, 8, tzinfo=UTC), datetime(2026, 10, 27, 17, tzinfo=UTC)),
    ]


def test_whole_days_join_and_clip_to_the_window():
    lo, hi = datetime(2026, 11, 6, 12, tzinfo=UTC), datetime(2026, 11, 10, 6, tzinfo=UTC)  # Friday noon → Tuesday
    weekdays = weekly_ranges(weekdays=frozenset(range(5)), start=None, end=None, zone=UTC, lo=lo, hi=hi)
    assert weekdays == [(lo, datetime(2026, 11, 7, tzinfo=UTC)), (datetime(2026, 11, 9, tzinfo=UTC), hi)]
    assert weekly_ranges(weekdays=frozenset(range(7)), start=None, end=None, zone=UTC, lo=lo, hi=hi) == [(lo, hi)]
    assert weekly_ranges(weekdays=frozenset(range(7)), start=time(9), end=time(10), zone=UTC, lo=lo, hi=lo) == []
