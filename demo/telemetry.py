"""The demo history's telemetry (demo/history.py): a minute rollup for every physical GPU and minute,
generated in SQL so that it agrees with the stored jobs, and the hour rollups from them.

The minute rollups are one ``INSERT … SELECT`` over ``generate_series``, run over each stretch of a
GPU's time read back from the stored allocations (an allocation, or the free time between two): busy
60–95 % inside a job, except that one job in six sits idle (< 5 %) for its first 2–6 hours, "allocated
but idle"; 0–2 % when free; no utilization on the MIG-partitioned GPU (NVML gives none: its slices'
jobs are unmeasured); a few minutes partly covered; no rows in the holes (the outage, the sample gap, a
maintenance window). The hour rollups are computed from them as the rollup worker would. Both are
``ON CONFLICT DO NOTHING``, so a rerun adds nothing twice.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from agents.backends.gpu_models import find_model
from cluster.models import Allocation, Gpu, HourRollup, Job, JobSource, MinuteRollup
from cluster.telemetry.rollups import EPOCH, ROLLUP_COLUMNS

IDLE_HEAD_EVERY = 6  # demo job <n> with n divisible by this sits idle for its first 2–6 hours (at most half its run)
ALLOCATION = Allocation._meta.db_table
JOB = Job._meta.db_table
MINUTE_ROLLUP = MinuteRollup._meta.db_table
HOUR_ROLLUP = HourRollup._meta.db_table


def _rand(k: int) -> str:
    """A pseudo-random number in [0, 1) from the GPU and the minute (the classic sin hash)."""
    value = f"sin(gpu_id::float8 * 12.9898 + (mi %% 1000003)::float8 * 78.233 + {k}) * 43758.5453"
    return f"({value} - floor({value}))"


# Rows come from one generate_series per stretch of a GPU's time (an allocation, or the free time
# between two), so no join of millions of minutes is needed; util and power are computed once per row
# in their own subquery (OFFSET 0 keeps PostgreSQL from inlining them into every use).
_MINUTES_SQL = f"""
WITH gpus AS (
    SELECT * FROM unnest(%(gpu)s::bigint[], %(mig)s::bool[], %(memory)s::int[], %(idle_w)s::float8[],
                         %(full_w)s::float8[], %(idle_t)s::float8[], %(full_t)s::float8[])
        AS g(gpu_id, mig, memory_mib, idle_w, full_w, idle_t, full_t)
),
holes AS (
    SELECT gpu_id, (extract(epoch FROM lo) / 60)::bigint AS lo, (extract(epoch FROM hi) / 60)::bigint AS hi
    FROM unnest(%(hole_gpu)s::bigint[], %(hole_lo)s::timestamptz[], %(hole_hi)s::timestamptz[]) AS h(gpu_id, lo, hi)
),
held AS (  -- the demo jobs' allocations on whole GPUs, as stored; one in six starts idle
    SELECT a.gpu_id, greatest(a.start, %(start)s) AS lo, least(a."end", %(end)s) AS hi, j.n,
           CASE WHEN j.n %% {IDLE_HEAD_EVERY} = 0
                THEN a.start + least(interval '1 hour' * (2 + j.n %% 5), (a."end" - a.start) / 2)
                ELSE a.start END AS idle_to
    FROM {ALLOCATION} a
    JOIN (SELECT id, substr(external_id, length(%(prefix)s::text) + 1)::int AS n FROM {JOB}
          WHERE source = %(source)s AND external_id LIKE %(like)s) j ON j.id = a.job_id
    WHERE a.gpu_id = ANY(%(gpu)s) AND a.start < %(end)s AND a."end" > %(start)s
),
free AS (  -- the time between them
    SELECT g.gpu_id, f.lo, f.hi, NULL::int AS n, f.lo AS idle_to
    FROM gpus g CROSS JOIN LATERAL (
        SELECT coalesce(lag(hi) OVER (ORDER BY lo), %(start)s) AS lo, lo AS hi FROM held WHERE held.gpu_id = g.gpu_id
        UNION ALL
        SELECT coalesce(max(hi), %(start)s), %(end)s FROM held WHERE held.gpu_id = g.gpu_id
    ) f
    WHERE f.hi > f.lo
),
stretches AS (  -- in epoch minutes: generate_series and the hashes below work on integers
    SELECT gpu_id, n, (extract(epoch FROM lo) / 60)::bigint AS lo, (extract(epoch FROM hi) / 60)::bigint AS hi,
           (extract(epoch FROM idle_to) / 60)::bigint AS idle_to
    FROM (SELECT * FROM held UNION ALL SELECT * FROM free) s
    ORDER BY gpu_id, lo
)
INSERT INTO {MINUTE_ROLLUP} ({", ".join(ROLLUP_COLUMNS)})
SELECT gpu_id, to_timestamp(mi * 60), round(util * 10) / 10,
       CASE WHEN NOT mig THEN round(least(100, util + 6 * r3) * 10) / 10 END,
       CASE WHEN mig THEN NULL WHEN n IS NULL THEN 0 ELSE round(util * 4.5) / 10 END,
       CASE WHEN mig THEN 61 WHEN n IS NULL THEN 0
            WHEN mi < idle_to THEN (memory_mib * 0.25)::int ELSE (memory_mib * (0.55 + 0.04 * (n %% 10)))::int END,
       round(power * 10) / 10, round(power * covered * 10) / 10,
       round(idle_t + (full_t - idle_t) * greatest(0, (power - idle_w) / (full_w - idle_w)))::smallint,
       0, 0, covered, CASE WHEN mig THEN 0 ELSE covered END, ceil(covered / 10.0)::int
