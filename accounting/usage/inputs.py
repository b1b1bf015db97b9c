"""Reads for the usage aggregation: everything the state split needs for a window of whole minutes —
the physical GPUs, the claims on them (bookings, job allocations, MIG slices mapped to their GPU), the
ranges their nodes were recorded down or in maintenance, and their minute rollups as compact codes.
All times leave here as integer epoch seconds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Q

from accounting.usage.states import (
    BUSY_FLAG,
    LOW_POWER_FLAG,
    MEMORY_FLAG,
    MINUTE,
    SHALLOW_FLAG,
    SM_FLAG,
    Claim,
)
from cluster.bookings.holds import RangeBoundEpoch
from cluster.bookings.slots import epoch
from cluster.choices import GpuStatus, NodeStatus
from cluster.models import Allocation, Gpu, GpuHold, GpuModel, HoldKind, MinuteRollup, NodeStatusPeriod
from core.timewindow import WINDOW_END, WINDOW_START
from core.units import WHOLE_GPU_SHARE

BOOKING_FIRST, JOBS_AFTER = 0, 1
MINUTE_ROLLUP = MinuteRollup._meta.db_table
GPU, GPU_MODEL = Gpu._meta.db_table, GpuModel._meta.db_table


@dataclass
class GpuWindow:
    """One physical GPU's inputs over the window."""

    gpu_id: int
    node_id: int
    model_id: int
    claims: list[Claim] = field(default_factory=list)
    down: list[tuple[int, int]] = field(default_factory=list)
    codes: np.ndarray | None = None
    energy_mj: np.ndarray | None = None  # per minute


def physical_gpus(gpu_ids: Sequence[int] | None = None):
    """The GPUs that have capacity: whole GPUs (MIG slices are parts of their GPU), retired ones excluded."""
    gpus = Gpu.objects.filter(mig_parent__isnull=True).exclude(status=GpuStatus.RETIRED)
    return gpus if gpu_ids is None else gpus.filter(pk__in=gpu_ids)


def allocations_in_window() -> Q:
    """The allocations the aggregation can count: begun in the supported window, not ending after it.
    One outside it is a stored bad record (written before the window was enforced, or by raw SQL): it is
    left out, and its job is reported for an admin to correct (``accounting.usage.services.usage_process``)."""
    return Q(start__gte=WINDOW_START, start__lt=WINDOW_END) & (Q(end__isnull=True) | Q(end__lte=WINDOW_END))


def counted_allocations():
    """``Allocation.objects.counted()`` within the window (:func:`allocations_in_window`)."""
    return Allocation.objects.counted().filter(allocations_in_window())


def gpu_windows(*, start: datetime, end: datetime, now: datetime, gpu_ids: Sequence[int] | None = None,
                threshold: float) -> list[GpuWindow]:
    """Inputs of every physical GPU (or of ``gpu_ids``) over ``[start, end)``; ranges still open end at ``now``."""
    lo, hi, now_s = epoch(start), epoch(end), epoch(now)
    windows = {
        gpu_id: GpuWindow(gpu_id, node_id, model_id)
        for gpu_id, node_id, model_id, status in physical_gpus(gpu_ids).values_list("pk", "node_id", "model_id", "status")
    }
    if not windows:
        return []
    ids = list(windows)
    _booking_claims(windows, ids, start, end)
    _job_claims(windows, ids, start, end, now_s)
    _down_ranges(windows, ids, start, end, now_s)
    missing = Gpu.objects.filter(pk__in=ids, status=GpuStatus.MISSING).values_list("pk", flat=True)
    for gpu_id in missing:
        windows[gpu_id].down.append((lo, hi))
    minutes = (hi - lo) // MINUTE
    for gpu_id, (codes, energy) in minute_codes_by_gpu(ids, lo, hi, threshold).items():
        windows[gpu_id].codes, windows[gpu_id].energy_mj = codes, energy
    for window in windows.values():
        if window.codes is None:
            window.codes = np.zeros(minutes, dtype=np.int64)
            window.energy_mj = np.zeros(minutes, dtype=np.int64)
    return list(windows.values())


def _booking_claims(windows, ids, start, end) -> None:
    # Ordered by key, not by the model's default (its GPUs' hostnames: two joins and a sort of every hold, which
    # at 10,000 GPUs made this read minutes long); the claims carry their own order.
    holds = GpuHold.objects.filter(kind=HoldKind.BOOKING, active=True, gpu_id__in=ids, during__overlap=(start, end))
    rows = holds.order_by("pk").values_list(
        "pk", "gpu_id", "team_id", "project_id", RangeBoundEpoch("during", function="lower"),
        RangeBoundEpoch("during", function="upper"), "booking_id",
    )
    for pk, gpu_id, team_id, project_id, lo, hi, booking_id in rows:
        windows[gpu_id].claims.append(Claim(lo, hi, WHOLE_GPU_SHARE, team_id, project_id, (BOOKING_FIRST, lo, pk),
                                            ("booking", booking_id)))


