"""The periodic watch over bookings (DESIGN.md §6): end them at their end, warn and release idle ones,
remind the booker before the end, and raise a conflict when another team's job sits on a booked GPU.

Every step takes ``now`` and is rerunnable: a second run at the same ``now`` changes nothing more. The
task ``cluster.tasks.bookings_tick`` runs :func:`watch` under an advisory lock once a minute.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from cluster.bookings.services import booking_limits, booking_release, bookings_end_due
from cluster.bookings.slots import ceil_to_grid, floor_to_grid, idle_clock, minute_state
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.models import (
    Alert,
    Allocation,
    Booking,
    BookingStatus,
    Gpu,
    GpuHold,
    HoldKind,
    Job,
    MinuteRollup,
    Node,
)
from cluster.status.services import alert_close, alert_raise
from core.languages import in_every_language
from teams.models import Team

# The idle clock reads at most this many minutes beyond the team's longest idle limit: unmeasured
# minutes pause the clock, and a pause longer than this margin delays a release (never hastens one).
IDLE_LOOKBACK_MARGIN_MINUTES = 60
# A job on a booked GPU at any moment in the last CONFLICT_WINDOW is a conflict: observed allocations
# end where their process was last seen, so a conflict outlives its job by up to this window.
CONFLICT_WINDOW = timedelta(minutes=10)


def booking_label(booking_id: int, team_name: str) -> str:
    """How an alert names its booking: ``booking #12 (Team Alpha)``."""
    return _("booking #%(id)d (%(team)s)") % {"id": booking_id, "team": team_name}


def _local_moment(moment: datetime, *, now: datetime) -> str:
    """``14:00 (UTC)`` in the display zone, with the date when it is not today's."""
    zone = timezone.get_current_timezone()
    local = timezone.localtime(moment, zone)
    same_day = local.date() == timezone.localtime(now, zone).date()
    return f"{date_format(local, 'H:i' if same_day else 'Y-m-d H:i')} ({zone})"


def _close_alerts_of(booking_ids, *, kinds: tuple[str, ...], at: datetime) -> int:
    closed = 0
    for booking_id in booking_ids:
        closed += alert_close(subject_type=AlertSubject.BOOKING, subject_id=booking_id, kinds=kinds, at=at)
    return closed


def _open_alert_subjects(kind: str, *, among=None) -> set[int]:
    alerts = Alert.objects.open().filter(subject_type=AlertSubject.BOOKING, kind=kind)
    if among is not None:
        alerts = alerts.filter(subject_id__in=among)
    return set(alerts.values_list("subject_id", flat=True))


def bookings_end(*, now: datetime) -> int:
    """End bookings whose end has come; close the idle and reminder alerts of bookings no longer booked
    (ended, cancelled or released). Returns how many bookings it ended."""
    ended = bookings_end_due(now=now)
    closed_ids = (
        Alert.objects.open()
        .filter(subject_type=AlertSubject.BOOKING, kind__in=(AlertKind.BOOKING_IDLE, AlertKind.BOOKING_ENDING))
        .filter(subject_id__in=Booking.objects.exclude(status=BookingStatus.BOOKED).values("pk"))
        .values_list("subject_id", flat=True)
        .distinct()
    )
    _close_alerts_of(list(closed_ids), kinds=(AlertKind.BOOKING_IDLE, AlertKind.BOOKING_ENDING), at=now)
    return ended


def _running_holds(now: datetime) -> tuple[list[Booking], dict[int, list[Gpu]]]:
    """Running bookings and their held GPUs: two queries."""
    bookings = list(
        Booking.objects.filter(status=BookingStatus.BOOKED, start__lte=now, end__gt=now).select_related("team")
    )
    gpus: dict[int, list[Gpu]] = defaultdict(list)
    holds = GpuHold.objects.active().filter(kind=HoldKind.BOOKING, booking__in=[b.pk for b in bookings])
    for hold in holds.select_related("gpu__node").order_by("gpu__node__hostname", "gpu__index"):
        gpus[hold.booking_id].append(hold.gpu)
    return bookings, gpus


