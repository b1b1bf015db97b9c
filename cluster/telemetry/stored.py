"""What a page of agent records becomes, shared by its two paths into the database (``cluster.telemetry.ingest``,
``cluster.telemetry.clean_page``): the ``Sample`` columns it fills, and the result of storing it."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

from agents.records import FLOAT_FIELDS, INT_FIELDS
from cluster.telemetry.models import Sample

VALUE_COLUMNS = ("interval_s", *FLOAT_FIELDS, *INT_FIELDS)  # stored as they come, under their own names
SAMPLE_COLUMNS = ("gpu_id", "ts", *VALUE_COLUMNS, "processes")  # what a page writes, in this order


def column_type(name: str) -> str:
    """The SQL type of a Sample column (``double precision``, ``integer``, ...)."""
    return Sample._meta.get_field(name).db_type(connection)


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
