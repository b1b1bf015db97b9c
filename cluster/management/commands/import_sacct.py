from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from cluster.job_import import ImportRefused
from cluster.sacct import OPTIONAL, REQUIRED, import_sacct


class Command(BaseCommand):
    help = (
        "Import Slurm jobs from `sacct --allocations --duplicates --parsable2 "
        f"--format={','.join(REQUIRED + OPTIONAL)}` output (steps skipped, array tasks and requeued runs kept "
        "apart, GPUs from AllocTRES, unplaced). Accounts map to teams through Slurm-account identities or a team "
        "slug; unmapped accounts are reported, or created as teams with --create-teams. Bad rows are reported "
        "with their line and reason and the good rows kept, unless --strict. Importing again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--tz", default=None,
            help="time zone of sacct's times (default: the business time zone, CARDHOUR_BUSINESS_TIME_ZONE)",
        )
        parser.add_argument("--create-teams", action="store_true", help="create a team for each unmapped account")
        parser.add_argument("--strict", action="store_true", help="reject the whole file if any row is bad")

    def handle(self, *args, file: Path, tz: str | None, create_teams: bool, strict: bool, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        tz = tz or settings.CARDHOUR_BUSINESS_TIME_ZONE
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise CommandError(f"--tz: {tz!r} is not a time zone (e.g. UTC, Asia/Shanghai)") from None
        try:
            report = import_sacct(file, tz=tz, create_teams=create_teams, strict=strict)
        except ImportRefused as error:
            raise CommandError(str(error)) from None
        for line, reason in report.rejected:
            self.stderr.write(f"line {line}: {reason}")
        self.stdout.write(report.summary())
