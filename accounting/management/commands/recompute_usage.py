"""``manage.py recompute_usage``: rebuild the daily usage aggregates of a range (accounting.usage.services)."""

from django.core.management.base import BaseCommand, CommandError

from accounting.management.commands.usage_report import EXAMPLE, parse_moment
from accounting.usage.services import usage_recompute
from core.timewindow import OutsideWindow, check_in_window, window_message


class Command(BaseCommand):
    help = (
        "Rebuild the daily usage aggregates of every business day that [--start, --end) touches, up to today, "
        f"from the minute rollups, jobs, bookings and node statuses. Times are ISO-8601 with a UTC offset (e.g. "
        f"{EXAMPLE}). Prints the days rebuilt; running it twice gives the same rows."
    )

    def add_arguments(self, parser):
        parser.add_argument("--start", required=True, help=f"first instant, e.g. {EXAMPLE}")
        parser.add_argument("--end", required=True, help="instant after the last (exclusive)")

    def handle(self, *args, start: str, end: str, **options):
        start_at, end_at = parse_moment("start", start), parse_moment("end", end)
        for name, moment in (("start", start_at), ("end", end_at)):
            try:
                check_in_window(moment, field=name)
            except OutsideWindow as error:
                raise CommandError(f"--{name}: {window_message(error)}") from None
        if end_at <= start_at:
            raise CommandError("--end: must be after --start")
        days = usage_recompute(start=start_at, end=end_at)
        for day in days:
            self.stdout.write(day.isoformat())
        self.stdout.write(f"Rebuilt {len(days)} business day(s).")
