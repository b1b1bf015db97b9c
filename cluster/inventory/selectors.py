from collections import Counter
from dataclasses import dataclass

from cluster.choices import GpuStatus, NodeStatus


@dataclass(frozen=True)
class InventorySummary:
    node_count: int
    nodes_up: int
    gpu_count: int
    gpus_by_model: list[tuple[str, int]]


def inventory_summary(nodes) -> InventorySummary:
    """Totals for the inventory header, from nodes fetched by ``nodes_with_gpus`` (no extra queries)."""
    by_model = Counter(
        gpu.model.short_name for node in nodes for gpu in node.whole_gpus if gpu.status != GpuStatus.RETIRED
    )
    return InventorySummary(
        node_count=len(nodes),
        nodes_up=sum(node.status == NodeStatus.UP for node in nodes),
        gpu_count=sum(by_model.values()),
        gpus_by_model=sorted(by_model.items()),
    )


def collectable_node_ids() -> list[int]:
    """Nodes the collector pulls: those with an agent URL, not retired (maintenance nodes still report)."""
    from cluster.models import Node

    return list(
        Node.objects.exclude(agent_url="").exclude(status=NodeStatus.RETIRED).order_by("pk").values_list("pk", flat=True)
    )
