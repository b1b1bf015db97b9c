"""The supported time window (DESIGN.md §3): every time accepted from outside lies in it.

A time outside it (a job "started" in year 1, a quota "ending" in 9999) would overflow the
calendar arithmetic of the accounting, and in Asia/Shanghai a year-1 instant renders with the
local-mean-time offset +08:05:43, which is no RFC 3339 date-time. So such a time is refused where it
enters (API, forms, CSV, query parameters) with a message that names the field and the window.

Jobs and bookings are held to "now" as well: a job's times lie at most :data:`JOB_MAX_FUTURE` ahead
(a scheduler's clock may run a little fast; a job record from next year is a mistake).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

WINDOW_START = datetime(2000, 1, 1, tzinfo=UTC)
WINDOW_END = datetime(2100, 1, 1, tzinfo=UTC)  # exclusive
JOB_MAX_FUTURE = timedelta(days=1)

WINDOW_TEXT = "2000-01-01T00:00:00Z … 2100-01-01T00:00:00Z"


class OutsideWindow(ValueError):
    """A time outside the supported window; the message names the field and the window."""

    def __init__(self, field: str, value, *, limit_text: str = WINDOW_TEXT):
        self.field = field
        self.value = value
        self.limit_text = limit_text
        super().__init__(f"{field}: {_show(value)} is outside the supported window {limit_text}")


def _show(value) -> str:
    if isinstance(value, datetime | date):
        try:
            return value.isoformat()
        except (OverflowError, ValueError):
            return repr(value)
    return repr(value)


def in_window(moment: datetime) -> bool:
    """Whether an aware ``moment`` lies in [WINDOW_START, WINDOW_END)."""
    try:
        return WINDOW_START <= moment < WINDOW_END
    except (OverflowError, TypeError):
        return False


def date_in_window(day: date) -> bool:
    """Whether a calendar ``day`` lies in the window (its first instant, taken as UTC)."""
    return WINDOW_START.date() <= day < WINDOW_END.date()


def check_in_window(moment: datetime | None, *, field: str) -> datetime | None:
    """Return ``moment`` (or None) if it lies in the window, else raise :class:`OutsideWindow`."""
    if moment is not None and not in_window(moment):
        raise OutsideWindow(field, moment)
    return moment


def check_date_in_window(day: date | None, *, field: str) -> date | None:
    """Return ``day`` (or None) if it lies in the window, else raise :class:`OutsideWindow`."""
    if day is not None and not date_in_window(day):
        raise OutsideWindow(field, day)
    return day


def check_job_time(moment: datetime | None, *, field: str, now: datetime) -> datetime | None:
    """A job's time: in the window and at most :data:`JOB_MAX_FUTURE` after ``now``."""
    check_in_window(moment, field=field)
    if moment is not None and moment > now + JOB_MAX_FUTURE:
        limit = (now + JOB_MAX_FUTURE).astimezone(UTC).isoformat().replace("+00:00", "Z")
        raise OutsideWindow(field, moment, limit_text=f"{WINDOW_START.date().isoformat()} … {limit} (now + 1 day)")
    return moment


def epoch_in_window(seconds: float) -> bool:
    """Whether a Unix time (seconds) lies in the window; False for NaN and infinities."""
    try:
        return WINDOW_START.timestamp() <= seconds < WINDOW_END.timestamp()
    except TypeError:
        return False


def clamp_to_window(moment: datetime) -> datetime:
    """``moment`` moved into [WINDOW_START, WINDOW_END]: for ranges that calendar arithmetic walks over."""
    return min(max(moment, WINDOW_START), WINDOW_END)


def clamp_date_to_window(day: date) -> date:
    """``day`` moved into [first day, last day + 1] of the window (a stored quota from year 1, …)."""
    return min(max(day, WINDOW_START.date()), WINDOW_END.date())


def rfc3339_utc(moment: datetime) -> str:
    """An aware ``moment`` as an RFC 3339 date-time in UTC (``…Z``): how a time outside the window is
    shown, since a zone's offset in year 1 is its local mean time (Asia/Shanghai: +08:05:43)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def window_message(error: OutsideWindow) -> str:
    """The error's message for a person, translated; the field is named by where the message is shown
    (the API's ``detail`` and a form's error both key it by field)."""
    value = _show(error.value)
    if error.limit_text != WINDOW_TEXT:
        return _("%(value)s is outside the window accepted for job times, %(window)s.") % {
            "value": value, "window": error.limit_text}
    return _("%(value)s is outside the supported window %(window)s.") % {"value": value, "window": WINDOW_TEXT}


def validate_in_window(value) -> None:
    """A form or model field validator: a date or aware date-time in the window, else a ValidationError."""
    try:
        if isinstance(value, datetime):
            check_in_window(value if value.tzinfo else value.replace(tzinfo=UTC), field="time")
        elif isinstance(value, date):
            check_date_in_window(value, field="day")
    except OutsideWindow as error:
        raise ValidationError(window_message(error), code="outside_window") from None
