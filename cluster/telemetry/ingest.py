"""The one path by which samples enter the database: collected pages and imported CSV alike.

Records arrive as JSON lines (one record object per line, the agent's NDJSON page). A *clean* page
(every record well typed, in range, of a GPU it may write, in the time window, none stored before: what
a working agent sends) goes in by ``cluster.telemetry.clean_page``: msgspec checks the lines in C and one
binary ``COPY`` stores them, half the cost of the statement below (``make bench``, issue 18). Every
other page, and a clean page that meets a row stored meanwhile, takes this module's SQL statement, which
alone gives rejection reasons and skips repeats.

There, the lines are ``COPY``-ed as text into a session-local staging table, in a ``json`` column (its
input only checks the syntax: building ``jsonb`` there cost as much again, measured by ``make bench``,
and every field is read once later anyway); then one SQL statement validates each record
(the first failing rule becomes its rejection reason), inserts the good ones into the ``Sample`` table
with ``ON CONFLICT DO NOTHING`` (a repeated record changes nothing), and marks the minute buckets the
newly stored records cover dirty for the rollups. No per-record Python runs on this path: PostgreSQL
parses and checks the JSON in C.

Two forms of the statement share everything but how fields are read:

- the *typed* form reads each record once with ``json_to_record`` and checks ranges on typed
  columns. A value of the wrong JSON type (``"busy"`` for a utilization, ``12.5`` for a count) makes
  PostgreSQL raise, so it runs in a savepoint;
- the *checked* form, used only when the typed one raised, tests every field's JSON type before any
  cast (on the records as ``jsonb``), so every record gets a reason instead of the page an error.

Numeric strings (``"50"``) pass the typed form as numbers; the checked form, reached only through a
page with a real type error, refuses them. Both are documented behaviour, not a difference in what is
stored.

The record's fields, their types and ranges are ``agents/records.py``'s (the one schema); what becomes
of each field is :data:`STORED_AS` and :data:`NOT_STORED` here.
"""

from __future__ import annotations

import time
from datetime import datetime

import psycopg
from django.db import DataError, connection, transaction

from agents.records import (
    FLOAT_FIELDS,
    FLOAT_RANGES,
    INT_FIELDS,
    INT_RANGES,
    INTERVAL_S_RANGE,
    REQUIRED_FIELDS,
)
from cluster.inventory.models import Gpu
from cluster.telemetry.clean_page import decode_clean_page, store_clean_page
from cluster.telemetry.dirty_marks import gpu_range_marks_sql
from cluster.telemetry.models import Sample
from cluster.telemetry.stored import SAMPLE_COLUMNS, VALUE_COLUMNS, IngestResult, column_type

SAMPLE = Sample._meta.db_table
GPU = Gpu._meta.db_table

# A session-local staging table, emptied before each use (a caller's outer transaction may span pages).
STAGING_DDL = (
    "CREATE TEMP TABLE IF NOT EXISTS sample_staging (rec json) ON COMMIT DELETE ROWS; TRUNCATE sample_staging"
)
# CSV with quote and delimiter bytes that valid JSON text never contains (JSON escapes control
# characters): each line reaches PostgreSQL untouched, whatever backslashes or quotes it holds.
COPY_SQL = "COPY sample_staging (rec) FROM STDIN WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')"

# Where each field of an agent record goes: the Sample column it is stored in (VALUE_COLUMNS under their own
# names), or (NOT_STORED) why not. Every other Sample column is one of these; a test holds this to
# agents.records and the model.
STORED_AS = {"ts": "ts", "gpu_uuid": "gpu_id", **{name: name for name in VALUE_COLUMNS}, "processes": "processes"}
NOT_STORED = {"seq": "the collector's cursor: the page's highest seq (IngestResult.max_seq)"}
# Not an agent field: the importer numbers its records with their CSV line, for its report.
IMPORT_FIELDS = ("line",)

JSON_TYPE = {int: "number", str: "string"}  # of the required fields
WHOLE_NUMBERS = tuple(name for name in VALUE_COLUMNS if name in INT_FIELDS or REQUIRED_FIELDS.get(name) is int)
RANGES = {**FLOAT_RANGES, **INT_RANGES}


# The typed form reads each value as its column stores it.
TYPED_COLUMNS = (
    "seq bigint, line bigint, ts bigint, gpu_uuid text, "
    + ", ".join(f"{name} {column_type(name)}" for name in VALUE_COLUMNS)
    + ", processes jsonb"
)


def _common_rules(prefix: str, gpu: str) -> list[str]:
    """Rules on typed values, shared by both forms (``prefix`` names where the typed values live,
    ``gpu`` the matched GPU's id)."""
    p = prefix
    shortest, longest = INTERVAL_S_RANGE
    rules = [
        f"WHEN {p}ts > %(newest_ts)s THEN 'ts: too far in the future'",
        f"WHEN {p}ts < %(oldest_ts)s THEN 'ts: older than the agent spool keeps'",
        f"WHEN {gpu} IS NULL THEN 'gpu_uuid: unknown GPU'",
        f"WHEN {p}interval_s NOT BETWEEN {shortest} AND {longest} "
        f"THEN 'interval_s: not a whole number of seconds in {shortest}..{longest}'",
    ]
    for name, (lo, hi) in RANGES.items():
        rules.append(f"WHEN {p}{name} < {lo} THEN '{name}: below {lo}'")
        rules.append(f"WHEN {p}{name} > {hi} THEN '{name}: above {hi}'")
    return rules


