"""An audit row: who changed what, when (the application's clock, aware UTC), and the values before and
after. Rows are only ever inserted: the application's database role may not update, delete or truncate
them (``teams.audit.grants``), and a trigger refuses updates and deletes from any role as a second guard.

The actor and the team are kept as they were: ``changed_by`` and ``team`` carry no database constraint
(and Django does nothing on their deletion), so deleting a person or a team never needs to touch (or is
blocked by) the trail; ``actor`` keeps the name that made the change, a person's or a process's.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

_APPEND_ONLY: list[type[models.Model]] = []


def append_only(model: type[models.Model]) -> type[models.Model]:
    """Class decorator: the application's database role may only insert and read ``model``'s rows."""
    _APPEND_ONLY.append(model)
    return model


def append_only_models() -> list[type[models.Model]]:
    """Every model declared append-only (the audit rows, the ledger), once the apps are loaded."""
    return list(_APPEND_ONLY)


class AuditKind(models.TextChoices):
    MEMBERSHIP = "membership", _("Membership")
    ROLE = "role", _("Role (admin, finance)")
    NODE_TOKEN = "node_token", _("Node token")
    BOOKING = "booking", _("Booking")
    BOOKING_POLICY = "booking_policy", _("Team booking policy")
    GUARANTEE = "guarantee", _("Guaranteed share")
    RATE_CARD = "rate_card", _("Rate card")
    ENERGY_TARIFF = "energy_tariff", _("Energy tariff")
    CHARGE_POLICY = "charge_policy", _("Charge policy")
    QUOTA = "quota", _("Quota")
    PERIOD = "period", _("Period close")


# What finance saw as "money changes" before the trail was one table.
MONEY_KINDS = (AuditKind.RATE_CARD, AuditKind.ENERGY_TARIFF, AuditKind.CHARGE_POLICY, AuditKind.QUOTA)


@append_only
class AuditEntry(models.Model):
    """One change to an audited row: who, when (UTC), what, and its values before and after."""

    changed_at = models.DateTimeField(_("changed at"))
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, db_constraint=False, null=True, blank=True,
        related_name="+", verbose_name=_("changed by"),
    )
    actor = models.CharField(_("who"), max_length=150,
                             help_text=_("The person's username, or the task or command that made the change."))
    kind = models.CharField(_("kind"), max_length=20, choices=AuditKind.choices)
    object_id = models.BigIntegerField(_("object id"), null=True, blank=True)
    team = models.ForeignKey("teams.Team", on_delete=models.DO_NOTHING, db_constraint=False, null=True, blank=True,
                             related_name="+", verbose_name=_("team"))
    subject = models.CharField(_("what"), max_length=200, help_text=_("e.g. 'charge policy' or 'rate card 12'."))
    before = models.JSONField(_("before"), null=True, blank=True, help_text=_("Empty for a creation."))
    after = models.JSONField(_("after"), null=True, blank=True, help_text=_("Empty for a deletion."))

    class Meta:
        ordering = ["-changed_at", "-id"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit trail")
        indexes = [models.Index(fields=["kind", "changed_at"]), models.Index(fields=["changed_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(before__isnull=False) | Q(after__isnull=False),
                                   name="audit_before_or_after"),
        ]

    def __str__(self) -> str:
        return f"{self.changed_at:%Y-%m-%d %H:%M} {self.actor}: {self.subject}"


class MoneyChangeManager(models.Manager):
    def get_queryset(self):
        return super().get_queryset().filter(kind__in=MONEY_KINDS)
