"""The pure booking maths: grid, window rules, earliest slot (against a brute-force search), packing,
the most GPUs held at once and the idle clock."""

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.bookings.slots import (
    BUSY,
    IDLE,
    UNMEASURED,
    Candidate,
    Limits,
    ceil_to_grid,
    earliest_slot,
    epoch,
    floor_to_grid,
    idle_clock,
    minute_state,
    most_held_at_once,
    pick_gpus,
    window_problems,
)

T0 = datetime(2026, 11, 2, tzinfo=UTC)
HALF = timedelta(minutes=30)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def fields(problems):
    return [field for field, _rule in problems]


def test_grid_floor_and_ceil():
    assert floor_to_grid(at(47), 30) == at(30)
    assert ceil_to_grid(at(47), 30) == at(60)
    assert ceil_to_grid(at(60), 30) == at(60)
    assert floor_to_grid(at(60) + timedelta(microseconds=1), 30) == at(60)


def test_window_rules_name_the_field_and_rule():
    limits = Limits(max_hours=4, max_days_ahead=2)
    assert window_problems(start=at(60), end=at(120), now=at(10), limits=limits) == []
    assert fields(window_problems(start=at(45), end=at(120), now=at(10), limits=limits)) == ["start"]
    assert "grid" in window_problems(start=at(60), end=at(100), now=at(10), limits=limits)[0][1]
    assert window_problems(start=at(120), end=at(60), now=at(10), limits=limits) == [("end", "must be after the start.")]
    assert window_problems(start=at(60), end=at(60), now=at(10), limits=limits) == [("end", "must be after the start.")]
    assert window_problems(start=at(0), end=at(60), now=at(40), limits=limits)[0][0] == "start"
    assert "past" in window_problems(start=at(0), end=at(60), now=at(40), limits=limits)[0][1]
    # The current grid step is not the past: a booking may start in it (it begins at once).
    assert window_problems(start=at(30), end=at(90), now=at(40), limits=limits) == []
    assert "at most 4 hours" in window_problems(start=at(60), end=at(60 + 270), now=at(0), limits=limits)[0][1]
    assert "at most 2 days ahead" in window_problems(
        start=at(3 * 1440), end=at(3 * 1440 + 60), now=at(0), limits=limits
    )[0][1]


def test_changing_the_end_of_a_running_booking_checks_the_end_only():
    limits = Limits()
    assert window_problems(start=at(0), end=at(120), now=at(70), limits=limits, new=False) == []
    assert fields(window_problems(start=at(0), end=at(60), now=at(70), limits=limits, new=False)) == ["end"]


def gpus(*spec):
    """spec: (node_name, gpu count) pairs → candidates with ids 1.."""
    out, gpu_id = [], 0
    for node_id, (name, count) in enumerate(spec):
        for index in range(count):
            gpu_id += 1
            out.append(Candidate(gpu_id=gpu_id, node_id=node_id, node_name=name, index=index))
    return out


def test_packing_takes_the_fullest_node_that_fits():
    free = gpus(("a", 8), ("b", 3), ("c", 2))
    chosen = pick_gpus(free, 2)
    assert {g.node_name for g in chosen} == {"c"}
    chosen = pick_gpus(free, 3)
    assert {g.node_name for g in chosen} == {"b"} and [g.index for g in chosen] == [0, 1, 2]


def test_packing_spreads_over_fewest_nodes_when_none_fits():
    free = gpus(("a", 3), ("b", 2), ("c", 2))
    chosen = pick_gpus(free, 5)
    assert sorted(g.node_name for g in chosen) == ["a", "a", "a", "b", "b"]
    assert pick_gpus(free, 8) is None


def test_earliest_slot_is_the_requested_one_when_free():
    candidates = gpus(("a", 2))
    slot = earliest_slot(gpus=candidates, busy={}, count=2, start=at(60), end=at(180), now=at(0),
                         latest_start=at(10_000), grid_minutes=30)
    assert (slot.start, slot.end, len(slot.free)) == (at(60), at(180), 2)


