"""The clock and the business calendar (DESIGN.md §4), written once for every floor above.

Stored times are aware UTC. The business time zone (``settings.CARDHOUR_BUSINESS_TIME_ZONE``) draws
the days that usage is aggregated, priced and closed by; a business day is ``[local midnight, next
local midnight)``, so it is 23 or 25 hours long on a daylight-saving change. A function that reads the
clock takes ``now=`` and otherwise reads the application's clock (``timezone.now()``), never the
database's. The display zone (``TIME_ZONE``) is not the business zone and is not handled here.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import timezone

from core.timewindow import clamp_to_window


def business_zone() -> ZoneInfo:
    """The business time zone: the one that draws the days."""
    return ZoneInfo(settings.CARDHOUR_BUSINESS_TIME_ZONE)


def business_day_of(moment: datetime) -> date:
    """The business day an aware ``moment`` falls on."""
    return timezone.localtime(moment, business_zone()).date()


def business_today(*, now: datetime | None = None) -> date:
    """Today's date in the business time zone (``now`` defaults to the application's clock)."""
    return business_day_of(now or timezone.now())


def business_day_bounds(day: date) -> tuple[datetime, datetime]:
    """``[start, end)`` of ``day`` in the business zone, as the UTC instants of its local midnights
    (23 or 25 hours long on a daylight-saving change)."""
    zone = business_zone()
    start = datetime.combine(day, time.min, tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), time.min, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


def business_days(start: datetime, end: datetime) -> list[date]:
    """The business days that ``[start, end)`` touches, in order; clamped to the supported window first,
    so a stored year-1 time neither overflows the calendar nor asks for 700,000 days."""
    start, end = clamp_to_window(start), clamp_to_window(end)
    if end <= start:
        return []
    return days_through(business_day_of(start), business_day_of(end - timedelta(microseconds=1)))


def days_through(first: date, last: date) -> list[date]:
    """The days ``first`` … ``last``, both included (none when ``last`` is before ``first``)."""
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def week_days(day: date) -> tuple[date, date]:
    """Monday and Sunday of ``day``'s week (weeks run Monday to Sunday)."""
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=6)


def month_days(period: date) -> tuple[date, date]:
    """[first day, first day of the next month) of the month holding ``period``."""
    first = period.replace(day=1)
    following = (first.replace(day=28) + timedelta(days=4)).replace(day=1)
    return first, following


def previous_month(day: date) -> date:
    """The first day of the month before ``day``'s."""
    return (day.replace(day=1) - timedelta(days=1)).replace(day=1)


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch of an aware datetime (the charts' time unit, STYLE.md 6)."""
    return int(moment.timestamp() * 1000)
