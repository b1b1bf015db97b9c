"""Alerts reaching people (DESIGN.md §6): in-app notifications, subscriptions, webhook endpoints and
their deliveries, the daily digest's once-a-day mark, and the weekly report's once-a-week mark and opt-out."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from cluster.choices import AlertKind, AlertSubject, AlertTier
from core.crypto import EncryptedTextField


class NotificationQuerySet(models.QuerySet):
    def unread(self) -> NotificationQuerySet:
        return self.filter(read_at__isnull=True)


class Notification(models.Model):
    """One alert episode shown to one person (in-app), with when it was read and e-mailed."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications",
                             verbose_name=_("user"))
    alert = models.ForeignKey("cluster.Alert", on_delete=models.CASCADE, related_name="notifications",
                              verbose_name=_("alert"))
    created_at = models.DateTimeField(_("created"))
    read_at = models.DateTimeField(_("read"), null=True, blank=True)
    emailed_at = models.DateTimeField(_("e-mailed"), null=True, blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        indexes = [models.Index(fields=["user", "read_at"])]
        constraints = [models.UniqueConstraint(fields=["user", "alert"], name="notification_once_per_user")]

    def __str__(self) -> str:
        return f"{self.user} · {self.alert}"


class Subscription(models.Model):
    """A person's wish to hear about alerts of a subject type (one subject, or all), of one kind or all."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_subscriptions",
                             verbose_name=_("user"))
    subject_type = models.CharField(_("subject type"), max_length=16, choices=AlertSubject.choices)
    subject_id = models.BigIntegerField(_("subject id"), null=True, blank=True,
                                        help_text=_("Empty: every subject of this type."))
    kind = models.CharField(_("kind"), max_length=32, choices=AlertKind.choices, blank=True,
                            help_text=_("Empty: every kind."))

    class Meta:
        ordering = ["user", "subject_type"]
        verbose_name = _("alert subscription")
        verbose_name_plural = _("alert subscriptions")
        constraints = [
            models.UniqueConstraint(fields=["user", "subject_type", "subject_id", "kind"], nulls_distinct=False,
                                    name="subscription_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.subject_type} {self.subject_id or '*'} {self.kind or '*'}"


class WebhookPreset(models.TextChoices):
    GENERIC = "generic", _("Generic JSON")
    DINGTALK = "dingtalk", _("DingTalk robot")
    FEISHU = "feishu", _("Feishu bot")


class WebhookEndpoint(models.Model):
    """A URL that alerts of at least ``min_tier`` are posted to, in one of the preset shapes."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    url = models.URLField(_("URL"), max_length=500)
    preset = models.CharField(_("preset"), max_length=16, choices=WebhookPreset.choices, default=WebhookPreset.GENERIC)
    secret = EncryptedTextField(_("signing secret"), blank=True,
                                help_text=_("Signs each post where the preset supports it; stored encrypted."))
    min_tier = models.CharField(
        _("lowest tier"), max_length=16, default=AlertTier.CRITICAL,
        choices=[(AlertTier.CRITICAL, AlertTier.CRITICAL.label), (AlertTier.WARNING, AlertTier.WARNING.label)],
    )
    active = models.BooleanField(_("active"), default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")

    def __str__(self) -> str:
        return self.name

    def admits(self, tier: str) -> bool:
        if self.min_tier == AlertTier.WARNING:
            return tier in (AlertTier.WARNING, AlertTier.CRITICAL)
        return tier == AlertTier.CRITICAL


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed")


class WebhookDelivery(models.Model):
    """One alert posted (or being posted) to one webhook endpoint."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries",
                                 verbose_name=_("endpoint"))
    alert = models.ForeignKey("cluster.Alert", on_delete=models.CASCADE, related_name="+", verbose_name=_("alert"))
    status = models.CharField(_("status"), max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True)
    created_at = models.DateTimeField(_("created"))
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        constraints = [models.UniqueConstraint(fields=["endpoint", "alert"], name="webhook_delivery_once")]

    def __str__(self) -> str:
        return f"{self.endpoint} · {self.alert_id} · {self.status}"


class DigestSent(models.Model):
    """The daily digest e-mailed to one person on one local day (so it goes out once a day)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+",
                             verbose_name=_("user"))
    local_day = models.DateField(_("day"))
    sent_at = models.DateTimeField(_("sent"))
    notification_count = models.PositiveIntegerField(_("notifications"))

    class Meta:
        ordering = ["-local_day"]
        verbose_name = _("digest sent")
        verbose_name_plural = _("digests sent")
        constraints = [models.UniqueConstraint(fields=["user", "local_day"], name="digest_once_a_day")]

    def __str__(self) -> str:
        return f"{self.user} · {self.local_day}"


class WeeklyReportSent(models.Model):
    """The weekly report of one week (its Monday) e-mailed to one person (so it goes out once a week)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+",
                             verbose_name=_("user"))
    week_start = models.DateField(_("week (Monday)"))
    sent_at = models.DateTimeField(_("sent"))

    class Meta:
        ordering = ["-week_start", "user"]
        verbose_name = _("weekly report sent")
        verbose_name_plural = _("weekly reports sent")
        constraints = [models.UniqueConstraint(fields=["user", "week_start"], name="weekly_report_once_a_week")]

    def __str__(self) -> str:
        return f"{self.user} · {self.week_start}"


class WeeklyReportOptOut(models.Model):
    """A person who asked not to receive the weekly report e-mail (no row: they receive it)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="weekly_report_opt_out",
                                verbose_name=_("user"))
    created_at = models.DateTimeField(_("created"))

    class Meta:
        ordering = ["user"]
        verbose_name = _("weekly report opt-out")
        verbose_name_plural = _("weekly report opt-outs")

    def __str__(self) -> str:
        return str(self.user)
