"""How far usage can be trusted: the "data complete to" watermark per node and for the cluster."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.utils import timezone

from accounting.usage.models import UsageAggregateState
from cluster.choices import NodeStatus
from cluster.models import Node
from cluster.telemetry.rollups import rollup_watermark
from core.timeutils import business_day_of


def data_complete_to(*, now: datetime | None = None) -> tuple[datetime | None, dict[int, datetime | None]]:
    """(cluster, {node id: watermark}). A node's data is complete up to the newest record its agent had
    spooled when it was last collected in full, and no further than the rollups (a node recorded down
    is complete up to now: its gap is known to be down). A node never collected has None, and so has
    the cluster while any node in service has None; retired nodes do not count."""
    now = now or timezone.now()
    rolled_up_to = rollup_watermark(now=now)
    per_node: dict[int, datetime | None] = {}
    down = NodeStatus.down()
    nodes = Node.objects.exclude(status=NodeStatus.RETIRED).values_list("pk", "status", "collection__data_complete_to")
    for pk, status, collected in nodes:  # plain values: a thousand nodes would cost a model instance each
        if status in down:
            per_node[pk] = now
        elif collected is None:
            per_node[pk] = None
        else:
            per_node[pk] = min(collected, rolled_up_to)
    values = list(per_node.values())
    cluster = None if not values or any(v is None for v in values) else min(values)
    return cluster, per_node


@dataclass(frozen=True)
class Backfill:
    """Older history being loaded (:func:`accounting.usage.services.backfill_started`): figures of the
    business days ``first`` to ``last`` are incomplete until it is done."""

    first: date
    last: date


def backfill_in_progress() -> Backfill | None:
    """The history still loading, or None (one query by primary key)."""
    row = UsageAggregateState.objects.filter(id=1, backfill_from__isnull=False, backfill_before__isnull=False).values_list(
        "backfill_from", "backfill_before").first()
    if row is None:
        return None
    return Backfill(first=business_day_of(row[0]), last=business_day_of(row[1] - timedelta(microseconds=1)))
