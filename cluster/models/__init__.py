from cluster.models.bookings import (
    Booking,
    BookingMode,
    BookingStatus,
    GpuHold,
    HoldKind,
    MaintenanceWindow,
    TeamBookingPolicy,
)
from cluster.models.inventory import Gpu, GpuModel, GpuModelAlias, Node
from cluster.models.jobs import (
    Allocation,
    AllocationOrigin,
    IdentityKind,
    Job,
    JobSource,
    JobState,
    ObservedScanState,
    TeamIdentity,
)
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
    "Alert",
    "Allocation",
    "AllocationOrigin",
    "Booking",
    "BookingMode",
    "BookingStatus",
    "CollectionState",
    "DirtyBucket",
    "Gpu",
    "GpuHold",
    "GpuModel",
    "GpuModelAlias",
    "HoldKind",
    "HourRollup",
    "IdentityKind",
    "Job",
    "JobSource",
    "JobState",
    "MaintenanceWindow",
    "MinuteRollup",
    "Node",
    "NodeStatusPeriod",
    "ObservedScanState",
    "RollupLevel",
    "Sample",
    "TeamBookingPolicy",
    "TeamIdentity",
]
