"""The bookings API (DESIGN.md §6) against the real services and PostgreSQL: book by model, named GPUs or
node; who books for whom; 409 that names only the slot's time and team; 400 naming the rule; another
team's booking is 404; extend, cancel, end early; the earliest free slot; the list's query count."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.bookings.services import booking_create
from cluster.models import Booking, BookingStatus, Gpu, GpuHold, Node, TeamBookingPolicy
from teams.models import ApiToken, Project
from teams.roles import TeamRole
from teams.tokens import ApiTokenKind
from tests.conftest import T0

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(hours=8)  # the tests' clock: Monday 08:00 UTC, on the grid
TEN, NOON = T0 + timedelta(hours=10), T0 + timedelta(hours=12)
ROW_FIELDS = {
    "id", "team", "project", "booker", "created_by", "mode", "gpu_model", "node", "gpu_count", "gpus", "start",
    "end", "booked_end", "status", "note", "created_at", "closed_at",
}


def at(hours: float):
    return T0 + timedelta(hours=hours)


def iso(moment) -> str:
    return moment.isoformat()


def shown(moment) -> str:
    """A time as the API writes it: UTC with Z."""
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
def clock(monkeypatch):
    """``timezone.now()`` reads ``clock.now`` (services, views and the API alike)."""

    class Clock:
        now = NOW

    monkeypatch.setattr(timezone, "now", lambda: Clock.now)
    return Clock


@pytest.fixture
def cast(team_a, team_b, small_cluster, clock):
    return small_cluster


def gpu(name: str) -> Gpu:
    hostname, index = name.split("/")
    return Gpu.objects.get(node__hostname=hostname, index=int(index), mig_parent__isnull=True)


def book(user, team, *, start=TEN, end=NOON, **what) -> Booking:
    """A booking made through the service, as another person would have."""
    return booking_create(user=user, team=team, start=start, end=end, now=NOW, **what)


def request_body(**changes) -> dict:
    body = {"team": "alpha", "start": iso(at(10)), "end": iso(at(12)), "gpu_model": "H200", "count": 1}
    body.update(changes)
    return {name: value for name, value in body.items() if value is not None}


@pytest.fixture
def third_node(cast):
    """An up node with three H200s beside h200-a's two, so packing has a choice."""
    node = Node.objects.create(hostname="h200-c", pool="train")
    for index in range(3):
        Gpu.objects.create(node=node, index=index, uuid=f"GPU-h200-c-{index}", model=cast["h200"], memory_mib=143771)
    return node


def test_it_books_by_model_packing_one_node(api, third_node, engineer_a):
    client = api.as_user(engineer_a)
    first = client.post("/api/v1/bookings/", request_body(count=2, note="fine-tune"))
    assert first.status_code == 201, first.json()
    row = first.json()
    assert set(row) == ROW_FIELDS
    assert (row["team"], row["project"], row["booker"], row["created_by"]) == ("alpha", None, "ed-eng-a", "ed-eng-a")
    assert (row["mode"], row["gpu_model"], row["node"], row["gpu_count"]) == ("model", "H200", None, 2)
    assert (row["start"], row["end"], row["booked_end"], row["status"]) == (
        shown(at(10)), shown(at(12)), shown(at(12)), "booked")
    assert (row["note"], row["created_at"], row["closed_at"]) == ("fine-tune", shown(NOW), None)
    # The fullest node that still fits both: h200-a (2 free) before h200-c (3 free).
    assert [g["name"] for g in row["gpus"]] == ["h200-a/0", "h200-a/1"]
    assert [g["id"] for g in row["gpus"]] == [gpu("h200-a/0").pk, gpu("h200-a/1").pk]

    second = client.post("/api/v1/bookings/", request_body(count=2, gpu_model="NVIDIA H200", project="alpha-pre"))
    assert second.status_code == 201, second.json()
    assert [g["name"] for g in second.json()["gpus"]] == ["h200-c/0", "h200-c/1"]
    assert second.json()["project"] == "alpha-pre"

    holds = GpuHold.objects.filter(booking_id__in=[row["id"], second.json()["id"]], active=True)
    assert sorted(str(hold.gpu) for hold in holds) == ["h200-a/0", "h200-a/1", "h200-c/0", "h200-c/1"]
    assert {(hold.during.lower, hold.during.upper, hold.team.slug, hold.booker.username) for hold in holds} == {
        (at(10), at(12), "alpha", "ed-eng-a")}


