from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from cluster.jobs.observed.scan import observed_scan


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{text!r} is not an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise CommandError(f"{text!r} needs a UTC offset, e.g. 2026-11-02T00:00:00+08:00")
    return moment


class Command(BaseCommand):
    help = (
        "Turn the processes in stored samples into observed allocations and jobs. Without --start/--end "
        "each node is read from where the last scan left it (what the periodic task does); with them, "
        "every sample in (start, end] is rescanned, e.g. after import_samples loaded history."
    )

    def add_arguments(self, parser):
        parser.add_argument("--start", type=_instant, help="ISO-8601 with offset")
        parser.add_argument("--end", type=_instant, help="ISO-8601 with offset")

    def handle(self, *args, start=None, end=None, **options):
        if (start is None) != (end is None):
            raise CommandError("--start and --end go together")
        if start is not None and end <= start:
            raise CommandError("--end must be after --start")
        result = observed_scan(start=start, end=end)
        if result.get("skipped"):
            raise CommandError("another observed-usage scan is running; try again when it ends")
        self.stdout.write(", ".join(f"{key} {value}" for key, value in result.items()))
