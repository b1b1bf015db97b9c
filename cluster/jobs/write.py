"""Writing many job reports at once, leaving the rows ``job_upsert`` (cluster.jobs.services) would leave after
upserting them one by one, in order: the set-based path of the CSV and sacct imports.

``job_upsert`` stays the single-report service (the API); this is its bulk twin, held to the same
rules by tests that compare the rows both leave. The rules, replayed:
- a report lands on the run with its key (source, external id, start time) and sets all its facts;
- a started report whose run is not stored adopts the job's pending, never-started run, if any;
- a run's scheduler allocations follow its facts (``wanted_allocations``).

How: the reports are replayed in Python only as far as keys go (which row each lands on; a few
queries, for jobs that have a never-started run), then the last report of each run and the
allocations it wants are COPY-ed into session-local staging tables; one ``INSERT … ON CONFLICT``
writes the runs (a row whose facts are all equal is left alone, so a re-import writes nothing), and
the scheduler allocations of exactly the runs whose wanted allocations differ are replaced.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter

from django.db import connection, transaction
from django.utils import timezone

from cluster.jobs.services import JOB_FIELDS, JobInput, unplaced_share
from cluster.models import Allocation, AllocationOrigin, Job, JobState

CHUNK = 5_000
JOB = Job._meta.db_table
ALLOCATION = Allocation._meta.db_table
_COPY_TYPES = {"CharField": "text", "ForeignKey": "int8", "IntegerField": "int4", "DecimalField": "numeric",
               "BooleanField": "bool", "DateTimeField": "timestamptz"}
_FIELDS = [Job._meta.get_field(name) for name in ("source", "external_id", "start_time", *JOB_FIELDS)]
_FACTS = [f'"{f.column}"' for f in _FIELDS[3:]]
_COLUMNS = ", ".join(f'"{f.column}"' for f in _FIELDS)
_STAGING = ", ".join(f'"{f.column}" {_COPY_TYPES[f.get_internal_type()]}' for f in _FIELDS)

STAGING_DDL = (
    f"CREATE TEMP TABLE IF NOT EXISTS job_staging (ord int4, {_STAGING}, job_id int8) ON COMMIT DELETE ROWS; "
    "CREATE TEMP TABLE IF NOT EXISTS job_alloc_staging (ord int4, gpu_id int8, gpu_model_id int8, share int8) "
    "ON COMMIT DELETE ROWS; "
    "CREATE TEMP TABLE IF NOT EXISTS job_realloc (job_id int8) ON COMMIT DELETE ROWS; "
    "TRUNCATE job_staging, job_alloc_staging, job_realloc"
)
ADOPT_SQL = f"""
    UPDATE {JOB} j SET start_time = v.start_time, updated_at = %(now)s
    FROM unnest(%(ids)s::int8[], %(starts)s::timestamptz[]) AS v (id, start_time) WHERE j.id = v.id
"""  # noqa: S608 (the model's table; values are bound)
UPSERT_SQL = f"""
    INSERT INTO {JOB} AS j ({_COLUMNS}, created_at, updated_at)
    SELECT {_COLUMNS}, %(now)s, %(now)s FROM job_staging
    ORDER BY source, external_id, start_time  -- two imports lock the runs they share in one order
    ON CONFLICT ON CONSTRAINT job_one_row_per_run DO UPDATE
        SET ({", ".join(_FACTS)}, updated_at) = ({", ".join(f"EXCLUDED.{c}" for c in _FACTS)}, EXCLUDED.updated_at)
        WHERE ({", ".join(f"j.{c}" for c in _FACTS)}) IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in _FACTS)})
    RETURNING j.id, j.xmax = 0
"""  # noqa: S608 (built from model metadata only; values are bound)
# Every staged run's id, written or not (the upsert returns only the rows it wrote).
LINK_SQL = f"""
    UPDATE job_staging s SET job_id = j.id FROM {JOB} j
    WHERE j.source = s.source AND j.external_id = s.external_id AND j.start_time IS NOT DISTINCT FROM s.start_time;
    ANALYZE job_staging
"""  # noqa: S608 (the model's table)
# Runs whose stored scheduler allocations differ from the wanted ones, as multisets. job_upsert keeps
# an allocation that matches and replaces the others; replacing all of a changed run's gives the same rows.
REALLOC_SQL = f"""
    WITH want AS (
        SELECT s.job_id, a.gpu_id, a.gpu_model_id, a.share, s.start_time, s.end_time
        FROM job_alloc_staging a JOIN job_staging s USING (ord)
    ), have AS (
        SELECT a.job_id, a.gpu_id, CASE WHEN a.gpu_id IS NULL THEN a.gpu_model_id END, a.share, a.start, a."end"
        FROM {ALLOCATION} a JOIN job_staging s ON s.job_id = a.job_id WHERE a.origin = %(origin)s
    )
    INSERT INTO job_realloc
    SELECT DISTINCT job_id FROM ((TABLE want EXCEPT ALL TABLE have) UNION ALL (TABLE have EXCEPT ALL TABLE want)) d
    RETURNING job_id
"""  # noqa: S608 (the model's table; values are bound)
REPLACE_SQL = f"""
    ANALYZE job_realloc;
    DELETE FROM {ALLOCATION} a USING job_realloc r WHERE a.job_id = r.job_id AND a.origin = %(origin)s;
    INSERT INTO {ALLOCATION} (job_id, gpu_id, gpu_model_id, share, start, "end", origin)
    SELECT s.job_id, a.gpu_id, a.gpu_model_id, a.share, s.start_time, s.end_time, %(origin)s
    FROM job_alloc_staging a JOIN job_staging s USING (ord) JOIN job_realloc r ON r.job_id = s.job_id
