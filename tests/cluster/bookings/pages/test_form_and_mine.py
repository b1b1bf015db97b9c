"""The booking form's answers (302, 400, 403, 409, the earliest slot) and my bookings' cancel, end now and
extend, against the real services and PostgreSQL."""


import pytest
from django.urls import reverse

from cluster.bookings import views as booking_views
from cluster.bookings.calendar import BlockKind
from cluster.bookings.services import booking_create
from cluster.models import Booking, BookingStatus, GpuHold, TeamBookingPolicy
from teams.models import Membership
from teams.roles import TeamRole
from tests.cluster.bookings.pages.helpers import (
    CALENDAR,
    MINE,
    MINE_QUERIES,
    NEW,
    NOW,
    at,
    book,
    gpu,
    kinds,
    lanes,
    local,
)

pytestmark = pytest.mark.django_db


# --- the booking form


def form_data(**changes) -> dict:
    data = {"mode": "model", "gpu_model": "", "count": "1", "start": local(at(10)), "hours": "2", "note": ""}
    data.update(changes)
    return {name: value for name, value in data.items() if value is not None}


@pytest.fixture
def cluster(team_a, team_b, small_cluster):
    return small_cluster


def test_the_form_opened_from_a_lane_names_its_gpu_and_model(client, engineer_a, cluster):
    client.force_login(engineer_a)
    lane_gpu = gpu("h200-a/1")
    response = client.get(NEW, {"gpus": lane_gpu.pk, "start": "2026-11-03T10:00:00.000Z", "hours": "2"})

    assert response.status_code == 200
    initial = response.context["form"].initial
    assert (initial["mode"], initial["gpus"], initial["gpu_model"], initial["start"], initial["hours"]) == (
        "gpus", [lane_gpu.pk], cluster["h200"], at(34), 2,
    )
    body = response.content.decode()
    assert 'value="2026-11-03T10:00"' in body and 'step="1800"' in body
    assert 'name="booker"' not in body  # an engineer books for themself
    assert "est-params_billion" in body  # the memory estimator beside the form


def test_the_form_starts_at_the_next_half_hour_and_not_in_the_past(client, engineer_a, cluster, clock):
    client.force_login(engineer_a)
    clock.now = at(8.2)
    assert client.get(NEW).context["form"].initial["start"] == at(8.5)
    assert client.get(NEW, {"start": "2026-11-01T10:00:00Z"}).context["form"].initial["start"] == at(8.5)
    assert client.get(NEW, {"start": "2026-13-45T10:00:00Z"}).context["form"].initial["start"] == at(8.5)
    assert client.get(NEW, {"node": "h200-a"}).context["form"].initial["mode"] == "node"


def test_a_lead_may_pick_the_booker(client, lead_a, engineer_a, team_a, cluster):
    client.force_login(lead_a)
    response = client.get(NEW)
    booker = response.context["form"].fields["booker"]
    assert sorted(booker.queryset.values_list("username", flat=True)) == ["ed-eng-a", "lena-lead-a"]

    response = client.post(NEW, form_data(team=team_a.pk, booker=engineer_a.pk, gpu_model=cluster["h200"].pk))
    assert response.status_code == 302
    booking = Booking.objects.get()
    assert (booking.booker, booking.created_by) == (engineer_a, lead_a)


def test_booking_by_model_redirects_to_the_week_with_a_message(client, engineer_a, team_a, cluster):
    client.force_login(engineer_a)
    response = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, count="2",
                                          start=local(at(58)), hours="1.5", note="eval"))

    assert response.status_code == 302
    assert response["Location"] == f"{CALENDAR}?week=2026-11-04"
    booking = Booking.objects.get()
    assert (booking.booker, booking.team, booking.start, booking.end, booking.gpu_count, booking.note) == (
        engineer_a, team_a, at(58), at(59.5), 2, "eval",
    )
    page = client.get(response["Location"])
    assert [str(m) for m in page.context["messages"]] == [
        "Booked h200-a/0, h200-a/1 for 2026-11-04 10:00–11:30 (UTC)."
    ]
    assert kinds(lanes(page)["h200-a/0"]) == [BlockKind.MINE]


