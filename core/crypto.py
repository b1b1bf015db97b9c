"""Secrets the server must read back (node agent tokens), encrypted at rest with FIELD_ENCRYPTION_KEY."""

from __future__ import annotations

from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

PREFIX = "fernet:"


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key.encode()) for key in keys])


def encrypt(value: str) -> str:
    return PREFIX + _fernet(tuple(settings.FIELD_ENCRYPTION_KEYS)).encrypt(value.encode()).decode()


def decrypt(stored: str) -> str:
    if not stored.startswith(PREFIX):
        raise ImproperlyConfigured("an encrypted column holds a value that was not encrypted by Cardhour")
    try:
        return _fernet(tuple(settings.FIELD_ENCRYPTION_KEYS)).decrypt(stored.removeprefix(PREFIX).encode()).decode()
    except InvalidToken:
        raise ImproperlyConfigured(
            "cannot decrypt a stored secret: FIELD_ENCRYPTION_KEY is not the key it was written with "
            "(to rotate, list the new key first and keep the old one after it)"
        ) from None


class EncryptedTextField(models.TextField):
    """A text column stored as Fernet ciphertext; Python code sees plain text. Not searchable."""

    def from_db_value(self, value, expression, connection):
        return value if value in (None, "") else decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return value if value in (None, "") else encrypt(value)
