"""Guaranteed shares enforced by the booking services (issue 19), against the real PostgreSQL: picks, named
GPUs and extensions refused with a 409 that names the guarantee, its hours honoured, the team itself never
refused within its share, the API's 409, races of 50 threads under the writers' lock, and the admin that
manages guarantees with every change audited."""

from datetime import time, timedelta

import pytest
import time_machine
from django.urls import reverse

from cluster.bookings.services import BookingRefused, booking_create, booking_set_end
from cluster.models import Booking, Gpu, GpuModel, GuaranteeDays, Node, TeamGuarantee
from teams.audit.models import AuditEntry, AuditKind
from tests.cluster.bookings.test_concurrency import race
from tests.conftest import T0  # Monday 2026-11-02 00:00 UTC

HOUR = timedelta(hours=1)
NOW = T0 + 6 * HOUR


@pytest.fixture(autouse=True)
def utc_business_zone(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    settings.TIME_ZONE = "UTC"


@pytest.fixture
def a100s(db):
    """Four A100s on two up nodes, two on each."""
    model = GpuModel.objects.create(name="NVIDIA A100-SXM4-80GB", short_name="A100", memory_mib=81920)
    for hostname in ("a100-a", "a100-b"):
        node = Node.objects.create(hostname=hostname, pool="train")
        for index in range(2):
            Gpu.objects.create(node=node, index=index, uuid=f"GPU-{hostname}-{index}", model=model, memory_mib=81920)
    return model


def refused(call, **kwargs) -> BookingRefused:
    with pytest.raises(BookingRefused) as info:
        call(**kwargs)
    return info.value


def book(user, team, model, count, start, end):
    return booking_create(user=user, team=team, gpu_model=model, count=count, start=start, end=end, now=NOW)


def held(team) -> int:
    return sum(Booking.objects.filter(team=team).values_list("gpu_count", flat=True))


def test_other_teams_stop_at_the_guarantee_and_the_409_names_it(a100s, engineer_a, engineer_b, team_a, team_b):
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=2)
    start, end = T0 + 10 * HOUR, T0 + 12 * HOUR
    book(engineer_a, team_a, a100s, 2, start, end)

    answer = refused(book, user=engineer_a, team=team_a, model=a100s, count=1, start=start, end=end)
    assert (answer.status, answer.field) == (409, "count")
    assert answer.message == (
        "1 × A100 2026-11-02 10:00–12:00 (UTC) would take GPUs reserved by the guaranteed share of team Team Beta "
        "(2 × A100, always): it still reserves 2 2026-11-02 10:00–12:00 (UTC), and this booking would leave 1 free."
    )
    # The named GPUs left are refused the same way (field "gpus").
    free = Gpu.objects.exclude(holds__active=True).order_by("pk")[:1]
    answer = refused(booking_create, user=engineer_a, team=team_a, gpus=list(free), start=start, end=end, now=NOW)
    assert (answer.status, answer.field) == (409, "gpus") and "Team Beta" in answer.message
    # Before and after the guarantee's GPUs are asked for, team A's window elsewhere is untouched: none held.
    assert held(team_a) == 2

    # Team B books its share in full; nothing is left and nothing was taken from it.
    book(engineer_b, team_b, a100s, 2, start, end)
    assert (held(team_a), held(team_b)) == (2, 2)


def test_a_team_books_beyond_its_share_only_what_no_guarantee_reserves(a100s, engineer_a, engineer_b, team_a, team_b):
    TeamGuarantee.objects.create(team=team_a, gpu_model=a100s, gpus=1)
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=2)
    start, end = T0 + 10 * HOUR, T0 + 12 * HOUR
    # Team B's bookings beyond its 2 must leave team A's 1: 3 pass, a fourth is refused naming Team Alpha.
    book(engineer_b, team_b, a100s, 3, start, end)
    answer = refused(book, user=engineer_b, team=team_b, model=a100s, count=1, start=start, end=end)
    assert (answer.status, answer.field) == (409, "count") and "team Team Alpha (1 × A100, always)" in answer.message
    book(engineer_a, team_a, a100s, 1, start, end)
    assert (held(team_a), held(team_b)) == (1, 3)


