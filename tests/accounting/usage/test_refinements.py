"""Beyond the duty cycle (issue 16): shallow busy, busy at idle power and idle with memory held refine the
busy and idle ticks of hand-made minutes, and never change the five states."""

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.usage.states import (
    BUSY,
    BUSY_FLAG,
    IDLE,
    LOW_POWER,
    LOW_POWER_FLAG,
    MEMORY_FLAG,
    MEMORY_HELD,
    REFINES,
    SHALLOW,
    SHALLOW_FLAG,
    SM_FLAG,
    SM_MEASURED,
    UNMEASURED,
    Claim,
    Refinement,
    minute_code,
    minute_codes,
    settle_claims,
    split_detail,
    split_refined,
    split_states,
)

GPU = 840_000
M = 60
JOB = ("job", 5)
TEAM, PROJECT = 1, 10
MINUTE_TICKS = GPU * M
REFINE = Refinement(shallow_sm_pct=25, memory_held_mib=1024, power_floor_w=100)


def split(codes, *, claims=None):
    codes = np.asarray(codes, dtype=np.int64)
    claims = claims or [Claim(0, len(codes) * M, GPU, TEAM, PROJECT, (1, 0, 1), JOB)]
    return split_detail(start=0, end=len(codes) * M, capacity=GPU, pieces=settle_claims(claims, GPU), codes=codes)


def test_a_minute_code_carries_the_refinements_as_flags():
    # busy by duty cycle (util 90 ≥ 5), SM activity 10 (< 25: shallow), 30 GiB used, 85 W (under the 100 W floor)
    assert minute_code(90, 60, 5, sm=10, memory_mib=30_000, power_w=85, refine=REFINE) == (
        60 + BUSY_FLAG + SM_FLAG + SHALLOW_FLAG + MEMORY_FLAG + LOW_POWER_FLAG)
    assert minute_code(90, 60, 5, sm=60, memory_mib=30_000, power_w=400, refine=REFINE) == 60 + BUSY_FLAG + SM_FLAG + MEMORY_FLAG
    # no SM data (an L40S, an older driver): no SM flag, so never shallow
    assert minute_code(90, 60, 5, sm=None, memory_mib=500, power_w=300, refine=REFINE) == 60 + BUSY_FLAG
    # exactly at the thresholds: not shallow (25 is not under 25), not held (1024 is not over 1024), not low (100)
    assert minute_code(2, 60, 5, sm=25, memory_mib=1024, power_w=100, refine=REFINE) == 60 + SM_FLAG
    # a model without a floor never flags idle power
    assert minute_code(90, 60, 5, power_w=1, refine=Refinement(power_floor_w=None)) == 60 + BUSY_FLAG
    # no readings: nothing, whatever else the minute had
    assert minute_code(None, 0, 5, sm=10, memory_mib=30_000, power_w=85, refine=REFINE) == 0


def test_busy_and_idle_minutes_are_refined_by_sm_activity_memory_and_power():
    readings = {
        0 * M: (90, 60, 70, 40_000, 500),   # busy, SM 70: busy with SM data, not shallow
        1 * M: (90, 60, 10, 40_000, 500),   # busy, SM 10: shallow busy
        2 * M: (90, 60, None, 40_000, 500),  # busy, no SM data
        3 * M: (90, 60, 50, 40_000, 80),    # busy at 80 W: busy at idle power
        4 * M: (1, 60, 0, 20_000, 90),      # idle, 20 GB held: idle with memory held
        5 * M: (1, 60, 0, 300, 75),         # idle, empty
        6 * M: (90, 30, 5, 40_000, 500),    # half the minute measured: busy and shallow for its 30 s
    }
    codes = minute_codes(0, 8, readings, 5, REFINE)
    result = split(codes)
    assert result.states == Counter({
        (BUSY, TEAM, PROJECT): 4 * MINUTE_TICKS + MINUTE_TICKS // 2,
        (IDLE, TEAM, PROJECT): 2 * MINUTE_TICKS,
        (UNMEASURED, TEAM, PROJECT): MINUTE_TICKS + MINUTE_TICKS // 2,  # minute 7, and minute 6's other 30 s
    })
    assert result.refined == Counter({
        (SM_MEASURED, TEAM, PROJECT): 3 * MINUTE_TICKS + MINUTE_TICKS // 2,  # minutes 0, 1, 3 and half of 6
        (SHALLOW, TEAM, PROJECT): MINUTE_TICKS + MINUTE_TICKS // 2,
        (LOW_POWER, TEAM, PROJECT): MINUTE_TICKS,
        (MEMORY_HELD, TEAM, PROJECT): MINUTE_TICKS,
    })
    assert result.refined_holders == Counter({(JOB, kind, team, project): ticks
                                              for (kind, team, project), ticks in result.refined.items()})


