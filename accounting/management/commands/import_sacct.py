from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounting.usage.replay import finish_import
from cluster.jobs.imports.sacct import FORMAT, import_sacct
from cluster.jobs.imports.shared import ImportRefused


class Command(BaseCommand):
    help = (
        "Import Slurm jobs from `sacct --allocations --duplicates --parsable2 "
        f"--format={','.join(FORMAT)}` output (steps skipped, array tasks and requeued runs kept apart, GPUs "
        "from AllocTRES, unplaced; a GRES type that names no GPU model or alias creates one, reported). Accounts "
        "map to teams through Slurm-account identities or a team slug, else the user through a unix-user "
        "identity (a capture without Account maps by user alone); unmapped rows are reported, or go to a team "
        "created per account with --create-teams, or to --default-team. Bad rows are reported with their line "
        "and reason and the good rows kept, unless --strict. Then the daily aggregates are brought up to date "
        "in this process (--defer leaves them to the Celery worker). Importing again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--tz", default=None,
            help="time zone of sacct's times (default: the business time zone, CARDHOUR_BUSINESS_TIME_ZONE)",
        )
        parser.add_argument("--create-teams", action="store_true", help="create a team for each unmapped account")
        parser.add_argument("--default-team", metavar="SLUG",
                            help="the team (slug) for rows that map to no team (after --create-teams)")
        parser.add_argument("--strict", action="store_true", help="reject the whole file if any row is bad")
        parser.add_argument("--defer", action="store_true",
                            help="leave the rollups and daily aggregates to the Celery worker")

    def handle(self, *args, file: Path, tz: str | None, create_teams: bool, default_team: str | None, strict: bool,
               defer: bool, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        tz = tz or settings.CARDHOUR_BUSINESS_TIME_ZONE
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise CommandError(f"--tz: {tz!r} is not a time zone (e.g. UTC, Asia/Shanghai)") from None
        try:
            report = import_sacct(file, tz=tz, create_teams=create_teams, strict=strict, default_team=default_team)
        except ImportRefused as error:
            raise CommandError(str(error)) from None
        for line, reason in report.rejected:
            self.stderr.write(f"line {line}: {reason}")
        for line, text in report.warnings:
            self.stderr.write(f"line {line}: warning: {text}")
        self.stdout.write(report.summary())
        finish_import(self, defer=defer)
