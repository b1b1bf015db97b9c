"""The daily board's pure maths (boards/maths.py)."""

from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from boards.maths import (
    BANDS,
    CELL_KINDS,
    MEASURED,
    OTHER_TEAMS,
    Change,
    DayOfGpu,
    allocation_rate,
    band_of,
    card_hours_by_state,
    cell_kind,
    cell_kinds,
    change_against,
    efficiency,
    idle_since,
    rests,
)
from cluster.jobs.kpis import percent
from core.units import TICKS_PER_CARD_HOUR

H = TICKS_PER_CARD_HOUR


def test_rates_and_efficiency():
    ticks = {"busy": 3 * H, "idle": H, "unallocated": 4 * H, "down": 2 * H}
    assert allocation_rate(ticks) == Fraction(4, 8)  # allocated ÷ (capacity − down)
    assert efficiency(ticks) == Fraction(3, 4)
    assert allocation_rate({"down": H}) is None and efficiency({"unallocated": H}) is None
    # under a team filter the other teams' ticks are capacity, not the team's allocation
    assert allocation_rate({"busy": H, OTHER_TEAMS: H, "unallocated": 2 * H}) == Fraction(1, 4)
    assert percent(Fraction(2, 3)) == Decimal("66.7") and percent(None) is None


@given(st.dictionaries(st.sampled_from(["busy", "idle", "unmeasured", "unallocated", "down", OTHER_TEAMS]),
                       st.integers(min_value=0, max_value=10**15)))
def test_card_hours_add_up_to_the_rounded_capacity(ticks):
    hours = card_hours_by_state(ticks)
    total = sum(ticks.values())
    assert sum(hours.values()) == Decimal((2 * total * 10**4 + H) // (2 * H)).scaleb(-4)


def test_change_against_the_mean_of_the_days_with_data():
    assert change_against(Decimal("10.0"), [Decimal("8.0"), None, Decimal("9.0")]) == Change(Decimal("8.5"), Decimal("1.5"))
    assert change_against(Decimal("10.0"), [None]) == Change(None, None)
    assert change_against(None, [Decimal(1)]).direction == "flat"
    assert change_against(Decimal("1.00"), [Decimal("2.00")]).direction == "down"


def test_a_cell_is_measured_only_when_allocated_and_measured_time_leads():
    assert cell_kind({"busy": 40, "unallocated": 20}, has_util=True) == MEASURED
    assert cell_kind({"busy": 40, "unallocated": 20}, has_util=False) == "unmeasured"  # never 0 %
    assert cell_kind({"idle": 10, "unmeasured": 50}, has_util=True) == "unmeasured"
    assert cell_kind({"down": 30, "unallocated": 30}, has_util=False) == "unallocated"
    assert cell_kind({"down": 31, "unallocated": 29}, has_util=False) == "down"
    assert cell_kind({}, has_util=False) == "unmeasured"
    assert cell_kind({"busy": 10, OTHER_TEAMS: 50}, has_util=True) == OTHER_TEAMS


@given(st.lists(st.tuples(*[st.integers(min_value=0, max_value=4) for _ in range(6)], st.booleans()), min_size=1))
def test_the_column_wise_kinds_are_the_reference_kinds(cells):
    keys = ("busy", "idle", "unmeasured", OTHER_TEAMS, "unallocated", "down")
    columns = list(zip(*cells, strict=True))
    kinds = cell_kinds(*columns)
    assert [CELL_KINDS[k] for k in kinds] == [
        cell_kind(dict(zip(keys, cell[:6], strict=True)), has_util=cell[6]) for cell in cells]


@given(st.floats(min_value=0, max_value=100))
def test_every_utilization_has_one_band(util):
    lo, hi = BANDS[band_of(util)]
    assert lo <= util < hi or (util == 100 and hi == 100)


def test_long_idle_counts_whole_days_across_a_month_boundary():
    resting, busy = DayOfGpu(0, 86400, 0), DayOfGpu(60, 86340, 0)
    days = {date(2026, 10, 29): busy, **{date(2026, 10, 30) + timedelta(days=n): resting for n in range(4)}}
    assert idle_since(days, last=date(2026, 11, 2)) == date(2026, 10, 30)
    assert idle_since(days, last=date(2026, 10, 29)) is None
    days.pop(date(2026, 10, 31))  # a day with no row breaks the run
    assert idle_since(days, last=date(2026, 11, 2)) == date(2026, 11, 1)
    assert not rests(DayOfGpu(0, 10, 90)) and rests(DayOfGpu(0, 50, 50))  # mostly down or unmeasured says nothing
