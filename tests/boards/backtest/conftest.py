import pytest

from tests.boards.backtest.history import make_history


@pytest.fixture
def history(small_cluster, team_a, team_b, admin_user, settings):
    """The recorded day of tests/boards/backtest/history.py."""
    return make_history(small_cluster, team_a, team_b, admin_user, settings)
