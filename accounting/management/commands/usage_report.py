"""``manage.py usage_report``: the usage report (accounting.usage.report) as CSV, XLSX or JSON.

CSV and JSON go to stdout unless ``--output FILE``; XLSX is binary and needs ``--output``. The command
line sees every team, the unattributed row included. When work is pending over the window (rollups or
daily aggregates the worker has not done, see accounting.usage.report) a warning goes to stderr, so the
figures on stdout are never taken as final without saying so."""

import io
import json
from datetime import datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounting.money.exports import write_csv, write_xlsx
from accounting.usage.report import BY_CHOICES, TIME_COLUMNS, UsageReportRefused, usage_report

FORMATS = ("csv", "xlsx", "json")
EXAMPLE = "2026-11-01T00:00:00+08:00"


def parse_moment(option: str, text: str) -> datetime:
    """An ISO-8601 time with a UTC offset, or a CommandError naming ``--option``."""
    try:
        parsed = parse_datetime(text.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        raise CommandError(f"--{option}: {text!r} is not an ISO-8601 time such as {EXAMPLE}")
    if timezone.is_naive(parsed):
        raise CommandError(f"--{option}: {text!r} needs a UTC offset, e.g. {EXAMPLE}")
    return parsed


class Command(BaseCommand):
    help = (
        "Card-hours over [--start, --end) by team, project, GPU model, node or GPU: allocated, busy, idle, "
        "unmeasured, and for GPU groupings unallocated, down and capacity. Times are ISO-8601 with a UTC offset "
        f"on whole minutes (e.g. {EXAMPLE}); whole business days come from the daily aggregates, partial days "
        "are computed exactly. CSV and JSON go to stdout unless --output; XLSX needs --output. Work still "
        "pending over the window (rollups, daily aggregates) is warned about on stderr."
    )

    def add_arguments(self, parser):
        parser.add_argument("--start", required=True, help=f"first instant, e.g. {EXAMPLE}")
        parser.add_argument("--end", required=True, help="instant after the last (exclusive)")
        parser.add_argument("--by", choices=BY_CHOICES, default="team", help="grouping (default: team)")
        parser.add_argument("--format", choices=FORMATS, default="csv", dest="file_format",
                            help="output format (default: csv)")
        parser.add_argument("--output", type=Path, help="write to this file instead of stdout")

    def handle(self, *args, start: str, end: str, by: str, file_format: str, output: Path | None, **options):
        start_at, end_at = parse_moment("start", start), parse_moment("end", end)
        if file_format == "xlsx" and output is None:
            raise CommandError("--output: an XLSX file is binary; name the file to write with --output FILE")
        if output is not None and not output.parent.is_dir():
            raise CommandError(f"--output: the folder {output.parent} does not exist")
        try:
            report = usage_report(start=start_at, end=end_at, by=by)
        except UsageReportRefused as refused:
            raise CommandError(f"--{refused.field}: {refused.message}") from None
        self._warn(report, end_at)
        if file_format == "xlsx":
            write_xlsx(report.columns, report.rows, output, sheet_title=f"usage by {by}", time_columns=TIME_COLUMNS)
        else:
            text = io.StringIO(newline="")
            if file_format == "csv":
                write_csv(report.columns, report.rows, text)
            else:
                body = report.as_json()
                text.write(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
            if output is None:
                self.stdout.write(text.getvalue(), ending="")
                return
            output.write_text(text.getvalue(), encoding="utf-8", newline="")
        self.stdout.write(f"Wrote {len(report.rows)} rows to {output}.")

    def _warn(self, report, end: datetime) -> None:
        if report.pending_buckets:
            self.stderr.write(self.style.WARNING(
                f"Warning: {report.pending_buckets} buckets pending: figures after "
                f"{report.pending_from.isoformat()} may change (rollups or daily aggregates not done yet; run "
                "the Celery worker, or import without --defer)."))
        if report.data_complete_to is None:
            self.stderr.write(self.style.WARNING(
                "Note: data_complete_to is empty: some node in service has never been collected, so its figures "
                "may be incomplete."))
        elif report.data_complete_to < end:
            self.stderr.write(self.style.WARNING(
                f"Note: data complete to {report.data_complete_to.isoformat()}: later minutes may still be "
                "missing samples (read as unmeasured or unallocated)."))
