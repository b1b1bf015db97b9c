"""Reads for the node page's telemetry: a business day's minute series and the agent's health."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
from django.db import connection
from django.db.models import BigIntegerField, F, Func
from django.utils.translation import gettext

from cluster.choices import AlertSubject, AlertTier
from cluster.models import Alert, CollectionState, MinuteRollup, Node, NodeStatusPeriod
from cluster.telemetry.models import clock_skewed

SERIES_COLUMNS = ["gpu", "bucket_ms", "util_mean", "util_max", "mem_used_max_mib", "coverage"]
STATUS_HISTORY_LENGTH = 20
_TIER_ORDER = {AlertTier.CRITICAL: 0, AlertTier.WARNING: 1, AlertTier.INFO: 2}


def still_filling_from(data_complete_to: datetime | None, *, now: datetime) -> datetime:
    """The first minute that may still gain records: the one holding the newest record the node's agent
    had when last collected in full (or the current minute, when nothing says more). A minute
    ``[b, b + 60 s)`` is complete only once ``b + 60 s <= data_complete_to``."""
    edge = now if data_complete_to is None else min(now, data_complete_to)
    return edge.astimezone(UTC).replace(second=0, microsecond=0)


def node_day_series(
    node: Node, day_start_utc: datetime, day_end_utc: datetime, *, labels: Mapping[int, str] | None = None
) -> pd.DataFrame:
    """Minute rollups of every GPU and MIG instance of ``node`` in ``[day_start_utc, day_end_utc)``, in one
    query, as tidy rows: ``gpu`` (label), ``bucket_ms`` (minute start, epoch ms), ``util_mean`` and
    ``util_max`` (%), ``mem_used_max_mib``, ``coverage`` (covered seconds ÷ 60, 0–1). Rows come in GPU
    order (index, the whole GPU before its MIG instances), then time; a missing minute has no row.
    ``labels`` (GPU id → label, from :func:`node_gpu_labels`) names the GPUs as the page's rows do; without
    it they are named from the rows found."""
    columns = [
        "gpu_id", "gpu__index", "gpu__mig_parent_id", "gpu__mig_profile", "bucket_ms", "util_mean", "util_max",
        "mem_used_max_mib", "covered_s",
    ]
    query = (
        MinuteRollup.objects.filter(gpu__node=node, bucket__gte=day_start_utc, bucket__lt=day_end_utc)
        .order_by(
            "gpu__index", F("gpu__mig_parent_id").asc(nulls_first=True), "gpu__mig_profile", "gpu__uuid", "bucket"
        )
        .values_list(*columns[:4], EpochMs("bucket"), *columns[5:])
    )
    # Plain tuples with epoch ms from the cursor: turning a day of minutes (17,000 rows on a 12-GPU node)
    # into timestamps, dicts and converted model values cost most of the page's time.
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return pd.DataFrame({
            "gpu": pd.Series(dtype="object"), "bucket_ms": pd.Series(dtype="int64"),
            **{name: pd.Series(dtype="float64") for name in SERIES_COLUMNS[2:]},
        })
    frame = pd.DataFrame.from_records(rows, columns=columns)
    if labels is None:
        labels = gpu_labels(frame.drop_duplicates("gpu_id")[columns[:4]].itertuples(index=False))
    return pd.DataFrame({
        "gpu": frame["gpu_id"].map(labels),
        "bucket_ms": frame["bucket_ms"].astype("int64"),
        "util_mean": frame["util_mean"].astype("float64"),
        "util_max": frame["util_max"].astype("float64"),
        "mem_used_max_mib": frame["mem_used_max_mib"].astype("float64"),
        "coverage": frame["covered_s"] / MinuteRollup.BUCKET_S,
    })[SERIES_COLUMNS]


class EpochMs(Func):
    """A timestamp as whole epoch milliseconds."""

    template = "(extract(epoch from %(expressions)s) * 1000)::bigint"
    output_field = BigIntegerField()


def gpu_labels(gpus: Iterable[tuple[int, int, int | None, str]]) -> dict[int, str]:
    """GPU id → ``GPU 0`` for a whole GPU, ``GPU 0 · 1g.10gb`` for a MIG instance, from (id, index, MIG
    parent id, profile) in series order; two instances of one profile on one GPU are numbered in that order
    (``… 1g.10gb (2)``)."""
    labels, seen = {}, {}
    for gpu_id, index, parent, profile in gpus:
        label = gettext("GPU %(index)s") % {"index": index}
        if pd.notna(parent):
            mig = profile or gettext("MIG")
            label = f"{label} · {mig}"
        seen[label] = seen.get(label, 0) + 1
        labels[gpu_id] = label if seen[label] == 1 else f"{label} ({seen[label]})"
    return labels


def node_gpu_labels(node: Node) -> dict[int, str]:
    """:func:`gpu_labels` of every GPU and MIG instance of a node fetched by ``nodes_with_gpus`` (no
    query), in the series' order: by index, each whole GPU before its instances, these by profile and UUID."""
    rows = []
    for gpu in sorted(node.whole_gpus, key=lambda gpu: (gpu.index, gpu.uuid)):
        rows.append((gpu.pk, gpu.index, None, gpu.mig_profile))
        instances = sorted(gpu.mig_instances.all(), key=lambda mig: (mig.mig_profile, mig.uuid))
        rows.extend((mig.pk, mig.index, mig.mig_parent_id, mig.mig_profile) for mig in instances)
    return gpu_labels(rows)


