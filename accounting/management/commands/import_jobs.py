from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from accounting.usage.replay import finish_import
from cluster.jobs.imports.jobs_csv import CSV_OPTIONAL, CSV_REQUIRED, ImportRefused, import_jobs_csv
from cluster.models import JobSource


class Command(BaseCommand):
    help = (
        f"Import jobs from the generic CSV ({','.join(CSV_REQUIRED)}, optional {','.join(CSV_OPTIONAL)}). "
        "team and project are slugs (--create-teams creates those that do not exist); gpu_model an NVML name, "
        "short name or GPU model alias (a name that matches none creates a model, reported); node+gpu_indices "
        "place the job on those GPUs, else it is unplaced; times ISO-8601 with an offset or epoch seconds (empty "
        "start: never started, empty end: running). Jobs are keyed by (source, job_id, start_time). Bad rows are "
        "reported with their line and reason and the good rows kept, unless --strict. Then the daily aggregates "
        "are brought up to date in this process (--defer leaves them to the Celery worker). Importing the same "
        "file again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--strict", action="store_true", help="reject the whole file if any row is bad")
        parser.add_argument("--create-teams", action="store_true",
                            help="create the teams and projects that the file names and that do not exist")
        parser.add_argument("--defer", action="store_true",
                            help="leave the rollups and daily aggregates to the Celery worker")
        sources = [s for s in JobSource.values if s != JobSource.OBSERVED]
        parser.add_argument(
            "--source", choices=sources, default=JobSource.CSV,
            help="the jobs' source (default csv); a scheduler's name merges the rows with its other records",
        )

    def handle(self, *args, file: Path, strict: bool, create_teams: bool, defer: bool, source: str, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            report = import_jobs_csv(file, source=source, strict=strict, create_teams=create_teams)
        except ImportRefused as error:
            raise CommandError(str(error)) from None
        for line, reason in report.rejected:
            self.stderr.write(f"line {line}: {reason}")
        for line, text in report.warnings:
            self.stderr.write(f"line {line}: warning: {text}")
        self.stdout.write(report.summary())
        finish_import(self, defer=defer)
