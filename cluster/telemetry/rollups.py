"""Rollup maintenance: samples mark buckets dirty, workers recompute them from raw, in set-based SQL.

The values follow ``cluster/telemetry/rollup_math.py`` (the reference; its docstring has every rule). Buckets
are UTC minutes and hours ``[start, start + length)``; a record covers ``[ts - interval_s, ts)``. How
samples get in and mark their minutes dirty is ``cluster/telemetry/dirty_marks.py``; this module is the
workers' side: claiming marks, recomputing, the watermark, repairs and retention.
Long because the claim, the recompute SQL of both levels and retention share their statements here.

Concurrency
-----------
A worker claims dirty rows with ``DELETE … FOR UPDATE SKIP LOCKED`` (statement 1), then recomputes them
from raw in statement 2 of the same transaction, so two workers never take the same bucket and a crash
leaves it dirty. Statement 2 takes its snapshot after the claim: every collection that touched a
claimed mark before the claim has committed by then, so its samples are read. (One statement that
both claimed and recomputed read a snapshot taken before the claim, and could consume the mark of a
collection that committed in between without its samples: the fault run of issue 12.)

A writer that finds its bucket already dirty locks that mark until it commits, so a worker skips it
(``dirty_marks.MARK_CONFLICT``); a writer whose bucket a worker holds waits for it, then marks the
bucket afresh. Hours work the same way, with the minute workers as their writers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.records import GPM_FIELDS
from cluster.models import DirtyBucket, Gpu, GpuModel, HourRollup, MinuteRollup, Node, RollupLevel, Sample
from cluster.telemetry.dirty_marks import (
    EPOCH,
    MARK_CONFLICT,
    MAX_INTERVAL_S,
    as_utc,
    ceil_minute,
    floor_minute,
    insert_samples_marking_dirty,
    mark_dirty_range,
)
from cluster.telemetry.partitions import partitions_add, partitions_prune
from cluster.telemetry.rollup_math import GPM_COVERAGE_FIELD, GPM_MEANS

SAMPLE = Sample._meta.db_table
DIRTY = DirtyBucket._meta.db_table
MINUTES = MinuteRollup._meta.db_table
HOURS = HourRollup._meta.db_table

DEFAULT_BATCH = 5000

ROLLUP_COLUMNS = (
    "gpu_id", "bucket", "util_mean", "util_max", "util_mem_mean", "mem_used_max_mib", "power_mean_w",
    "energy_j", "temp_max_c", "xid_count", "ecc_dbe_count", "covered_s", "util_covered_s", "sample_count",
)
# The NVML GPM means and their seconds (issue 16). Kept apart from ROLLUP_COLUMNS, which other writers
# fill positionally (demo/telemetry.py): a row written without them has no GPM means and gpm_covered_s 0.
GPM_ROLLUP_COLUMNS = (*GPM_MEANS, "gpm_covered_s")
WRITTEN_COLUMNS = (*ROLLUP_COLUMNS, *GPM_ROLLUP_COLUMNS)  # what a recompute writes
# An hour's own columns (HourRollup), each from its minutes: the lowest minute with a utilization, and how
# many have one. The demo's history and the bench fill them with the same expressions.
HOUR_ONLY = {
    "util_min_minute": "min(util_mean) FILTER (WHERE util_covered_s > 0)",
    "util_minutes": "count(*) FILTER (WHERE util_covered_s > 0)",
}
HOUR_ONLY_COLUMNS = tuple(HOUR_ONLY)
HOUR_ONLY_SOURCES = ", ".join(HOUR_ONLY.values())


# --- Recomputing claimed buckets --------------------------------------------------------------------

# Statement 1 of a batch: claim (delete, locked until commit) up to ``limit`` marks of a level.
# Picked once (a materialized CTE): as IN (subquery) the LIMIT … SKIP LOCKED could rescan and claim all.
_CLAIM_SQL = f"""
    WITH picked AS MATERIALIZED (
        SELECT q.gpu_id, q.bucket FROM {DIRTY} q
        WHERE q.level = %(level)s
        ORDER BY q.gpu_id, q.bucket
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM {DIRTY} d USING picked p
    WHERE d.level = %(level)s AND d.gpu_id = p.gpu_id AND d.bucket = p.bucket
    RETURNING d.gpu_id, d.bucket"""  # noqa: S608 (only module constants are interpolated)

# Statement 2 reads the claimed buckets back from its parameters, under a snapshot taken after the claim.
_CLAIMED = """
    claimed AS (
        SELECT * FROM unnest(%(gpu_ids)s::bigint[], %(buckets)s::timestamptz[]) AS c(gpu_id, bucket)
    )"""

# Each GPM field's mean over the seconds owned by records that have it, as util_mean's (rollup_math).
_GPM_MINUTE_MEANS = "".join(
    f"sum({name} * own_s) / nullif(sum(own_s) FILTER (WHERE {name} IS NOT NULL), 0) AS {name}_mean,\n"
    for name in GPM_FIELDS
)
_GPM_PIECE_COLUMNS = "".join(f", s.{name}" for name in GPM_FIELDS)

# The most minutes one record touches (an unaligned hour-long record: 61). As a LIMIT it never cuts
# anything; it tells the planner so. Without it PostgreSQL guesses 1000 minutes a record, costs a batch
# some 30 times too high and JIT-compiles it: about 40 ms of a 5000-minute batch's 190 ms (measured).
_MAX_MINUTES_PER_RECORD = MAX_INTERVAL_S // 60 + 1

# Consecutive claimed minutes of a GPU form a run, read from raw in one index range scan of the
# (gpu_id, ts) primary key; reading MAX_INTERVAL_S past the run finds the records that start inside
# it and end later. LATERAL … OFFSET 0 keeps that a per-run index scan whatever the statistics say
# (right after a big import the planner may know nothing of the new rows).
_MINUTE_SOURCE = f"""
    runs AS (
        SELECT gpu_id, min(bucket) AS lo, max(bucket) + interval '60 seconds' AS hi
        FROM (
            SELECT gpu_id, bucket, bucket - row_number() OVER (PARTITION BY gpu_id ORDER BY bucket)
                                          * interval '60 seconds' AS run
            FROM claimed
        ) numbered
        GROUP BY gpu_id, run
    ),
    pieces AS (
        SELECT s.gpu_id, m.bucket, date_part('epoch', m.bucket) AS b, s.e, s.e - s.interval_s AS st,
               s.interval_s, s.util_gpu, s.util_gpu_max, s.util_mem, s.mem_used_mib, s.power_w, s.energy_j,
               s.temp_c, s.xid_count, s.ecc_dbe_count{_GPM_PIECE_COLUMNS}
        FROM runs r
        CROSS JOIN LATERAL (
            SELECT s.*, date_part('epoch', s.ts) AS e FROM {SAMPLE} s
            WHERE s.gpu_id = r.gpu_id AND s.ts > r.lo AND s.ts < r.hi + interval '{MAX_INTERVAL_S} seconds'
              AND s.ts - s.interval_s * interval '1 second' < r.hi
            OFFSET 0
        ) s
        CROSS JOIN LATERAL (
            SELECT generate_series(
                greatest(date_bin('60 seconds', s.ts - s.interval_s * interval '1 second', {EPOCH}), r.lo),
                least(date_bin('60 seconds', s.ts - interval '1 microsecond', {EPOCH}), r.hi - interval '60 seconds'),
                interval '60 seconds'
            ) AS bucket
            LIMIT {_MAX_MINUTES_PER_RECORD}
        ) AS m
    ),
    owned AS (
        -- the seconds of its bucket a record owns: those no record before it in (start, end) order covered
        SELECT p.*, greatest(0, least(p.e, p.b + 60) - greatest(p.st, p.b, max(p.e) OVER earlier)) AS own_s
        FROM pieces p
        WINDOW earlier AS (
            PARTITION BY p.gpu_id, p.bucket ORDER BY p.st, p.e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        )
    ),
    rolled AS (
        SELECT gpu_id, bucket,
            -- float sums in the window's (start, end) order: the same rows give the same bits
            sum(util_gpu * own_s) / nullif(sum(own_s) FILTER (WHERE util_gpu IS NOT NULL), 0) AS util_mean,
            max(coalesce(util_gpu_max, util_gpu)) AS util_max,
            sum(util_mem * own_s) / nullif(sum(own_s) FILTER (WHERE util_mem IS NOT NULL), 0) AS util_mem_mean,
            max(mem_used_mib) AS mem_used_max_mib,
            sum(power_w * own_s) / nullif(sum(own_s) FILTER (WHERE power_w IS NOT NULL), 0) AS power_mean_w,
            sum(energy_j * own_s / interval_s) FILTER (WHERE own_s > 0) AS energy_j,
            max(temp_c) AS temp_max_c,
            -- events count in the bucket holding the record's last second
            coalesce(sum(xid_count) FILTER (WHERE e <= b + 60), 0) AS xid_count,
            coalesce(sum(ecc_dbe_count) FILTER (WHERE e <= b + 60), 0) AS ecc_dbe_count,
            round(sum(own_s))::int AS covered_s,
            coalesce(round(sum(own_s) FILTER (WHERE util_gpu IS NOT NULL)), 0)::int AS util_covered_s,
            {_GPM_MINUTE_MEANS}
            coalesce(round(sum(own_s) FILTER (WHERE {GPM_COVERAGE_FIELD} IS NOT NULL)), 0)::int AS gpm_covered_s,
            count(*) AS sample_count
        FROM owned
        GROUP BY gpu_id, bucket
    )"""  # noqa: S608 (only module constants are interpolated)

_GPM_HOUR_MEANS = "".join(
    f"sum({mean} * gpm_covered_s ORDER BY minute) / nullif(sum(gpm_covered_s) FILTER (WHERE {mean} IS NOT NULL), 0)"
    f" AS {mean},\n"
    for mean in GPM_MEANS
)

# An hour from its minutes (rollup_math.combine): sums of seconds, energy and counts, maxima, and
# means weighted by util_covered_s, the GPM means by gpm_covered_s, util_mem and power by
# rollup_math.aux_weight_s. Float sums run in minute order so that recomputing gives the same bits
# whatever plan reads the minutes.
_HOUR_SOURCE = f"""
    minutes AS (
        SELECT c.bucket AS hour, m.bucket AS minute, m.*,
               CASE WHEN m.util_covered_s > 0 THEN m.util_covered_s ELSE m.covered_s END AS aux_s
        FROM claimed c
        CROSS JOIN LATERAL (  -- an index range scan per hour, whatever the statistics say
            SELECT * FROM {MINUTES} m
            WHERE m.gpu_id = c.gpu_id AND m.bucket >= c.bucket AND m.bucket < c.bucket + interval '1 hour'
            OFFSET 0
        ) m
    ),
    rolled AS (
        SELECT gpu_id, hour AS bucket,
            sum(util_mean * util_covered_s ORDER BY minute)
                / nullif(sum(util_covered_s) FILTER (WHERE util_mean IS NOT NULL), 0) AS util_mean,
            max(util_max) AS util_max,
            sum(util_mem_mean * aux_s ORDER BY minute) / nullif(sum(aux_s) FILTER (WHERE util_mem_mean IS NOT NULL), 0)
                AS util_mem_mean,
            max(mem_used_max_mib) AS mem_used_max_mib,
            sum(power_mean_w * aux_s ORDER BY minute) / nullif(sum(aux_s) FILTER (WHERE power_mean_w IS NOT NULL), 0)
                AS power_mean_w,
            sum(energy_j ORDER BY minute) AS energy_j,
            max(temp_max_c) AS temp_max_c,
            sum(xid_count) AS xid_count,
            sum(ecc_dbe_count) AS ecc_dbe_count,
            sum(covered_s) AS covered_s,
            sum(util_covered_s) AS util_covered_s,
            {_GPM_HOUR_MEANS}
            sum(gpm_covered_s) AS gpm_covered_s,
            sum(sample_count) AS sample_count,
            {", ".join(f"{source} AS {column}" for column, source in HOUR_ONLY.items())}
        FROM minutes
        GROUP BY gpu_id, hour
    )"""  # noqa: S608 (only module constants are interpolated)

_WRITE = """
    upserted AS (
        INSERT INTO {table} ({columns}) SELECT {columns} FROM rolled
        ON CONFLICT (gpu_id, bucket) DO UPDATE SET {updates}
        RETURNING 1
    ),
    emptied AS (
        -- a claimed bucket that no record covers any more has no rollup: recomputing is exact
        DELETE FROM {table} t
        USING (
            SELECT c.gpu_id, c.bucket FROM claimed c
            WHERE NOT EXISTS (SELECT 1 FROM rolled r WHERE r.gpu_id = c.gpu_id AND r.bucket = c.bucket)
        ) gone
        WHERE t.gpu_id = gone.gpu_id AND t.bucket = gone.bucket
        RETURNING 1
    )"""

_MARK_HOURS = f"""
    hours AS (
        INSERT INTO {DIRTY} (level, gpu_id, bucket)
        SELECT DISTINCT '{RollupLevel.HOUR.value}', gpu_id, date_bin('3600 seconds', bucket, {EPOCH}) FROM claimed
        ORDER BY 2, 3
        {MARK_CONFLICT}
    )"""  # noqa: S608 (only module constants are interpolated)


_COUNTS = """
    SELECT (SELECT count(*) FROM claimed), (SELECT count(*) FROM upserted), (SELECT count(*) FROM emptied)"""


def _process_sql(level: str) -> str:
    """The statement that recomputes the claimed buckets, writes them and (minutes) marks their hours."""
    minute = level == RollupLevel.MINUTE.value
    written = WRITTEN_COLUMNS if minute else (*WRITTEN_COLUMNS, *HOUR_ONLY_COLUMNS)
    columns = ", ".join(written)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in written[2:])
    table = MINUTES if minute else HOURS
    parts = [_CLAIMED, _MINUTE_SOURCE if minute else _HOUR_SOURCE]
    parts.append(_WRITE.format(table=table, columns=columns, updates=updates))
    if minute:
        parts.append(_MARK_HOURS)
    return "WITH" + ",".join(parts) + _COUNTS


_PROCESS_SQL = {level: _process_sql(level) for level in RollupLevel.values}  # keyed by plain strings


def process_dirty(*, level: str = RollupLevel.MINUTE.value, limit: int | None = None) -> int:
    """Claim up to ``limit`` dirty buckets of ``level`` and recompute their rollups, in one transaction;
    minutes also mark their hours dirty. Returns the number of buckets claimed (fewer than ``limit``
    when no more are dirty, or others hold them).

    Two statements, not one: under READ COMMITTED a statement reads the snapshot taken when it began,
    and a mark may be claimed only after the collection that locked it committed. Recomputing in the
    claiming statement would read a snapshot without that collection's samples and still consume its
    mark. The second statement's snapshot is taken after the claim, so it holds every sample of every
    collection that touched a claimed mark before the claim; a collection that comes later waits for
    this transaction and then marks the bucket afresh (see the module docstring)."""
    level = RollupLevel(level).value
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"level": level, "limit": limit or DEFAULT_BATCH})
        claimed_rows = cursor.fetchall()
        if not claimed_rows:
            return 0
        gpu_ids, buckets = (list(column) for column in zip(*claimed_rows, strict=True))
        cursor.execute(_PROCESS_SQL[level], {"gpu_ids": gpu_ids, "buckets": buckets})
        claimed, _upserted, _emptied = cursor.fetchone()
    return claimed


def rollup_pending(*, batch: int = DEFAULT_BATCH, max_batches: int = 1000,
                   levels: Sequence[str] = (RollupLevel.MINUTE.value, RollupLevel.HOUR.value),
                   on_batch: Callable[[int], object] | None = None) -> dict:
    """Process dirty minutes, then the hours they marked (or only ``levels``), batch after batch until a
    batch comes back short (nothing left, or another worker holds the rest) or ``max_batches`` have run.
    ``on_batch(claimed)`` follows each batch (an import's progress bar)."""
    result = {"minute_buckets": 0, "hour_buckets": 0, "batches": 0}
    for level in levels:
        while result["batches"] < max_batches:
            claimed = process_dirty(level=level, limit=batch)
            result[f"{level}_buckets"] += claimed
            result["batches"] += 1
            if on_batch is not None:
                on_batch(claimed)
            if claimed < batch:
                break
    return result


def rollup_watermark(*, now: datetime | None = None) -> datetime:
    """The time up to which rollups reflect every stored sample: the oldest dirty bucket (minute or
    hour), or the start of the current minute when nothing older is dirty. Every minute and hour
    bucket that ends at or before it is final until another late record arrives; whether the data
    itself is complete is the collector's ``data_complete_to`` per node, not this."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT min(bucket) FROM {DIRTY}")  # noqa: S608 (the model's table)
        oldest_dirty = cursor.fetchone()[0]
    current_minute = floor_minute(now or timezone.now())
    return current_minute if oldest_dirty is None else min(oldest_dirty, current_minute)


def recompute_range(
    *, start: datetime, end: datetime, gpu_ids: list[int] | None = None, now: datetime | None = None
) -> dict:
    """Recompute from raw every minute (and its hour) in ``[start, end)`` that samples cover.

    Minutes older than the raw retention are left alone: their raw data may be partly pruned, and
    their rollups are what remains of it."""
    retained_from = ceil_minute((now or timezone.now()) - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS))
    start = max(as_utc(start), retained_from)
    marked = mark_dirty_range(start=start, end=end, gpu_ids=gpu_ids) if start < end else 0
    return {"start": start, "marked": marked, **rollup_pending(max_batches=10**9)}


def prune(*, now: datetime, batch: int = 50_000) -> dict:
    """Retention (DESIGN.md §3): drop the raw samples' day partitions wholly older than
    TELEMETRY_RAW_RETENTION_DAYS (``partitions.partitions_prune``), and delete minute rollups older than
    TELEMETRY_MINUTE_RETENTION_DAYS, ``batch`` rows a statement; hours stay.

    A day is dropped only when it also ends at or before the rollup watermark: raw rows that a dirty
    bucket may still need are kept, so pruning before a backlog is processed never loses data."""
    raw_cutoff = min(as_utc(now) - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS), rollup_watermark(now=now))
    minute_cutoff = as_utc(now) - timedelta(days=settings.TELEMETRY_MINUTE_RETENTION_DAYS)
    raw = partitions_prune(before=raw_cutoff)
    return {
        "sample_days_dropped": raw["dropped"],
        "samples_deleted_from_default": raw["default_rows_deleted"],
        "minute_rollups": _delete_before(MINUTES, "bucket", minute_cutoff, batch),
        "raw_cutoff": raw_cutoff,
        "minute_cutoff": minute_cutoff,
    }


def _delete_before(table: str, column: str, cutoff: datetime, batch: int) -> int:
    """Delete rows with ``column < cutoff`` in batches (each its own transaction outside an atomic
    block), through the table's index on ``column``; returns the rows deleted."""
    sql = f"""
        DELETE FROM {table} t USING (SELECT gpu_id, {column} FROM {table} WHERE {column} < %s LIMIT %s) old
        WHERE t.gpu_id = old.gpu_id AND t.{column} = old.{column}
    """  # noqa: S608 (table and column names come from prune(), not from data)
    deleted = 0
    with connection.cursor() as cursor:
        while True:
            cursor.execute(sql, [cutoff, batch])
            deleted += cursor.rowcount
            if cursor.rowcount < batch:
                return deleted


# --- Benchmark ----------------------------------------------------------------------------------------


def bench_rollup(n_records: int = 1_000_000, *, gpus: int = 1000, interval_s: int = 10,
                 batch: int = DEFAULT_BATCH) -> dict:
    """Time storing ``n_records`` synthetic samples (``gpus`` GPUs, one record every ``interval_s``, every
    field known, the GPM ones too, as on a Hopper GPU) with their dirty marks, and rolling them up; everything runs in one transaction that is rolled back,
    so the database is left as it was. Returns counts, seconds and rates."""
    per_gpu = -(-n_records // gpus)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with transaction.atomic():
        model = GpuModel.objects.create(name="Bench GPU", short_name="BENCH", memory_mib=81920)
        node = Node.objects.create(hostname="bench-rollup", pool="bench")
        gpu_ids = [
            g.pk for g in Gpu.objects.bulk_create(
                Gpu(node=node, index=i, uuid=f"GPU-bench-{i}", model=model, memory_mib=81920) for i in range(gpus)
            )
        ]
        source = """
            SELECT g.id, %(start)s + k * %(interval)s * interval '1 second', %(interval)s,
                   (g.id * 7 + k * 13) %% 101, NULL::float8, (g.id + k) %% 50, 40000 + k %% 1000, 81920,
                   300 + (g.id + k) %% 200, (300 + (g.id + k) %% 200) * %(interval)s, 60, 1980,
                   (k %% 5000 = 0)::int, 0, NULL::jsonb,
                   -- the GPM fields (Hopper): sm_active … fp64_active percent, then NVLink and PCIe MiB/s
                   (g.id * 7 + k * 13) %% 101 * 0.9, (g.id + k * 3) %% 70, (g.id * 3 + k) %% 90, (g.id + k) %% 80,
                   (k * 7) %% 40, (g.id + k * 11) %% 60, k %% 5, 1000 + (g.id * 31 + k) %% 90000,
                   1000 + (g.id * 17 + k) %% 90000, 100 + (g.id + k * 5) %% 20000, 100 + (g.id * 5 + k) %% 20000
            FROM unnest(%(gpu_ids)s::bigint[]) AS g(id) CROSS JOIN generate_series(1, %(per_gpu)s) AS k
            LIMIT %(n)s
        """
        params = {"start": start, "interval": interval_s, "gpu_ids": gpu_ids, "per_gpu": per_gpu, "n": n_records}
        last_day = (start + timedelta(seconds=per_gpu * interval_s)).date()
        partitions_add([start.date() + timedelta(days=k) for k in range((last_day - start.date()).days + 1)])
        began = time.perf_counter()
        with connection.cursor() as cursor:
            inserted, marked = insert_samples_marking_dirty(cursor, source_sql=source, params=params)
        stored_s = time.perf_counter() - began
        began = time.perf_counter()
        pending = rollup_pending(batch=batch, max_batches=10**9)
        rollup_s = time.perf_counter() - began
        minutes = MinuteRollup.objects.filter(gpu_id__in=gpu_ids).count()
        transaction.set_rollback(True)
    return {
        "records": inserted, "gpus": gpus, "interval_s": interval_s, "dirty_minutes": marked,
        "minute_rollups": minutes, **pending, "store_s": round(stored_s, 3), "rollup_s": round(rollup_s, 3),
        "rollup_s_per_million_records": round(rollup_s * 1e6 / max(inserted, 1), 2),
        "records_per_s": round(inserted / rollup_s) if rollup_s else None,
    }
