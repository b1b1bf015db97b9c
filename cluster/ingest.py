"""The one path by which samples enter the database: collected pages and imported CSV alike.

Records arrive as JSON lines (one record object per line, the agent's NDJSON page). They are
``COPY``-ed as text into a session-local staging table, then one SQL statement validates each record
(the first failing rule becomes its rejection reason), inserts the good ones into ``cluster_sample``
with ``ON CONFLICT DO NOTHING`` (a repeated record changes nothing), and marks the minute buckets the
newly stored records cover as dirty for the rollups. No per-record Python runs on this path:
PostgreSQL parses and checks the JSON in C (measured here, Python's ``json.loads`` alone costs more
per record than the whole ``COPY``; see ``make bench``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

# A session-local staging table, emptied before each use (a caller's outer transaction may span pages).
STAGING_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS sample_staging (rec jsonb) ON COMMIT DELETE ROWS; TRUNCATE sample_staging"
)
# CSV with quote and delimiter bytes that valid JSON text never contains (JSON escapes control
# characters): each line reaches PostgreSQL untouched, whatever backslashes or quotes it holds.
COPY_SQL = "COPY sample_staging (rec) FROM STDIN WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"

INT_MAX = 2**31 - 1


def _number(name: str, *, integer: bool = False, lo: float | None = 0, hi: float | None = None) -> str:
    """CASE branches rejecting a present, non-null field that is not a number in [lo, hi]."""
    field_ = f"rec->'{name}'"
    value = f"(rec->>'{name}')::numeric"
    branches = [f"WHEN jsonb_typeof({field_}) NOT IN ('number', 'null') THEN '{name}: not a number'"]
    if integer:
        branches.append(f"WHEN jsonb_typeof({field_}) = 'number' AND {value} <> trunc({value}) THEN '{name}: not a whole number'")
    if lo is not None:
        branches.append(f"WHEN jsonb_typeof({field_}) = 'number' AND {value} < {lo} THEN '{name}: below {lo}'")
    if hi is not None:
        branches.append(f"WHEN jsonb_typeof({field_}) = 'number' AND {value} > {hi} THEN '{name}: above {hi}'")
    return "\n            ".join(branches)


REASON_SQL = f"""
        CASE
            WHEN jsonb_typeof(rec) <> 'object' THEN 'record: not a JSON object'
            WHEN jsonb_typeof(rec->'seq') IS DISTINCT FROM 'number' AND %(need_seq)s THEN 'seq: missing or not a number'
            WHEN jsonb_typeof(rec->'ts') IS DISTINCT FROM 'number' THEN 'ts: missing or not a number'
            WHEN (rec->>'ts')::numeric <> trunc((rec->>'ts')::numeric) THEN 'ts: not whole seconds'
            WHEN (rec->>'ts')::numeric > %(newest_ts)s THEN 'ts: too far in the future'
            WHEN (rec->>'ts')::numeric < %(oldest_ts)s THEN 'ts: older than the agent spool keeps'
            WHEN jsonb_typeof(rec->'gpu_uuid') IS DISTINCT FROM 'string' THEN 'gpu_uuid: missing or not a string'
            WHEN g.id IS NULL THEN 'gpu_uuid: unknown GPU'
            WHEN jsonb_typeof(rec->'interval_s') IS DISTINCT FROM 'number' THEN 'interval_s: missing or not a number'
            WHEN (rec->>'interval_s')::numeric NOT BETWEEN 1 AND 3600
                OR (rec->>'interval_s')::numeric <> trunc((rec->>'interval_s')::numeric)
                THEN 'interval_s: not a whole number of seconds in 1..3600'
            {_number("util_gpu", hi=100)}
            {_number("util_gpu_max", hi=100)}
            {_number("util_mem", hi=100)}
            {_number("mem_used_mib", integer=True, hi=INT_MAX)}
            {_number("mem_total_mib", integer=True, hi=INT_MAX)}
            {_number("power_w", hi=100_000)}
            {_number("energy_j", hi=1e12)}
            {_number("temp_c", integer=True, lo=-100, hi=200)}
            {_number("sm_clock_mhz", integer=True, hi=100_000)}
            {_number("xid_count", integer=True, hi=INT_MAX)}
            {_number("ecc_dbe_count", integer=True, hi=INT_MAX)}
            WHEN jsonb_typeof(rec->'processes') NOT IN ('array', 'null') THEN 'processes: not a list'
        END"""

SAMPLE_COLUMNS = (
    "gpu_id, ts, interval_s, util_gpu, util_gpu_max, util_mem, mem_used_mib, mem_total_mib, power_w, "
    "energy_j, temp_c, sm_clock_mhz, xid_count, ecc_dbe_count, processes"
)

INGEST_SQL = f"""
WITH checked AS MATERIALIZED (
    SELECT s.rec, g.id AS gpu_id, {REASON_SQL} AS reason
    FROM sample_staging s
    LEFT JOIN cluster_gpu g ON g.uuid = s.rec->>'gpu_uuid' AND (%(node_id)s::bigint IS NULL OR g.node_id = %(node_id)s)
),
inserted AS (
    INSERT INTO cluster_sample ({SAMPLE_COLUMNS})
    SELECT gpu_id, to_timestamp((rec->>'ts')::bigint), (rec->>'interval_s')::int,
           (rec->>'util_gpu')::float8, (rec->>'util_gpu_max')::float8, (rec->>'util_mem')::float8,
           (rec->>'mem_used_mib')::int, (rec->>'mem_total_mib')::int, (rec->>'power_w')::float8,
           (rec->>'energy_j')::float8, (rec->>'temp_c')::smallint, (rec->>'sm_clock_mhz')::int,
           (rec->>'xid_count')::int, (rec->>'ecc_dbe_count')::int,
           NULLIF(NULLIF(rec->'processes', 'null'::jsonb), '[]'::jsonb)
    FROM checked WHERE reason IS NULL
    ON CONFLICT DO NOTHING
    RETURNING gpu_id, ts, interval_s, xid_count, ecc_dbe_count
),
dirty AS (
    -- A record covers the seconds [ts - interval_s, ts): every minute bucket from the one holding its
    -- first second to the one holding its last (cluster/rollups.py works on the same convention).
    INSERT INTO cluster_dirtybucket (level, gpu_id, bucket)
    SELECT DISTINCT 'minute', i.gpu_id, b
    FROM inserted i,
         generate_series(
             date_bin('1 minute', i.ts - make_interval(secs => i.interval_s), TIMESTAMPTZ '2000-01-01 00:00:00+00'),
             date_bin('1 minute', i.ts - interval '1 second', TIMESTAMPTZ '2000-01-01 00:00:00+00'),
             interval '1 minute') AS b
    ON CONFLICT DO NOTHING
    RETURNING 1
),
errors AS (
    SELECT gpu_id, sum(xid_count) FILTER (WHERE xid_count > 0) AS xid, sum(ecc_dbe_count) FILTER (WHERE ecc_dbe_count > 0) AS ecc
    FROM inserted GROUP BY gpu_id HAVING max(xid_count) > 0 OR max(ecc_dbe_count) > 0
)
SELECT 'stored' AS what, NULL AS reason, count(*) AS n, extract(epoch FROM max(ts))::bigint AS newest, NULL::bigint AS gpu_id, NULL::bigint AS xid, NULL::bigint AS ecc FROM inserted
UNION ALL
SELECT 'rejected', reason, count(*), NULL, NULL, NULL, NULL FROM checked WHERE reason IS NOT NULL GROUP BY reason
UNION ALL
SELECT 'seen', NULL, count(*), extract(epoch FROM max(to_timestamp((rec->>'ts')::bigint)) FILTER (WHERE reason IS NULL))::bigint,
       max((rec->>'seq')::bigint) FILTER (WHERE jsonb_typeof(rec->'seq') = 'number'), NULL, NULL FROM checked