FROM (
    SELECT *,
        CASE WHEN mig THEN idle_w + (full_w - idle_w) * (0.1 + 0.2 * r3)
             WHEN n IS NULL THEN idle_w * (0.99 + 0.02 * r3)
             ELSE idle_w + (full_w - idle_w) * (0.06 + 0.94 * power(util / 100, 1.2)) END AS power
    FROM (
        SELECT g.*, s.n, s.idle_to, mi, {_rand(3)} AS r3,
            CASE WHEN g.mig THEN NULL
                 WHEN s.n IS NULL THEN 2 * {_rand(1)}
                 WHEN mi < s.idle_to THEN 0.3 + 3 * {_rand(1)}
                 ELSE 64 + (s.n * 37) %% 28 + 4 * sin(mi::float8 / 13 + gpu_id) + 3 * (2 * {_rand(1)} - 1) END AS util,
            CASE WHEN {_rand(2)} < 0.0015 THEN 10 + floor({_rand(3)} * 40)::int ELSE 60 END AS covered
        FROM gpus g
        JOIN stretches s USING (gpu_id)
        CROSS JOIN LATERAL generate_series(s.lo, s.hi - 1) mi
        WHERE NOT EXISTS (SELECT 1 FROM holes h WHERE h.gpu_id = g.gpu_id AND mi >= h.lo AND mi < h.hi)
        OFFSET 0
    ) valued OFFSET 0
) powered
ON CONFLICT (gpu_id, bucket) DO NOTHING
"""  # noqa: S608 (only module constants are interpolated)


def insert_minutes(gpus: list[Gpu], *, mig: set[int], start: datetime, end: datetime, holes: list[tuple],
                   job_prefix: str) -> int:
    """A rollup for every minute of ``gpus`` in ``[start, end)`` but ``holes`` (GPU, lo, hi), busy where the
    Slurm jobs ``<job_prefix><n>`` hold them; ``mig``: the MIG-partitioned GPUs (no utilization, as NVML
    reports them). Returns the rows inserted."""
    specs = [find_model(g.model.name) or find_model("H100") for g in gpus]
    params = {
        "gpu": [g.pk for g in gpus], "mig": [g.pk in mig for g in gpus], "memory": [g.memory_mib for g in gpus],
        "idle_w": [s.idle_w for s in specs], "full_w": [s.full_load_w for s in specs],
        "idle_t": [s.idle_temp_c for s in specs], "full_t": [s.full_load_temp_c for s in specs],
        "hole_gpu": [h[0] for h in holes], "hole_lo": [h[1] for h in holes], "hole_hi": [h[2] for h in holes],
        "start": start, "end": end, "source": JobSource.SLURM, "prefix": job_prefix, "like": job_prefix + "%",
    }
    with connection.cursor() as cursor:
        cursor.execute(_MINUTES_SQL, params)
        return cursor.rowcount


_HOURS_SQL = f"""
INSERT INTO {HOUR_ROLLUP} ({", ".join(ROLLUP_COLUMNS)})
SELECT gpu_id, date_bin('3600 seconds', bucket, {EPOCH}),
    sum(util_mean * util_covered_s) / nullif(sum(util_covered_s) FILTER (WHERE util_mean IS NOT NULL), 0),
    max(util_max),
    sum(util_mem_mean * aux_s) / nullif(sum(aux_s) FILTER (WHERE util_mem_mean IS NOT NULL), 0),
    max(mem_used_max_mib),
    sum(power_mean_w * aux_s) / nullif(sum(aux_s) FILTER (WHERE power_mean_w IS NOT NULL), 0),
    sum(energy_j), max(temp_max_c), sum(xid_count), sum(ecc_dbe_count), sum(covered_s), sum(util_covered_s),
    sum(sample_count)
FROM (SELECT *, CASE WHEN util_covered_s > 0 THEN util_covered_s ELSE covered_s END AS aux_s
      FROM {MINUTE_ROLLUP} WHERE gpu_id = ANY(%(gpu)s) AND bucket >= %(start)s AND bucket < %(end)s) m
GROUP BY 1, 2
ON CONFLICT (gpu_id, bucket) DO NOTHING
"""  # noqa: S608 (only module constants are interpolated)


def insert_hours(gpu_ids: list[int], *, start: datetime, end: datetime) -> int:
    """The hour rollups of the generated minutes, as the rollup worker computes them (cluster/telemetry/rollups.py)."""
    with connection.cursor() as cursor:
        cursor.execute(_HOURS_SQL, {"gpu": gpu_ids, "start": start, "end": end})
        return cursor.rowcount
