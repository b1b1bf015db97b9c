"""Choices carry their label and display colour, so templates never compare raw strings."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class ColouredChoices(models.TextChoices):
    @property
    def colour(self) -> str:
        return self._colours().get(self.value, "grey")

    @classmethod
    def _colours(cls) -> dict[str, str]:
        return {}


class NodeStatus(ColouredChoices):
    UP = "up", _("Up")
    UNREACHABLE = "unreachable", _("Unreachable")
    MAINTENANCE = "maintenance", _("Maintenance")
    RETIRED = "retired", _("Retired")

    @classmethod
    def _colours(cls):
        return {"up": "green", "unreachable": "red", "maintenance": "amber", "retired": "grey"}


class GpuStatus(ColouredChoices):
    ACTIVE = "active", _("Active")
    MAINTENANCE = "maintenance", _("Maintenance")
    MISSING = "missing", _("Missing")
    RETIRED = "retired", _("Retired")

    @classmethod
    def _colours(cls):
        return {"active": "green", "maintenance": "amber", "missing": "red", "retired": "grey"}
