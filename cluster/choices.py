"""The cluster's shared choices (node and GPU status, alert tiers, subjects and kinds), with their colours."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from core.choices import ColouredChoices


class NodeStatus(ColouredChoices):
    UP = "up", _("Up")
    UNREACHABLE = "unreachable", _("Unreachable")
    UNAUTHORIZED = "unauthorized", _("Unauthorized")
    AGENT_ERROR = "agent_error", _("Agent error")
    MAINTENANCE = "maintenance", _("Maintenance")
    RETIRED = "retired", _("Retired")

    @classmethod
    def _colours(cls):
        return {
            "up": "green", "unreachable": "red", "unauthorized": "red", "agent_error": "red",
            "maintenance": "amber", "retired": "grey",
        }

    @classmethod
    def set_by_admins(cls) -> tuple[str, ...]:
        """Statuses an admin sets; the collector leaves them alone (it sets the others)."""
        return (cls.MAINTENANCE, cls.RETIRED)

    @classmethod
    def down(cls) -> tuple[str, ...]:
        """Statuses in which a node's GPUs count as down when no samples arrive (DESIGN.md §4)."""
        return (cls.UNREACHABLE, cls.UNAUTHORIZED, cls.AGENT_ERROR, cls.MAINTENANCE, cls.RETIRED)


class GpuStatus(ColouredChoices):
    ACTIVE = "active", _("Active")
    MAINTENANCE = "maintenance", _("Maintenance")
    MISSING = "missing", _("Missing")
    RETIRED = "retired", _("Retired")

    @classmethod
    def _colours(cls):
        return {"active": "green", "maintenance": "amber", "missing": "red", "retired": "grey"}


class AlertTier(ColouredChoices):
    CRITICAL = "critical", _("Critical")
    WARNING = "warning", _("Warning")
    INFO = "info", _("Info")

    @classmethod
    def _colours(cls):
        return {"critical": "red", "warning": "amber", "info": "grey"}


class AlertSubject(models.TextChoices):
    NODE = "node", _("Node")
    GPU = "gpu", _("GPU")
    TEAM = "team", _("Team")
    BOOKING = "booking", _("Booking")
    QUOTA = "quota", _("Quota")
    JOB = "job", _("Job")


class AlertKind(models.TextChoices):
    NODE_UNREACHABLE = "node_unreachable", _("Node unreachable")
    NODE_UNAUTHORIZED = "node_unauthorized", _("Agent refuses the server's token")
    AGENT_ERROR = "agent_error", _("Agent answers in an unknown shape")
    NODE_CLOCK_SKEW = "node_clock_skew", _("Agent clock off")
    GPU_XID = "gpu_xid", _("XID errors")
    GPU_ECC_DBE = "gpu_ecc_dbe", _("Double-bit ECC errors")
    BOOKING_IDLE = "booking_idle", _("Booked GPUs idle")
    BOOKING_RELEASED = "booking_released", _("Idle booking released")
    BOOKING_ENDING = "booking_ending", _("Booking ends soon")
    BOOKING_CONFLICT = "booking_conflict", _("Job on a GPU booked by another team")
    # xgettext:no-python-format
    QUOTA_50 = "quota_50", _("Quota 50 % used")
    # xgettext:no-python-format
    QUOTA_75 = "quota_75", _("Quota 75 % used")
    # xgettext:no-python-format
    QUOTA_90 = "quota_90", _("Quota 90 % used")
    QUOTA_100 = "quota_100", _("Quota used up")
    QUOTA_EXPIRY = "quota_expiry", _("Quota expires soon")
    USAGE_FAILED = "usage_failed", _("Usage accounting failed")
