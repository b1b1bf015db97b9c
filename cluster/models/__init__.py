from cluster.models.bookings import (
    Booking,
    BookingMode,
    BookingStatus,
    GpuHold,
    HoldKind,
    MaintenanceWindow,
    TeamBookingPolicy,
)
from cluster.models.inventory import Gpu, GpuModel, Node
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
    "Alert", "Allocation", "AllocationOrigin", "Booking", "BookingMode", "BookingStatus", "GpuHold", "HoldKind",
    "MaintenanceWindow", "TeamBookingPolicy", "CollectionState", "DirtyBucket", "Gpu", "GpuModel", "HourRollup",
    "IdentityKind", "Job", "JobSource", "JobState", "MinuteRollup", "Node", "NodeStatusPeriod", "ObservedScanState", "RollupLevel",
    "Sample", "TeamIdentity",
]