def test_it_books_named_gpus_by_name_and_id(api, cast, engineer_a):
    response = api.as_user(engineer_a).post(
        "/api/v1/bookings/", request_body(gpu_model=None, count=None, gpus=["h200-a/1", gpu("h200-b/0").pk]),
    )
    assert response.status_code == 201, response.json()
    row = response.json()
    assert (row["mode"], row["gpu_model"], row["gpu_count"]) == ("gpus", "H200", 2)
    assert [g["name"] for g in row["gpus"]] == ["h200-a/1", "h200-b/0"]
    assert [g["node"] for g in row["gpus"]] == ["h200-a", "h200-b"]


def test_it_books_a_whole_node(api, cast, lead_a):
    body = request_body(gpu_model=None, count=None, node="h200-a", gpus=[], project="")  # empty reads as left out
    response = api.as_user(lead_a).post("/api/v1/bookings/", body)
    assert response.status_code == 201, response.json()
    row = response.json()
    assert (row["mode"], row["node"], row["gpu_count"]) == ("node", "h200-a", 2)
    assert [g["name"] for g in row["gpus"]] == ["h200-a/0", "h200-a/1"]


def test_an_engineer_books_only_for_themself(api, cast, engineer_a, lead_a):
    response = api.as_user(engineer_a).post("/api/v1/bookings/", request_body(booker=lead_a.username))
    assert response.status_code == 403
    assert response.json()["detail"] == "booker: only a team lead books for someone else."
    assert not Booking.objects.exists()


def test_a_lead_books_for_a_team_member(api, cast, lead_a, engineer_a, engineer_b):
    client = api.as_user(lead_a)
    response = client.post("/api/v1/bookings/", request_body(booker=engineer_a.username))
    assert response.status_code == 201, response.json()
    assert (response.json()["booker"], response.json()["created_by"]) == ("ed-eng-a", "lena-lead-a")
    outsider = client.post("/api/v1/bookings/", request_body(booker=engineer_b.username, start=iso(at(14)),
                                                             end=iso(at(15))))
    assert outsider.status_code == 400
    assert outsider.json()["detail"] == "booker: must be a member of the team."


def test_another_team_cannot_book_for_a_team_it_is_not_in(api, cast, engineer_a):
    response = api.as_user(engineer_a).post("/api/v1/bookings/", request_body(team="beta"))
    assert response.status_code == 403
    assert "team" in response.json()


def test_a_service_token_cannot_book(api, cast, django_user_model):
    account = django_user_model.objects.create_user("svc-slurm")
    _token, raw = ApiToken.issue(user=account, name="slurm", kind=ApiTokenKind.SERVICE)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = api.post("/api/v1/bookings/", request_body())
    assert response.status_code == 403
    assert "Service tokens" in response.json()["detail"]
    assert api.get("/api/v1/bookings/").status_code == 200
    assert not Booking.objects.exists()


@pytest.fixture
def beta_holds_h200_a0(cast, engineer_b, team_b):
    return book(engineer_b, team_b, gpus=[gpu("h200-a/0")], project=Project.objects.get(slug="beta-vision"),
                note="secret launch plan")


def test_an_overlap_is_a_409_naming_only_the_time_and_the_team(api, beta_holds_h200_a0, engineer_a):
    response = api.as_user(engineer_a).post(
        "/api/v1/bookings/",
        request_body(gpu_model=None, count=None, gpus=["h200-a/0"], start=iso(at(11)), end=iso(at(13))),
    )
    assert response.status_code == 409
    body = response.json()
    assert set(body) == {"detail", "gpus"}
    assert body["detail"] == "gpus: GPU h200-a/0 is booked 2026-11-02 10:00–12:00 (UTC) by team Team Beta."
    assert body["gpus"] == ["GPU h200-a/0 is booked 2026-11-02 10:00–12:00 (UTC) by team Team Beta."]
    for private in ("bea-eng-b", "beta-vision", "secret launch plan"):
        assert private not in response.content.decode()
    assert Booking.objects.count() == 1