def test_guarantees_over_the_model_let_the_first_team_book_its_whole_share(a100s, engineer_a, engineer_b, team_a,
                                                                          team_b):
    """Guarantees of 3 and 3 on 4 GPUs: a team within its share is never refused for a guarantee while GPUs
    are free; the second team then gets the one left, and is refused (not for a guarantee) beyond it."""
    TeamGuarantee.objects.create(team=team_a, gpu_model=a100s, gpus=3)
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=3)
    start, end = T0 + 10 * HOUR, T0 + 12 * HOUR
    book(engineer_a, team_a, a100s, 3, start, end)
    book(engineer_b, team_b, a100s, 1, start, end)
    answer = refused(book, user=engineer_b, team=team_b, model=a100s, count=1, start=start, end=end)
    assert answer.status == 409 and "are not free" in answer.message


def test_weekday_hours_reserve_only_within_them(a100s, engineer_a, team_a, team_b):
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=3, days=GuaranteeDays.WEEKDAYS,
                                 start_time=time(9), end_time=time(18))
    monday = T0
    book(engineer_a, team_a, a100s, 4, monday + 18 * HOUR, monday + 20 * HOUR)  # after 18:00: all four
    saturday = T0 + timedelta(days=5)
    book(engineer_a, team_a, a100s, 4, saturday + 10 * HOUR, saturday + 12 * HOUR)  # the weekend: all four
    answer = refused(book, user=engineer_a, team=team_a, model=a100s, count=2, start=monday + 16 * HOUR,
                     end=monday + 18 * HOUR)
    assert answer.status == 409
    assert "(3 × A100, Monday to Friday 09:00–18:00)" in answer.message
    assert "it still reserves 3 2026-11-02 16:00–18:00 (UTC)" in answer.message
    book(engineer_a, team_a, a100s, 1, monday + 16 * HOUR, monday + 18 * HOUR)


def test_an_extension_into_the_guaranteed_hours_is_refused_on_end(a100s, engineer_a, team_a, team_b):
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=3, days=GuaranteeDays.WEEKDAYS,
                                 start_time=time(9), end_time=time(18))
    booking = book(engineer_a, team_a, a100s, 2, T0 + 7 * HOUR, T0 + 9 * HOUR)
    answer = refused(booking_set_end, user=engineer_a, booking=booking, end=T0 + 10 * HOUR, now=NOW)
    assert (answer.status, answer.field) == (409, "end")
    assert "2026-11-02 09:00–10:00 (UTC)" in answer.message and "Team Beta" in answer.message
    booking.refresh_from_db()
    assert booking.end == T0 + 9 * HOUR
    assert {during.upper for during in booking.holds.values_list("during", flat=True)} == {T0 + 9 * HOUR}
    # Shortening, or a guarantee that leaves room, is not refused.
    TeamGuarantee.objects.filter(team=team_b).update(gpus=2)
    booking = booking_set_end(user=engineer_a, booking=booking, end=T0 + 10 * HOUR, now=NOW)
    assert booking.end == T0 + 10 * HOUR


@time_machine.travel(NOW, tick=False)  # the API books against the clock
def test_the_api_answers_409_naming_the_guarantee(api, a100s, engineer_a, team_a, team_b):
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=4)
    answer = api.as_user(engineer_a).post("/api/v1/bookings/", {
        "team": "alpha", "gpu_model": "A100", "count": 1, "start": "2026-11-02T10:00:00Z",
        "end": "2026-11-02T12:00:00Z",
    }, format="json")
    assert answer.status_code == 409, answer.content
    assert "guaranteed share of team Team Beta (4 × A100, always)" in answer.json()["count"][0]
    assert not Booking.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_fifty_racing_requests_never_take_the_guarantee(a100s, engineer_a, team_a, team_b):
    """50 threads of team A ask for one A100 each at once; team B's guarantee of 2 leaves exactly 2 to win
    and 48 clean 409s that name it. Without the writers' turn around the check, more than 2 would pass."""
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=2)
    start, end = T0 + 10 * HOUR, T0 + 12 * HOUR
    booked, refusals = race(50, lambda _i: book(engineer_a, team_a, a100s, 1, start, end))
    assert len(booked) == 2 and len(refusals) == 48
    assert {(r.status, r.field) for r in refusals} == {(409, "count")}
    assert all("guaranteed share of team Team Beta" in r.message for r in refusals)
    assert held(team_a) == 2