def test_booking_named_gpus_and_a_whole_node(client, engineer_a, team_a, cluster):
    client.force_login(engineer_a)
    named = client.post(NEW, form_data(team=team_a.pk, mode="gpus", gpus=[gpu("h200-b/1").pk]))
    node = client.post(NEW, form_data(team=team_a.pk, mode="node", node="h200-a"))

    assert named.status_code == node.status_code == 302
    held = GpuHold.objects.order_by("gpu__node__hostname", "gpu__index").values_list("gpu__node__hostname", "gpu__index")
    assert list(held) == [("h200-a", 0), ("h200-a", 1), ("h200-b", 1)]


def test_a_rule_broken_is_400_on_its_field(client, engineer_a, team_a, cluster):
    client.force_login(engineer_a)
    off_grid = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, start="2026-11-02T10:15"))
    assert off_grid.status_code == 400
    assert off_grid.context["form"].errors["start"] == ["must be on the 30-minute grid (a whole number of 30-minute steps past midnight)."]
    too_long = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, hours="200"))
    assert too_long.status_code == 400
    assert too_long.context["form"].errors["hours"] == ["a booking lasts at most 168 hours."]
    too_many = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, count="5"))
    assert too_many.status_code == 400
    assert "the cluster has 4 bookable H200 GPUs." in too_many.content.decode()
    no_model = client.post(NEW, form_data(team=team_a.pk))
    assert no_model.status_code == 400 and no_model.context["form"].errors["gpu_model"] == ["Choose a GPU model."]
    assert not Booking.objects.exists()


def test_an_overlap_is_409_naming_the_time_and_team_only(client, engineer_a, engineer_b, team_a, team_b, cluster):
    book(engineer_b, team_b, start=at(9), end=at(11), gpus=[gpu("h200-a/0")], note="private purpose")
    client.force_login(engineer_a)
    response = client.post(NEW, form_data(team=team_a.pk, mode="gpus", gpus=[gpu("h200-a/0").pk]))

    assert response.status_code == 409
    assert response.context["form"].errors["gpus"] == [
        "GPU h200-a/0 is booked 2026-11-02 09:00–11:00 (UTC) by team Team Beta."
    ]
    body = response.content.decode()
    assert "bea-eng-b" not in body and "private purpose" not in body
    assert Booking.objects.count() == 1


def test_booking_for_someone_else_as_an_engineer_of_that_team_is_403(client, lead_a, engineer_a, team_a, team_b,
                                                                     cluster):
    Membership.objects.create(user=lead_a, team=team_b, role=TeamRole.ENGINEER)  # leads A, engineer in B
    Membership.objects.create(user=engineer_a, team=team_b, role=TeamRole.ENGINEER)
    client.force_login(lead_a)
    response = client.post(NEW, form_data(team=team_b.pk, booker=engineer_a.pk, gpu_model=cluster["h200"].pk))

    assert response.status_code == 403
    assert response.context["form"].errors["booker"] == ["only a team lead books for someone else."]
    assert not Booking.objects.exists()


def test_another_teams_choice_is_refused_by_the_form(client, engineer_a, team_b, cluster):
    client.force_login(engineer_a)
    response = client.post(NEW, form_data(team=team_b.pk, gpu_model=cluster["h200"].pk))
    assert response.status_code == 400 and "team" in response.context["form"].errors
    assert not Booking.objects.exists()


def test_find_the_earliest_slot_moves_the_start(client, engineer_a, engineer_b, team_a, team_b, cluster):
    book(engineer_b, team_b, start=at(9), end=at(12), gpus=[gpu("h200-a/0"), gpu("h200-a/1")])
    client.force_login(engineer_a)
    response = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, count="2", propose="1"))

    assert response.status_code == 200
    assert response.context["proposal"] == "Earliest free: 2026-11-02 12:00–14:00 (UTC) on h200-a/0, h200-a/1."
    form = response.context["form"]
    assert form.is_valid() and form.cleaned_data["start"] == at(12)
    assert 'value="2026-11-02T12:00"' in response.content.decode()
    assert Booking.objects.count() == 1  # proposing books nothing


