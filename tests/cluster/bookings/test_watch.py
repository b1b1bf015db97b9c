"""The periodic booking watch (cluster/bookings/watch.py) with a fixed clock and real rows: auto-end, idle
warning and release, end reminders and conflict alerts, each rerunnable."""

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.bookings import watch as booking_watch
from cluster.bookings.services import booking_create, booking_set_end
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.models import (
    Alert,
    Allocation,
    Booking,
    BookingStatus,
    Gpu,
    GpuHold,
    Job,
    JobSource,
    JobState,
    MinuteRollup,
    TeamBookingPolicy,
)
from cluster.tasks import bookings_tick
from tests.conftest import T0

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)
WHOLE_GPU = 840_000


@pytest.fixture
def gpus(small_cluster):
    """The two GPUs of h200-a (up)."""
    return list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))


@pytest.fixture
def booking(gpus, engineer_a, team_a):
    """Team Alpha holds both GPUs of h200-a over [T0, T0 + 4 h)."""
    return book(engineer_a, team_a, gpus, T0, T0 + timedelta(hours=4))


def book(user, team, gpus, start, end, *, now=None):
    return booking_create(user=user, team=team, start=start, end=end, gpus=gpus, now=now or start)


def measure(gpus, start, minutes, *, util=1.0):
    """Minute rollups for ``gpus`` from ``start``, fully covered, at ``util`` percent (a list: one per GPU)."""
    utils = util if isinstance(util, list) else [util] * len(gpus)
    MinuteRollup.objects.bulk_create(
        MinuteRollup(gpu=gpu, bucket=start + i * MINUTE, util_mean=value, util_max=value, covered_s=60,
                     util_covered_s=60, sample_count=6)
        for i in range(minutes) for gpu, value in zip(gpus, utils, strict=True)
    )


def alerts(booking, kind):
    return Alert.objects.filter(subject_type=AlertSubject.BOOKING, subject_id=booking.pk, kind=kind)


def state(booking):
    """Everything the watch may change about a booking."""
    booking.refresh_from_db()
    holds = sorted((h.gpu_id, h.during.lower, h.during.upper, h.active) for h in booking.holds.all())
    alert_rows = sorted(Alert.objects.filter(subject_type=AlertSubject.BOOKING, subject_id=booking.pk).values_list(
        "kind", "opened_at", "last_seen_at", "closed_at", "message"))
    return (booking.status, booking.end, booking.closed_at, booking.idle_warned_at, booking.reminded_at, holds,
            alert_rows)


# Auto-end


def test_it_ends_a_booking_at_its_end_and_closes_its_alerts(booking):
    before_end = booking_watch.watch(now=booking.end - MINUTE)
    assert (before_end["ended"], before_end["reminded"]) == (0, 1)
    booking.refresh_from_db()
    assert booking.status == BookingStatus.BOOKED
    assert alerts(booking, AlertKind.BOOKING_ENDING).open().count() == 1

    end = T0 + timedelta(hours=4)
    assert booking_watch.watch(now=end)["ended"] == 1
    booking.refresh_from_db()
    assert (booking.status, booking.closed_at, booking.end) == (BookingStatus.ENDED, end, end)
    assert alerts(booking, AlertKind.BOOKING_ENDING).get().closed_at == end

    after = state(booking)
    assert booking_watch.watch(now=end)["ended"] == 0
    assert booking_watch.watch(now=end + timedelta(minutes=5))["ended"] == 0
    assert state(booking) == after


# Idle


def test_it_warns_once_when_all_gpus_are_idle_for_30_minutes(booking, gpus):
    measure(gpus, T0, 31, util=1.0)
    now = T0 + timedelta(minutes=30)
    assert booking_watch.watch(now=now)["idle_warned"] == 1
    booking.refresh_from_db()
    assert booking.idle_warned_at == now
    warning = alerts(booking, AlertKind.BOOKING_IDLE).get()
    assert warning.tier == AlertTier.WARNING and warning.closed_at is None
    assert warning.subject_label == f"booking #{booking.pk} (Team Alpha)"
    assert warning.message.startswith(f"All 2 GPUs of booking #{booking.pk} have been idle for 30 minutes")
    assert "60" in warning.message

    again = state(booking)
    assert booking_watch.watch(now=now)["idle_warned"] == 0
    assert state(booking) == again

    assert booking_watch.watch(now=now + MINUTE)["idle_warned"] == 0
    warning = alerts(booking, AlertKind.BOOKING_IDLE).get()
    assert "idle for 31 minutes" in warning.message and warning.closed_at is None
    booking.refresh_from_db()
    assert booking.idle_warned_at == now  # the first warning of the episode
    assert booking.status == BookingStatus.BOOKED


