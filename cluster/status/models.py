from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from cluster.choices import AlertKind, AlertSubject, AlertTier, NodeStatus
from cluster.inventory.models import Node
from core.languages import in_current_language

MESSAGE_IN = "message_in"  # details' key of an alert's message in every language


class NodeStatusPeriod(models.Model):
    """A time range during which a node had one status; the open one (no end) is the current status."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="status_periods")
    status = models.CharField(max_length=16, choices=NodeStatus.choices)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["node", "-started_at"]
        verbose_name = _("node status period")
        verbose_name_plural = _("node status periods")
        indexes = [models.Index(fields=["node", "started_at"])]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=models.Q(ended_at__isnull=True), name="one_open_status_period"),
            models.CheckConstraint(
                condition=models.Q(ended_at__isnull=True) | models.Q(ended_at__gte=models.F("started_at")),
                name="status_period_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node} {self.status} from {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def status_colour(self) -> str:
        return NodeStatus(self.status).colour


class AlertQuerySet(models.QuerySet):
    def open(self) -> AlertQuerySet:
        return self.filter(closed_at__isnull=True)

    def about(self, subject_type: str, subject_id: int) -> AlertQuerySet:
        return self.filter(subject_type=subject_type, subject_id=subject_id)


class Alert(models.Model):
    """One episode of a condition on a subject (node, GPU, team, booking): opened once, closed when
    the condition ends; the same condition later opens a new episode (DESIGN.md §6)."""

    subject_type = models.CharField(max_length=16, choices=AlertSubject.choices)
    subject_id = models.BigIntegerField()
    subject_label = models.CharField(max_length=200, help_text=_("How the subject reads, e.g. a hostname."))
    kind = models.CharField(max_length=32, choices=AlertKind.choices)
    tier = models.CharField(max_length=16, choices=AlertTier.choices)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    opened_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(help_text=_("When the condition was last observed."))
    closed_at = models.DateTimeField(null=True, blank=True)

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-opened_at"]
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        indexes = [models.Index(fields=["subject_type", "subject_id", "kind"])]
        constraints = [
            models.UniqueConstraint(
                fields=["subject_type", "subject_id", "kind"], condition=models.Q(closed_at__isnull=True),
                name="one_open_alert_per_episode",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_tier_display()}: {self.get_kind_display()} · {self.subject_label}"

    @property
    def text(self) -> str:
        """The message in the reader's language where it was written in each (``details["message_in"]``)."""
        return in_current_language((self.details or {}).get(MESSAGE_IN), self.message)

    @property
    def tier_colour(self) -> str:
        return AlertTier(self.tier).colour
