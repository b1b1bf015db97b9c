"""The business calendar (core/timeutils.py), on hand-computed days: daylight-saving change days in
Europe/Berlin, a UTC evening that is already tomorrow in Asia/Shanghai, months across a year end and a
leap February, and epoch milliseconds. Every case passes ``now=`` or freezes the clock."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine

from core.timeutils import (
    business_day_bounds,
    business_day_of,
    business_days,
    business_today,
    business_zone,
    days_through,
    epoch_ms,
    month_days,
    previous_month,
    week_days,
)

HOUR = timedelta(hours=1)
MICRO = timedelta(microseconds=1)
LATE_EVENING_UTC = datetime(2026, 11, 1, 23, 30, tzinfo=UTC)  # 2026-11-02 07:30 in Asia/Shanghai (UTC+8)


@pytest.fixture
def berlin(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Europe/Berlin"


@pytest.fixture
def shanghai(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"


def test_the_business_zone_is_the_setting(shanghai):
    assert business_zone() == ZoneInfo("Asia/Shanghai")


# ---- days ------------------------------------------------------------------------------------------------

def test_a_utc_day_is_midnight_to_midnight(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    assert business_day_bounds(date(2026, 11, 2)) == (
        datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC))


def test_a_shanghai_day_starts_at_16_utc_the_day_before(shanghai):
    assert business_day_bounds(date(2026, 11, 2)) == (
        datetime(2026, 11, 1, 16, tzinfo=UTC), datetime(2026, 11, 2, 16, tzinfo=UTC))


def test_the_spring_change_day_in_berlin_has_23_hours(berlin):
    # 2026-03-29: clocks go from 02:00 CET (UTC+1) to 03:00 CEST (UTC+2).
    start, end = business_day_bounds(date(2026, 3, 29))
    assert start == datetime(2026, 3, 28, 23, tzinfo=UTC)
    assert end == datetime(2026, 3, 29, 22, tzinfo=UTC)
    assert end - start == 23 * HOUR
    assert start.tzinfo is UTC and end.tzinfo is UTC


def test_the_autumn_change_day_in_berlin_has_25_hours(berlin):
    # 2026-10-25: clocks go from 03:00 CEST (UTC+2) back to 02:00 CET (UTC+1).
    start, end = business_day_bounds(date(2026, 10, 25))
    assert start == datetime(2026, 10, 24, 22, tzinfo=UTC)
    assert end == datetime(2026, 10, 25, 23, tzinfo=UTC)
    assert end - start == 25 * HOUR


def test_half_past_eleven_utc_is_already_tomorrow_in_shanghai(shanghai):
    assert business_day_of(LATE_EVENING_UTC) == date(2026, 11, 2)
    assert business_day_of(datetime(2026, 11, 1, 15, 59, 59, tzinfo=UTC)) == date(2026, 11, 1)
    assert business_day_of(datetime(2026, 11, 1, 16, tzinfo=UTC)) == date(2026, 11, 2)


def test_the_same_moment_is_still_today_in_utc(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    assert business_day_of(LATE_EVENING_UTC) == date(2026, 11, 1)


def test_a_moment_in_another_zone_is_read_as_the_instant_it_is(shanghai):
    new_york_evening = datetime(2026, 11, 1, 18, 30, tzinfo=ZoneInfo("America/New_York"))  # = 23:30 UTC
    assert business_day_of(new_york_evening) == date(2026, 11, 2)


def test_a_day_holds_its_own_bounds_and_nothing_past_them(berlin):
    for day in (date(2026, 3, 29), date(2026, 10, 25), date(2028, 2, 29)):
        start, end = business_day_bounds(day)
        assert business_day_of(start) == day
        assert business_day_of(end - MICRO) == day
        assert business_day_of(end) == day + timedelta(days=1)
        assert business_day_of(start - MICRO) == day - timedelta(days=1)


def test_today_is_the_business_day_of_now(shanghai):
    assert business_today(now=LATE_EVENING_UTC) == date(2026, 11, 2)


def test_today_without_now_reads_the_application_clock(shanghai):
    with time_machine.travel(LATE_EVENING_UTC, tick=False):
        assert business_today() == date(2026, 11, 2)


def test_the_days_a_window_touches(berlin):
    start, end = business_day_bounds(date(2026, 3, 29))
    assert business_days(start, end) == [date(2026, 3, 29)]
    assert business_days(start, end + MICRO) == [date(2026, 3, 29), date(2026, 3, 30)]
    assert business_days(start - MICRO, end) == [date(2026, 3, 28), date(2026, 3, 29)]
    assert business_days(start, start + MICRO) == [date(2026, 3, 29)]


def test_an_empty_or_backward_window_touches_no_day(berlin):
    moment = datetime(2026, 3, 29, 12, tzinfo=UTC)
    assert business_days(moment, moment) == []
    assert business_days(moment, moment - HOUR) == []


def test_the_days_of_a_window_are_clamped_to_the_supported_window(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    year_one = datetime(1, 1, 1, tzinfo=UTC)
    assert business_days(year_one, datetime(2000, 1, 3, tzinfo=UTC)) == [date(2000, 1, 1), date(2000, 1, 2)]
    assert business_days(year_one, datetime(1999, 1, 1, tzinfo=UTC)) == []


# ---- months ----------------------------------------------------------------------------------------------

def test_december_runs_into_the_next_year():
    assert month_days(date(2026, 12, 15)) == (date(2026, 12, 1), date(2027, 1, 1))
    assert month_days(date(2026, 12, 31)) == (date(2026, 12, 1), date(2027, 1, 1))


def test_the_month_before_january_is_last_december():
    assert previous_month(date(2027, 1, 1)) == date(2026, 12, 1)
    assert previous_month(date(2027, 1, 31)) == date(2026, 12, 1)


def test_february_of_a_leap_year_has_29_days():
    first, following = month_days(date(2028, 2, 29))
    assert (first, following) == (date(2028, 2, 1), date(2028, 3, 1))
    assert (following - first).days == 29
    assert previous_month(date(2028, 3, 31)) == date(2028, 2, 1)


def test_february_of_a_common_year_has_28_days():
    first, following = month_days(date(2027, 2, 1))
    assert (following - first).days == 28


def test_a_month_of_31_days():
    assert month_days(date(2026, 10, 31)) == (date(2026, 10, 1), date(2026, 11, 1))


# ---- epoch milliseconds ----------------------------------------------------------------------------------

def test_epoch_ms_of_the_epoch_and_of_a_day():
    assert epoch_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    # 1970-01-01 → 2026-11-02: 56 years with 14 leap days, then 305 days into 2026 = 20,759 days.
    assert epoch_ms(datetime(2026, 11, 2, tzinfo=UTC)) == 20_759 * 86_400_000 == 1_793_577_600_000


def test_epoch_ms_keeps_milliseconds_and_ignores_the_zone():
    assert epoch_ms(datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)) == 1_500
    shanghai_morning = datetime(2026, 11, 2, 8, tzinfo=ZoneInfo("Asia/Shanghai"))  # = 00:00 UTC
    assert epoch_ms(shanghai_morning) == 1_793_577_600_000


def test_days_through_includes_both_ends_and_a_week_runs_monday_to_sunday():
    assert days_through(date(2026, 2, 27), date(2026, 3, 2)) == [
        date(2026, 2, 27), date(2026, 2, 28), date(2026, 3, 1), date(2026, 3, 2)]
    assert days_through(date(2026, 3, 2), date(2026, 3, 1)) == []
    assert week_days(date(2026, 12, 3)) == week_days(date(2026, 11, 30)) == (date(2026, 11, 30), date(2026, 12, 6))
    assert week_days(date(2026, 12, 6)) == (date(2026, 11, 30), date(2026, 12, 6))
