"""Who a request is: the API's bearer tokens, the client's address, and the throttle on failed tokens."""

from __future__ import annotations

import ipaddress
import math
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection
from django.db.models import Subquery
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from teams.models import ApiToken, TokenFailures
from teams.tokens import hash_token


def client_ip(request) -> str | None:
    """The client's address (for sign-in and token throttling): ``REMOTE_ADDR``, or behind a proxy that ends
    TLS (``TRUST_X_FORWARDED_FOR``) the last address of ``X-Forwarded-For``, the one the proxy appended (the
    ones before it are the client's to write)."""
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR")


def throttled_address(raw: str | None) -> str:
    """The address failures are counted under: an IPv4 address as it is, an IPv6 one as its /64 (one
    client holds a whole /64), anything unreadable as ``::`` (counted together, never uncounted)."""
    try:
        address = ipaddress.ip_address((raw or "").strip())
    except ValueError:
        return "::"
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False).network_address)
    return str(address)


def failure_window(now: datetime) -> tuple[datetime, datetime]:
    """The fixed window of ``API_TOKEN_FAILURE_WINDOW_MINUTES`` that holds ``now`` (aligned to the epoch)."""
    seconds = settings.API_TOKEN_FAILURE_WINDOW_MINUTES * 60
    start = int(now.timestamp()) // seconds * seconds
    return datetime.fromtimestamp(start, tz=UTC), datetime.fromtimestamp(start + seconds, tz=UTC)


def record_token_failure(address: str, *, now: datetime) -> int:
    """Count one failed token from ``address`` in this window (one statement, safe under concurrent
    failures) and forget ended windows; returns the window's count."""
    start, _end = failure_window(now)
    table = TokenFailures._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE window_start < %s", [start])  # noqa: S608 (our table's name)
        cursor.execute(
            f"INSERT INTO {table} (address, window_start, failures) VALUES (%s, %s, 1) "  # noqa: S608
            "ON CONFLICT (address, window_start) DO UPDATE SET failures = "
            f"{table}.failures + 1 RETURNING failures",
            [address, start],
        )
        return cursor.fetchone()[0]


class HashedTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>`` (or ``Token <token>``) checked against stored SHA-256 hashes."""

    keywords = (b"bearer", b"token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Authorization header must be 'Bearer <token>'."))
        # An address past its failures is refused whatever token it shows, right or wrong: otherwise the
        # refusals would still tell a guess that hits from one that misses. A good token costs no query more:
        # its address's failures come with it.
        now = timezone.now()
        address = throttled_address(client_ip(request))
        start, end = failure_window(now)
        try:
            raw = header[1].decode()
        except UnicodeDecodeError:
            raw = None
        token = None if raw is None else (
            ApiToken.objects.usable(now).select_related("user").filter(key_hash=hash_token(raw))
            .annotate(address_failures=Subquery(
                TokenFailures.objects.filter(address=address, window_start=start).values("failures")[:1]))
            .first()
        )
        if token is not None and (token.address_failures or 0) < settings.API_TOKEN_FAILURE_LIMIT:
            token.mark_used()
            return token.user, token
        if token is None and record_token_failure(address, now=now) <= settings.API_TOKEN_FAILURE_LIMIT:
            if raw is None:
                raise exceptions.AuthenticationFailed(_("The token contains invalid characters."))
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked token."))
        raise exceptions.Throttled(wait=max(1, math.ceil((end - now).total_seconds())),
                                   detail=str(_("Too many failed API tokens from this address.")))

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class HashedTokenScheme(OpenApiAuthenticationExtension):
    target_class = HashedTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token from /account/tokens/."}