def test_earliest_slot_moves_past_a_booking_keeping_the_length():
    candidates = gpus(("a", 2))
    busy = {1: [(epoch(at(0)), epoch(at(150)))]}
    slot = earliest_slot(gpus=candidates, busy=busy, count=2, start=at(60), end=at(180), now=at(0),
                         latest_start=at(10_000), grid_minutes=30)
    assert (slot.start, slot.end) == (at(150), at(270))
    # One GPU is free at once.
    slot = earliest_slot(gpus=candidates, busy=busy, count=1, start=at(60), end=at(180), now=at(0),
                         latest_start=at(10_000), grid_minutes=30)
    assert slot.start == at(60) and [g.gpu_id for g in slot.free] == [2]


def test_a_start_in_the_current_step_begins_now():
    slot = earliest_slot(gpus=gpus(("a", 1)), busy={}, count=1, start=at(30), end=at(90), now=at(40),
                         latest_start=at(10_000), grid_minutes=30)
    assert (slot.start, slot.end) == (at(40), at(90))


def test_no_slot_within_the_horizon():
    busy = {1: [(epoch(at(0)), epoch(at(10_000)))]}
    assert earliest_slot(gpus=gpus(("a", 1)), busy=busy, count=1, start=at(60), end=at(120), now=at(0),
                         latest_start=at(600), grid_minutes=30) is None


def brute_force(candidates, busy, count, start, end, latest_start):
    length = end - start
    moment = start
    while moment <= latest_start:
        lo_s, hi_s = epoch(moment), epoch(moment + length)
        free = [g for g in candidates if not any(lo < hi_s and lo_s < hi for lo, hi in busy.get(g.gpu_id, ()))]
        if len(free) >= count:
            return moment, {g.gpu_id for g in free}
        moment += HALF
    return None


ranges = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 12)).map(
        lambda p: (epoch(at(p[0] * 30)), epoch(at((p[0] + p[1]) * 30)))
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    busy_lists=st.lists(ranges, min_size=1, max_size=6),
    count=st.integers(1, 6),
    start_step=st.integers(0, 10),
    length_steps=st.integers(1, 10),
)
def test_the_sweep_finds_what_a_brute_force_search_finds(busy_lists, count, start_step, length_steps):
    candidates = gpus(("a", len(busy_lists)))
    busy = {g.gpu_id: b for g, b in zip(candidates, busy_lists, strict=True)}
    start, end = at(start_step * 30), at((start_step + length_steps) * 30)
    latest = at(60 * 30)
    slot = earliest_slot(gpus=candidates, busy=busy, count=count, start=start, end=end, now=start,
                         latest_start=latest, grid_minutes=30)
    expected = brute_force(candidates, busy, count, start, end, latest)
    if expected is None:
        assert slot is None
    else:
        assert (slot.start, {g.gpu_id for g in slot.free}) == expected
        assert slot.end - slot.start == end - start


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=12))
def test_most_held_at_once_matches_counting_every_minute(spec):
    held = [(at(lo), at(lo + length)) for lo, length in spec]
    by_minute = max((sum(lo <= at(m) < hi for lo, hi in held) for m in range(0, 80)), default=0)
    assert most_held_at_once(held) == by_minute


def test_minute_states():
    assert minute_state([(50.0, 60), (0.0, 60)], 2, 5) == BUSY
    assert minute_state([(1.0, 60), (0.0, 60)], 2, 5) == IDLE
    assert minute_state([(1.0, 60)], 2, 5) == UNMEASURED  # one GPU has no rollup
    assert minute_state([(1.0, 60), (None, 0)], 2, 5) == UNMEASURED
    assert minute_state([(1.0, 60), (2.0, 10)], 2, 5) == UNMEASURED  # barely covered
    assert minute_state([(9.0, 10), (None, 0)], 2, 5) == BUSY  # any measured work counts


def test_idle_clock_resets_on_busy_and_pauses_on_unmeasured():
    assert idle_clock([IDLE] * 20 + [UNMEASURED] * 30 + [IDLE] * 20) == 40
    assert idle_clock([IDLE] * 50 + [BUSY] + [IDLE] * 5) == 5
    assert idle_clock([]) == 0