def test_it_releases_a_booking_idle_for_60_minutes(booking, gpus, engineer_b, team_b):
    measure(gpus, T0, 60)
    now = T0 + timedelta(minutes=60)
    booking_watch.watch(now=T0 + timedelta(minutes=45))  # warned first
    assert alerts(booking, AlertKind.BOOKING_IDLE).open().count() == 1

    summary = booking_watch.watch(now=now)
    assert summary["idle_released"] == 1
    booking.refresh_from_db()
    assert (booking.status, booking.end, booking.closed_at) == (BookingStatus.RELEASED, now, now)
    assert booking.booked_end == T0 + timedelta(hours=4)
    assert {(h.during.lower, h.during.upper, h.active) for h in booking.holds.all()} == {(T0, now, True)}
    assert not alerts(booking, AlertKind.BOOKING_IDLE).open().exists()
    released = alerts(booking, AlertKind.BOOKING_RELEASED).get()
    assert (released.tier, released.opened_at, released.closed_at) == (AlertTier.WARNING, now, now)
    assert "h200-a/0, h200-a/1" in released.message and "60 minutes" in released.message

    after = state(booking)
    booking_watch.watch(now=now)
    booking_watch.watch(now=now + MINUTE)
    assert state(booking) == after

    # The GPUs are bookable again from the release on, by another team.
    other = book(engineer_b, team_b, gpus, now, now + timedelta(hours=1))
    assert other.holds.count() == 2


def test_a_busy_minute_resets_the_idle_clock(booking, gpus):
    measure(gpus, T0, 40)
    measure(gpus, T0 + timedelta(minutes=40), 1, util=55.0)
    measure(gpus, T0 + timedelta(minutes=41), 25)
    summary = booking_watch.watch(now=T0 + timedelta(minutes=66))
    assert (summary["idle_warned"], summary["idle_released"]) == (0, 0)
    assert not alerts(booking, AlertKind.BOOKING_IDLE).exists()

    measure(gpus, T0 + timedelta(minutes=66), 5)  # 30 idle minutes since the busy one
    assert booking_watch.watch(now=T0 + timedelta(minutes=71))["idle_warned"] == 1
    booking.refresh_from_db()
    assert booking.status == BookingStatus.BOOKED


def test_busy_again_ends_the_warning(booking, gpus):
    measure(gpus, T0, 35)
    booking_watch.watch(now=T0 + timedelta(minutes=35))
    assert alerts(booking, AlertKind.BOOKING_IDLE).open().count() == 1

    measure(gpus, T0 + timedelta(minutes=35), 1, util=80.0)
    booking_watch.watch(now=T0 + timedelta(minutes=36))
    booking.refresh_from_db()
    assert booking.idle_warned_at is None
    assert alerts(booking, AlertKind.BOOKING_IDLE).get().closed_at == T0 + timedelta(minutes=36)


def test_unmeasured_minutes_pause_the_clock(booking, gpus):
    measure(gpus, T0, 20)
    # 30 minutes with no rollup at all, then 20 idle ones: 40 idle minutes, not 70.
    measure(gpus, T0 + timedelta(minutes=50), 20)
    now = T0 + timedelta(minutes=70)
    summary = booking_watch.watch(now=now)
    assert (summary["idle_warned"], summary["idle_released"]) == (1, 0)
    booking.refresh_from_db()
    assert booking.status == BookingStatus.BOOKED
    assert "idle for 40 minutes" in alerts(booking, AlertKind.BOOKING_IDLE).get().message


def test_a_minute_measured_on_one_gpu_only_is_unmeasured(booking, gpus):
    measure(gpus, T0, 20)
    measure(gpus[:1], T0 + timedelta(minutes=20), 50)  # the other GPU reported nothing
    summary = booking_watch.watch(now=T0 + timedelta(minutes=70))
    assert (summary["idle_warned"], summary["idle_released"]) == (0, 0)


def test_one_busy_gpu_keeps_the_booking(booking, gpus):
    measure(gpus, T0, 90, util=[60.0, 0.0])
    summary = booking_watch.watch(now=T0 + timedelta(minutes=90))
    assert (summary["idle_warned"], summary["idle_released"]) == (0, 0)
    booking.refresh_from_db()
    assert (booking.status, booking.idle_warned_at) == (BookingStatus.BOOKED, None)
    assert not Alert.objects.exists()


