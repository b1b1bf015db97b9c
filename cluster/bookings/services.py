"""Writes to bookings (DESIGN.md §6): create, change the end, cancel or end early, release, maintenance.

Each runs in one transaction. The exclusion constraint on ``GpuHold`` is the guard against double
booking; these functions check first only to answer with a clear message, and turn the constraint's
refusal (a concurrent writer won) into the same 409. What they read of GPUs and holds is ``holds.py``.

Writers of holds take their turn (one advisory lock, :data:`HOLDS_LOCK`, held to the end of the
transaction) before they read what is free: two inserts checking the exclusion constraint at the same
moment would otherwise wait on each other until PostgreSQL's deadlock detector aborts one, a second later
(and never, where that detector's timer does not fire: under libfaketime, see .ci/clock). A booking is a
person's request, so one writer at a time costs nothing; a pick by model then sees the holds of the
writer before it and chooses free GPUs the first time. Guaranteed shares (``guarantees.py``) are checked in
the same turn, so two bookings cannot both take the last GPUs a guarantee leaves.

Long because every write to holds lives here, under one lock, with its audit row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, OperationalError, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange
from django.utils import timezone
from django.utils.translation import gettext as _

from cluster.bookings.guarantees import guarantee_refusal
from cluster.bookings.holds import (
    bookable_gpus,
    busy_ranges,
    candidate_gpus,
    first_conflict,
    hold_conflict_message,
    local_span,
    node_gpu_ids,
)
from cluster.bookings.slots import (
    Candidate,
    Limits,
    earliest_slot,
    most_held_at_once,
    pick_gpus,
    window_problems,
)
from cluster.choices import NodeStatus
from cluster.models import (
    Booking,
    BookingMode,
    BookingStatus,
    Gpu,
    GpuHold,
    GpuModel,
    HoldKind,
    MaintenanceWindow,
    Node,
    TeamBookingPolicy,
)
from core.locks import wait_turn
from core.sqlstate import DEADLOCK_DETECTED, EXCLUSION_VIOLATION
from teams.audit.models import AuditKind
from teams.audit.records import audit_entry, audit_record_many, audit_values
from teams.models import Membership, Project, Team
from teams.roles import TeamRole, is_admin

AUTO_PICK_ATTEMPTS = 5
HOLDS_LOCK = "cardhour.booking.holds"


class BookingRefused(Exception):
    """A booking request the rules refuse: ``status`` is the HTTP answer (400, 403, 404, 409) and
    ``field`` the request field the message is about."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.status, self.field, self.message = status, field, message


def booking_limits(team: Team | None) -> Limits:
    """The settings' limits with the team's overrides applied."""
    limits = {
        "grid_minutes": settings.BOOKING_GRID_MINUTES, "min_minutes": settings.BOOKING_MIN_MINUTES,
        "max_hours": settings.BOOKING_MAX_HOURS, "max_days_ahead": settings.BOOKING_MAX_DAYS_AHEAD,
        "max_gpus_per_booking": settings.BOOKING_MAX_GPUS_PER_BOOKING, "max_gpus_held": settings.BOOKING_MAX_GPUS_HELD,
        "idle_warn_minutes": settings.BOOKING_IDLE_WARN_MINUTES,
        "idle_release_minutes": settings.BOOKING_IDLE_RELEASE_MINUTES,
    }
    policy = TeamBookingPolicy.objects.filter(team=team).first() if team is not None else None
    if policy is not None:
        overrides = {
            "max_hours": policy.max_hours, "max_days_ahead": policy.max_days_ahead,
            "max_gpus_per_booking": policy.max_gpus_per_booking, "max_gpus_held": policy.max_gpus_held,
            "idle_warn_minutes": policy.idle_warn_minutes, "idle_release_minutes": policy.idle_release_minutes,
        }
        limits.update({key: value for key, value in overrides.items() if value is not None})
    return Limits(**limits)