def _job_claims(windows, ids, start, end, now_s) -> None:
    allocations = (
        counted_allocations()
        .filter(Q(gpu_id__in=ids) | Q(gpu__mig_parent_id__in=ids), start__lt=end)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .order_by("pk")
        .values_list("pk", "gpu_id", "gpu__mig_parent_id", "share", "start", "end", "job__team_id", "job__project_id",
                     "job_id")
    )
    for pk, gpu_id, parent_id, share, begin, finish, team_id, project_id, job_id in allocations:
        lo = epoch(begin)
        hi = now_s if finish is None else epoch(finish)
        physical = parent_id or gpu_id
        windows[physical].claims.append(Claim(lo, max(lo, hi), share, team_id, project_id, (JOBS_AFTER, lo, pk),
                                              ("job", job_id)))


def _down_ranges(windows, ids, start, end, now_s) -> None:
    by_node = defaultdict(list)
    for window in windows.values():
        by_node[window.node_id].append(window)
    periods = NodeStatusPeriod.objects.filter(
        node_id__in=list(by_node), status__in=NodeStatus.down(), started_at__lt=end,
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start)).order_by("pk").values_list("node_id", "started_at", "ended_at")
    for node_id, began, ended in periods:
        span = (epoch(began), now_s if ended is None else epoch(ended))
        for window in by_node[node_id]:
            window.down.append(span)
    maintenance = GpuHold.objects.filter(
        kind=HoldKind.MAINTENANCE, active=True, gpu_id__in=ids, during__overlap=(start, end)
    ).order_by("pk").values_list("gpu_id", RangeBoundEpoch("during", function="lower"), RangeBoundEpoch("during", function="upper"))
    for gpu_id, lo, hi in maintenance:
        windows[gpu_id].down.append((lo, hi))


def minute_codes_by_gpu(gpu_ids: Sequence[int], lo: int, hi: int, threshold: float) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each GPU's minute codes and energy (millijoules) over ``[lo, hi)`` (epoch seconds): one bytea per
    GPU of (minute index, code, energy) built by PostgreSQL and read with numpy, so a day of 1,000 GPUs is
    1,000 rows, not 1.4 M. A code is :func:`accounting.usage.states.minute_code` of the minute's rollup,
    here in SQL (the same rules: tests/accounting/usage/test_refinements.py holds the two together)."""
    minutes = (hi - lo) // MINUTE
    floors = settings.CARDHOUR_IDLE_POWER_FLOOR_W  # watts by GPU model short name, upper case
    # Each GPU's idle-power floor comes from its model's short name in the same statement (no read more).
    sql = f"""
        WITH f AS (
            SELECT g.id AS gpu_id, w.floor_w
            FROM {GPU} g JOIN {GPU_MODEL} m ON m.id = g.model_id
            JOIN unnest(%(floor_models)s::text[], %(floors)s::float8[]) AS w(model, floor_w) ON w.model = upper(m.short_name)
            WHERE g.id = ANY(%(ids)s)
        )
        SELECT r.gpu_id, string_agg(
            int4send(((extract(epoch FROM r.bucket)::bigint - %(lo)s) / 60)::int)
            || int2send((CASE WHEN r.util_covered_s > 0 THEN least(r.util_covered_s, 60)
                              + CASE WHEN r.util_mean >= %(threshold)s THEN %(busy)s ELSE 0 END
                              + CASE WHEN r.gpm_covered_s > 0 AND r.sm_active_mean IS NOT NULL
                                     THEN %(sm)s + CASE WHEN r.sm_active_mean < %(shallow_pct)s THEN %(shallow)s ELSE 0 END
                                     ELSE 0 END
                              + CASE WHEN r.mem_used_max_mib > %(memory_mib)s THEN %(memory)s ELSE 0 END
                              + CASE WHEN r.power_mean_w < f.floor_w THEN %(low_power)s ELSE 0 END
                         ELSE 0 END)::int2)
            || int8send(coalesce(round(r.energy_j * 1000), 0)::bigint),
            ''::bytea ORDER BY r.bucket)
        FROM {MINUTE_ROLLUP} r
        LEFT JOIN f ON f.gpu_id = r.gpu_id
        WHERE r.gpu_id = ANY(%(ids)s) AND r.bucket >= to_timestamp(%(lo)s) AND r.bucket < to_timestamp(%(hi)s)
        GROUP BY r.gpu_id
    """  # noqa: S608 (the table name from model metadata; values are bound)
    rows_type = np.dtype([("minute", ">i4"), ("code", ">i2"), ("energy", ">i8")])
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    params = {"lo": lo, "hi": hi, "ids": list(gpu_ids), "threshold": threshold, "busy": BUSY_FLAG, "sm": SM_FLAG,
              "shallow": SHALLOW_FLAG, "shallow_pct": settings.CARDHOUR_SHALLOW_SM_PCT, "memory": MEMORY_FLAG,
              "memory_mib": settings.CARDHOUR_MEMORY_HELD_MIB, "low_power": LOW_POWER_FLAG,
              "floor_models": list(floors), "floors": [float(w) for w in floors.values()]}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for gpu_id, blob in cursor.fetchall():
            codes = np.zeros(minutes, dtype=np.int64)
            energy = np.zeros(minutes, dtype=np.int64)
            if blob:
                rows = np.frombuffer(bytes(blob), dtype=rows_type)
                codes[rows["minute"]] = rows["code"]
                energy[rows["minute"]] = np.maximum(rows["energy"], 0)
            out[gpu_id] = codes, energy
    return out
