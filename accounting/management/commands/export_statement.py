"""``manage.py export_statement 2026-11 --format csv|xlsx [--output FILE] [--revision N]``: a statement's lines
and team totals (accounting.money.statements.statement_rows) as CSV or XLSX, every team included.

The statement is the period's closed one unless ``--revision`` names another; a reopened period (no
closed statement) exports its latest revision, with a note on stderr. CSV goes to stdout unless
``--output``; XLSX is binary and needs ``--output``."""

import io
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from accounting.models import Statement, StatementStatus
from accounting.money.close import parse_period
from accounting.money.exports import write_csv, write_xlsx
from accounting.money.statements import COLUMNS, period_label, statement_rows


def period_argument(text: str):
    """The ``period`` argument as the month's first day, or a CommandError naming it."""
    try:
        return parse_period(text)
    except ValueError as error:
        raise CommandError(f"period: {error}") from None


def choose_statement(period, revision: int | None) -> tuple[Statement, str | None]:
    """(the statement to export, a note for stderr or None)."""
    label = period_label(period)
    statements = list(Statement.objects.filter(period=period).order_by("revision"))
    if not statements:
        raise CommandError(f"period: {label} has no statement; close it first with manage.py close_period {label}")
    if revision is not None:
        for statement in statements:
            if statement.revision == revision:
                return statement, None
        known = ", ".join(f"r{s.revision}" for s in statements)
        raise CommandError(f"--revision: {label} has no revision {revision} (it has {known})")
    for statement in statements:
        if statement.status == StatementStatus.CLOSED:
            return statement, None
    latest = statements[-1]
    return latest, f"{label} is reopened: exporting its latest revision, r{latest.revision}."


class Command(BaseCommand):
    help = (
        "Export a period's statement (lines per team, project, GPU model, kind and rate interval, and a totals "
        "row per team) as CSV or XLSX, with the columns " + ", ".join(COLUMNS) + ". Default: the period's "
        "closed statement. CSV goes to stdout unless --output; XLSX needs --output."
    )

    def add_arguments(self, parser):
        parser.add_argument("period", help="the month, YYYY-MM (e.g. 2026-11)")
        parser.add_argument("--format", choices=("csv", "xlsx"), default="csv", dest="file_format",
                            help="output format (default: csv)")
        parser.add_argument("--output", type=Path, help="write to this file instead of stdout")
        parser.add_argument("--revision", type=int, help="export this revision (default: the closed statement)")

    def handle(self, *args, period: str, file_format: str, output: Path | None, revision: int | None, **options):
        first = period_argument(period)
        if file_format == "xlsx" and output is None:
            raise CommandError("--output: an XLSX file is binary; name the file to write with --output FILE")
        if output is not None and not output.parent.is_dir():
            raise CommandError(f"--output: the folder {output.parent} does not exist")
        statement, note = choose_statement(first, revision)
        if note:
            self.stderr.write(note)
        rows = statement_rows(statement)
        label = f"{period_label(statement.period)} r{statement.revision}"
        if file_format == "xlsx":
            write_xlsx(COLUMNS, rows, output, sheet_title=f"Statement {label}")
        else:
            text = io.StringIO(newline="")
            write_csv(COLUMNS, rows, text)
            if output is None:
                self.stdout.write(text.getvalue(), ending="")
                return
            output.write_text(text.getvalue(), encoding="utf-8", newline="")
        self.stdout.write(f"Wrote {len(rows)} rows of statement {label} to {output}.")