def test_a_pick_by_model_with_no_room_is_a_409_proposing_the_earliest_slot(api, beta_holds_h200_a0, engineer_a):
    response = api.as_user(engineer_a).post("/api/v1/bookings/", request_body(count=2))
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "count: 2 × H200 are not free 2026-11-02 10:00–12:00 (UTC); "
        "the earliest free slot is 2026-11-02 12:00–14:00 (UTC).")
    assert "bea-eng-b" not in response.content.decode()


def off(hours):
    return iso(at(hours))


@pytest.mark.parametrize(
    ("changes", "limits", "field", "rule"),
    [
        ({"end": off(10)}, {}, "end", "must be after the start."),
        ({"end": off(9)}, {}, "end", "must be after the start."),
        ({"start": off(10.25)}, {}, "start", "must be on the 30-minute grid"),
        ({"end": iso(at(12) + timedelta(minutes=10))}, {}, "end", "must be on the 30-minute grid"),
        ({"start": off(6), "end": off(7)}, {}, "start", "is in the past."),
        ({"end": off(15)}, {"BOOKING_MAX_HOURS": 4}, "end", "a booking lasts at most 4 hours."),
        ({"start": off(24 * 3), "end": off(24 * 3 + 1)}, {"BOOKING_MAX_DAYS_AHEAD": 2}, "start",
         "may be at most 2 days ahead."),
        ({"count": 5}, {}, "count", "the cluster has 4 bookable H200 GPUs."),
        ({"count": 2}, {"BOOKING_MAX_GPUS_PER_BOOKING": 1}, "count", "a booking holds at most 1 GPUs."),
        ({"count": 0}, {}, "count", "greater than or equal to 1"),
        ({"start": "2026-11-02T10:00:00"}, {}, "start", "needs a UTC offset"),
        ({"end": "noon"}, {}, "end", "wrong format"),
        ({"team": "gamma"}, {}, "team", "Unknown team “gamma”."),
        ({"project": "beta-vision"}, {}, "project", "Unknown project “beta-vision” in team “alpha”."),
        ({"booker": "nobody"}, {}, "booker", "Unknown user “nobody”."),
        ({"gpu_model": "Z9"}, {}, "gpu_model", "Unknown GPU model “Z9”."),
        ({"gpu_model": None, "count": None, "gpus": ["h200-a/7", 999999]}, {}, "gpus",
         "Unknown GPU h200-a/7, #999999."),
        ({"gpu_model": None, "count": None, "gpus": "h200-a/0"}, {}, "gpus", "A list of GPU ids"),
        ({"gpu_model": None, "count": None, "gpus": ["l40s-a/0"]}, {}, "gpus", "cannot be booked"),
        ({"gpu_model": None, "count": None, "node": "h200-z"}, {}, "node", "Unknown node “h200-z”."),
        ({"gpu_model": None, "count": None, "node": "l40s-a"}, {}, "node", "is in maintenance or retired."),
        ({"gpus": ["h200-a/0"]}, {}, "gpus", "give exactly one of"),
        ({"gpu_model": None}, {}, "count", "goes with gpu_model"),
        ({"gpu_model": None, "count": None}, {}, "gpus", "give exactly one of"),
        ({"gpu_model": None, "count": None, "gpus": ["h200-a/0", "h200-a/0"]}, {}, "gpus", "names a GPU twice."),
    ],
)
def test_a_request_breaking_a_rule_is_a_400_naming_it(api, cast, engineer_a, settings, changes, limits, field, rule):
    for name, value in limits.items():
        setattr(settings, name, value)
    response = api.as_user(engineer_a).post("/api/v1/bookings/", request_body(**changes))
    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in body
    assert body["detail"].startswith(f"{field}: ") and rule in body["detail"], body["detail"]
    assert not Booking.objects.exists()


def test_a_team_policy_overrides_the_settings(api, cast, engineer_a, engineer_b, team_a):
    TeamBookingPolicy.objects.create(team=team_a, max_hours=2, max_gpus_per_booking=1)
    client = api.as_user(engineer_a)
    too_long = client.post("/api/v1/bookings/", request_body(end=off(13)))
    assert too_long.status_code == 400
    assert too_long.json()["detail"] == "end: a booking lasts at most 2 hours."
    too_many = client.post("/api/v1/bookings/", request_body(count=2))
    assert too_many.json()["detail"] == "count: a booking holds at most 1 GPUs."
    assert client.post("/api/v1/bookings/", request_body(end=off(12))).status_code == 201
    beta = api.as_user(engineer_b).post("/api/v1/bookings/", request_body(team="beta", end=off(13), start=off(10)))
    assert beta.status_code == 201, beta.json()  # beta keeps the settings' limits