def test_a_refinement_goes_to_the_holder_of_the_minute():
    # two jobs of two teams one after the other, both shallow busy: each gets its own minutes
    first = Claim(0, 2 * M, GPU, 1, None, (1, 0, 1), ("job", 1))
    second = Claim(2 * M, 4 * M, GPU, 2, None, (1, 2 * M, 2), ("job", 2))
    codes = [60 + BUSY_FLAG + SM_FLAG + SHALLOW_FLAG] * 3 + [60 + MEMORY_FLAG]
    result = split(codes, claims=[first, second])
    assert result.refined_holders == Counter({
        (("job", 1), SM_MEASURED, 1, None): 2 * MINUTE_TICKS, (("job", 1), SHALLOW, 1, None): 2 * MINUTE_TICKS,
        (("job", 2), SM_MEASURED, 2, None): MINUTE_TICKS, (("job", 2), SHALLOW, 2, None): MINUTE_TICKS,
        (("job", 2), MEMORY_HELD, 2, None): MINUTE_TICKS,
    })


def test_an_unallocated_minute_is_never_refined():
    codes = np.asarray([60 + BUSY_FLAG + SM_FLAG + SHALLOW_FLAG + LOW_POWER_FLAG, 60 + MEMORY_FLAG], dtype=np.int64)
    result = split_refined(start=0, end=2 * M, capacity=GPU, pieces=[], codes=codes)
    assert result.refined == Counter()


MINUTES = 90
flags_st = st.sampled_from([0, SM_FLAG, SM_FLAG + SHALLOW_FLAG, MEMORY_FLAG, LOW_POWER_FLAG,
                            SM_FLAG + SHALLOW_FLAG + MEMORY_FLAG + LOW_POWER_FLAG])
codes_st = st.lists(st.tuples(st.integers(0, 60), st.booleans(), flags_st).map(
    lambda t: 0 if t[0] == 0 else t[0] + (BUSY_FLAG if t[1] else 0) + t[2]), min_size=MINUTES, max_size=MINUTES)
claims_st = st.lists(
    st.builds(lambda lo, length, share, team, n: Claim(lo * 10, lo * 10 + length * 10, share, team, None, (1, lo, n),
                                                       ("job", n % 4)),
              st.integers(0, MINUTES * 6 - 1), st.integers(1, 400), st.sampled_from([GPU, GPU // 2, GPU // 7]),
              st.sampled_from([1, 2, 3]), st.integers(0, 10**6)),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(codes=codes_st, claims=claims_st)
def test_refinements_never_change_the_states_and_stay_within_theirs(codes, claims):
    pieces = settle_claims(claims, GPU)
    array = np.asarray(codes, dtype=np.int64)
    without_flags = array & (BUSY_FLAG + 63)
    result = split_detail(start=0, end=MINUTES * M, capacity=GPU, pieces=pieces, codes=array)
    assert result.states == split_states(start=0, end=MINUTES * M, capacity=GPU, pieces=pieces, codes=without_flags)
    assert split_refined(start=0, end=MINUTES * M, capacity=GPU, pieces=pieces, codes=array).refined == result.refined
    for (kind, team, project), ticks in result.refined.items():
        assert 0 < ticks <= result.states[(REFINES[kind], team, project)]
    for (_kind, team, project), ticks in ((k, t) for k, t in result.refined.items() if k[0] == SHALLOW):
        assert ticks <= result.refined[(SM_MEASURED, team, project)]
    per_holder = Counter()
    for (_holder, kind, team, project), ticks in result.refined_holders.items():
        per_holder[(kind, team, project)] += ticks
    assert per_holder == result.refined