def _hold_write(write: Callable[[], None], *, attempts: int = 3) -> bool:
    """Run ``write`` (inserting or moving holds) in a savepoint; False when another writer holds the GPUs
    (the exclusion constraint refused). Its callers have taken the writers' turn (:data:`HOLDS_LOCK`)
    before reading what is free. A deadlock with a writer outside these services (PostgreSQL aborts one
    of the two) is tried again."""
    for _attempt in range(attempts):
        try:
            with transaction.atomic():
                write()
            return True
        except (IntegrityError, OperationalError) as exc:
            state = getattr(exc.__cause__, "sqlstate", None)
            if state == EXCLUSION_VIOLATION:
                return False
            if state != DEADLOCK_DETECTED:
                raise
    return False


def _check_booker(*, user, team: Team, booker) -> None:
    """A lead books for anyone in the team, an engineer for themself, an admin for anyone in the team."""
    member_role = Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()
    if not (is_admin(user) or member_role is not None):
        raise BookingRefused(403, "team", _("you may book only for a team you belong to."))
    if booker != user and not (is_admin(user) or member_role == TeamRole.LEAD):
        raise BookingRefused(403, "booker", _("only a team lead books for someone else."))
    if booker != user and not Membership.objects.filter(user=booker, team=team).exists():
        raise BookingRefused(400, "booker", _("must be a member of the team."))


def _requested_gpus(*, gpu_model, count, gpus, node) -> tuple[str, list[Gpu] | None, int]:
    """(mode, named GPUs or None for a pick by model, count); refuses a request that is not one of the three."""
    given = [name for name, value in (("gpus", gpus), ("node", node), ("gpu_model", gpu_model)) if value]
    if len(given) != 1:
        raise BookingRefused(400, "gpus", _("give exactly one of: a GPU model and a count, named GPUs, or a node."))
    if gpus:
        gpus = list(gpus)
        if len({gpu.pk for gpu in gpus}) != len(gpus):
            raise BookingRefused(400, "gpus", _("names a GPU twice."))
        bookable = set(bookable_gpus().filter(pk__in=[gpu.pk for gpu in gpus]).values_list("pk", flat=True))
        for gpu in gpus:
            if gpu.pk not in bookable:
                raise BookingRefused(400, "gpus", _("GPU %(gpu)s cannot be booked (a MIG instance, or not in service).")
                                     % {"gpu": gpu})
        return BookingMode.GPUS, gpus, len(gpus)
    if node:
        if node.status in NodeStatus.set_by_admins():
            raise BookingRefused(400, "node", _("node %(node)s is in maintenance or retired.") % {"node": node})
        named = list(bookable_gpus().filter(node=node).select_related("node").order_by("index"))
        if not named:
            raise BookingRefused(400, "node", _("node %(node)s has no GPU that can be booked.") % {"node": node})
        return BookingMode.NODE, named, len(named)
    if not count or count < 1:
        raise BookingRefused(400, "count", _("must be at least 1."))
    total = bookable_gpus().filter(model=gpu_model).count()
    if count > total:
        raise BookingRefused(400, "count", _("the cluster has %(total)d bookable %(model)s GPUs.")
                             % {"total": total, "model": gpu_model})
    return BookingMode.MODEL, None, count


def _check_team_cap(*, team: Team, limits: Limits, start: datetime, end: datetime, count: int,
                    exclude_booking: int | None = None) -> None:
    if not limits.max_gpus_held:
        return
    wait_turn(f"cardhour.booking.team.{team.pk}")  # one team's bookings are checked one at a time
    holds = GpuHold.objects.overlapping(start, end).filter(kind=HoldKind.BOOKING, team=team)
    if exclude_booking is not None:
        holds = holds.exclude(booking_id=exclude_booking)
    ranges = [(max(h.during.lower, start), min(h.during.upper, end)) for h in holds.only("during")]
    ranges += [(start, end)] * count
    if most_held_at_once(ranges) > limits.max_gpus_held:
        raise BookingRefused(400, "count", _("team %(team)s may hold at most %(n)d GPUs at once.")
                             % {"team": team, "n": limits.max_gpus_held})


def _insert_holds(booking: Booking, gpu_ids: Sequence[int]) -> None:
    GpuHold.objects.bulk_create(
        GpuHold(
            gpu_id=gpu_id, during=DateTimeTZRange(booking.start, booking.end), kind=HoldKind.BOOKING, booking=booking,
            team_id=booking.team_id, project_id=booking.project_id, booker_id=booking.booker_id,
        )
        for gpu_id in gpu_ids
    )


