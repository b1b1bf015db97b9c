"""Reads for bookings: the earliest free slot for a request, and who may see which bookings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from cluster.bookings.holds import busy_ranges, candidate_gpus
from cluster.bookings.services import booking_limits
from cluster.bookings.slots import Candidate, Slot, earliest_slot, pick_gpus
from cluster.models import Booking, GpuModel


@dataclass(frozen=True)
class Availability:
    """The earliest slot for a request, the GPUs a booking would take there, and every GPU free then."""

    slot: Slot | None
    picked: tuple[Candidate, ...]
    total: int  # bookable GPUs of the model on nodes that are up


def availability(
    *, gpu_model: GpuModel, count: int, start: datetime, end: datetime, team=None, now: datetime | None = None,
) -> Availability:
    """Where and when ``count`` GPUs of ``gpu_model`` are first free for the length of ``[start, end)``,
    searching from ``start`` up to the booking horizon (``team``'s limits)."""
    now = now or timezone.now()
    limits = booking_limits(team)
    candidates = candidate_gpus(gpu_model)
    gpu_ids = [c.gpu_id for c in candidates]
    requested = max(start, now)
    busy_now = busy_ranges(gpu_ids, requested, end)
    free_now = tuple(c for c in candidates if c.gpu_id not in busy_now)
    if len(free_now) >= count:  # the usual answer: no need to read the weeks ahead
        slot = Slot(requested, end, free_now)
        return Availability(slot=slot, picked=tuple(pick_gpus(free_now, count)), total=len(candidates))
    latest = now + timedelta(days=limits.max_days_ahead)
    busy = busy_ranges(gpu_ids, requested, latest + (end - start))
    slot = earliest_slot(
        gpus=candidates, busy=busy, count=count, start=start, end=end, now=now, latest_start=latest,
        grid_minutes=limits.grid_minutes,
    )
    picked = tuple(pick_gpus(slot.free, count) or ()) if slot else ()
    return Availability(slot=slot, picked=picked, total=len(candidates))


def bookings_for_list(user, *, mine_only: bool = False):
    """The bookings ``user`` may see, newest first, with what the list shows in one query."""
    bookings = Booking.objects.visible_to(user).select_related("team", "project", "booker", "gpu_model", "node")
    if mine_only:
        bookings = bookings.filter(booker=user)
    return bookings.order_by("-start", "-id")
