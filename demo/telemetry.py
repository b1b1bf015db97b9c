"""The demo history's telemetry (demo/history.py): a minute rollup for every physical GPU and minute,
generated in SQL so that it agrees with the stored jobs and bookings, and the hour rollups from them.

Each GPU's time is cut into stretches (:func:`gpu_stretches`): its jobs' allocations and its bookings,
each with its profile (demo/workloads.py), the free time between them, and nothing in the holes (an
outage, a sample gap, a maintenance window). One ``INSERT … SELECT`` over ``generate_series`` per
stretch draws each minute from its profile: pretraining ~95 % with a dip at each hourly checkpoint, the
always-full GPU 97–100 %, training at its job's level ± a wobble and noise, a notebook under 5 % but
for bursts, an endpoint at 10–28 % following the business day's rhythm, a batch job at its level
± 3 %; under 4 % in a job's idle first or last minutes (as planned) and on the GPUs a job holds but
leaves unused; 0–2 % when free; no utilization on the MIG-partitioned GPU (NVML gives none: its
slices' jobs are unmeasured); a few minutes partly covered. On the Hopper GPUs each minute has an SM
activity, occupancy, tensor and DRAM activity (NVML GPM) below its duty cycle (:data:`_SM_RATIO`); the
A100 and L40S have none. The hour rollups are computed from them as
the rollup worker would. Both are ``ON CONFLICT DO NOTHING``, so a rerun adds nothing twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from django.db import connection

from agents.backends.gpu_models import find_model
from cluster.models import Gpu, HourRollup, MinuteRollup
from cluster.telemetry.rollups import EPOCH, HOUR_ONLY_COLUMNS, HOUR_ONLY_SOURCES, ROLLUP_COLUMNS
from core.timeutils import business_zone
from demo.workloads import BATCH, FREE, FULL, IDLE, NOTEBOOK, PRETRAIN, SERVE, TRAIN, Profile

MINUTE_ROLLUP = MinuteRollup._meta.db_table
GPM_MODELS = {"H100", "H200"}  # Hopper: NVML GPM (the A100 and the L40S have none)
HOUR_ROLLUP = HourRollup._meta.db_table
BURST_BLOCK_MIN, BURST_CHANCE = 12, 0.12  # a notebook's bursts: a 12-minute block busy one time in eight


def _rand(k: int, a: str = "gpu_id", b: str = "mi") -> str:
    """A pseudo-random number in [0, 1) from two integers (the classic sin hash): by default the GPU and the minute."""
    value = f"sin({a}::float8 * 12.9898 + ({b} %% 1000003)::float8 * 78.233 + {k}) * 43758.5453"
    return f"({value} - floor({value}))"


# 0 at 04:00 and 1 at 16:00 (local), damped to 45 % on weekends: an endpoint's traffic
_RHYTHM = """(0.5 - 0.5 * cos(2 * pi() * (((mi + %(offset)s) %% 1440) / 60.0 - 4) / 24))
    * CASE WHEN ((mi + %(offset)s) / 1440 + 3) %% 7 >= 5 THEN 0.45 ELSE 1 END"""
# A hung pretraining run (its idle tail) whose job number is even hangs in a collective that never returns:
# the kernel spins, so the duty cycle reads 99–100 % on a few SMs while the GPU draws its idle power (as NCCL
# hangs look); the odd ones hang idle (a stalled data loader). The board's "busy at idle power" finds them.
_SPIN = f"(s.kind = {PRETRAIN} AND mi >= s.idle_from AND s.seed %% 2 = 0)"
_UTIL = f"""CASE
    WHEN g.mig THEN NULL
    WHEN s.kind = {FREE} THEN 2 * {_rand(1)}
    WHEN {_SPIN} THEN 99 + {_rand(1)}
    WHEN s.kind = {IDLE} OR mi < s.idle_to OR mi >= s.idle_from THEN 0.2 + 3.5 * {_rand(1)}
    WHEN s.kind = {FULL} THEN least(100, s.level + 3 * {_rand(1)})
    WHEN s.kind = {PRETRAIN} THEN CASE WHEN (mi + s.seed * 7) %% 60 < 2 THEN 35 + 20 * {_rand(1)}
        ELSE least(100, s.level + 1.2 * sin(mi::float8 / 7 + gpu_id) + 2 * (2 * {_rand(1)} - 1)) END
    WHEN s.kind = {TRAIN} THEN s.level + 4 * sin(mi::float8 / 13 + gpu_id) + 3 * (2 * {_rand(1)} - 1)
    WHEN s.kind = {NOTEBOOK} THEN CASE WHEN {_rand(5, "s.seed", f"(mi / {BURST_BLOCK_MIN})")} < {BURST_CHANCE}
        THEN 30 + 55 * {_rand(1)} ELSE 0.2 + 2.8 * {_rand(1)} END
    WHEN s.kind = {SERVE} THEN greatest(10.2, least(29.5, 10 + 18 * {_RHYTHM} + 2.5 * (2 * {_rand(1)} - 1)))
    WHEN s.kind = {BATCH} THEN s.level + 3 * (2 * {_rand(1)} - 1)
