"""The cluster app's models, from its domains (inventory, status, telemetry, jobs, bookings); Django loads them
from here, and code above the domains may import them from here."""

from cluster.bookings.models import (
    Booking,
    BookingMode,
    BookingStatus,
    GpuHold,
    GuaranteeDays,
    HoldKind,
    MaintenanceWindow,
    TeamBookingPolicy,
    TeamGuarantee,
)
from cluster.inventory.models import Gpu, GpuModel, GpuModelAlias, Node
from cluster.jobs.models import (
    Allocation,
    AllocationOrigin,
    IdentityKind,
    Job,
    JobSource,
    JobState,
    ObservedScanState,
    TeamIdentity,
)
from cluster.status.models import Alert, NodeStatusPeriod
from cluster.telemetry.models import (
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
    "GuaranteeDays",
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
    "TeamGuarantee",
    "TeamIdentity",
]