def _missing_rule(name: str, test: str) -> str:
    """The rule refusing a record without the required field ``name`` (``test``: it is absent or of
    another JSON type)."""
    return f"WHEN {test} THEN '{name}: missing or not a {JSON_TYPE[REQUIRED_FIELDS[name]]}'"


TYPED_CHECKED = f"""
    SELECT g.id AS gpu_id, r.seq, r.line, r.ts, {", ".join(f"r.{c}" for c in VALUE_COLUMNS)},
           NULLIF(NULLIF(r.processes, 'null'::jsonb), '[]'::jsonb) AS processes,
           CASE
               WHEN json_typeof(s.rec) <> 'object' THEN 'record: not a JSON object'
               WHEN r.seq IS NULL AND %(need_seq)s THEN 'seq: missing or not a number'
               {" ".join(_missing_rule(name, f"r.{name} IS NULL") for name in REQUIRED_FIELDS)}
               {" ".join(_common_rules("r.", "g.id"))}
               WHEN r.processes IS NOT NULL AND jsonb_typeof(r.processes) NOT IN ('array', 'null') THEN 'processes: not a list'
           END AS reason
    FROM sample_staging s
    CROSS JOIN LATERAL json_to_record(CASE WHEN json_typeof(s.rec) = 'object' THEN s.rec ELSE '{{}}'::json END)
        AS r({TYPED_COLUMNS})
    LEFT JOIN {GPU} g ON g.uuid = r.gpu_uuid AND (%(node_id)s::bigint IS NULL OR g.node_id = %(node_id)s)
"""


def _json_number(name: str, kind: str) -> str:
    """A field of ``rec`` as ``kind`` when it is a JSON number (whole, for integer kinds), else NULL."""
    whole = kind != "float8"
    test = f"jsonb_typeof(rec->'{name}') = 'number'"
    if whole:
        test += f" AND (rec->'{name}')::numeric = trunc((rec->'{name}')::numeric) AND abs((rec->'{name}')::numeric) <= {2**62}"
    return f"CASE WHEN {test} THEN (rec->'{name}')::numeric::{kind} END"


def _type_rules() -> list[str]:
    rules = [
        "WHEN jsonb_typeof(rec) <> 'object' THEN 'record: not a JSON object'",
        "WHEN jsonb_typeof(rec->'seq') IS DISTINCT FROM 'number' AND %(need_seq)s THEN 'seq: missing or not a number'",
    ]
    for name, kind in REQUIRED_FIELDS.items():
        rules.append(_missing_rule(name, f"jsonb_typeof(rec->'{name}') IS DISTINCT FROM '{JSON_TYPE[kind]}'"))
        if name == "ts":
            rules.append("WHEN (rec->'ts')::numeric <> trunc((rec->'ts')::numeric) THEN 'ts: not whole seconds'")
    for name in VALUE_COLUMNS:
        rules.append(f"WHEN jsonb_typeof(rec->'{name}') NOT IN ('number', 'null') THEN '{name}: not a number'")
    for name in WHOLE_NUMBERS:
        rules.append(
            f"WHEN jsonb_typeof(rec->'{name}') = 'number' AND (rec->'{name}')::numeric <> trunc((rec->'{name}')::numeric) "
            f"THEN '{name}: not a whole number'"
        )
    rules.append("WHEN jsonb_typeof(rec->'processes') NOT IN ('array', 'null') THEN 'processes: not a list'")
    return rules


CHECKED_CHECKED = f"""
    SELECT gpu_id, seq, line, ts, {", ".join(VALUE_COLUMNS)}, processes,
           CASE WHEN type_reason IS NOT NULL THEN type_reason {" ".join(_common_rules("", "gpu_id"))} END AS reason
    FROM (
        SELECT g.id AS gpu_id, rec,
               CASE {" ".join(_type_rules())} END AS type_reason,
               {_json_number("seq", "bigint")} AS seq, {_json_number("line", "bigint")} AS line,
               {_json_number("ts", "bigint")} AS ts,
               {", ".join(f"{_json_number(c, 'float8' if c in FLOAT_FIELDS else 'bigint')} AS {c}" for c in VALUE_COLUMNS)},
               CASE WHEN jsonb_typeof(rec->'processes') = 'array' AND rec->'processes' <> '[]'::jsonb
                    THEN rec->'processes' END AS processes
        FROM (SELECT rec::jsonb AS rec FROM sample_staging) s
        LEFT JOIN {GPU} g ON g.uuid = s.rec->>'gpu_uuid' AND (%(node_id)s::bigint IS NULL OR g.node_id = %(node_id)s)
    ) typed
"""