@pytest.mark.django_db(transaction=True)
def test_two_teams_racing_each_keep_their_guarantee(a100s, engineer_a, engineer_b, team_a, team_b):
    TeamGuarantee.objects.create(team=team_a, gpu_model=a100s, gpus=1)
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=2)
    start, end = T0 + 10 * HOUR, T0 + 12 * HOUR
    booked, refusals = race(50, lambda i: book(*((engineer_a, team_a) if i % 2 else (engineer_b, team_b)),
                                               a100s, 1, start, end))
    assert len(booked) == 4 and len(refusals) == 46
    assert {r.status for r in refusals} == {409}
    assert held(team_a) >= 1 and held(team_b) >= 2 and held(team_a) + held(team_b) == 4


def test_the_admin_manages_guarantees_and_each_change_is_audited(client, admin_user, a100s, team_b):
    admin_user.is_staff, admin_user.is_superuser = True, True  # Django's admin site wants model permissions
    admin_user.save()
    client.force_login(admin_user)
    add = reverse("admin:cluster_teamguarantee_add")
    form = {"team": team_b.pk, "gpu_model": a100s.pk, "gpus": 2, "days": "weekdays", "start_time": "09:00",
            "end_time": ""}
    answer = client.post(add, form)
    assert answer.status_code == 200  # one time without the other: the form says so, nothing saved
    assert "Give both times" in answer.content.decode() and not TeamGuarantee.objects.exists()

    answer = client.post(add, {**form, "end_time": "18:00"})
    assert answer.status_code == 302
    guarantee = TeamGuarantee.objects.get()
    created = AuditEntry.objects.get(kind=AuditKind.GUARANTEE)
    assert (created.actor, created.before, created.after["gpus"], created.team_id) == (
        "alice-admin", None, 2, team_b.pk)

    answer = client.post(reverse("admin:cluster_teamguarantee_change", args=[guarantee.pk]), {**form, "gpus": 6,
                                                                                            "end_time": "18:00"})
    assert answer.status_code == 302
    changed = AuditEntry.objects.filter(kind=AuditKind.GUARANTEE).order_by("-pk").first()
    assert (changed.before["gpus"], changed.after["gpus"]) == (2, 6)
    warning = [str(m) for m in answer.wsgi_request._messages]
    assert any("add up to 6 GPUs, more than the 4 that can be booked" in m for m in warning)

    answer = client.post(reverse("admin:cluster_teamguarantee_delete", args=[guarantee.pk]), {"post": "yes"})
    assert answer.status_code == 302 and not TeamGuarantee.objects.exists()
    deleted = AuditEntry.objects.filter(kind=AuditKind.GUARANTEE).order_by("-pk").first()
    assert (deleted.before["gpus"], deleted.after) == (6, None)
    assert AuditEntry.objects.filter(kind=AuditKind.GUARANTEE).count() == 3


def test_the_api_lists_guarantees_read_only(api, a100s, engineer_a, team_b):
    TeamGuarantee.objects.create(team=team_b, gpu_model=a100s, gpus=2, days=GuaranteeDays.WEEKDAYS,
                                 start_time=time(9), end_time=time(18))
    assert api.get("/api/v1/guarantees/").status_code == 401
    answer = api.as_user(engineer_a).get("/api/v1/guarantees/")
    assert answer.status_code == 200
    assert answer.json()["results"] == [{
        "id": TeamGuarantee.objects.get().pk, "team": "beta", "gpu_model": "A100", "gpus": 2, "days": "weekdays",
        "start_time": "09:00:00", "end_time": "18:00:00", "hours": "Monday to Friday 09:00–18:00",
    }]
    assert api.post("/api/v1/guarantees/", {"team": "alpha"}, format="json").status_code == 405