END"""

# NVML GPM (issue 16) on the Hopper GPUs: SM activity a share of the duty cycle by the kind of work (a
# training job one in four a small-batch run at a quarter of it: shallow busy; an endpoint's decoding
# half of it: shallow too), occupancy about half of that, tensor pipes busy in training only.
_SM_RATIO = f"""CASE
    WHEN kind = {FULL} THEN 0.86 WHEN kind = {PRETRAIN} THEN 0.8
    WHEN kind = {TRAIN} THEN CASE WHEN seed %% 4 = 0 THEN 0.24 ELSE 0.72 END
    WHEN kind = {NOTEBOOK} THEN 0.35 WHEN kind = {SERVE} THEN 0.5 WHEN kind = {BATCH} THEN 0.55 ELSE 0.3 END"""
_TENSOR_RATIO = f"""CASE WHEN kind IN ({FULL}, {PRETRAIN}, {TRAIN}) THEN 0.75 WHEN kind = {SERVE} THEN 0.4
    WHEN kind = {BATCH} THEN 0.3 ELSE 0.05 END"""
GPM_COLUMNS = ("sm_active_mean", "sm_occupancy_mean", "tensor_active_mean", "dram_active_mean", "gpm_covered_s")

# Rows come from one generate_series per stretch; util and power are computed once per row in their own
# subquery (OFFSET 0 keeps PostgreSQL from inlining them into every use).
_MINUTES_SQL = f"""
WITH gpus AS (
    SELECT * FROM unnest(%(gpu)s::bigint[], %(mig)s::bool[], %(gpm)s::bool[], %(memory)s::int[], %(idle_w)s::float8[],
                         %(full_w)s::float8[], %(idle_t)s::float8[], %(full_t)s::float8[])
        AS g(gpu_id, mig, gpm, memory_mib, idle_w, full_w, idle_t, full_t)
),
stretches AS (  -- in epoch minutes: generate_series and the hashes work on integers
    SELECT * FROM unnest(%(s_gpu)s::bigint[], %(s_lo)s::bigint[], %(s_hi)s::bigint[], %(s_kind)s::int[],
                         %(s_level)s::float8[], %(s_memory)s::float8[], %(s_idle_to)s::bigint[],
                         %(s_idle_from)s::bigint[], %(s_seed)s::int[])
        AS s(gpu_id, lo, hi, kind, level, memory, idle_to, idle_from, seed)
)
INSERT INTO {MINUTE_ROLLUP} ({", ".join((*ROLLUP_COLUMNS, *GPM_COLUMNS))})
SELECT gpu_id, to_timestamp(mi * 60), round(util * 10) / 10,
       CASE WHEN NOT mig THEN round(least(100, util + 6 * r3) * 10) / 10 END,
       CASE WHEN mig THEN NULL WHEN kind = {FREE} OR spin THEN 0 ELSE round(util * 4.5) / 10 END,
       CASE WHEN mig THEN 61 WHEN kind = {FREE} THEN 0
            WHEN mi < idle_to THEN (memory_mib * 0.25)::int ELSE (memory_mib * memory)::int END,
       round(power * 10) / 10, round(power * covered * 10) / 10,
       round(idle_t + (full_t - idle_t) * greatest(0, (power - idle_w) / (full_w - idle_w)))::smallint,
       0, 0, covered, CASE WHEN mig THEN 0 ELSE covered END, ceil(covered / 10.0)::int,
       round(sm * 10) / 10, round(sm * (0.45 + 0.1 * r4) * 10) / 10, round(sm * {_TENSOR_RATIO} * 10) / 10,
       round(least(100, CASE WHEN kind = {SERVE} THEN 30 + 1.5 * sm ELSE 0.45 * sm END) * 10) / 10,
       CASE WHEN sm IS NULL THEN 0 ELSE covered END
