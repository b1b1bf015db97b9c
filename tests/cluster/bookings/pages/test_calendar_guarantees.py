"""The calendar shows each guaranteed share (issue 19): team, model, GPUs, hours, what the team holds now and
what the guarantee still reserves; in a fixed number of queries."""

import re
from datetime import time

import pytest

from cluster.models import GuaranteeDays, TeamGuarantee
from tests.cluster.bookings.pages.helpers import CALENDAR, CALENDAR_QUERIES, at, book, gpu

pytestmark = pytest.mark.django_db


def table_rows(response) -> list[list[str]]:
    """The table's body rows as the text of their cells."""
    page = response.content.decode()
    table = page[page.index('data-testid="calendar-guarantees"'):]
    body = table[table.index("<tbody>"):table.index("</tbody>")]
    return [[" ".join(re.sub(r"<[^>]+>", "", cell).split()) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def test_the_calendar_lists_guarantees_with_what_they_reserve_now(client, engineer_a, team_a, team_b, small_cluster,
                                                                   django_assert_num_queries):
    h200 = small_cluster["h200"]
    TeamGuarantee.objects.create(team=team_a, gpu_model=h200, gpus=2)
    TeamGuarantee.objects.create(team=team_b, gpu_model=h200, gpus=1, days=GuaranteeDays.WEEKDAYS,
                                 start_time=time(9), end_time=time(18))
    book(engineer_a, team_a, start=at(8), end=at(10), gpus=[gpu("h200-a/0")])  # held at NOW, Monday 08:00
    client.force_login(engineer_a)
    client.get(CALENDAR)  # warm the session
    with django_assert_num_queries(CALENDAR_QUERIES + 1):  # the holds at this moment
        response = client.get(CALENDAR, {"week": "2026-11-02"})
    assert response.status_code == 200
    assert table_rows(response) == [
        ["Team Alpha", "H200", "2", "always", "1", "1"],
        ["Team Beta", "H200", "1", "Monday to Friday 09:00–18:00 (not now)", "0", "0"],
    ]


def test_without_guarantees_the_calendar_has_no_table(client, engineer_a, small_cluster):
    client.force_login(engineer_a)
    response = client.get(CALENDAR)
    assert response.status_code == 200 and b"calendar-guarantees" not in response.content