_INSERTED_RANGES = """(
    SELECT gpu_id, min(ts - make_interval(secs => interval_s)) AS first_s, max(ts) - interval '1 second' AS last_s
    FROM inserted GROUP BY gpu_id
)"""


def _ingest_sql(checked: str) -> str:
    return f"""
WITH checked AS MATERIALIZED ({checked}),
inserted AS (
    INSERT INTO {SAMPLE} ({", ".join(SAMPLE_COLUMNS)})
    SELECT gpu_id, to_timestamp(ts), {", ".join(VALUE_COLUMNS)}, processes
    FROM checked WHERE reason IS NULL
    ON CONFLICT DO NOTHING
    RETURNING gpu_id, ts, interval_s, xid_count, ecc_dbe_count
),
dirty AS (
    -- A record covers the seconds [ts - interval_s, ts): each GPU's range of new seconds is marked. The
    -- conflict clause locks an existing mark until commit, so a rollup worker cannot claim it and
    -- recompute without these rows (cluster/telemetry/dirty_marks.py).
    {gpu_range_marks_sql(_INSERTED_RANGES)}
    RETURNING 1
),
errors AS (
    SELECT gpu_id, sum(xid_count) FILTER (WHERE xid_count > 0) AS xid,
           sum(ecc_dbe_count) FILTER (WHERE ecc_dbe_count > 0) AS ecc
    FROM inserted GROUP BY gpu_id HAVING max(xid_count) > 0 OR max(ecc_dbe_count) > 0
)
SELECT 'stored' AS what, NULL AS reason, count(*) AS n, extract(epoch FROM max(ts))::bigint AS newest,
       NULL::bigint AS gpu_id, NULL::bigint AS xid, NULL::bigint AS ecc FROM inserted
UNION ALL
SELECT 'rejected', reason, count(*), NULL, NULL, NULL, NULL FROM checked WHERE reason IS NOT NULL GROUP BY reason
UNION ALL
SELECT 'seen', NULL, count(*), max(ts) FILTER (WHERE reason IS NULL), max(seq), NULL, NULL FROM checked
UNION ALL
SELECT 'errors', NULL, NULL, NULL, gpu_id, xid, ecc FROM errors
UNION ALL
SELECT 'dirty', NULL, count(*), NULL, NULL, NULL, NULL FROM dirty
UNION ALL
(SELECT 'rejected_line', reason, line, NULL, NULL, NULL, NULL FROM checked
 WHERE reason IS NOT NULL AND line IS NOT NULL ORDER BY line LIMIT 10000)
"""


TYPED_INGEST_SQL = _ingest_sql(TYPED_CHECKED)
CHECKED_INGEST_SQL = _ingest_sql(CHECKED_CHECKED)


def ingest_json_lines(
    blob: bytes, *, node_id: int | None, now: datetime, max_future_s: int, max_age_s: int, need_seq: bool = True,
    timings: dict[str, float] | None = None, clean_path: bool = True,
) -> IngestResult:
    """Validate and store newline-separated JSON records; call inside a transaction.

    ``node_id`` limits GPUs to that node's (collection); None accepts any known GPU (import). A line
    that is not JSON raises ``psycopg.DataError`` (the page is malformed: the caller's transaction
    stores nothing). A clean page takes ``cluster.telemetry.clean_page``'s path, any other the SQL
    statement; ``clean_path=False`` sends every page through the statement (the tests hold the two
    paths to the same result, the bench times both)."""
    now_s = int(now.timestamp())
    params = {"node_id": node_id, "newest_ts": now_s + max_future_s, "oldest_ts": now_s - max_age_s, "need_seq": need_seq}
    started = time.perf_counter()
    records = decode_clean_page(blob) if clean_path else None
    if timings is not None:
        timings["decode"] = timings.get("decode", 0.0) + time.perf_counter() - started
    if records is not None:
        result = store_clean_page(
            records, node_id=node_id, oldest_ts=params["oldest_ts"], newest_ts=params["newest_ts"],
            need_seq=need_seq, timings=timings,
        )
        if result is not None:
            return result
    with connection.cursor() as cursor:
        cursor.execute(STAGING_DDL)
        started = time.perf_counter()
        with cursor.cursor.copy(COPY_SQL) as copy:
            copy.write(blob)
        copied = time.perf_counter()
        try:
            with transaction.atomic():
                cursor.execute(TYPED_INGEST_SQL, params)
                rows = cursor.fetchall()
        except (DataError, psycopg.DataError):
            # A value of the wrong JSON type somewhere in the page: give every record its reason.
            cursor.execute(CHECKED_INGEST_SQL, params)
            rows = cursor.fetchall()
        if timings is not None:
            timings["sql copy"] = timings.get("sql copy", 0.0) + copied - started
            timings["sql validate+upsert"] = timings.get("sql validate+upsert", 0.0) + time.perf_counter() - copied
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
