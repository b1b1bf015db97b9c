"""A PostgreSQL advisory lock so periodic work never runs twice at once (two beats, a slow worker)."""

from __future__ import annotations

import zlib
from contextlib import contextmanager

from django.db import connection, transaction


@contextmanager
def advisory_lock(name: str):
    """Yield True while holding the transaction-scoped lock ``name``, False if someone else holds it."""
    key = zlib.crc32(name.encode()) - 2**31  # a stable signed 32-bit key (Python's hash() is salted)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
        yield cursor.fetchone()[0]
