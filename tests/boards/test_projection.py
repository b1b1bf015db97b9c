"""Next month's need, projected from the full months before it (boards/periods/projection.py): pure maths."""

from datetime import date
from decimal import Decimal
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from boards.periods.projection import LINEAR_TREND, NOT_ENOUGH_HISTORY, project_next_month

MONTHS = [date(2026, 8, 1), date(2026, 9, 1), date(2026, 10, 1)]


def history(*means):
    return list(zip(MONTHS[-len(means):] if means else [], means, strict=True))


def test_it_projects_a_rising_history_along_its_trend_with_the_largest_residual_as_band():
    projection = project_next_month(history(10, 14, 15))
    # slope 2.5, intercept 10.5: next month 18; residuals -0.5, +1, -0.5
    assert projection.method == LINEAR_TREND and projection.enough_history and projection.months_used == 3
    assert (projection.value, projection.low, projection.high) == (Decimal("18.00"), Decimal("17.00"), Decimal("19.00"))
    assert projection.band == Decimal("1.00") and projection.last_mean == Decimal("15.00")


def test_a_flat_history_projects_itself_with_no_band():
    projection = project_next_month(history(Decimal("7.25"), Decimal("7.25"), Decimal("7.25")))
    assert (projection.value, projection.low, projection.high) == (Decimal("7.25"),) * 3


def test_a_falling_history_is_clamped_at_zero():
    projection = project_next_month(history(10, 4, 1))
    # slope -4.5, intercept 9.5: next month -4, band 1 → clamped to 0 … 0
    assert (projection.value, projection.low, projection.high) == (Decimal("0.00"),) * 3
    assert projection.band == Decimal("1.00")


def test_only_the_last_three_months_count():
    months = [(date(2026, m, 1), mean) for m, mean in ((6, 100), (7, 1), (8, 2), (9, 3))]
    assert project_next_month(months).value == Decimal("4.00")


def test_one_month_is_not_enough_history_and_carries_its_mean():
    projection = project_next_month(history(Fraction(10, 3)))
    assert projection.method == NOT_ENOUGH_HISTORY and not projection.enough_history
    assert projection.months_used == 1 and projection.last_mean == Decimal("3.33")
    assert projection.value is projection.low is projection.high is None


def test_no_history_projects_nothing():
    projection = project_next_month([])
    assert projection.method == NOT_ENOUGH_HISTORY and projection.months_used == 0
    assert projection.last_mean is None and projection.value is None


hundredths = st.integers(min_value=0, max_value=10**6).map(lambda n: Fraction(n, 100))


@given(start=hundredths, step=st.integers(min_value=-10**4, max_value=10**4).map(lambda n: Fraction(n, 100)))
def test_a_perfectly_linear_history_projects_its_next_point_exactly_with_no_band(start, step):
    points = [start + step * x for x in range(3)]
    if min(points) < 0:
        return
    projection = project_next_month(history(*points))
    expected = max(start + step * 3, Fraction(0))
    assert projection.value == projection.low == projection.high == Decimal(expected.numerator) / expected.denominator
    assert projection.band == 0


@given(st.lists(hundredths, min_size=3, max_size=3))
def test_the_band_holds_the_projection_and_nothing_is_negative(means):
    projection = project_next_month(history(*means))
    assert Decimal(0) <= projection.low <= projection.value <= projection.high
    assert projection.band >= 0