FROM (
    SELECT *, CASE WHEN NOT gpm OR mig THEN NULL WHEN spin THEN 0.6 + 0.9 * r4
                   ELSE least(util, util * {_SM_RATIO} * (0.92 + 0.16 * r4)) END AS sm
    FROM (
    SELECT *,
        CASE WHEN mig THEN idle_w + (full_w - idle_w) * (0.1 + 0.2 * r3)
             WHEN kind = {FREE} THEN idle_w * (0.99 + 0.02 * r3)
             WHEN spin THEN idle_w * (1.03 + 0.1 * r3)
             ELSE idle_w + (full_w - idle_w) * (0.06 + 0.94 * power(util / 100, 1.2)) END AS power
    FROM (
        SELECT g.*, s.kind, s.memory, s.idle_to, s.seed, mi, {_rand(3)} AS r3, {_rand(4)} AS r4, {_UTIL} AS util, {_SPIN} AS spin,
            CASE WHEN {_rand(2)} < 0.0015 THEN 10 + floor({_rand(3)} * 40)::int ELSE 60 END AS covered
        FROM gpus g
        JOIN stretches s USING (gpu_id)
        CROSS JOIN LATERAL generate_series(s.lo, s.hi - 1) mi
        OFFSET 0
    ) valued OFFSET 0
    ) powered OFFSET 0
) measured
ON CONFLICT (gpu_id, bucket) DO NOTHING
"""  # noqa: S608 (only module constants are interpolated)


class Stretch(NamedTuple):
    """A stretch of one GPU's time drawn from one profile, in epoch minutes: ``[lo, hi)``; idle before
    ``idle_to`` and from ``idle_from`` (the profile's idle head and tail); ``seed`` varies its noise."""

    gpu_id: int
    lo: int
    hi: int
    profile: Profile
    seed: int
    idle_to: int
    idle_from: int


def _epoch_minute(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def gpu_stretches(gpu_ids: list[int], *, held: list[tuple], start: datetime, end: datetime,
                  holes: list[tuple]) -> list[Stretch]:
    """Each GPU's time in ``[start, end)``: ``held`` (GPU, lo, hi, profile, seed), which never overlap on a
    GPU, and the free time between them, neither in ``holes`` (GPU, lo, hi)."""
    lo_all, hi_all = _epoch_minute(start), _epoch_minute(end)
    by_gpu: dict[int, list[Stretch]] = {gpu_id: [] for gpu_id in gpu_ids}
    for gpu_id, lo, hi, profile, seed in held:
        first, last = _epoch_minute(lo), _epoch_minute(hi)
        by_gpu[gpu_id].append(Stretch(gpu_id, max(lo_all, first), min(hi_all, last), profile, seed,
                                      first + profile.idle_minutes, last - profile.idle_tail_minutes))
    cut: dict[int, list[tuple[int, int]]] = {}
    for gpu_id, lo, hi in holes:
        cut.setdefault(gpu_id, []).append((_epoch_minute(lo), _epoch_minute(hi)))
    out = []
    for gpu_id, spans in by_gpu.items():
        filled, at = [], lo_all
        for span in sorted((s for s in spans if s.hi > s.lo), key=lambda s: s.lo):
            filled += [Stretch(gpu_id, at, span.lo, Profile(), 0, 0, hi_all)] if span.lo > at else []
            filled.append(span)
            at = max(at, span.hi)
        filled += [Stretch(gpu_id, at, hi_all, Profile(), 0, 0, hi_all)] if hi_all > at else []
        out += [span._replace(lo=a, hi=b) for span in filled for a, b in _subtract(span.lo, span.hi, cut.get(gpu_id, []))]
    return out


def _subtract(lo: int, hi: int, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    pieces = [(lo, hi)]
    for h_lo, h_hi in holes:
        pieces = [p for a, b in pieces for p in ((a, min(b, h_lo)), (max(a, h_hi), b)) if p[1] > p[0]]
    return pieces


def insert_minutes(gpus: list[Gpu], *, mig: set[int], stretches: list[Stretch], start: datetime) -> int:
    """A rollup for every minute of ``stretches`` (:func:`gpu_stretches`) of ``gpus``; ``mig``: the
    MIG-partitioned GPUs (no utilization, as NVML reports them). Returns the rows inserted."""
    specs = [find_model(g.model.name) or find_model("H100") for g in gpus]
    offset = start.astimezone(business_zone()).utcoffset() or timedelta(0)  # the rhythm's zone, at the start
    params = {
        "gpu": [g.pk for g in gpus], "mig": [g.pk in mig for g in gpus],
        "gpm": [g.model.short_name in GPM_MODELS for g in gpus], "memory": [g.memory_mib for g in gpus],
        "idle_w": [s.idle_w for s in specs], "full_w": [s.full_load_w for s in specs],
        "idle_t": [s.idle_temp_c for s in specs], "full_t": [s.full_load_temp_c for s in specs],
        "s_gpu": [s.gpu_id for s in stretches], "s_lo": [s.lo for s in stretches], "s_hi": [s.hi for s in stretches],
        "s_kind": [s.profile.kind for s in stretches], "s_level": [float(s.profile.level) for s in stretches],
        "s_memory": [float(s.profile.memory) for s in stretches], "s_idle_to": [s.idle_to for s in stretches],
        "s_idle_from": [s.idle_from for s in stretches], "s_seed": [s.seed for s in stretches],
        "offset": int(offset / timedelta(minutes=1)),
    }
    with connection.cursor() as cursor:
        cursor.execute(_MINUTES_SQL, params)
        return cursor.rowcount


_GPM_HOURS = ", ".join(
    f"sum({c} * gpm_covered_s) FILTER (WHERE {c} IS NOT NULL) / nullif(sum(gpm_covered_s) FILTER (WHERE {c} IS NOT NULL), 0)"
    for c in GPM_COLUMNS[:-1])
_HOURS_SQL = f"""
INSERT INTO {HOUR_ROLLUP} ({", ".join((*ROLLUP_COLUMNS, *GPM_COLUMNS, *HOUR_ONLY_COLUMNS))})
SELECT gpu_id, date_bin('3600 seconds', bucket, {EPOCH}),
    sum(util_mean * util_covered_s) / nullif(sum(util_covered_s) FILTER (WHERE util_mean IS NOT NULL), 0),
    max(util_max),
    sum(util_mem_mean * aux_s) / nullif(sum(aux_s) FILTER (WHERE util_mem_mean IS NOT NULL), 0),
    max(mem_used_max_mib),
    sum(power_mean_w * aux_s) / nullif(sum(aux_s) FILTER (WHERE power_mean_w IS NOT NULL), 0),
    sum(energy_j), max(temp_max_c), sum(xid_count), sum(ecc_dbe_count), sum(covered_s), sum(util_covered_s),
    sum(sample_count), {_GPM_HOURS}, sum(gpm_covered_s), {HOUR_ONLY_SOURCES}
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