@transaction.atomic
def booking_create(
    *, user, team: Team, start: datetime, end: datetime, gpu_model: GpuModel | None = None, count: int | None = None,
    gpus: Sequence[Gpu] | None = None, node: Node | None = None, project: Project | None = None, booker=None,
    note: str = "", now: datetime | None = None,
) -> Booking:
    """Book GPUs for ``team``: ``count`` of ``gpu_model`` (picked, packing one node first, trying other
    free GPUs when a concurrent booking takes the first choice), the named ``gpus``, or a whole ``node``."""
    now = now or timezone.now()
    booker = booker or user
    limits = booking_limits(team)
    for field, message in window_problems(start=start, end=end, now=now, limits=limits):
        raise BookingRefused(400, field, message)
    _check_booker(user=user, team=team, booker=booker)
    if project is not None and project.team_id != team.pk:
        raise BookingRefused(400, "project", _("must be one of the team's projects."))
    mode, named, count = _requested_gpus(gpu_model=gpu_model, count=count, gpus=gpus, node=node)
    if count > limits.max_gpus_per_booking:
        raise BookingRefused(400, "count", _("a booking holds at most %(n)d GPUs.") % {"n": limits.max_gpus_per_booking})
    start = max(start, now)  # a booking in the current grid step starts now
    _check_team_cap(team=team, limits=limits, start=start, end=end, count=count)
    booking = Booking(
        team=team, project=project, booker=booker, created_by=user, mode=mode, gpu_count=count, start=start, end=end,
        booked_end=end, note=note, created_at=now, node=node,
        gpu_model=gpu_model if named is None else named[0].model if len({g.model_id for g in named}) == 1 else None,
    )
    booking = _book_named(booking, named) if named is not None else _book_picked(booking, gpu_model, limits, now)
    _record(booking, user=user, before=None, now=now)
    return booking


def _book_named(booking: Booking, gpus: list[Gpu]) -> Booking:
    gpu_ids = [gpu.pk for gpu in gpus]
    wait_turn(HOLDS_LOCK)
    if (hold := first_conflict(gpu_ids, booking.start, booking.end)) is not None:
        raise BookingRefused(409, "gpus", hold_conflict_message(hold))
    _check_guarantees(booking, Counter(gpu.model_id for gpu in gpus), "gpus", booking.start, booking.end)
    if not _hold_write(lambda: _save_with_holds(booking, gpu_ids)):
        hold = first_conflict(gpu_ids, booking.start, booking.end)
        raise BookingRefused(409, "gpus", hold_conflict_message(hold) if hold else _("the GPUs were just booked."))
    return booking


def _check_guarantees(booking: Booking, counts: dict[int, int], field: str, start: datetime, end: datetime) -> None:
    """409 naming the guarantee when ``counts`` GPUs (by model id) over ``[start, end)`` would take GPUs that
    another team's guaranteed share reserves. Called with the writers' turn held."""
    refusal = guarantee_refusal(team_id=booking.team_id, counts=dict(counts), start=start, end=end,
                                exclude_booking=booking.pk)
    if refusal is not None:
        raise BookingRefused(409, field, refusal)


def _save_with_holds(booking: Booking, gpu_ids: Sequence[int]) -> None:
    booking.pk, booking._state.adding = None, True  # a retried attempt inserts afresh
    booking.save()
    _insert_holds(booking, gpu_ids)


def _book_picked(booking: Booking, gpu_model: GpuModel, limits: Limits, now: datetime) -> Booking:
    wait_turn(HOLDS_LOCK)
    _check_guarantees(booking, {gpu_model.pk: booking.gpu_count}, "count", booking.start, booking.end)
    candidates = candidate_gpus(gpu_model)
    lost: set[int] = set()
    for _attempt in range(AUTO_PICK_ATTEMPTS):
        pool = [c for c in candidates if c.gpu_id not in lost]
        busy = busy_ranges([c.gpu_id for c in pool], booking.start, booking.end)
        chosen = pick_gpus([c for c in pool if c.gpu_id not in busy], booking.gpu_count)
        if chosen is None:
            break
        chosen_ids = [c.gpu_id for c in chosen]
        if _hold_write(lambda ids=chosen_ids: _save_with_holds(booking, ids)):
            return booking
        taken = busy_ranges(chosen_ids, booking.start, booking.end)
        lost.update(taken or chosen_ids)
    raise BookingRefused(409, "count", _no_room_message(booking, gpu_model, candidates, limits, now))


