"""The clean page's path into the ``Sample`` table: what the collector does with almost every page.

A page is *clean* when every line is a record of the right JSON types within the ranges of
``agents/records.py``, of a GPU the page may write, inside the time window, not already stored, and
later than the same GPU's previous record in the page. Such a page needs no rejection reasons and no
conflict handling, so it skips the SQL statement of ``cluster.telemetry.ingest``: msgspec decodes and
checks every line in C (the types and ranges are declared once, from ``agents.records``), and the rows
go into the table by one binary ``COPY`` (PostgreSQL's batched insert), followed by one statement that
marks their minutes dirty. The agent's and the importer's pages are clean unless something is wrong
with them; measured by ``make bench`` (issue 18), this path costs half of the SQL one.

Anything else (one line of another type or range, an unknown GPU, a repeated key, a row already
stored, or the ``COPY`` meeting a row another writer stored meanwhile) makes :func:`store_clean_page`
write nothing and answer None, and the caller sends the whole page through the SQL statement, which
gives every record its reason and skips repeats. So the reasons have one source, and a page stores
exactly what the SQL path would store: ``tests/cluster/telemetry/test_clean_page.py`` holds the two
paths to the same result.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

import msgspec
import psycopg
from django.db import DatabaseError, connection, transaction

from agents.records import FLOAT_RANGES, INT_RANGES, INTERVAL_S_RANGE
from cluster.inventory.models import Gpu
from cluster.telemetry.dirty_marks import gpu_range_marks_sql
from cluster.telemetry.models import Sample
from cluster.telemetry.stored import SAMPLE_COLUMNS, VALUE_COLUMNS, IngestResult, column_type

SAMPLE = Sample._meta.db_table
GPU = Gpu._meta.db_table

BIGINT = msgspec.Meta(ge=-(2**63), le=2**63 - 1)


def _record_fields() -> list[tuple]:
    """The record as msgspec checks it: required fields first, then the measurements (each null or a
    number in its range), then ``processes`` kept as raw JSON text."""
    shortest, longest = INTERVAL_S_RANGE
    fields: list[tuple] = [
        ("seq", Annotated[int, BIGINT] | None, None),
        ("line", Annotated[int, BIGINT] | None, None),
        ("ts", Annotated[int, BIGINT]),
        ("gpu_uuid", str),
        ("interval_s", Annotated[int, msgspec.Meta(ge=shortest, le=longest)]),
    ]
    fields += [(name, Annotated[float, msgspec.Meta(ge=lo, le=hi)] | None, None) for name, (lo, hi) in FLOAT_RANGES.items()]
    fields += [(name, Annotated[int, msgspec.Meta(ge=lo, le=hi)] | None, None) for name, (lo, hi) in INT_RANGES.items()]
    fields.append(("processes", msgspec.Raw, msgspec.Raw(b"null")))
    return fields


# Fields in SAMPLE_COLUMNS' order after the four leading ones (the struct is built from the same
# agents.records tuples), so a record's tuple slices into its row.
CleanRecord = msgspec.defstruct("CleanRecord", _record_fields(), kw_only=True, gc=False)
DECODER = msgspec.json.Decoder(CleanRecord)
_astuple = msgspec.structs.astuple
_from_timestamp = datetime.fromtimestamp

# The COPY's types, as psycopg names them. ``processes`` travels as jsonb's binary form (a version byte,
# then the JSON text) under bytea's dumper, which sends bytes as they are: msgspec kept the text.
_PG_TYPE = {"bigint": "int8", "integer": "int4", "smallint": "int2", "double precision": "float8"}
COPY_TYPES = (
    "int8", "timestamptz",
    *(_PG_TYPE[column_type(name)] for name in VALUE_COLUMNS),
    "bytea",
)
COPY_SQL = f"COPY {SAMPLE} ({', '.join(SAMPLE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
JSONB_VERSION = b"\x01"
XID, ECC = SAMPLE_COLUMNS.index("xid_count"), SAMPLE_COLUMNS.index("ecc_dbe_count")

# The same marks as the SQL path's: each GPU's range of new seconds, from three arrays (epoch seconds).
MARKS_SQL = gpu_range_marks_sql(
    "(SELECT gpu_id, to_timestamp(first_s) AS first_s, to_timestamp(last_s) AS last_s"
    " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS u(gpu_id, first_s, last_s))"
)


def decode_clean_page(blob: bytes) -> list | None:
    """Every line of ``blob`` as a checked record, or None when any line is not clean (or is blank)."""
    try:
        records = DECODER.decode_lines(blob)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    lines = blob.count(b"\n") + (0 if blob.endswith(b"\n") else 1)
    return records if records and len(records) == lines else None


class NotClean(Exception):
    """A record the decoder could not judge (its GPU, time, order or ``processes``) is not clean."""


def _processes(raw: msgspec.Raw) -> bytes | None:
    """The stored form of ``processes``: jsonb's binary form of a non-empty list, None for null or an empty
    list (as the SQL path stores them); any other JSON type is not clean."""
    text = bytes(raw)
    if text == b"null":
        return None
    if text[:1] != b"[":
        raise NotClean("processes")
    if text[1:].lstrip(b" \t\r\n")[:1] == b"]":
        return None
    return JSONB_VERSION + text


def store_clean_page(
    records: list, *, node_id: int | None, oldest_ts: int, newest_ts: int, need_seq: bool,
    timings: dict[str, float] | None = None,
) -> IngestResult | None:
    """Store the decoded records of a clean page and mark their minutes dirty; call inside a transaction.

    Returns the page's ``IngestResult``, or None having written nothing when the page is not clean after
    all (see the module docstring). The rows are checked as they stream into the ``COPY``, in a savepoint:
    a record found not clean there, or a row the primary key finds stored already, ends the ``COPY`` and
    rolls it back."""
    started = time.perf_counter()
    uuids = list({record.gpu_uuid for record in records})
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT uuid, id FROM {GPU} WHERE uuid = ANY(%s) AND (%s::bigint IS NULL OR node_id = %s)",  # noqa: S608
            [uuids, node_id, node_id],
        )
        gpu_ids = dict(cursor.fetchall())
        if len(gpu_ids) < len(uuids):
            return None
        page = _Page()
        try:
            with transaction.atomic(), cursor.cursor.copy(COPY_SQL) as copy:
                copy.set_types(COPY_TYPES)
                write_row = copy.write_row
                for row in page.rows(records, gpu_ids, oldest_ts=oldest_ts, newest_ts=newest_ts, need_seq=need_seq):
                    write_row(row)
        except (NotClean, psycopg.IntegrityError, psycopg.DataError, DatabaseError):
            return None  # nothing was kept: the SQL path sorts the page out
        copied = time.perf_counter()
        gpus = list(page.last_ts)
        cursor.execute(MARKS_SQL, [gpus, [page.first_s[g] for g in gpus], [page.last_ts[g] - 1 for g in gpus]])
    if timings is not None:
        timings["check+copy"] = timings.get("check+copy", 0.0) + copied - started
        timings["marks"] = timings.get("marks", 0.0) + time.perf_counter() - copied
    return IngestResult(
        seen=len(records), stored=len(records), max_seq=page.max_seq, newest_ts=max(page.last_ts.values()),
        gpu_errors={gpu_id: (xid, ecc) for gpu_id, (xid, ecc) in page.errors.items()},
    )


class _Page:
    """What the stored rows add up to: per GPU its first covered second and last ``ts``, its new XID and
    double-bit ECC events; the page's highest ``seq``."""

    def __init__(self) -> None:
        self.first_s: dict[int, int] = {}
        self.last_ts: dict[int, int] = {}
        self.errors: dict[int, list[int]] = {}
        self.max_seq: int | None = None

    def rows(self, records: list, gpu_ids: dict[str, int], *, oldest_ts: int, newest_ts: int, need_seq: bool):
        """Each record's row for the COPY; raises NotClean at the first record that is not."""
        first_s, last_ts, errors = self.first_s, self.last_ts, self.errors
        for record in records:
            values = _astuple(record)
            seq, ts = values[0], values[2]
            if seq is None:
                if need_seq:
                    raise NotClean("seq")
            elif self.max_seq is None or seq > self.max_seq:
                self.max_seq = seq
            if not oldest_ts <= ts <= newest_ts:
                raise NotClean("ts")
            gpu_id = gpu_ids[values[3]]
            previous = last_ts.get(gpu_id)
            if previous is None:
                first_s[gpu_id] = ts - values[4]
            elif ts <= previous:
                raise NotClean("order")  # a repeated key, or records out of order
            elif ts - values[4] < first_s[gpu_id]:
                first_s[gpu_id] = ts - values[4]
            last_ts[gpu_id] = ts
            row = (gpu_id, _from_timestamp(ts, UTC), *values[4:-1], _processes(values[-1]))
            if row[XID] or row[ECC]:
                counts = errors.setdefault(gpu_id, [0, 0])
                counts[0] += row[XID] or 0
                counts[1] += row[ECC] or 0
            yield row
