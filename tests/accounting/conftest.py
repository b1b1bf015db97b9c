import pytest

from tests.accounting.usage.usage_day import make_day


@pytest.fixture
def day(team_a, team_b, engineer_a):
    """A hand-made day of usage (tests/accounting/usage/usage_day.py)."""
    return make_day(team_a, team_b, engineer_a)