def _no_room_message(booking: Booking, gpu_model: GpuModel, candidates: list[Candidate], limits: Limits,
                     now: datetime) -> str:
    wanted = {"count": booking.gpu_count, "model": gpu_model, "span": local_span(booking.start, booking.end)}
    latest = now + timedelta(days=limits.max_days_ahead)
    busy = busy_ranges([c.gpu_id for c in candidates], booking.start, latest + (booking.end - booking.start))
    slot = earliest_slot(
        gpus=candidates, busy=busy, count=booking.gpu_count, start=booking.start, end=booking.end, now=now,
        latest_start=latest, grid_minutes=limits.grid_minutes,
    )
    if slot is None:
        return _("%(count)d × %(model)s are not free %(span)s, nor later within the booking horizon.") % wanted
    return _("%(count)d × %(model)s are not free %(span)s; the earliest free slot is %(slot)s.") % {
        **wanted, "slot": local_span(slot.start, slot.end),
    }


def bookings_writable_by(user):
    """Bookings ``user`` may change: admins any, leads their teams', engineers their own."""
    if is_admin(user):
        return Booking.objects.all()
    led = Team.objects.led_by(user)
    return Booking.objects.filter(team__in=led) | Booking.objects.filter(booker=user, team__memberships__user=user)


def _check_writable(user, booking: Booking) -> None:
    if not bookings_writable_by(user).filter(pk=booking.pk).exists():
        if not Booking.objects.visible_to(user).filter(pk=booking.pk).exists():
            raise BookingRefused(404, "id", _("no such booking."))
        raise BookingRefused(403, "booker", _("only the booker or a team lead changes this booking."))


@transaction.atomic
def booking_set_end(*, user, booking: Booking, end: datetime, now: datetime | None = None) -> Booking:
    """Extend (when the GPUs are free) or shorten a booking that has not ended."""
    now = now or timezone.now()
    booking = _locked().get(pk=booking.pk)
    _check_writable(user, booking)
    if booking.status != BookingStatus.BOOKED or booking.end <= now:
        raise BookingRefused(400, "end", _("the booking has already ended."))
    before = booking_values(booking)
    limits = booking_limits(booking.team)
    for field, message in window_problems(start=booking.start, end=end, now=now, limits=limits, new=False):
        raise BookingRefused(400, field, message)
    if end > booking.end:
        _check_team_cap(team=booking.team, limits=limits, start=booking.end, end=end, count=booking.gpu_count,
                        exclude_booking=booking.pk)
    gpu_ids = list(booking.holds.active().values_list("gpu_id", flat=True))
    wait_turn(HOLDS_LOCK)
    if (hold := first_conflict(gpu_ids, booking.start, end, exclude_booking=booking.pk)) is not None:
        raise BookingRefused(409, "end", hold_conflict_message(hold))
    if end > booking.end:
        models = Counter(Gpu.objects.filter(pk__in=gpu_ids).values_list("model_id", flat=True))
        _check_guarantees(booking, models, "end", booking.end, end)
    if not _hold_write(lambda: booking.holds.active().update(during=DateTimeTZRange(booking.start, end))):
        hold = first_conflict(gpu_ids, booking.start, end, exclude_booking=booking.pk)
        raise BookingRefused(409, "end", hold_conflict_message(hold) if hold else _("the GPUs were just booked."))
    booking.end = booking.booked_end = end
    booking.reminded_at = None
    booking.save(update_fields=["end", "booked_end", "reminded_at"])
    _record(booking, user=user, before=before, now=now)
    return booking


