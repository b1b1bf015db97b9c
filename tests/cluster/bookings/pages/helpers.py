"""Helpers of the booking page tests: the fixed clock's time, GPUs by name, booking through the service."""

from datetime import datetime, timedelta

from django.urls import reverse

from cluster.bookings.services import booking_create
from cluster.models import Booking, Gpu
from tests.conftest import T0

NOW = T0 + timedelta(hours=8)  # Monday 2026-11-02 08:00 UTC, on the grid
CALENDAR = reverse("cluster:booking-calendar")
NEW = reverse("cluster:booking-new")
MINE = reverse("cluster:booking-mine")
CALENDAR_QUERIES = 10  # session, user, nav (groups, memberships), unread notifications, teams, GPUs, holds, downs,
# guarantees (and the holds at this moment where there are some: one more)
MINE_QUERIES = 10  # session, user, nav (2), unread notifications, count, rows, holds + GPUs, led teams, writable


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def local(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M")  # the display zone is UTC in tests


def gpu(name: str) -> Gpu:
    hostname, index = name.split("/")
    return Gpu.objects.get(node__hostname=hostname, index=int(index), mig_parent__isnull=True)


def book(user, team, *, start, end, **what) -> Booking:
    return booking_create(user=user, team=team, start=start, end=end, now=NOW, **what)


def lanes(response) -> dict:
    return {lane.name: lane for group in response.context["week"].groups for lane in group.lanes}


def kinds(lane) -> list[str]:
    return [block.kind for block in lane.blocks]
