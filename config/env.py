"""The environment readers of ``config/settings.py``: each reads one variable, falls back to its default, and
fails at start-up with ImproperlyConfigured naming the variable and the rule when the value is wrong."""

from __future__ import annotations

import base64
import os
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, "")
    if value:
        return value
    if default is None:
        raise ImproperlyConfigured(
            f"{name} is not set. Run through `make demo`, `manage.py` or the test suite, which start "
            f"the embedded services, or set {name} (see README: external PostgreSQL and Redis)."
        )
    return default


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false, 1/0, yes/no, on/off), not {value!r}.")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}.")
    return value


def env_list(name: str, default: str | None) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_watts(name: str, default: str) -> dict[str, int]:
    """``H200=100,H100=100``: watts per GPU model short name (upper case), each a whole number ≥ 1."""
    out = {}
    for item in env_list(name, default):
        model, sep, watts = item.partition("=")
        if not sep or not model.strip() or not watts.strip().isdigit() or int(watts) < 1:
            raise ImproperlyConfigured(f"{name} must be MODEL=WATTS pairs, comma-separated (H200=100,L40S=50), not {item!r}.")
        out[model.strip().upper()] = int(watts)
    return out


def env_zone(name: str, default: str) -> str:
    value = env_str(name, default)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(f"{name} must be an IANA time zone such as Asia/Shanghai, not {value!r}.") from None
    return value


def fernet_keys(keys: list[str]) -> list[str]:
    """Check each key is a Fernet key (url-safe base64 of 32 bytes), so a typo fails at start-up."""
    for key in keys:
        try:
            if len(base64.urlsafe_b64decode(key.encode())) != 32:
                raise ValueError
        except ValueError:  # binascii.Error is a ValueError
            raise ImproperlyConfigured(
                "FIELD_ENCRYPTION_KEY must be url-safe base64 of 32 bytes (a Fernet key; "
                "comma-separate several to rotate, newest first)."
            ) from None
    return keys
