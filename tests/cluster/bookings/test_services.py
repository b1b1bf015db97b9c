"""Booking services: who books for whom, maintenance windows, the team's limits, what cannot be booked."""

from datetime import timedelta

import pytest
from django.urls import reverse

from cluster.bookings.services import BookingRefused, booking_cancel, booking_create, maintenance_create
from cluster.models import Booking, Gpu, GpuHold, MaintenanceWindow, TeamBookingPolicy
from tests.conftest import T0

HOUR = timedelta(hours=1)


def refused(call, **kwargs) -> BookingRefused:
    with pytest.raises(BookingRefused) as info:
        call(**kwargs)
    return info.value


@pytest.fixture
def h200(small_cluster):
    return list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))


def test_an_engineer_books_only_for_themself(h200, engineer_a, lead_a, team_a):
    answer = refused(booking_create, user=engineer_a, team=team_a, booker=lead_a, gpus=h200[:1],
                     start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    assert (answer.status, answer.field) == (403, "booker")
    assert not Booking.objects.exists()


def test_a_lead_books_for_a_team_member_but_not_an_outsider(h200, lead_a, engineer_a, engineer_b, team_a):
    booking = booking_create(user=lead_a, team=team_a, booker=engineer_a, gpus=h200[:1],
                             start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    assert (booking.booker, booking.created_by) == (engineer_a, lead_a)
    assert list(booking.holds.values_list("booker", "team")) == [(engineer_a.pk, team_a.pk)]
    answer = refused(booking_create, user=lead_a, team=team_a, booker=engineer_b, gpus=h200[1:],
                     start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    assert (answer.status, answer.field) == (400, "booker")


def test_nobody_books_for_a_team_they_are_not_in(h200, engineer_b, team_a, finance_user):
    for user in (engineer_b, finance_user):
        answer = refused(booking_create, user=user, team=team_a, gpus=h200[:1], start=T0 + HOUR, end=T0 + 2 * HOUR,
                         now=T0)
        assert (answer.status, answer.field) == (403, "team")


def test_the_project_must_be_the_teams(h200, engineer_a, team_a, team_b):
    answer = refused(booking_create, user=engineer_a, team=team_a, project=team_b.projects.get(), gpus=h200[:1],
                     start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    assert (answer.status, answer.field) == (400, "project")


def test_a_mig_instance_or_a_node_in_maintenance_cannot_be_booked(small_cluster, h200, engineer_a, team_a):
    slice_ = Gpu.objects.create(node=h200[0].node, index=0, uuid="MIG-1", model=h200[0].model, memory_mib=18000,
                                mig_parent=h200[0], mig_profile="1g.18gb", share=120000)
    answer = refused(booking_create, user=engineer_a, team=team_a, gpus=[slice_], start=T0 + HOUR, end=T0 + 2 * HOUR,
                     now=T0)
    assert (answer.status, answer.field) == (400, "gpus")
    answer = refused(booking_create, user=engineer_a, team=team_a, node=small_cluster["nodes"][2],
                     start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    assert (answer.status, answer.field) == (400, "node")


def test_a_whole_node_is_booked_as_one_row_per_gpu(small_cluster, engineer_a, team_a):
    booking = booking_create(user=engineer_a, team=team_a, node=small_cluster["nodes"][0],
                             start=T0 + HOUR, end=T0 + 3 * HOUR, now=T0)
    assert booking.gpu_count == 2 and booking.holds.count() == 2 and booking.mode == "node"


def test_a_maintenance_window_blocks_bookings_like_a_booking(small_cluster, h200, engineer_a, team_a, admin_user):
    maintenance_create(node=h200[0].node, start=T0 + 2 * HOUR, end=T0 + 4 * HOUR, reason="firmware", user=admin_user)
    assert GpuHold.objects.filter(kind="maintenance").count() == 2
    answer = refused(booking_create, user=engineer_a, team=team_a, gpus=h200[:1], start=T0 + 3 * HOUR,
                     end=T0 + 5 * HOUR, now=T0)
    assert answer.status == 409 and "maintenance" in answer.message and "02:00–04:00" in answer.message
    # Adjacent is fine: ranges are half-open.
    booking_create(user=engineer_a, team=team_a, gpus=h200[:1], start=T0 + 4 * HOUR, end=T0 + 5 * HOUR, now=T0)


def test_maintenance_over_a_booking_is_refused_naming_the_team(h200, engineer_a, team_a, admin_user):
    booking_create(user=engineer_a, team=team_a, gpus=h200[1:], start=T0 + HOUR, end=T0 + 3 * HOUR, now=T0)
    answer = refused(maintenance_create, node=h200[0].node, start=T0, end=T0 + 2 * HOUR, reason="x", user=admin_user)
    assert answer.status == 409 and "Team Alpha" in answer.message and engineer_a.username not in answer.message
    assert not MaintenanceWindow.objects.exists()


def test_the_admin_form_shows_a_booking_in_the_way_and_creates_the_holds(client, admin_user, h200, engineer_a, team_a):
    booking_create(user=engineer_a, team=team_a, gpus=h200[:1], start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    url = reverse("admin:cluster_maintenancewindow_add")
    form = {"node": h200[0].node_id, "start_0": "2026-11-02", "start_1": "00:00:00", "end_0": "2026-11-02",
            "end_1": "03:00:00", "reason": "cabling"}
    response = client.post(url, form)
    assert response.status_code == 200 and "is booked" in response.content.decode()
    form.update(start_1="02:00:00", end_1="05:00:00")
    assert client.post(url, form).status_code == 302
    assert GpuHold.objects.filter(kind="maintenance").count() == 2


def test_a_team_cap_counts_gpus_held_at_the_same_moment(h200, small_cluster, engineer_a, lead_a, team_a):
    TeamBookingPolicy.objects.create(team=team_a, max_gpus_held=2)
    b_gpus = list(Gpu.objects.filter(node__hostname="h200-b").order_by("index"))
    booking_create(user=engineer_a, team=team_a, gpus=h200, start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    answer = refused(booking_create, user=lead_a, team=team_a, gpus=b_gpus[:1], start=T0 + HOUR,
                     end=T0 + 3 * HOUR, now=T0)
    assert (answer.status, answer.field) == (400, "count") and "at most 2 GPUs" in answer.message
    # Back to back is not at the same moment.
    booking_create(user=lead_a, team=team_a, gpus=b_gpus, start=T0 + 2 * HOUR, end=T0 + 3 * HOUR, now=T0)


def test_team_policy_overrides_the_settings(h200, engineer_a, team_a, settings):
    settings.BOOKING_MAX_HOURS = 4
    TeamBookingPolicy.objects.create(team=team_a, max_hours=8)
    booking_create(user=engineer_a, team=team_a, gpus=h200[:1], start=T0 + HOUR, end=T0 + 9 * HOUR, now=T0)
    answer = refused(booking_create, user=engineer_a, team=team_a, gpus=h200[1:], start=T0 + HOUR,
                     end=T0 + 10 * HOUR, now=T0)
    assert answer.field == "end" and "at most 8 hours" in answer.message


def test_cancelled_holds_free_the_gpu_and_stay_as_history(h200, engineer_a, engineer_b, team_a, team_b):
    booking = booking_create(user=engineer_a, team=team_a, gpus=h200[:1], start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    booking_cancel(user=engineer_a, booking=booking, now=T0)
    booking.refresh_from_db()
    assert booking.status == "cancelled" and list(booking.holds.values_list("active", flat=True)) == [False]
    booking_create(user=engineer_b, team=team_b, gpus=h200[:1], start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)


def test_a_booking_in_the_current_step_starts_now_and_ends_early_to_the_second(h200, engineer_a, team_a):
    now = T0 + timedelta(minutes=7, seconds=3)
    booking = booking_create(user=engineer_a, team=team_a, gpus=h200[:1], start=T0, end=T0 + HOUR, now=now)
    assert booking.start == now
    later = now + timedelta(minutes=20)
    booking_cancel(user=engineer_a, booking=booking, now=later)
    booking.refresh_from_db()
    assert (booking.status, booking.end, booking.booked_end) == ("ended", later, T0 + HOUR)
    assert booking.holds.get().during.upper == later