def test_another_teams_booking_is_404(api, beta_holds_h200_a0, engineer_a, lead_a):
    url = f"/api/v1/bookings/{beta_holds_h200_a0.pk}/"
    for user in (engineer_a, lead_a):
        client = api.as_user(user)
        assert client.get(url).status_code == 404
        assert client.patch(url, {"end": off(13)}).status_code == 404
        assert client.delete(url).status_code == 404
    beta_holds_h200_a0.refresh_from_db()
    assert (beta_holds_h200_a0.status, beta_holds_h200_a0.end) == (BookingStatus.BOOKED, at(12))


@pytest.fixture
def eve(make_user, team_a):
    return make_user("eve-eng-a", team=team_a, role=TeamRole.ENGINEER)


def test_an_engineer_cannot_change_a_teammates_booking_but_a_lead_can(api, cast, eve, engineer_a, lead_a, team_a):
    booking = book(eve, team_a, gpus=[gpu("h200-a/0")])
    url = f"/api/v1/bookings/{booking.pk}/"
    client = api.as_user(engineer_a)
    assert client.get(url).status_code == 200  # teammates see each other's bookings
    refused = client.patch(url, {"end": off(13)})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "booker: only the booker or a team lead changes this booking."
    assert client.delete(url).status_code == 403
    booking.refresh_from_db()
    assert (booking.status, booking.end) == (BookingStatus.BOOKED, at(12))
    assert api.as_user(lead_a).patch(url, {"end": off(13)}).status_code == 200


def test_it_extends_when_the_gpus_are_free(api, cast, engineer_a, team_a):
    booking = book(engineer_a, team_a, node=Node.objects.get(hostname="h200-a"))
    response = api.as_user(engineer_a).patch(f"/api/v1/bookings/{booking.pk}/", {"end": off(15)})
    assert response.status_code == 200, response.json()
    assert (response.json()["end"], response.json()["booked_end"]) == (shown(at(15)), shown(at(15)))
    assert [(h.during.lower, h.during.upper) for h in booking.holds.filter(active=True)] == [(at(10), at(15))] * 2
    shorter = api.as_user(engineer_a).patch(f"/api/v1/bookings/{booking.pk}/", {"end": off(11)})
    assert shorter.status_code == 200
    assert {h.during.upper for h in booking.holds.all()} == {at(11)}


def test_extending_into_another_booking_is_a_409(api, beta_holds_h200_a0, engineer_a, team_a):
    mine = book(engineer_a, team_a, gpus=[gpu("h200-a/0")], start=at(8), end=at(10))
    response = api.as_user(engineer_a).patch(f"/api/v1/bookings/{mine.pk}/", {"end": off(11)})
    assert response.status_code == 409
    assert response.json()["detail"] == "end: GPU h200-a/0 is booked 2026-11-02 10:00–12:00 (UTC) by team Team Beta."
    mine.refresh_from_db()
    assert mine.end == at(10)
    assert {h.during.upper for h in mine.holds.all()} == {at(10)}


def test_a_patch_changes_only_the_end(api, cast, engineer_a, team_a):
    booking = book(engineer_a, team_a, gpus=[gpu("h200-a/0")])
    url = f"/api/v1/bookings/{booking.pk}/"
    response = api.as_user(engineer_a).patch(url, {"end": off(13), "start": off(9), "gpus": ["h200-a/1"]})
    assert response.status_code == 400
    assert set(response.json()) == {"detail", "start", "gpus"}
    assert api.as_user(engineer_a).patch(url, {"end": "2026-11-02T13:00:00"}).json()["detail"].startswith(
        "end: A time needs a UTC offset")
    booking.refresh_from_db()
    assert booking.end == at(12)


