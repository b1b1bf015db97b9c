from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from accounting.usage.replay import finish_import
from cluster.telemetry.importer import ImportRefused, import_samples


class Command(BaseCommand):
    help = (
        "Import GPU samples from the generic CSV (ts,node,gpu,util_gpu[,mem_used_mib,power_w,interval_s]"
        "[,gpu_model][,sm_active,sm_occupancy,tensor_active,dram_active,fp16_active,fp32_active,fp64_active,"
        "nvlink_rx_mibs,nvlink_tx_mibs,pcie_rx_mibs,pcie_tx_mibs]; the NVML GPM columns are optional, percent "
        "and MiB/s, an empty cell unknown). Unknown nodes and GPUs are created and listed. Bad rows are reported with their line "
        "and reason and the good rows kept, unless --strict. Then the rollups and daily aggregates are brought "
        "up to date in this process (--defer leaves them to the Celery worker). Importing the same file again "
        "changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--strict", action="store_true", help="reject the whole file if any row is bad")
        parser.add_argument("--defer", action="store_true",
                            help="leave the rollups and daily aggregates to the Celery worker")

    def handle(self, *args, file: Path, strict: bool, defer: bool, **options):
        if not file.is_file():
            raise CommandError(f"{file}: no such file")
        try:
            report = import_samples(file, strict=strict)
        except ImportRefused as error:
            raise CommandError(str(error)) from None
        for line, reason in report.rejected:
            self.stderr.write(f"line {line}: {reason}")
        for line, text in report.warnings:
            self.stderr.write(f"line {line}: warning: {text}")
        self.stdout.write(report.summary())
        finish_import(self, defer=defer)
