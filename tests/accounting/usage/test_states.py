"""The pure state split: hand-made minutes, and properties over random allocations and samples."""

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.usage.states import (
    BUSY,
    BUSY_FLAG,
    DOWN,
    IDLE,
    STATES,
    UNALLOCATED,
    UNMEASURED,
    Claim,
    Piece,
    minute_codes,
    settle_claims,
    split_states,
)

GPU = 840_000  # ticks per second of a whole GPU
M = 60


def split(pieces, codes, down=(), start=0, minutes=None):
    minutes = len(codes) if minutes is None else minutes
    return split_states(start=start, end=start + minutes * M, capacity=GPU, pieces=pieces,
                        codes=np.asarray(codes, dtype=np.int64), down=down)


def test_a_whole_minute_busy_idle_unmeasured_unallocated():
    team = Piece(0, 4 * M, GPU, 1, 10)
    result = split([team], [60 + BUSY_FLAG, 60, 0, 30 + BUSY_FLAG])
    assert result == Counter({
        (BUSY, 1, 10): GPU * (60 + 30), (IDLE, 1, 10): GPU * 60, (UNMEASURED, 1, 10): GPU * (60 + 30),
    })
    assert split([], [60, 0]) == Counter({(UNALLOCATED, None, None): GPU * 120})


def test_down_takes_the_uncovered_seconds_of_a_down_stretch_only():
    # Minute 0: node down 0–40 s, samples cover 30 s → the 30 covered seconds fall in the up part first
    # (20 s) and 10 s in the down part: down-and-uncovered = min(40, 60 − 30) = 30 s.
    team = Piece(0, M, GPU, 1, None)
    assert split([team], [30], down=[(0, 40)]) == Counter({
        (IDLE, 1, None): GPU * 30, (DOWN, None, None): GPU * 30,
    })
    assert split([], [0], down=[(0, 40)]) == Counter({(DOWN, None, None): GPU * 40, (UNALLOCATED, None, None): GPU * 20})


