"""PostgreSQL advisory locks, transaction-scoped: periodic work that never runs twice at once (two beats, a
slow worker), and writers that take their turn instead of waiting on each other."""

from __future__ import annotations

import zlib
from contextlib import contextmanager

from django.db import connection, transaction


def _key(name: str) -> int:
    return zlib.crc32(name.encode()) - 2**31  # a stable signed 32-bit key (Python's hash() is salted)


@contextmanager
def advisory_lock(name: str):
    """Yield True while holding the transaction-scoped lock ``name``, False if someone else holds it."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_key(name)])
        yield cursor.fetchone()[0]


def wait_turn(name: str) -> None:
    """Wait for the lock ``name`` and hold it to the end of the current transaction (taking it again in
    the same transaction does not wait). Writers that all take the lock before writing cannot deadlock
    each other: none waits on a row another has written while that one waits for it."""
    if not connection.in_atomic_block:
        raise RuntimeError("wait_turn() holds its lock to the end of a transaction: call it inside one")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_key(name)])
