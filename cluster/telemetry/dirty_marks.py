"""Dirty marks: every write of samples marks the minute buckets its rows cover, so the rollup workers
(``cluster/telemetry/rollups.py``) recompute them. Buckets are UTC minutes ``[start, start + 60 s)``; a
record covers ``[ts - interval_s, ts)``.

How samples get in (collector, importer)
----------------------------------------
Every path that writes the ``Sample`` table must mark the minute buckets its new rows overlap in the
same statement, so a rollup can never miss a committed sample. Use :func:`insert_samples_marking_dirty`
with a SELECT that yields :data:`SAMPLE_COLUMNS` in order, inside the transaction that also stores the
cursor::

    cols = ", ".join(SAMPLE_COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE sample_in (LIKE {SAMPLE}) ON COMMIT DROP")
        with cursor.copy(f"COPY sample_in ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        inserted, dirtied = insert_samples_marking_dirty(cursor, source_sql=f"SELECT {cols} FROM sample_in")

A repeated record (same GPU and ``ts``) is skipped and marks nothing (DESIGN.md §3). A statement that
composes its own insert (``cluster/telemetry/ingest.py``) ends with :func:`dirty_marks_sql` named after its CTE
that returns the inserted ``gpu_id, ts, interval_s`` (:data:`DIRTY_FROM_INSERTED_SQL` for a CTE
``ins``), or with its own marks; either way it must keep :data:`MARK_CONFLICT`, not ``DO NOTHING``.
Rows written any other way (fixtures, repairs) are marked with :func:`mark_dirty_range`, or
``rollups.recompute_range`` marks and processes.

The writer's side of concurrency
--------------------------------
A writer that finds its bucket already dirty locks that row (``ON CONFLICT DO UPDATE … WHERE false``
locks without writing) until it commits: a rollup worker then skips the row instead of recomputing
without the writer's uncommitted samples and deleting the mark. A writer whose bucket a worker holds
waits for it, then marks the bucket afresh. Marks are inserted in (gpu, bucket) order, so two writers
cannot deadlock. (The worker's side is in ``rollups.py``.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

from agents.records import INTERVAL_S_RANGE
from cluster.telemetry.models import DirtyBucket, RollupLevel, Sample

SAMPLE = Sample._meta.db_table
DIRTY = DirtyBucket._meta.db_table

MAX_INTERVAL_S = INTERVAL_S_RANGE[1]  # no stored record reaches further back (ingest's rule)
# The Sample table's columns, in the model's order: what a source SELECT yields.
SAMPLE_COLUMNS = tuple(f.column for f in Sample._meta.concrete_fields)

EPOCH = "timestamptz '1970-01-01 00:00:00+00'"  # date_bin origin: buckets never depend on the session zone

# Locks an existing mark until commit instead of writing a new row version (see module docstring).
MARK_CONFLICT = "ON CONFLICT (level, gpu_id, bucket) DO UPDATE SET level = EXCLUDED.level WHERE false"


def minutes_of(alias: str) -> str:
    """SQL set of the minute starts that the record ``alias`` touches (its last second ends at ts)."""
    return (
        f"generate_series(date_bin('60 seconds', {alias}.ts - {alias}.interval_s * interval '1 second', {EPOCH}),"
        f" date_bin('60 seconds', {alias}.ts - interval '1 microsecond', {EPOCH}), interval '60 seconds')"
    )


def dirty_marks_sql(relation: str = "ins") -> str:
    """An ``INSERT`` marking dirty the minute buckets of the rows of ``relation`` (a CTE or table with
    ``gpu_id, ts, interval_s``): the tail of a statement whose CTE inserted samples."""
    return f"""
        INSERT INTO {DIRTY} (level, gpu_id, bucket)
        SELECT DISTINCT '{RollupLevel.MINUTE.value}', r.gpu_id, m.bucket
        FROM {relation} r CROSS JOIN LATERAL {minutes_of("r")} AS m(bucket)
        ORDER BY 2, 3
        {MARK_CONFLICT}
    """  # noqa: S608 (a CTE name from the calling code; values are bound parameters)


DIRTY_FROM_INSERTED_SQL = dirty_marks_sql("ins")


def gpu_range_marks_sql(ranges: str) -> str:
    """An ``INSERT`` marking dirty, per GPU of ``ranges`` (a relation of ``gpu_id, first_s, last_s``, the first
    and last second its new records cover, timestamptz), every minute from the one holding ``first_s`` to
    the one holding ``last_s``: one range per GPU instead of a row per record (a gap inside a page only
    dirties minutes whose recomputation finds nothing). Marks go in (gpu, bucket) order and lock the ones
    that exist (:data:`MARK_CONFLICT`). The collector's two paths end with it."""
    return f"""
        INSERT INTO {DIRTY} (level, gpu_id, bucket)
        SELECT '{RollupLevel.MINUTE.value}', r.gpu_id, b
        FROM {ranges} r,
             generate_series(date_bin('1 minute', r.first_s, {EPOCH}), date_bin('1 minute', r.last_s, {EPOCH}),
                             interval '1 minute') AS b
        ORDER BY 2, 3
        {MARK_CONFLICT}
    """  # noqa: S608 (a relation from the calling code; values are bound parameters)