def _idle_minutes(bookings, gpus, limits, now: datetime) -> dict[int, int]:
    """Each running booking's idle clock (minutes) from its GPUs' minute rollups: one query for all."""
    upto = floor_to_grid(now, 1)  # the last whole minute ends here
    since: dict[int, datetime] = {}
    for booking in bookings:
        team_limits = limits[booking.team_id]
        longest = max(team_limits.idle_warn_minutes, team_limits.idle_release_minutes)
        if longest and gpus[booking.pk]:
            lookback = timedelta(minutes=longest + IDLE_LOOKBACK_MARGIN_MINUTES)
            since[booking.pk] = max(ceil_to_grid(booking.start, 1), upto - lookback)
    if not since:
        return {}
    gpu_ids = [gpu.pk for booking_id in since for gpu in gpus[booking_id]]
    readings: dict[tuple[int, datetime], tuple[float | None, int]] = {}
    rows = MinuteRollup.objects.filter(gpu_id__in=gpu_ids, bucket__gte=min(since.values()), bucket__lt=upto)
    for gpu_id, bucket, util_mean, covered in rows.values_list("gpu_id", "bucket", "util_mean", "util_covered_s"):
        readings[(gpu_id, bucket)] = (util_mean, covered)
    threshold = settings.CARDHOUR_IDLE_THRESHOLD_PCT
    clocks = {}
    for booking_id, start in since.items():
        held = [gpu.pk for gpu in gpus[booking_id]]
        states = []
        minute = start
        while minute < upto:
            minute_readings = [readings[(gpu_id, minute)] for gpu_id in held if (gpu_id, minute) in readings]
            states.append(minute_state(minute_readings, len(held), threshold))
            minute += timedelta(minutes=1)
        clocks[booking_id] = idle_clock(states)
    return clocks


def _release(booking: Booking, gpus: list[Gpu], idle: int, now: datetime) -> bool:
    with transaction.atomic():
        if booking_release(booking_id=booking.pk, at=now) is None:
            return False
        alert_close(subject_type=AlertSubject.BOOKING, subject_id=booking.pk, kind=AlertKind.BOOKING_IDLE, at=now)
        message = in_every_language(lambda: ngettext(
            "Booking #%(id)d released: its GPU %(gpus)s was idle for %(minutes)d minutes.",
            "Booking #%(id)d released: its GPUs %(gpus)s were idle for %(minutes)d minutes.",
            len(gpus),
        ) % {"id": booking.pk, "gpus": ", ".join(str(gpu) for gpu in gpus), "minutes": idle})
        alert_raise(
            subject_type=AlertSubject.BOOKING, subject_id=booking.pk,
            subject_label=booking_label(booking.pk, booking.team.name),
            kind=AlertKind.BOOKING_RELEASED, tier=AlertTier.WARNING, message=message,
            details={"gpus": [gpu.pk for gpu in gpus], "idle_minutes": idle}, at=now,
        )
        # A release is a one-off event: its episode ends as it opens.
        alert_close(subject_type=AlertSubject.BOOKING, subject_id=booking.pk, kind=AlertKind.BOOKING_RELEASED, at=now)
    return True


def _warn(booking: Booking, gpus: list[Gpu], idle: int, release_minutes: int, now: datetime) -> bool:
    def text() -> str:
        message = ngettext(
            "The GPU of booking #%(id)d has been idle for %(minutes)d minutes.",
            "All %(n)d GPUs of booking #%(id)d have been idle for %(minutes)d minutes.",
            len(gpus),
        ) % {"n": len(gpus), "id": booking.pk, "minutes": idle}
        if release_minutes:
            message += " " + _("The booking is released after %(n)d idle minutes.") % {"n": release_minutes}
        return message

    message = in_every_language(text)
    with transaction.atomic():
        _alert, opened = alert_raise(
            subject_type=AlertSubject.BOOKING, subject_id=booking.pk,
            subject_label=booking_label(booking.pk, booking.team.name),
            kind=AlertKind.BOOKING_IDLE, tier=AlertTier.WARNING, message=message,
            details={"gpus": [gpu.pk for gpu in gpus], "idle_minutes": idle}, at=now,
        )
        Booking.objects.filter(pk=booking.pk, idle_warned_at__isnull=True).update(idle_warned_at=now)
    return opened