def test_a_mig_slice_and_a_half_minute_allocation():
    slice_ = Piece(30, 2 * M, GPU // 7, 2, None)  # a 1g slice from second 30
    result = split([slice_], [60, 60])
    assert result[(IDLE, 2, None)] == GPU // 7 * 90
    assert result[(UNALLOCATED, None, None)] == GPU * 120 - GPU // 7 * 90


def test_bookings_come_first_and_a_job_in_its_own_booking_counts_once():
    booking = Claim(0, 10 * M, GPU, 1, 10, priority=(0, 0, 1))
    own_job = Claim(2 * M, 5 * M, GPU, 1, 11, priority=(1, 2 * M, 7))
    pieces = settle_claims([own_job, booking], GPU)
    assert pieces == [Piece(0, 10 * M, GPU, 1, 10)]
    # Two jobs of half a GPU each and one whole GPU: the first two fill it, the third gets nothing.
    jobs = [Claim(0, M, GPU // 2, 1, None, (1, 0, 1)), Claim(0, M, GPU // 2, 2, None, (1, 0, 2)),
            Claim(0, M, GPU, 3, None, (1, 0, 3))]
    assert [p.team_id for p in settle_claims(jobs, GPU)] == [1, 2]


def test_settled_pieces_merge_across_stretches():
    a = Claim(0, 10, GPU, 1, None, (0, 0, 1))
    b = Claim(5, 20, GPU, 2, None, (1, 5, 2))
    assert settle_claims([a, b], GPU) == [Piece(0, 10, GPU, 1, None), Piece(10, 20, GPU, 2, None)]


def test_minute_codes_from_rollups():
    codes = minute_codes(600, 3, {600: (50.0, 60), 660: (1.0, 45), 9999: (90.0, 60)}, threshold=5)
    assert list(codes) == [60 + BUSY_FLAG, 45, 0]


# --- properties

MINUTES = 30
claims = st.lists(
    st.builds(
        lambda lo, length, share, team, kind, n: Claim(lo * 10, min(lo * 10 + length * 10, MINUTES * M), share, team,
                                                       team * 10 if team else None, (kind, lo, n)),
        st.integers(0, MINUTES * 6 - 1), st.integers(1, 90), st.sampled_from([GPU, GPU // 2, GPU // 7, 386_400]),
        st.sampled_from([None, 1, 2, 3]), st.integers(0, 1), st.integers(0, 10**6),
    ),
    max_size=6,
)
codes_st = st.lists(st.integers(0, 60).flatmap(lambda c: st.sampled_from([c, c + BUSY_FLAG])),
                    min_size=MINUTES, max_size=MINUTES)
downs = st.lists(st.tuples(st.integers(0, MINUTES * M), st.integers(1, 900)).map(lambda p: (p[0], p[0] + p[1])),
                 max_size=3)


@settings(max_examples=200, deadline=None)
@given(claims=claims, codes=codes_st, down=downs)
def test_the_five_states_add_up_to_capacity_and_holders_to_the_gpu(claims, codes, down):
    pieces = settle_claims(claims, GPU)
    result = split(pieces, codes, down=down)
    assert sum(result.values()) == GPU * MINUTES * M
    assert all(state in STATES and ticks > 0 for (state, _t, _p), ticks in result.items())
    assert all(team is None for (state, team, _p) in result if state in (UNALLOCATED, DOWN))
    allocated = sum(ticks for (state, _t, _p), ticks in result.items() if state in (BUSY, IDLE, UNMEASURED))
    held = sum(p.share * (min(p.end, MINUTES * M) - p.start) for p in pieces)
    down_of_held = held - allocated
    assert 0 <= down_of_held <= result[(DOWN, None, None)]
    # Per team: a team's ticks never exceed what its pieces hold.
    for team in {p.team_id for p in pieces}:
        team_held = sum(p.share * (p.end - p.start) for p in pieces if p.team_id == team)
        assert sum(t for (s, tm, _p), t in result.items() if tm == team and s in (BUSY, IDLE, UNMEASURED)) <= team_held


@settings(max_examples=200, deadline=None)
@given(claims=claims, codes=codes_st, down=downs, cut=st.integers(0, MINUTES))
def test_two_windows_add_up_to_the_whole(claims, codes, down, cut):
    pieces = settle_claims(claims, GPU)
    whole = split(pieces, codes, down=down)
    first = split(pieces, codes[:cut], down=down, start=0, minutes=cut)
    second = split(pieces, codes[cut:], down=down, start=cut * M, minutes=MINUTES - cut)
    assert first + second == whole


@settings(max_examples=200, deadline=None)
@given(claims=claims)
def test_settled_claims_never_exceed_capacity(claims):
    pieces = settle_claims(claims, GPU)
    for second in range(0, MINUTES * M, 7):
        assert sum(p.share for p in pieces if p.start <= second < p.end) <= GPU
    # And the claim served first, if it wants the whole GPU, holds it whole from its start to its end.
    live = sorted((c for c in claims if c.end > c.start), key=lambda c: c.priority)
    if live and live[0].share == GPU:
        first = live[0]
        held = sum(p.share * (p.end - p.start) for p in pieces
                   if (p.team_id, p.project_id) == (first.team_id, first.project_id))
        assert held >= GPU * (first.end - first.start)


@settings(max_examples=100, deadline=None)
@given(gpus=st.lists(st.tuples(claims, codes_st, downs), min_size=1, max_size=4))
def test_team_and_project_sums_equal_the_per_gpu_rows(gpus):
    per_gpu, per_team, per_project = Counter(), Counter(), Counter()
    for gpu, (gpu_claims, codes, down) in enumerate(gpus):
        for (state, team, project), ticks in split(settle_claims(gpu_claims, GPU), codes, down=down).items():
            per_gpu[(gpu, state)] += ticks
            per_team[(team, state)] += ticks
            per_project[(team, project, state)] += ticks
    for state in STATES:
        by_gpu = sum(t for (_g, s), t in per_gpu.items() if s == state)
        assert by_gpu == sum(t for (_tm, s), t in per_team.items() if s == state)
        assert by_gpu == sum(t for (_tm, _p, s), t in per_project.items() if s == state)
    for team in {team for team, _s in per_team}:
        assert sum(t for (tm, _s), t in per_team.items() if tm == team) == \
            sum(t for (tm, _p, _s), t in per_project.items() if tm == team)
    assert sum(per_gpu.values()) == GPU * MINUTES * M * len(gpus)


@settings(max_examples=100, deadline=None)
@given(claims=claims, energy=st.lists(st.integers(0, 60_000_000), min_size=MINUTES, max_size=MINUTES))
def test_energy_is_shared_among_holders_and_adds_up(claims, energy):
    from accounting.usage.states import split_energy

    pieces = settle_claims(claims, GPU)
    shares = split_energy(start=0, end=MINUTES * M, capacity=GPU, pieces=pieces, energy_mj=np.asarray(energy))
    assert sum(shares.values()) == sum(energy)
    for (team, project), millijoules in shares.items():
        held = [p for p in pieces if (p.team_id, p.project_id) == (team, project)]
        if (team, project) != (None, None):
            assert held and millijoules <= sum(energy)
