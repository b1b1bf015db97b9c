from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from cluster.importer import ImportRefused, import_samples


class Command(BaseCommand):
    help = (
        "Import GPU samples from the generic CSV (ts,node,gpu,util_gpu[,mem_used_mib,power_w,interval_s]"
        "[,gpu_model]). Unknown nodes and GPUs are created. Bad rows are reported with their line and "
        "reason and the good rows kept, unless --strict. Importing the same file again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--strict", action="store_true", help="reject the whole file if any row is bad")

    def handle(self, *args, file: Path, strict: bool, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            report = import_samples(file, strict=strict)
        except ImportRefused as error:
            raise CommandError(str(error)) from None
        for line, reason in report.rejected:
            self.stderr.write(f"line {line}: {reason}")
        self.stdout.write(report.summary())