def insert_samples_marking_dirty(cursor, *, source_sql: str, params=None) -> tuple[int, int]:
    """Insert the rows of ``source_sql`` (columns :data:`SAMPLE_COLUMNS`, in order) that are new and
    mark their minute buckets dirty, in one statement; returns (samples inserted, buckets newly marked)."""
    cols = ", ".join(SAMPLE_COLUMNS)
    cursor.execute(
        f"""
        WITH ins AS (
            INSERT INTO {SAMPLE} ({cols}) SELECT * FROM ({source_sql}) AS src
            ON CONFLICT (gpu_id, ts) DO NOTHING
            RETURNING gpu_id, ts, interval_s
        ), marked AS ({DIRTY_FROM_INSERTED_SQL} RETURNING 1)
        SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM marked)
        """,  # noqa: S608 (source_sql is the caller's SQL, not data; values are bound parameters)
        params,
    )
    inserted, marked = cursor.fetchone()
    return inserted, marked


def mark_dirty_range(*, start: datetime, end: datetime, gpu_ids: list[int] | None = None) -> int:
    """Mark dirty every minute bucket in ``[floor(start), end)`` that a stored sample overlaps;
    returns the number of buckets newly marked."""
    sql = f"""
        INSERT INTO {DIRTY} (level, gpu_id, bucket)
        SELECT DISTINCT '{RollupLevel.MINUTE.value}', s.gpu_id, m.bucket
        FROM {SAMPLE} s CROSS JOIN LATERAL {minutes_of("s")} AS m(bucket)
        WHERE s.ts > %(lo)s AND s.ts < %(end)s + interval '{MAX_INTERVAL_S} seconds'
          AND s.ts - s.interval_s * interval '1 second' < %(end)s
          AND (%(gpu_ids)s::bigint[] IS NULL OR s.gpu_id = ANY(%(gpu_ids)s::bigint[]))
          AND m.bucket >= %(lo)s AND m.bucket < %(end)s
        ORDER BY 2, 3
        {MARK_CONFLICT}
    """  # noqa: S608 (only module constants are interpolated)
    params = {"lo": floor_minute(as_utc(start)), "end": as_utc(end), "gpu_ids": gpu_ids}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


# --- Minute buckets -----------------------------------------------------------------------------------


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive one is refused (rollup times are aware)."""
    if timezone.is_naive(moment):
        raise ValueError(f"rollup times must be aware (UTC), not naive: {moment!r}")
    return moment.astimezone(UTC)


def floor_minute(moment: datetime) -> datetime:
    """Start of the UTC minute holding ``moment``."""
    return as_utc(moment).replace(second=0, microsecond=0)


def ceil_minute(moment: datetime) -> datetime:
    """``moment`` if it starts a minute, else the start of the next one."""
    floor = floor_minute(moment)
    return floor if floor == moment else floor + timedelta(minutes=1)
