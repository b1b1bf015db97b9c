"""How far usage can be trusted: the "data complete to" watermark per node and for the cluster."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from cluster.choices import NodeStatus
from cluster.models import Node
from cluster.telemetry.rollups import rollup_watermark


def data_complete_to(*, now: datetime | None = None) -> tuple[datetime | None, dict[int, datetime | None]]:
    """(cluster, {node id: watermark}). A node's data is complete up to the newest record its agent had
    spooled when it was last collected in full, and no further than the rollups (a node recorded down
    is complete up to now: its gap is known to be down). A node never collected has None, and so has
    the cluster while any node in service has None; retired nodes do not count."""
    now = now or timezone.now()
    rolled_up_to = rollup_watermark(now=now)
    per_node: dict[int, datetime | None] = {}
    nodes = Node.objects.exclude(status=NodeStatus.RETIRED).select_related("collection")
    for node in nodes:
        collected = getattr(getattr(node, "collection", None), "data_complete_to", None)
        if node.status in NodeStatus.down():
            per_node[node.pk] = now
        elif collected is None:
            per_node[node.pk] = None
        else:
            per_node[node.pk] = min(collected, rolled_up_to)
    values = list(per_node.values())
    cluster = None if not values or any(v is None for v in values) else min(values)
    return cluster, per_node
