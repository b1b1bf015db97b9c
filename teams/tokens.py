from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from teams.roles import is_admin

TOKEN_PREFIX = "chk_"  # noqa: S105 (a public prefix, not a secret)


def hash_token(raw: str) -> str:
    """SHA-256 of the whole token. Tokens are 256-bit random, so a fast hash is enough to keep them
    useless if the table leaks (as for GitHub's tokens); a slow password hash would add nothing."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenKind(models.TextChoices):
    PERSONAL = "personal", _("Personal")
    SERVICE = "service", _("Service")


class ApiTokenQuerySet(models.QuerySet):
    def usable(self, now=None) -> ApiTokenQuerySet:
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )

    def visible_to(self, user) -> ApiTokenQuerySet:
        return self if is_admin(user) else self.filter(user=user)


class ApiToken(models.Model):
    """An API credential: only its SHA-256 and a short display prefix are stored, never the token."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user"),
        help_text=_("The person the token acts as, or the service account of a service token."),
    )
    name = models.CharField(_("name"), max_length=100)
    kind = models.CharField(_("kind"), max_length=16, choices=ApiTokenKind.choices, default=ApiTokenKind.PERSONAL)
    display_prefix = models.CharField(_("starts with"), max_length=16, editable=False)
    key_hash = models.CharField(_("SHA-256 of the token"), max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        db_table = "accounting_apitoken"
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        constraints = [
            models.CheckConstraint(condition=models.Q(key_hash__regex=r"^[0-9a-f]{64}$"), name="apitoken_hash_is_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.display_prefix}…)"

    @classmethod
    def issue(cls, *, user, name: str, kind: str = ApiTokenKind.PERSONAL, expires_at=None) -> tuple[ApiToken, str]:
        """Create a token; return the row and the raw token, which is shown once and never stored."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user, name=name, kind=kind, expires_at=expires_at,
            display_prefix=raw[: len(TOKEN_PREFIX) + 6], key_hash=hash_token(raw),
        )
        return token, raw

    def mark_used(self) -> None:
        # Write at most once a minute: a busy scheduler hook must not turn every call into an UPDATE.
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > timedelta(minutes=1):
            ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class TokenFailures(models.Model):
    """Failed bearer tokens from one client address in one window (``API_TOKEN_FAILURE_WINDOW_MINUTES``):
    past ``API_TOKEN_FAILURE_LIMIT`` the address is answered 429 until the window ends. Kept in the
    database, not in Redis: the API keeps serving while Redis is down, and each test's rows roll back."""

    address = models.GenericIPAddressField(_("client address"))
    window_start = models.DateTimeField(_("window start"))
    failures = models.PositiveIntegerField(_("failures"))

    class Meta:
        verbose_name = _("failed API tokens")
        verbose_name_plural = _("failed API tokens")
        constraints = [models.UniqueConstraint(fields=["address", "window_start"], name="token_failures_once")]

    def __str__(self) -> str:
        return f"{self.address} {self.window_start:%Y-%m-%d %H:%M} × {self.failures}"