def test_deleting_before_the_start_cancels_and_frees_the_gpus(api, beta_holds_h200_a0, engineer_b, engineer_a):
    response = api.as_user(engineer_b).delete(f"/api/v1/bookings/{beta_holds_h200_a0.pk}/")
    assert response.status_code == 200, response.json()
    row = response.json()
    assert (row["status"], row["closed_at"], row["end"]) == ("cancelled", shown(NOW), shown(at(12)))
    assert [g["name"] for g in row["gpus"]] == ["h200-a/0"]  # what it held
    assert not beta_holds_h200_a0.holds.filter(active=True).exists()
    again = api.as_user(engineer_a).post("/api/v1/bookings/", request_body(gpu_model=None, count=None,
                                                                           gpus=["h200-a/0"]))
    assert again.status_code == 201, again.json()
    assert api.as_user(engineer_b).delete(f"/api/v1/bookings/{beta_holds_h200_a0.pk}/").status_code == 400


def test_deleting_a_running_booking_ends_it_now(api, cast, clock, engineer_a, team_a):
    clock.now = at(8) + timedelta(minutes=10)
    booking = booking_create(user=engineer_a, team=team_a, gpus=[gpu("h200-a/0")], start=at(8), end=at(10))
    assert booking.start == clock.now  # a booking in the current grid step starts now
    clock.now = at(9) + timedelta(minutes=5)
    response = api.as_user(engineer_a).delete(f"/api/v1/bookings/{booking.pk}/")
    assert response.status_code == 200, response.json()
    row = response.json()
    assert (row["status"], row["end"], row["booked_end"], row["closed_at"]) == (
        "ended", shown(clock.now), shown(at(10)), shown(clock.now))
    assert [(h.during.lower, h.during.upper, h.active) for h in booking.holds.all()] == [
        (at(8) + timedelta(minutes=10), clock.now, True)]


def test_availability_finds_the_earliest_slot_after_a_booking(api, beta_holds_h200_a0, engineer_a):
    client = api.as_user(engineer_a)
    query = {"model": "H200", "count": 2, "start": off(10), "end": off(11)}
    response = client.get("/api/v1/availability/", query)
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "requested": {"start": shown(at(10)), "end": shown(at(11)), "count": 2, "model": "H200"},
        "slot": {"start": shown(at(12)), "end": shown(at(13))},
        "gpus": [{"id": gpu(f"h200-a/{i}").pk, "name": f"h200-a/{i}", "node": "h200-a"} for i in (0, 1)],
        "free_gpus": [{"id": gpu(f"h200-a/{i}").pk, "name": f"h200-a/{i}", "node": "h200-a"} for i in (0, 1)],
        "total": 2,
    }
    one = client.get("/api/v1/availability/", {**query, "count": 1, "model": "NVIDIA H200", "team": "alpha"}).json()
    assert one["slot"] == {"start": shown(at(10)), "end": shown(at(11))}
    assert [g["name"] for g in one["gpus"]] == [g["name"] for g in one["free_gpus"]] == ["h200-a/1"]
    none = client.get("/api/v1/availability/", {**query, "count": 3}).json()
    assert (none["slot"], none["gpus"], none["free_gpus"], none["total"]) == (None, [], [], 2)


@pytest.mark.parametrize(
    ("query", "field", "rule"),
    [
        ({"model": None}, "model", "required"),
        ({"start": None}, "start", "required"),
        ({"model": "Z9"}, "model", "Unknown GPU model"),
        ({"count": 0}, "count", "greater than or equal to 1"),
        ({"count": "two"}, "count", "valid integer"),
        ({"start": "2026-11-02T10:00:00"}, "start", "needs a UTC offset"),
        ({"end": off(9)}, "end", "must be after the start"),
        ({"start": off(10.25)}, "start", "30-minute grid"),
        ({"team": "beta"}, "team", "Unknown team"),
    ],
)
def test_a_bad_availability_question_is_a_400_naming_it(api, cast, engineer_a, query, field, rule):
    params = {"model": "H200", "count": 1, "start": off(10), "end": off(11), **query}
    response = api.as_user(engineer_a).get("/api/v1/availability/", {k: v for k, v in params.items() if v is not None})
    assert response.status_code == 400
    assert field in response.json()
    assert response.json()["detail"].startswith(f"{field}: ") and rule in response.json()["detail"]


def test_any_role_may_ask_for_availability(api, cast, finance_user):
    response = api.as_user(finance_user).get(
        "/api/v1/availability/", {"model": "H200", "count": 1, "start": off(10), "end": off(11)})
    assert response.status_code == 200
    api.credentials()
    assert api.get("/api/v1/availability/").status_code == 401