def test_find_the_earliest_slot_from_a_lane_searches_for_its_model(client, engineer_a, team_a, cluster):
    client.force_login(engineer_a)
    response = client.post(NEW, form_data(team=team_a.pk, mode="gpus", gpus=[gpu("h200-b/0").pk], propose="1"))
    assert response.context["proposal"] == "Earliest free: 2026-11-02 10:00–12:00 (UTC) on h200-a/0."
    assert response.context["form"].cleaned_data["mode"] == "model"


def test_no_slot_within_the_horizon(client, engineer_a, engineer_b, team_a, team_b, cluster):
    TeamBookingPolicy.objects.create(team=team_a, max_days_ahead=1)
    book(engineer_b, team_b, start=at(8), end=at(80), gpus=[gpu("h200-a/0"), gpu("h200-a/1")])
    client.force_login(engineer_a)
    response = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, propose="1"))
    assert response.context["proposal"] == "No slot within the booking horizon."

    too_many = client.post(NEW, form_data(team=team_a.pk, gpu_model=cluster["h200"].pk, count="3", propose="1"))
    assert too_many.context["proposal"] == "The cluster has 2 H200 GPUs that can be booked now."  # h200-b is down


# --- my bookings


@pytest.fixture
def bookings(team_a, team_b, small_cluster, engineer_a, lead_a, engineer_b):
    return {
        "later": book(engineer_a, team_a, start=at(10), end=at(12), gpus=[gpu("h200-a/0")]),
        "running": booking_create(user=engineer_a, team=team_a, start=at(6), end=at(10), gpus=[gpu("h200-a/1")],
                                  now=at(5)),
        "teammate": book(lead_a, team_a, start=at(14), end=at(16), gpus=[gpu("h200-b/0")]),
        "other": book(engineer_b, team_b, start=at(14), end=at(16), gpus=[gpu("h200-b/1")]),
    }


def rows(response, key="mine") -> dict:
    table = next(table for table in response.context["tables"] if table["key"] == key)
    return {booking.pk: booking for booking in table["rows"]}


def test_my_bookings_lists_mine_with_their_actions(client, engineer_a, bookings):
    client.force_login(engineer_a)
    response = client.get(MINE)

    mine = rows(response)
    assert list(mine) == [bookings["later"].pk, bookings["running"].pk]
    later, running = mine[bookings["later"].pk], mine[bookings["running"].pk]
    assert (later.gpu_names, later.can_cancel, later.can_end, later.can_extend) == ("h200-a/0", True, False, True)
    assert (running.can_cancel, running.can_end, running.can_extend) == (False, True, True)
    assert len(response.context["tables"]) == 1  # an engineer has no team table
    body = response.content.decode()
    assert "Team Beta" not in body
    assert 'class="badge badge-green" data-testid="status">Booked<' in body


def test_a_lead_also_sees_the_teams_other_bookings(client, lead_a, bookings):
    client.force_login(lead_a)
    response = client.get(MINE)
    assert list(rows(response)) == [bookings["teammate"].pk]
    team = rows(response, "team")
    assert list(team) == [bookings["later"].pk, bookings["running"].pk]
    assert team[bookings["later"].pk].can_cancel  # a lead changes the team's bookings


def test_my_bookings_reads_in_a_fixed_number_of_queries(client, engineer_a, team_a, bookings,
                                                        django_assert_num_queries):
    client.force_login(engineer_a)
    client.get(MINE)
    with django_assert_num_queries(MINE_QUERIES):
        response = client.get(MINE)
    assert response.status_code == 200 and len(rows(response)) == 2
    for day in range(1, 5):
        book(engineer_a, team_a, start=at(24 * day), end=at(24 * day + 2), gpus=[gpu("h200-a/0"), gpu("h200-a/1")])
    with django_assert_num_queries(MINE_QUERIES):
        response = client.get(MINE)
    assert response.status_code == 200 and len(rows(response)) == 6


def test_my_bookings_has_pages(client, engineer_a, bookings, monkeypatch):
    monkeypatch.setattr(booking_views, "BOOKINGS_PER_PAGE", 1)
    client.force_login(engineer_a)
    first = client.get(MINE)
    assert list(rows(first)) == [bookings["later"].pk]
    assert 'data-testid="pager-mine"' in first.content.decode()
    assert list(rows(client.get(MINE, {"page": 2}))) == [bookings["running"].pk]