def test_team_policy_turns_release_off_and_warns_sooner(booking, gpus, team_a):
    TeamBookingPolicy.objects.create(team=team_a, idle_warn_minutes=10, idle_release_minutes=0)
    measure(gpus, T0, 12)
    assert booking_watch.watch(now=T0 + timedelta(minutes=12))["idle_warned"] == 1
    warning = alerts(booking, AlertKind.BOOKING_IDLE).get()
    assert "idle for 12 minutes" in warning.message and "released" not in warning.message

    measure(gpus, T0 + timedelta(minutes=12), 100)
    summary = booking_watch.watch(now=T0 + timedelta(minutes=112))
    assert summary["idle_released"] == 0
    booking.refresh_from_db()
    assert booking.status == BookingStatus.BOOKED
    assert alerts(booking, AlertKind.BOOKING_IDLE).open().count() == 1


def test_warnings_off_still_release(booking, gpus, team_a):
    TeamBookingPolicy.objects.create(team=team_a, idle_warn_minutes=0, idle_release_minutes=45)
    measure(gpus, T0, 45)
    assert booking_watch.watch(now=T0 + timedelta(minutes=44))["idle_warned"] == 0
    assert not alerts(booking, AlertKind.BOOKING_IDLE).exists()
    assert booking_watch.watch(now=T0 + timedelta(minutes=45))["idle_released"] == 1


def test_the_idle_check_reads_a_constant_number_of_queries(gpus, small_cluster, engineer_a, team_a):
    other_gpus = list(Gpu.objects.filter(node__hostname="h200-b").order_by("index"))
    first = book(engineer_a, team_a, gpus[:1], T0, T0 + timedelta(hours=4))
    measure(gpus, T0, 20)
    with CaptureQueriesContext(connection) as one:
        booking_watch.bookings_idle_check(now=T0 + timedelta(minutes=20))
    for gpu in [gpus[1], *other_gpus]:
        book(engineer_a, team_a, [gpu], T0, T0 + timedelta(hours=4))
    measure(other_gpus, T0, 20)
    with CaptureQueriesContext(connection) as four:
        booking_watch.bookings_idle_check(now=T0 + timedelta(minutes=20))
    assert Booking.objects.filter(status=BookingStatus.BOOKED).count() == 4 and first.pk
    assert len(four) == len(one)
    assert sum("cluster_minuterollup" in q["sql"] for q in four.captured_queries) == 1


# Reminders


def test_it_reminds_once_15_minutes_before_the_end_and_again_after_an_extension(engineer_a, team_a, gpus):
    booking = book(engineer_a, team_a, gpus, T0, T0 + timedelta(hours=2))
    assert booking_watch.watch(now=T0 + timedelta(minutes=104))["reminded"] == 0

    now = T0 + timedelta(minutes=105)
    assert booking_watch.watch(now=now)["reminded"] == 1
    booking.refresh_from_db()
    assert booking.reminded_at == now
    reminder = alerts(booking, AlertKind.BOOKING_ENDING).get()
    assert reminder.tier == AlertTier.WARNING and reminder.closed_at is None
    assert reminder.message.startswith(f"Booking #{booking.pk} ends at 02:00 (UTC), in 15 minutes")

    assert booking_watch.watch(now=now)["reminded"] == 0
    assert booking_watch.watch(now=now + MINUTE)["reminded"] == 0
    assert alerts(booking, AlertKind.BOOKING_ENDING).count() == 1

    booking_set_end(user=engineer_a, booking=booking, end=T0 + timedelta(hours=3), now=T0 + timedelta(minutes=110))
    booking_watch.watch(now=T0 + timedelta(minutes=111))
    assert alerts(booking, AlertKind.BOOKING_ENDING).get().closed_at == T0 + timedelta(minutes=111)

    assert booking_watch.watch(now=T0 + timedelta(minutes=165))["reminded"] == 1
    assert booking_watch.watch(now=T0 + timedelta(minutes=166))["reminded"] == 0
    assert alerts(booking, AlertKind.BOOKING_ENDING).count() == 2
    fresh = alerts(booking, AlertKind.BOOKING_ENDING).open().get()
    assert "ends at 03:00 (UTC)" in fresh.message

    booking_watch.watch(now=T0 + timedelta(hours=3))  # ended: the reminder's episode is over
    assert not alerts(booking, AlertKind.BOOKING_ENDING).open().exists()


# Conflicts


def run_job(gpu, *, team, start, end=None, source=JobSource.SLURM, external_id="101"):
    job = Job.objects.create(source=source, external_id=external_id, team=team, state=JobState.RUNNING,
                             start_time=start, name="secret-run", user="someone")
    return Allocation.objects.create(job=job, gpu=gpu, share=WHOLE_GPU, start=start, end=end)


