from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from cluster.job_import import CSV_OPTIONAL, CSV_REQUIRED, ImportRefused, import_jobs_csv
from cluster.models import JobSource


class Command(BaseCommand):
    help = (
        f"Import jobs from the generic CSV ({','.join(CSV_REQUIRED)}, optional {','.join(CSV_OPTIONAL)}). "
        "team and project are slugs; gpu_model a short or NVML name; node+gpu_indices place the job on those "
        "GPUs, else it is unplaced; times ISO-8601 with an offset or epoch seconds (empty start: never started, "
        "empty end: running). Jobs are keyed by (source, job_id, start_time). Bad rows are reported with their "
        "line and reason and the good rows kept, unless --strict. Importing the same file again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--strict", action="store_true", help="reject the whole file if any row is bad")
        sources = [s for s in JobSource.values if s != JobSource.OBSERVED]
        parser.add_argument(
            "--source", choices=sources, default=JobSource.CSV,
            help="the jobs' source (default csv); a scheduler's name merges the rows with its other records",
        )

    def handle(self, *args, file: Path, strict: bool, source: str, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            report = import_jobs_csv(file, source=source, strict=strict)
        except ImportRefused as error:
            raise CommandError(str(error)) from None
        for line, reason in report.rejected:
            self.stderr.write(f"line {line}: {reason}")
        self.stdout.write(report.summary())
