"""What storing one page of records did (``cluster.telemetry.ingest``, ``cluster.telemetry.clean_page``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IngestResult:
    """What one page (or import chunk) did: records seen, stored, rejected by reason, and the GPUs
    that reported new XID / double-bit ECC events."""

    seen: int = 0
    stored: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    max_seq: int | None = None
    newest_ts: int | None = None
    gpu_errors: dict[int, tuple[int, int]] = field(default_factory=dict)
    rejected_lines: list[tuple[int, str]] = field(default_factory=list)  # records carrying a "line" (imports)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())