@pytest.fixture
def listed(cast, team_a, team_b, engineer_a, lead_a, engineer_b):
    mine = book(engineer_a, team_a, gpus=[gpu("h200-a/0")], start=at(10), end=at(12))
    leads = book(lead_a, team_a, gpus=[gpu("h200-a/1")], start=at(12), end=at(14))
    cancelled = book(engineer_a, team_a, gpus=[gpu("h200-b/0")], start=at(20), end=at(22))
    cancelled.status = BookingStatus.CANCELLED
    cancelled.save()
    beta = book(engineer_b, team_b, gpus=[gpu("h200-b/1")], start=at(10), end=at(12))
    return {"mine": mine, "leads": leads, "cancelled": cancelled, "beta": beta}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["cancelled", "leads", "mine"]),
        ({"mine": "1"}, ["cancelled", "mine"]),
        ({"status": "cancelled"}, ["cancelled"]),
        ({"team": "alpha", "start_after": off(11)}, ["cancelled", "leads"]),
        ({"start_before": off(12)}, ["mine"]),
    ],
)
def test_the_list_is_scoped_and_filtered(api, listed, engineer_a, query, expected):
    response = api.as_user(engineer_a).get("/api/v1/bookings/", query)
    assert response.status_code == 200, response.json()
    ids = {booking.pk: name for name, booking in listed.items()}
    assert [ids[row["id"]] for row in response.json()["results"]] == expected


def test_admin_sees_every_teams_bookings_and_a_bad_filter_is_a_400(api, listed, admin_user, engineer_a):
    rows = api.as_user(admin_user).get("/api/v1/bookings/").json()["results"]
    assert {row["team"] for row in rows} == {"alpha", "beta"}
    refused = api.as_user(engineer_a).get("/api/v1/bookings/", {"team": "beta"})
    assert refused.status_code == 400
    assert refused.json()["detail"] == "team: Unknown team “beta”."
    assert api.as_user(engineer_a).get("/api/v1/bookings/", {"status": "lost"}).status_code == 400


def test_list_query_count_is_pinned(api, cast, lead_a, team_a, third_node, django_assert_num_queries):
    """Token, groups, count, bookings (with team, project, people, model, node), holds (with GPU and node):
    five queries however many bookings and GPUs."""
    client = api.as_user(lead_a)
    client.get("/api/v1/bookings/")  # the token's first use writes last_used_at
    book(lead_a, team_a, gpu_model=cast["h200"], count=1)
    with django_assert_num_queries(5):
        response = client.get("/api/v1/bookings/")
    assert response.status_code == 200 and len(response.json()["results"]) == 1
    for hour in range(10, 20):
        book(lead_a, team_a, gpu_model=cast["h200"], count=2, start=at(hour + 2), end=at(hour + 2.5),
             project=team_a.projects.get())
        book(lead_a, team_a, node=third_node, start=at(hour + 2), end=at(hour + 2.5))
    with django_assert_num_queries(5):
        response = client.get("/api/v1/bookings/")
    assert response.status_code == 200 and len(response.json()["results"]) == 21


def test_the_openapi_schema_documents_the_bookings_api(api, engineer_a):
    schema = api.as_user(engineer_a).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    bookings, booking = schema["paths"]["/api/v1/bookings/"], schema["paths"]["/api/v1/bookings/{id}/"]
    assert {"201", "400", "403", "409"} <= set(bookings["post"]["responses"])
    assert {"200", "400", "403", "404", "409"} <= set(booking["patch"]["responses"])
    assert {"200", "400", "403", "404"} <= set(booking["delete"]["responses"])
    assert "404" in booking["get"]["responses"]
    assert "put" not in booking
    assert {"team", "status", "mine", "start_after", "start_before"} <= {
        p["name"] for p in bookings["get"]["parameters"]}
    availability = schema["paths"]["/api/v1/availability/"]["get"]
    assert {"200", "400"} <= set(availability["responses"])
    assert {"model", "count", "start", "end", "team"} <= {p["name"] for p in availability["parameters"]}
    request_fields = set(schema["components"]["schemas"]["BookingCreateRequest"]["properties"])
    assert {"team", "project", "booker", "start", "end", "gpu_model", "count", "gpus", "node", "note"} <= request_fields
    assert set(schema["components"]["schemas"]["Booking"]["properties"]) == ROW_FIELDS
