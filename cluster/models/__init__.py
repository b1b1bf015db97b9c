from cluster.models.inventory import Gpu, GpuModel, Node
from cluster.models.status import Alert, NodeStatusPeriod
from cluster.models.telemetry import (
    CollectionState,
    DirtyBucket,
    HourRollup,
    MinuteRollup,
    RollupLevel,
    Sample,
)

__all__ = [
    "Alert", "CollectionState", "DirtyBucket", "Gpu", "GpuModel", "HourRollup", "MinuteRollup", "Node",
    "NodeStatusPeriod", "RollupLevel", "Sample",
]
