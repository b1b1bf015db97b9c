import pytest

from tests.boards.board_day import make_board_day


@pytest.fixture
def board_day(team_a, team_b, engineer_a):
    """The usage tests' hand-made day with its hour rollups, aggregated (tests/boards/board_day.py)."""
    return make_board_day(team_a, team_b, engineer_a)