@dataclass(frozen=True)
class NodeHealth:
    """What the collector knows of a node's agent, its recent status history and its open alerts."""

    collected: bool  # False when the collector has never tried this node
    last_attempt_at: datetime | None
    last_success_at: datetime | None
    data_complete_to: datetime | None
    lag_s: float | None
    clock_skew_s: float | None
    clock_skewed: bool  # off by more than TELEMETRY_MAX_CLOCK_SKEW_S
    consecutive_failures: int
    last_error: str
    records_stored: int
    agent_dropped_total: int
    rejected_total: int
    rejected_by_reason: list[tuple[str, int]]  # most frequent first
    agent_version: str
    driver_version: str
    status_history: list[NodeStatusPeriod]  # newest first, at most STATUS_HISTORY_LENGTH
    open_alerts: list[Alert]  # critical first, then newest


def node_health(node: Node) -> NodeHealth:
    """The node's health panel in three queries: collection state, status history, open alerts."""
    state = CollectionState.objects.filter(node=node).first() or CollectionState(node=node)
    history = list(NodeStatusPeriod.objects.filter(node=node).order_by("-started_at")[:STATUS_HISTORY_LENGTH])
    alerts = sorted(
        Alert.objects.open().about(AlertSubject.NODE, node.pk).order_by("-opened_at"),
        key=lambda alert: _TIER_ORDER.get(alert.tier, len(_TIER_ORDER)),
    )
    reasons = sorted((state.rejected_by_reason or {}).items(), key=lambda item: (-int(item[1]), item[0]))
    return NodeHealth(
        collected=state.last_attempt_at is not None,
        last_attempt_at=state.last_attempt_at,
        last_success_at=state.last_success_at,
        data_complete_to=state.data_complete_to,
        lag_s=state.lag_s,
        clock_skew_s=state.clock_skew_s,
        clock_skewed=clock_skewed(state.clock_skew_s),
        consecutive_failures=state.consecutive_failures,
        last_error=state.last_error,
        records_stored=state.records_stored,
        agent_dropped_total=state.agent_dropped_total,
        rejected_total=state.records_rejected,
        rejected_by_reason=[(reason, int(count)) for reason, count in reasons],
        agent_version=state.agent_version,
        driver_version=state.driver_version,
        status_history=history,
        open_alerts=alerts,
    )