def test_another_teams_job_on_a_booked_gpu_raises_a_critical_conflict(booking, gpus, team_b):
    allocation = run_job(gpus[0], team=team_b, start=T0 + timedelta(minutes=10))
    summary = booking_watch.watch(now=T0 + timedelta(minutes=20))
    assert summary["conflicts"] == 1
    conflict = alerts(booking, AlertKind.BOOKING_CONFLICT).get()
    assert (conflict.tier, conflict.closed_at) == (AlertTier.CRITICAL, None)
    assert conflict.subject_label == f"booking #{booking.pk} (Team Alpha)"
    assert "h200-a/0" in conflict.message and "Team Beta" in conflict.message
    assert "secret-run" not in conflict.message and "someone" not in conflict.message

    booking_watch.watch(now=T0 + timedelta(minutes=21))
    assert alerts(booking, AlertKind.BOOKING_CONFLICT).count() == 1

    allocation.end = T0 + timedelta(minutes=30)
    allocation.save()
    booking_watch.watch(now=T0 + timedelta(minutes=35))  # it ran within the last 10 minutes
    assert alerts(booking, AlertKind.BOOKING_CONFLICT).open().count() == 1
    summary = booking_watch.watch(now=T0 + timedelta(minutes=41))
    assert summary["conflicts_closed"] == 1
    assert alerts(booking, AlertKind.BOOKING_CONFLICT).get().closed_at == T0 + timedelta(minutes=41)
    assert booking_watch.watch(now=T0 + timedelta(minutes=42))["conflicts_closed"] == 0


def test_the_booking_teams_own_job_is_no_conflict(booking, gpus, team_a):
    run_job(gpus[0], team=team_a, start=T0 + timedelta(minutes=5))
    assert booking_watch.watch(now=T0 + timedelta(minutes=20))["conflicts"] == 0
    assert not Alert.objects.exists()


def test_an_unattributed_process_is_a_conflict(booking, gpus):
    run_job(gpus[1], team=None, source=JobSource.OBSERVED, external_id="h200-a/nobody",
            start=T0 + timedelta(minutes=5), end=T0 + timedelta(minutes=18))
    booking_watch.watch(now=T0 + timedelta(minutes=20))
    conflict = alerts(booking, AlertKind.BOOKING_CONFLICT).get()
    assert "h200-a/1" in conflict.message and "an unattributed process" in conflict.message


def test_a_job_on_a_mig_instance_of_a_booked_gpu_is_a_conflict(booking, gpus, team_b):
    parent = gpus[0]
    slice_ = Gpu.objects.create(node=parent.node, index=parent.index, uuid="MIG-h200-a-0-1", model=parent.model,
                                memory_mib=18000, mig_parent=parent, mig_profile="1g.18gb", share=120_000)
    run_job(slice_, team=team_b, start=T0 + timedelta(minutes=5))
    booking_watch.watch(now=T0 + timedelta(minutes=20))
    assert "h200-a/0" in alerts(booking, AlertKind.BOOKING_CONFLICT).get().message


def test_a_job_before_the_booking_or_on_a_free_gpu_is_no_conflict(engineer_a, team_a, team_b, gpus):
    booking = book(engineer_a, team_a, gpus[:1], T0 + timedelta(minutes=30), T0 + timedelta(hours=2), now=T0)
    run_job(gpus[0], team=team_b, start=T0, end=T0 + timedelta(minutes=30))
    run_job(gpus[1], team=team_b, start=T0 + timedelta(minutes=30), external_id="102")
    assert booking_watch.watch(now=T0 + timedelta(minutes=35))["conflicts"] == 0
    assert not alerts(booking, AlertKind.BOOKING_CONFLICT).exists()
    assert GpuHold.objects.count() == 1


# The task


@time_machine.travel(T0 + timedelta(hours=10, minutes=7), tick=False)  # the task reads the clock
def test_the_task_runs_the_watch_and_returns_its_summary(engineer_a, team_a, gpus):
    start = T0 + timedelta(hours=8)  # an hour's booking, over an hour ago
    booking = book(engineer_a, team_a, gpus, start, start + timedelta(hours=1))
    summary = bookings_tick.apply().get()
    assert summary == {
        "ended": 1, "idle_warned": 0, "idle_released": 0, "reminded": 0, "conflicts": 0, "conflicts_closed": 0,
    }
    booking.refresh_from_db()
    assert booking.status == BookingStatus.ENDED
    assert bookings_tick.apply().get()["ended"] == 0