def bookings_idle_check(*, now: datetime) -> dict[str, int]:
    """Warn running bookings whose GPUs have all been idle for the team's warning time, release those
    idle for its release time, and end the warning of bookings busy again. Returns
    ``{"idle_warned": new warnings, "idle_released": releases}``."""
    bookings, gpus = _running_holds(now)
    limits = {team_id: booking_limits(team) for team_id, team in {b.team_id: b.team for b in bookings}.items()}
    clocks = _idle_minutes(bookings, gpus, limits, now)
    warned_before = _open_alert_subjects(AlertKind.BOOKING_IDLE, among=[b.pk for b in bookings])
    warned = released = 0
    quiet = []
    for booking in bookings:
        idle, team_limits = clocks.get(booking.pk, 0), limits[booking.team_id]
        release_at, warn_at = team_limits.idle_release_minutes, team_limits.idle_warn_minutes
        if release_at and idle >= release_at:
            released += _release(booking, gpus[booking.pk], idle, now)
        elif warn_at and idle >= warn_at:
            warned += _warn(booking, gpus[booking.pk], idle, release_at, now)
        else:
            quiet.append(booking.pk)
    _close_alerts_of([pk for pk in quiet if pk in warned_before], kinds=(AlertKind.BOOKING_IDLE,), at=now)
    if quiet:
        Booking.objects.filter(pk__in=quiet, idle_warned_at__isnull=False).update(idle_warned_at=None)
    return {"idle_warned": warned, "idle_released": released}


def bookings_remind(*, now: datetime) -> int:
    """Tell the booker of each booking that ends within BOOKING_REMIND_BEFORE_END_MINUTES, once per end
    (changing the end clears ``reminded_at``, so the new end is reminded again). Returns how many."""
    before = settings.BOOKING_REMIND_BEFORE_END_MINUTES
    # A reminder about an end that has since moved is stale: end its episode.
    stale = _open_alert_subjects(
        AlertKind.BOOKING_ENDING,
        among=Booking.objects.filter(status=BookingStatus.BOOKED, reminded_at__isnull=True).values("pk"),
    )
    _close_alerts_of(sorted(stale), kinds=(AlertKind.BOOKING_ENDING,), at=now)
    if not before:
        return 0
    due = Booking.objects.filter(
        status=BookingStatus.BOOKED, reminded_at__isnull=True, end__gt=now, end__lte=now + timedelta(minutes=before)
    ).select_related("team")
    reminded = 0
    for booking in due:
        with transaction.atomic():
            # The claim: of two concurrent runs, only one updates the row and reminds.
            if not Booking.objects.filter(pk=booking.pk, reminded_at__isnull=True).update(reminded_at=now):
                continue
            minutes = max(1, round((booking.end - now).total_seconds() / 60))
            message = in_every_language(lambda booking=booking, minutes=minutes: ngettext(
                "Booking #%(id)d ends at %(end)s, in %(minutes)d minute. Extend it now if you need the GPUs longer.",
                "Booking #%(id)d ends at %(end)s, in %(minutes)d minutes. Extend it now if you need the GPUs longer.",
                minutes,
            ) % {"id": booking.pk, "end": _local_moment(booking.end, now=now), "minutes": minutes})
            alert_raise(
                subject_type=AlertSubject.BOOKING, subject_id=booking.pk,
                subject_label=booking_label(booking.pk, booking.team.name), kind=AlertKind.BOOKING_ENDING,
                tier=AlertTier.WARNING, message=message, details={"end": booking.end.isoformat()}, at=now,
            )
            reminded += 1
    return reminded


# The tables of the conflict query, by their models.
HOLD, BOOKING, TEAM = GpuHold._meta.db_table, Booking._meta.db_table, Team._meta.db_table
GPU, NODE, ALLOCATION, JOB = Gpu._meta.db_table, Node._meta.db_table, Allocation._meta.db_table, Job._meta.db_table

