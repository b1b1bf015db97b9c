"""Which navigation entry a page is under: the longest entry URL the path starts with; the home page (the
daily board) only for itself, and the board's other views under /board/ are the board's."""

import pytest

from teams.context_processors import NavEntry, current_entry

ENTRIES = [NavEntry("Board", "/", "board"), NavEntry("Monthly profile", "/board/profile/", "profile"),
           NavEntry("Inventory", "/inventory/", "inventory"), NavEntry("Teams", "/teams/", "teams")]


@pytest.mark.parametrize(("path", "key"), [
    ("/", "board"), ("/board/week/", "board"), ("/board/month/", "board"), ("/board/idle/", "board"),
    ("/board/profile/", "profile"), ("/inventory/nodes/n1/", "inventory"), ("/teams/alpha/", "teams"),
    ("/notifications/", None),
])
def test_a_page_is_under_one_entry(path, key):
    assert current_entry(path, ENTRIES) == key


@pytest.mark.django_db
def test_the_week_view_marks_the_board_not_the_profile(client, lead_a):
    client.force_login(lead_a)
    html = client.get("/board/week/").content.decode()
    assert 'data-nav="board" aria-current="page"' in html and 'data-nav="profile" aria-current' not in html