"""  # noqa: S608 (the model's table; values are bound)


@dataclass(frozen=True)
class WriteCounts:
    """Runs created, updated and left unchanged; reports superseded by a later report of the same run."""

    created: int
    updated: int
    unchanged: int
    superseded: int = 0


def wanted_allocations(data: JobInput) -> list[tuple[int | None, int | None, int]]:
    """(GPU id, model id of an unplaced one, share) of the scheduler allocations a run should have:
    job_upsert's rule (cluster.jobs.services._sync_allocations), which the consistency tests hold this to."""
    if data.start_time is None:
        return []
    if data.gpus:
        return [(gpu.pk, None, gpu.share) for gpu in data.gpus]
    if data.gpu_count > 0:
        return [(None, data.gpu_model.pk if data.gpu_model else None, unplaced_share(data.gpu_count))]
    return []


@transaction.atomic
def jobs_write(jobs: list[JobInput], *, now: datetime | None = None) -> WriteCounts:
    """Upsert these reports (already checked: ``JobInput.problems()`` empty) as ``job_upsert`` would in
    this order, and their runs' allocations."""
    if not jobs:
        return WriteCounts(0, 0, 0)
    now = now or timezone.now()
    final, adoptions = _replay(jobs)
    facts = attrgetter(*(f.name for f in _FIELDS))
    related = [i + 1 for i, f in enumerate(_FIELDS) if f.is_relation]  # + 1: after ord
    origin = {"origin": AllocationOrigin.SCHEDULER}
    with connection.cursor() as cursor:
        cursor.execute(STAGING_DDL)
        with cursor.cursor.copy(f"COPY job_staging (ord, {_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", *(_COPY_TYPES[f.get_internal_type()] for f in _FIELDS)])
            for ordinal, data in enumerate(final):
                row = [ordinal, *facts(data)]
                for i in related:
                    row[i] = row[i] and row[i].pk
                copy.write_row(row)
        with cursor.cursor.copy("COPY job_alloc_staging FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "int8", "int8", "int8"])
            for ordinal, data in enumerate(final):
                for wanted in wanted_allocations(data):
                    copy.write_row((ordinal, *wanted))
        # Temporary tables have no statistics until analysed: without them the joins plan as if tiny.
        cursor.execute("ANALYZE job_staging; ANALYZE job_alloc_staging")
        if adoptions:
            ids, starts = zip(*adoptions.items(), strict=True)
            cursor.execute(ADOPT_SQL, {"now": now, "ids": list(ids), "starts": list(starts)})
        cursor.execute(UPSERT_SQL, {"now": now})
        written = cursor.fetchall()
        cursor.execute(LINK_SQL)
        cursor.execute(REALLOC_SQL, origin)
        reallocated = {job_id for (job_id,) in cursor.fetchall()}
        if reallocated:
            cursor.execute(REPLACE_SQL, origin)
    created = {job_id for job_id, is_new in written if is_new}
    updated = ({job_id for job_id, is_new in written if not is_new} | reallocated | set(adoptions)) - created
    return WriteCounts(len(created), len(updated), len(final) - len(created) - len(updated), len(jobs) - len(final))


def _replay(jobs: list[JobInput]) -> tuple[list[JobInput], dict[int, datetime]]:
    """Replay the reports' keys in order: the last report of each run (in first-report order), and the
    stored never-started runs that a started report adopts (row id → its start).

    Only jobs with a started report and a never-started run (stored and pending, or reported in the
    file) can adopt, so only their stored runs are fetched."""
    started = {(d.source, d.external_id) for d in jobs if d.start_time is not None}
    never_started = {(d.source, d.external_id) for d in jobs if d.start_time is None}
    pending = set(
        Job.objects.filter(source__in={source for source, _id in started}, start_time__isnull=True,
                           state=JobState.PENDING).values_list("source", "external_id")
    )
    tracked = started & (never_started | pending)
    runs: dict[tuple, dict] = {group: {} for group in tracked}  # start time → state, per job
    stored_never_started: dict[tuple, int] = {}  # job → id of its stored never-started run
    ids = sorted({external_id for _source, external_id in tracked})
    for first in range(0, len(ids), CHUNK):
        stored = Job.objects.filter(external_id__in=ids[first : first + CHUNK]).values_list(
            "source", "external_id", "start_time", "state", "id"
        )
        for source, external_id, start, state, pk in stored:
            if (source, external_id) in runs:
                runs[(source, external_id)][start] = state
                if start is None:
                    stored_never_started[(source, external_id)] = pk
    latest: dict[tuple, int] = {}  # run key → index of its last report
    never_started_reports = defaultdict(list)  # job → reports that landed on its never-started run
    superseded: set[int] = set()
    adoptions: dict[int, datetime] = {}
    for i, data in enumerate(jobs):
        group, start = (data.source, data.external_id), data.start_time
        if group in runs:
            states = runs[group]
            if start is not None and start not in states and states.get(None) == JobState.PENDING:
                # The pending run started: the reports that wrote it are replaced by this one.
                superseded.update(never_started_reports.pop(group, ()))
                if group in stored_never_started:
                    adoptions[stored_never_started.pop(group)] = start
                del states[None]
            states[start] = data.state
            if start is None:
                never_started_reports[group].append(i)
        latest[(data.source, data.external_id, start)] = i
    return [jobs[i] for i in latest.values() if i not in superseded], adoptions