@dataclass(frozen=True)
class GpuActivity:
    """One GPU's means over a window (issue 16): the duty cycle (``util_pct``: a kernel ran) beside SM
    activity, SM occupancy, tensor and DRAM activity (NVML GPM). A mean is None where no minute had it: a
    GPU without GPM has no SM data, never 0 %."""

    gpu_id: int
    util_pct: float | None
    sm_active_pct: float | None
    sm_occupancy_pct: float | None
    tensor_active_pct: float | None
    dram_active_pct: float | None
    measured_minutes: int
    sm_minutes: int

    @property
    def no_sm_data(self) -> bool:
        return self.sm_active_pct is None


_GPM_MEANS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")


def gpu_activity(gpu_ids: Iterable[int], start: datetime, end: datetime) -> dict[int, GpuActivity]:
    """Each GPU's :class:`GpuActivity` over the minutes of ``[start, end)`` from its minute rollups, each mean
    weighted by the seconds it covers (``util_covered_s``, ``gpm_covered_s``), in one query."""
    ids = list(gpu_ids)
    if not ids:
        return {}
    gpm = ", ".join(
        f"sum({name}_mean * gpm_covered_s) FILTER (WHERE {name}_mean IS NOT NULL)"
        f" / nullif(sum(gpm_covered_s) FILTER (WHERE {name}_mean IS NOT NULL), 0)"
        for name in _GPM_MEANS
    )
    sql = f"""
        SELECT gpu_id,
               sum(util_mean * util_covered_s) FILTER (WHERE util_mean IS NOT NULL)
                 / nullif(sum(util_covered_s) FILTER (WHERE util_mean IS NOT NULL), 0),
               {gpm},
               count(*) FILTER (WHERE util_covered_s > 0), count(*) FILTER (WHERE sm_active_mean IS NOT NULL AND gpm_covered_s > 0)
        FROM {MinuteRollup._meta.db_table}
        WHERE gpu_id = ANY(%s) AND bucket >= %s AND bucket < %s
        GROUP BY gpu_id
    """  # noqa: S608 (names from model metadata; values are bound)
    with connection.cursor() as cursor:
        cursor.execute(sql, [ids, start, end])
        rows = cursor.fetchall()
    return {row[0]: GpuActivity(row[0], *row[1:]) for row in rows}


def mean_activity(activities: Iterable[GpuActivity], weights: Mapping[int, float] | None = None) -> GpuActivity | None:
    """The activities of several GPUs as one (a job's), each GPU's means weighted by its measured minutes
    (times ``weights``, a GPU's share); None when there are none."""
    items = list(activities)
    if not items:
        return None

    def mean(attr: str, minutes_attr: str) -> float | None:
        pairs = [(getattr(a, attr), getattr(a, minutes_attr) * (weights or {}).get(a.gpu_id, 1)) for a in items]
        pairs = [(v, w) for v, w in pairs if v is not None and w > 0]
        total = sum(w for _v, w in pairs)
        return sum(v * w for v, w in pairs) / total if total else None

    return GpuActivity(
        gpu_id=0, util_pct=mean("util_pct", "measured_minutes"), sm_active_pct=mean("sm_active_pct", "sm_minutes"),
        sm_occupancy_pct=mean("sm_occupancy_pct", "sm_minutes"), tensor_active_pct=mean("tensor_active_pct", "sm_minutes"),
        dram_active_pct=mean("dram_active_pct", "sm_minutes"),
        measured_minutes=sum(a.measured_minutes for a in items), sm_minutes=sum(a.sm_minutes for a in items),
    )


def collection_shards(node_ids: list[int], shards: int) -> list[list[int]]:
    """The nodes split into ``shards`` (by id modulo), the shard whose node waited longest first (a node
    never collected before all). Beat sends the shards in this order, each expiring after one interval: sent
    in a fixed order, an overloaded worker let the same last shards expire every round, and their nodes were
    never collected (the fleet soak of issue 18 saw 312 of 1,250)."""
    last = dict(CollectionState.objects.filter(node_id__in=node_ids).values_list("node_id", "last_success_at"))
    never = datetime.min.replace(tzinfo=UTC)
    groups = [[node_id for node_id in node_ids if node_id % shards == shard] for shard in range(shards)]
    groups = [ids for ids in groups if ids]
    return sorted(groups, key=lambda ids: min(last.get(node_id) or never for node_id in ids))