_CONFLICT_SQL = f"""
    SELECT DISTINCT h.booking_id, bt.name, n.hostname, g.index, j.team_id, jt.name
    FROM {HOLD} h
    JOIN {BOOKING} b ON b.id = h.booking_id
    JOIN {TEAM} bt ON bt.id = b.team_id
    JOIN {GPU} g ON g.id = h.gpu_id
    JOIN {NODE} n ON n.id = g.node_id
    JOIN {GPU} ag ON ag.id = h.gpu_id OR ag.mig_parent_id = h.gpu_id
    JOIN {ALLOCATION} a ON a.gpu_id = ag.id
    JOIN {JOB} j ON j.id = a.job_id
    LEFT JOIN {TEAM} jt ON jt.id = j.team_id
    WHERE h.kind = %(kind)s AND h.active
      AND h.during && tstzrange(%(since)s, %(now)s, '[]')
      AND a.start < %(now)s AND (a."end" IS NULL OR a."end" > %(since)s)
      AND NOT isempty(
            h.during * tstzrange(%(since)s, %(now)s, '[]')
            * tstzrange(a.start, GREATEST(a.start, COALESCE(a."end", %(now)s)), '[)'))
      AND j.team_id IS DISTINCT FROM h.team_id
    ORDER BY h.booking_id, n.hostname, g.index, jt.name NULLS LAST
"""  # noqa: S608 (the models' tables; values are bound)


def _conflict_rows(now: datetime) -> list[tuple]:
    """(booking id, booking's team name, GPU's node, GPU index, job's team id, job's team name) of each
    placed allocation (or one on a MIG instance of the GPU) whose job is not the booking team's and
    that ran on a booked GPU while it was booked, at some moment in the last CONFLICT_WINDOW."""
    with connection.cursor() as cursor:
        cursor.execute(_CONFLICT_SQL, {"kind": HoldKind.BOOKING, "since": now - CONFLICT_WINDOW, "now": now})
        return cursor.fetchall()


def _conflict_message(booking_id: int, rows) -> str:
    """One sentence per GPU naming who sits on it: a team by name or an unattributed process (no job
    names or users: the booking's owners may not see another team's jobs)."""
    by_gpu: dict[str, list[str]] = defaultdict(list)
    for _booking_id, _team, hostname, index, job_team_id, job_team in rows:
        who = _("team %(team)s") % {"team": job_team} if job_team_id is not None else _("an unattributed process")
        if who not in by_gpu[f"{hostname}/{index}"]:
            by_gpu[f"{hostname}/{index}"].append(who)
    return " ".join(
        _("GPU %(gpu)s of booking #%(id)d is in use by %(who)s.")
        % {"gpu": gpu, "id": booking_id, "who": ", ".join(who)}
        for gpu, who in by_gpu.items()
    )


def booking_conflicts_check(*, now: datetime) -> dict[str, int]:
    """Raise a critical conflict on each booking whose GPU another team's job (or an unattributed
    process) used in the last CONFLICT_WINDOW; close the conflicts that are over. Returns
    ``{"conflicts": bookings in conflict now, "conflicts_closed": episodes closed}``."""
    per_booking: dict[int, list[tuple]] = defaultdict(list)
    for row in _conflict_rows(now):
        per_booking[row[0]].append(row)
    for booking_id, rows in per_booking.items():
        alert_raise(
            subject_type=AlertSubject.BOOKING, subject_id=booking_id,
            subject_label=booking_label(booking_id, rows[0][1]),
            kind=AlertKind.BOOKING_CONFLICT, tier=AlertTier.CRITICAL,
            message=in_every_language(lambda booking_id=booking_id, rows=rows: _conflict_message(booking_id, rows)),
            details={"gpus": sorted({f"{row[2]}/{row[3]}" for row in rows})}, at=now,
        )
    over = _open_alert_subjects(AlertKind.BOOKING_CONFLICT) - set(per_booking)
    closed = _close_alerts_of(sorted(over), kinds=(AlertKind.BOOKING_CONFLICT,), at=now)
    return {"conflicts": len(per_booking), "conflicts_closed": closed}


def watch(*, now: datetime) -> dict[str, int]:
    """One pass of the booking watch, in order: end, idle, remind, conflicts. Returns what it did:
    bookings ended, new idle warnings, releases, reminders, bookings in conflict, conflicts closed."""
    summary = {"ended": bookings_end(now=now)}
    summary.update(bookings_idle_check(now=now))
    summary["reminded"] = bookings_remind(now=now)
    summary.update(booking_conflicts_check(now=now))
    return summary