def test_cancel_before_the_start(client, engineer_a, bookings):
    client.force_login(engineer_a)
    booking = bookings["later"]
    response = client.post(reverse("cluster:booking-cancel", args=[booking.pk]), {"next": MINE}, follow=True)

    booking.refresh_from_db()
    assert booking.status == BookingStatus.CANCELLED
    assert not booking.holds.filter(active=True).exists()
    assert response.redirect_chain == [(MINE, 302)]
    assert [str(m) for m in response.context["messages"]] == [f"Booking #{booking.pk} cancelled."]
    assert 'data-testid="status">Cancelled<' in response.content.decode()


def test_end_a_running_booking_now(client, engineer_a, bookings):
    client.force_login(engineer_a)
    booking = bookings["running"]
    response = client.post(reverse("cluster:booking-cancel", args=[booking.pk]), follow=True)

    booking.refresh_from_db()
    assert (booking.status, booking.end) == (BookingStatus.ENDED, NOW)
    assert booking.holds.get().during.upper == NOW
    assert [str(m) for m in response.context["messages"]] == [f"Booking #{booking.pk} ended; its GPUs are free."]


def test_extend_when_free_and_a_message_when_not(client, engineer_a, bookings):
    client.force_login(engineer_a)
    booking = bookings["later"]
    url = reverse("cluster:booking-extend", args=[booking.pk])

    response = client.post(url, {"end": "2026-11-02T13:30", "next": MINE}, follow=True)
    booking.refresh_from_db()
    assert booking.end == at(13.5)
    assert [str(m) for m in response.context["messages"]] == [
        f"Booking #{booking.pk} now runs 2026-11-02 10:00–13:30 (UTC)."
    ]

    book(engineer_a, booking.team, start=at(14), end=at(15), gpus=[gpu("h200-a/0")])
    response = client.post(url, {"end": "2026-11-02T15:00"}, follow=True)
    booking.refresh_from_db()
    assert booking.end == at(13.5)
    (message,) = response.context["messages"]
    assert message.level_tag == "error" and "GPU h200-a/0 is booked 2026-11-02 14:00–15:00 (UTC)" in str(message)

    response = client.post(url, {"end": "soon"}, follow=True)
    assert [m.level_tag for m in response.context["messages"]] == ["error"]


def test_another_teams_booking_is_404_and_a_teammates_is_refused(client, engineer_a, bookings):
    client.force_login(engineer_a)
    other = bookings["other"]
    assert client.post(reverse("cluster:booking-cancel", args=[other.pk])).status_code == 404
    assert client.post(reverse("cluster:booking-extend", args=[other.pk]), {"end": "2026-11-02T17:00"}).status_code == 404
    other.refresh_from_db()
    assert (other.status, other.end) == (BookingStatus.BOOKED, at(16))

    teammate = bookings["teammate"]
    response = client.post(reverse("cluster:booking-cancel", args=[teammate.pk]), follow=True)
    assert [str(m) for m in response.context["messages"]] == ["only the booker or a team lead changes this booking."]
    teammate.refresh_from_db()
    assert teammate.status == BookingStatus.BOOKED


def test_cancel_is_a_post_and_next_stays_on_this_site(client, engineer_a, bookings):
    client.force_login(engineer_a)
    url = reverse("cluster:booking-cancel", args=[bookings["later"].pk])
    assert client.get(url).status_code == 405
    response = client.post(url, {"next": "https://evil.example/"})
    assert response["Location"] == MINE


def test_every_signed_in_role_has_the_bookings_entry(client, engineer_a, finance_user):
    for user in (engineer_a, finance_user):
        client.force_login(user)
        assert f'href="{CALENDAR}" data-nav="bookings"' in client.get(MINE).content.decode()


def test_the_pages_render_in_chinese(client, engineer_a, week):
    client.force_login(engineer_a)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": MINE})
    for url in (f"{CALENDAR}?week=2026-11-02", f"{CALENDAR}?group=model", NEW, MINE):
        response = client.get(url)
        assert response.status_code == 200
        assert '<html lang="zh-hans">' in response.content.decode()
    response = client.get(CALENDAR, {"week": "2026-11-02"})
    assert lanes(response)["h200-a/0"].blocks[0].left_pct == 20.2381
    assert 'style="left: 20.2381%; width: 2.3810%"' in response.content.decode()  # a dot, whatever the language
