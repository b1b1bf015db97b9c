"""The hourly and holder split of the states (issue 14): hand-made minutes, and properties saying that the
hourly buckets and the holders add up exactly to the daily figures."""

from collections import Counter
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.usage.states import (
    ALLOCATED_STATES,
    BUSY,
    BUSY_FLAG,
    DOWN,
    IDLE,
    UNALLOCATED,
    UNMEASURED,
    Claim,
    Piece,
    hour_starts,
    settle_claims,
    split_detail,
    split_states,
)

GPU = 840_000
M, H = 60, 3600
JOB, BOOKING = ("job", 3), ("booking", 7)


def detail(pieces, codes, down=(), start=0):
    codes = np.asarray(codes, dtype=np.int64)
    return split_detail(start=start, end=start + len(codes) * M, capacity=GPU, pieces=pieces, codes=codes, down=down)


def test_a_booking_and_a_job_after_it_on_one_gpu_by_hour_and_holder():
    # The booking 00:00–02:00 and a job of the same team 00:30–03:00: the job holds the GPU from 02:00 only.
    booking = Claim(0, 2 * H, GPU, 1, 10, (0, 0, 1), BOOKING)
    job = Claim(H // 2, 3 * H, GPU, 1, 11, (1, H // 2, 2), JOB)
    pieces = settle_claims([job, booking], GPU)
    assert pieces == [Piece(0, 2 * H, GPU, 1, 10, BOOKING), Piece(2 * H, 3 * H, GPU, 1, 11, JOB)]
    codes = [60 + BUSY_FLAG] * 60 + [60] * 60 + [0] * 60 + [0] * 60  # busy, idle, unmeasured, unallocated
    result = detail(pieces, codes)
    assert result.states == Counter({(BUSY, 1, 10): GPU * H, (IDLE, 1, 10): GPU * H, (UNMEASURED, 1, 11): GPU * H,
                                     (UNALLOCATED, None, None): GPU * H})
    assert result.hours == Counter({(0, BUSY, 1): GPU * H, (H, IDLE, 1): GPU * H, (2 * H, UNMEASURED, 1): GPU * H,
                                    (3 * H, UNALLOCATED, None): GPU * H})
    assert result.holders == Counter({(BOOKING, BUSY, 1, 10): GPU * H, (BOOKING, IDLE, 1, 10): GPU * H,
                                      (JOB, UNMEASURED, 1, 11): GPU * H})


def test_adjacent_pieces_of_two_holders_stay_apart():
    first = Claim(0, 10, GPU, 1, None, (1, 0, 1), ("job", 1))
    second = Claim(10, 20, GPU, 1, None, (1, 10, 2), ("job", 2))
    assert settle_claims([first, second], GPU) == [Piece(0, 10, GPU, 1, None, ("job", 1)),
                                                   Piece(10, 20, GPU, 1, None, ("job", 2))]
    again = Claim(10, 20, GPU, 1, None, (1, 10, 3), ("job", 1))
    assert settle_claims([first, again], GPU) == [Piece(0, 20, GPU, 1, None, ("job", 1))]


def test_a_mig_slice_across_an_hour():
    slice_ = Piece(H - 90, H + 2 * M, GPU // 7, 2, None, JOB)  # a 1g slice from 00:58:30 to 01:02
    codes = [0] * 58 + [60] * 4
    result = detail([slice_], codes)
    assert result.hours[(0, IDLE, 2)] == GPU // 7 * 90
    assert result.hours[(H, IDLE, 2)] == GPU // 7 * 120
    assert result.hours[(0, UNALLOCATED, None)] == GPU * H - GPU // 7 * 90
    assert result.holders == Counter({(JOB, IDLE, 2, None): GPU // 7 * 210})


def test_down_and_unmeasured_stretches_by_hour():
    # Held 00:30–01:30 with no samples; the node down 01:00–02:00: unmeasured then down, then down unheld.
    held = Piece(H // 2, H + H // 2, GPU, 1, None, JOB)
    result = detail([held], [0] * 120, down=[(H, 2 * H)])
    assert result.hours == Counter({
        (0, UNALLOCATED, None): GPU * H // 2, (0, UNMEASURED, 1): GPU * H // 2, (H, DOWN, None): GPU * H,
    })
    assert result.holders == Counter({(JOB, UNMEASURED, 1, None): GPU * H // 2})  # down is nobody's


def test_a_day_starting_inside_an_hour_opens_and_closes_with_half_hours():
    kolkata = ZoneInfo("Asia/Kolkata")
    start = int(datetime(2026, 11, 2, tzinfo=kolkata).timestamp())
    end = int(datetime(2026, 11, 3, tzinfo=kolkata).timestamp())
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 11, 1, 18, 30, tzinfo=UTC)
    bounds = hour_starts(start, end)
    assert len(bounds) == 25 and bounds[0] == start and bounds[1] == start + H // 2 and bounds[-1] == end - H // 2
    job = Piece(start, start + 90 * M, GPU, 1, 10, JOB)
    result = detail([job], [60 + BUSY_FLAG] * 1440, start=start)
    assert result.hours[(start, BUSY, 1)] == GPU * 30 * M
    assert result.hours[(start + H // 2, BUSY, 1)] == GPU * H
    assert result.hours[(bounds[-1], UNALLOCATED, None)] == GPU * 30 * M
    assert sum(result.hours.values()) == GPU * 24 * H


# --- properties

MINUTES = 150  # two and a half hours, starting at a random minute of an hour
claims = st.lists(
    st.builds(
        lambda lo, length, share, team, kind, n: Claim(
            lo * 10, lo * 10 + length * 10, share, team, (team * 10 + n % 2) if team else None, (kind, lo, n),
            ("booking" if kind == 0 else "job", n % 5)),
        st.integers(0, MINUTES * 6 - 1), st.integers(1, 600), st.sampled_from([GPU, GPU // 2, GPU // 7, 386_400]),
        st.sampled_from([None, 1, 2, 3]), st.integers(0, 1), st.integers(0, 10**6),
    ),
    max_size=8,
)
codes_st = st.lists(st.integers(0, 60).flatmap(lambda c: st.sampled_from([c, c + BUSY_FLAG])),
                    min_size=MINUTES, max_size=MINUTES)
downs = st.lists(st.tuples(st.integers(0, MINUTES * M), st.integers(1, 3600)).map(lambda p: (p[0], p[0] + p[1])),
                 max_size=3)


@settings(max_examples=200, deadline=None)
@given(claims=claims, codes=codes_st, down=downs, offset=st.integers(0, 59))
def test_hours_and_holders_add_up_to_the_daily_figures(claims, codes, down, offset):
    start = offset * M
    shifted = [Claim(c.start + start, c.end + start, c.share, c.team_id, c.project_id, c.priority, c.holder)
               for c in claims]
    pieces = settle_claims(shifted, GPU)
    result = detail(pieces, codes, down=[(lo + start, hi + start) for lo, hi in down], start=start)
    assert result.states == split_states(start=start, end=start + MINUTES * M, capacity=GPU, pieces=pieces,
                                         codes=np.asarray(codes, dtype=np.int64),
                                         down=[(lo + start, hi + start) for lo, hi in down])
    by_team = Counter()
    for (state, team, _project), ticks in result.states.items():
        by_team[(state, team)] += ticks
    by_hour = Counter()
    for (hour, state, team), ticks in result.hours.items():
        assert ticks > 0 and hour in hour_starts(start, start + MINUTES * M)
        by_hour[(state, team)] += ticks
    assert by_hour == by_team
    held = Counter()
    for (_holder, state, team, project), ticks in result.holders.items():
        assert ticks > 0 and state in ALLOCATED_STATES
        held[(state, team, project)] += ticks
    assert held == Counter({key: t for key, t in result.states.items() if key[0] in ALLOCATED_STATES})