def _close(booking: Booking, *, status: str, at: datetime, user=None) -> Booking:
    """End a running booking at ``at`` (its GPUs are free from then), or cancel one not yet started."""
    before = booking_values(booking)
    if booking.start >= at:
        booking.status = BookingStatus.CANCELLED
        booking.holds.update(active=False)
    else:
        booking.status = status
        booking.end = min(booking.end, at)
        booking.holds.active().update(during=DateTimeTZRange(booking.start, booking.end))
    booking.closed_at = at
    booking.save(update_fields=["status", "end", "closed_at"])
    _record(booking, user=user, before=before, now=at)
    return booking


@transaction.atomic
def booking_cancel(*, user, booking: Booking, now: datetime | None = None) -> Booking:
    """Cancel a booking that has not started, or end a running one now (its GPUs are free at once)."""
    now = now or timezone.now()
    booking = _locked().get(pk=booking.pk)
    _check_writable(user, booking)
    if booking.status != BookingStatus.BOOKED or booking.end <= now:
        raise BookingRefused(400, "id", _("the booking has already ended."))
    return _close(booking, status=BookingStatus.ENDED, at=now, user=user)


@transaction.atomic
def booking_release(*, booking_id: int, at: datetime) -> Booking | None:
    """The system takes back an idle booking's GPUs from ``at`` (no-op unless it still holds them)."""
    booking = _locked().filter(pk=booking_id, status=BookingStatus.BOOKED).first()
    if booking is None or booking.end <= at:
        return None
    return _close(booking, status=BookingStatus.RELEASED, at=at)


@transaction.atomic
def bookings_end_due(*, now: datetime) -> int:
    """Mark bookings whose end has passed as ended (their holds already stop there), each audited. Rerunnable."""
    due = list(_locked().filter(status=BookingStatus.BOOKED, end__lte=now))
    entries = []
    for booking in due:
        before = booking_values(booking)
        booking.status, booking.closed_at = BookingStatus.ENDED, now
        entries.append(_entry(booking, user=None, before=before, now=now))
    Booking.objects.filter(pk__in=[booking.pk for booking in due]).update(status=BookingStatus.ENDED, closed_at=now)
    audit_record_many(entries)
    return len(due)


# ---- the audit trail -------------------------------------------------------------------------------------

BOOKING_RELATED = ("team", "project", "booker", "created_by", "gpu_model", "node")
# The watcher's own bookkeeping (when it warned, when it reminded) is not a change to the booking.
NOT_AUDITED = ("idle_warned_at", "reminded_at")


def booking_values(booking: Booking) -> dict:
    """A booking as the audit trail keeps it."""
    return audit_values(booking, exclude=NOT_AUDITED)


def _entry(booking: Booking, *, user, before: dict | None, now: datetime):
    return audit_entry(kind=AuditKind.BOOKING, user=user, object_id=booking.pk, team_id=booking.team_id, now=now,
                       subject=f"booking {booking.pk} ({booking.team.slug})", before=before,
                       after=booking_values(booking))


def _locked():
    """Bookings locked for a change, with what their audit rows name."""
    return Booking.objects.select_for_update(of=("self",)).select_related(*BOOKING_RELATED)


def _record(booking: Booking, *, user, before: dict | None, now: datetime) -> None:
    """The audit row of a booking's change, in the change's transaction."""
    audit_record_many([_entry(booking, user=user, before=before, now=now)])


@transaction.atomic
def maintenance_create(*, node: Node, start: datetime, end: datetime, reason: str, user=None) -> MaintenanceWindow:
    """Take ``node``'s GPUs away from bookings over ``[start, end)``; refused (409) over a booking."""
    if end <= start:
        raise BookingRefused(400, "end", _("must be after the start."))
    gpu_ids = node_gpu_ids(node)
    wait_turn(HOLDS_LOCK)
    if (hold := first_conflict(gpu_ids, start, end)) is not None:
        raise BookingRefused(409, "start", hold_conflict_message(hold))
    window = MaintenanceWindow.objects.create(node=node, start=start, end=end, reason=reason, created_by=user)
    holds = [GpuHold(gpu_id=gpu_id, during=DateTimeTZRange(start, end), kind=HoldKind.MAINTENANCE, maintenance=window)
             for gpu_id in gpu_ids]
    if not _hold_write(lambda: GpuHold.objects.bulk_create(holds)):
        raise BookingRefused(409, "start", _("the node's GPUs were just booked over this window."))
    return window