UNION ALL
SELECT 'errors', NULL, NULL, NULL, gpu_id, xid, ecc FROM errors
UNION ALL
SELECT 'dirty', NULL, count(*), NULL, NULL, NULL, NULL FROM dirty
UNION ALL
(SELECT 'rejected_line', reason, (rec->>'line')::bigint, NULL, NULL, NULL, NULL FROM checked
 WHERE reason IS NOT NULL AND jsonb_typeof(rec->'line') = 'number' LIMIT 10000)
"""  # noqa: S608 (only module constants are interpolated; values are bound parameters)


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


def ingest_json_lines(
    blob: bytes, *, node_id: int | None, now: datetime, max_future_s: int, max_age_s: int, need_seq: bool = True,
    timings: dict[str, float] | None = None,
) -> IngestResult:
    """Validate and store newline-separated JSON records; call inside a transaction.

    ``node_id`` limits GPUs to that node's (collection); None accepts any known GPU (import). A line
    that is not JSON raises ``psycopg.errors.InvalidTextRepresentation`` (the page is malformed and the
    caller's transaction stores nothing)."""
    import time

    clock = time.perf_counter
    with connection.cursor() as cursor:
        cursor.execute(STAGING_DDL)
        started = clock()
        with cursor.cursor.copy(COPY_SQL) as copy:
            copy.write(blob)
        copied = clock()
        now_s = int(now.timestamp())
        cursor.execute(
            INGEST_SQL,
            {
                "node_id": node_id, "newest_ts": now_s + max_future_s, "oldest_ts": now_s - max_age_s,
                "need_seq": need_seq,
            },
        )
        rows = cursor.fetchall()
        if timings is not None:
            timings["copy"] = timings.get("copy", 0.0) + copied - started
            timings["validate+upsert"] = timings.get("validate+upsert", 0.0) + clock() - copied
    return _result(rows)


def _result(rows) -> IngestResult:
    result = IngestResult()
    for what, reason, count, newest, extra, xid, ecc in rows:
        if what == "stored":
            result.stored = count
        elif what == "rejected":
            result.rejected[reason] = count
        elif what == "seen":
            result.seen, result.newest_ts, result.max_seq = count, newest, extra
        elif what == "errors":
            result.gpu_errors[extra] = (int(xid or 0), int(ecc or 0))
        elif what == "rejected_line":
            result.rejected_lines.append((count, reason))
    return result
