"""Node health on the daily board (issue 14): each node in scope as it is now — its status, collection
lag, "data complete to", open XID and ECC alerts and missing GPUs — problems first. Four queries.

The page lists the nodes that need a look (a problem, or not up: down, in maintenance) one per row, and
the healthy ones as one line (how many, their largest lag) with a link to the inventory, so the block
stays a few rows at 125 nodes or 1,250; the JSON lists every node."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q

from accounting.usage.selectors import data_complete_to
from boards.scope import BoardScope
from cluster.choices import AlertKind, AlertSubject, GpuStatus, NodeStatus
from cluster.models import Alert, Gpu, Node

LAGGING_S = 300  # a collection lag above this is a problem worth a look

PROBLEM_STATUSES = (NodeStatus.UNREACHABLE, NodeStatus.UNAUTHORIZED, NodeStatus.AGENT_ERROR)


@dataclass(frozen=True)
class NodeHealth:
    node_id: int
    hostname: str
    pool: str
    status: str
    status_label: str
    status_colour: str
    lag_s: float | None
    last_success_at: datetime | None
    data_complete_to: datetime | None
    xid_alerts: int
    ecc_alerts: int
    gpus_missing: int
    last_error: str

    @property
    def problem(self) -> bool:
        return (self.status in PROBLEM_STATUSES or self.xid_alerts > 0 or self.ecc_alerts > 0
                or self.gpus_missing > 0 or (self.lag_s is not None and self.lag_s > LAGGING_S)
                or (self.status == NodeStatus.UP and self.data_complete_to is None))


@dataclass(frozen=True)
class HealthView:
    """What the page shows of node health: the nodes to look at, and the rest counted."""

    attention: list[NodeHealth]
    healthy: int
    healthy_lag_max_s: float | None

    @classmethod
    def of(cls, rows: list[NodeHealth]) -> HealthView:
        attention, lags = [], []
        for row in rows:
            if row.problem or row.status != NodeStatus.UP:
                attention.append(row)
            elif row.lag_s is not None:
                lags.append(row.lag_s)
        return cls(attention=attention, healthy=len(rows) - len(attention), healthy_lag_max_s=max(lags, default=None))


def node_health(scope: BoardScope) -> list[NodeHealth]:
    nodes = Node.objects.exclude(status=NodeStatus.RETIRED)
    if scope.pool is not None:
        nodes = nodes.filter(pool=scope.pool)
    if scope.node_id is not None:
        nodes = nodes.filter(pk=scope.node_id)
    if scope.gpu_model_id is not None:
        nodes = nodes.filter(gpus__model_id=scope.gpu_model_id).distinct()
    # Plain values, not model instances: a node's instance would decrypt its agent token, for nothing.
    nodes = list(nodes.annotate(
        missing=Count("gpus", filter=Q(gpus__status=GpuStatus.MISSING, gpus__mig_parent__isnull=True)),
    ).values("pk", "hostname", "pool", "status", "missing", "collection__lag_s", "collection__last_success_at",
             "collection__last_error"))
    ids = [node["pk"] for node in nodes]
    alerts: Counter = Counter()
    gpus = Gpu.objects.filter(node_id__in=ids)
    open_alerts = Alert.objects.open().filter(kind__in=(AlertKind.GPU_XID, AlertKind.GPU_ECC_DBE)).filter(
        Q(subject_type=AlertSubject.GPU, subject_id__in=gpus.values("pk")) | Q(subject_type=AlertSubject.NODE, subject_id__in=ids)
    ).values_list("subject_type", "subject_id", "kind")
    open_alerts = list(open_alerts)
    gpu_node = dict(gpus.filter(pk__in={i for t, i, _k in open_alerts if t == AlertSubject.GPU}).values_list("pk", "node_id"))
    for subject_type, subject_id, kind in open_alerts:
        node_id = subject_id if subject_type == AlertSubject.NODE else gpu_node.get(subject_id)
        alerts[(node_id, kind)] += 1
    _cluster, complete = data_complete_to(now=scope.now)
    rows = []
    for node in nodes:
        pk, status = node["pk"], NodeStatus(node["status"])
        rows.append(NodeHealth(
            node_id=pk, hostname=node["hostname"], pool=node["pool"], status=node["status"],
            status_label=str(status.label), status_colour=status.colour, lag_s=node["collection__lag_s"],
            last_success_at=node["collection__last_success_at"], data_complete_to=complete.get(pk),
            xid_alerts=alerts[(pk, AlertKind.GPU_XID)], ecc_alerts=alerts[(pk, AlertKind.GPU_ECC_DBE)],
            gpus_missing=node["missing"], last_error=node["collection__last_error"] or "",
        ))
    rows.sort(key=lambda r: (not r.problem, r.status == NodeStatus.UP, r.hostname))
    return rows
