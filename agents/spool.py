"""The agent's durable spool: every record the sampler produces waits here until the server's
collector has acknowledged it (DESIGN.md §3).

One SQLite file with two tables:

- ``records(seq INTEGER PRIMARY KEY AUTOINCREMENT, ts, body)``: ``body`` is the record as compact
  JSON (without ``seq``). AUTOINCREMENT guarantees that a seq is never handed out twice, even after
  every row has been acknowledged and pruned, so the collector's cursor stays meaningful.
- ``meta(key, value)``: ``spool_id`` (uuid4 hex, made when the file is created afresh, so a deleted
  and recreated spool announces itself with a new id), ``dropped_total`` (records dropped by the
  size and age bounds), ``last_ts`` (newest record time ever spooled, kept even after pruning, so a
  restarted agent knows where it left off) and ``served_seq`` (highest seq ever served, see
  :meth:`Spool.ack`).

Records leave the spool oldest first, by seq. The sampler appends records in time order, so the
lowest seqs are also the oldest times and the rows left always form one contiguous seq range:
counting them is ``max(seq) - min(seq) + 1``, never a scan.

Durability. WAL journal with ``synchronous=FULL``. With WAL, a commit appends to the ``-wal`` file;
``NORMAL`` does not fsync that append, ``FULL`` does. A ``kill -9`` of the agent loses nothing either
way: the appended bytes are already in the kernel's page cache and the next open replays the WAL.
Only an OS crash or power cut can lose NORMAL's last commits, and that would be worse than a gap:
seqs the collector has already fetched would be handed out again for new records, which the
collector would then skip as already seen. FULL closes that hole and costs one fsync per commit;
the agent commits once per sample interval (a whole catch-up batch is one commit) plus once per
collector fetch, so that is a handful of fsyncs a minute.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

from agents.records import Record

DEFAULT_MAX_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_AGE_S = 7 * 24 * 3600
# How often (in appends) the bounds are checked. page_count and the ts index make a check cheap,
# but there is no reason to do it more than once a few minutes at the default 10 s interval.
DEFAULT_CHECK_EVERY = 16
# When the size bound is hit, drop down to this fraction of it, so the next appends do not each
# trigger another drop.
_LOW_WATER = 0.9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_ts ON records (ts);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def encode_record(record: Record) -> str:
    """Compact JSON of a record (no spaces): what the spool stores and the HTTP API sends."""
    return json.dumps(record, separators=(",", ":"), allow_nan=False)


class Spool:
    """A bounded, durable FIFO of records. Thread-safe: the sampler appends while HTTP threads read
    and acknowledge. One connection behind a lock: every operation is a few milliseconds at most,
    and serialising them keeps SQLite's locking out of the picture."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        check_every: int = DEFAULT_CHECK_EVERY,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.check_every = max(1, check_every)
        self._lock = threading.Lock()
        self._appends_since_check = 0
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # see the module docstring
        # The WAL is checkpointed every 1000 pages; truncate it back afterwards so it cannot keep
        # the size of its largest burst.
        self._db.execute("PRAGMA journal_size_limit=16777216")
        self._create()
        self.spool_id: str = self._meta("spool_id")
        self._page_size: int = self._db.execute("PRAGMA page_size").fetchone()[0]

    # -- setup ---------------------------------------------------------------------------------

    def _create(self) -> None:
        with self._lock, self._transaction():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            # A spool created afresh gets a new id; an existing one keeps its own (OR IGNORE).
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('spool_id', ?)", (uuid.uuid4().hex,))
            for key in ("dropped_total", "last_ts", "served_seq"):
                self._db.execute("INSERT OR IGNORE INTO meta VALUES (?, '0')", (key,))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def _meta(self, key: str) -> str:
        return self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]

    def _set_meta(self, key: str, value: Any) -> None:
        self._db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(value), key))

    # -- writing -------------------------------------------------------------------------------

    def append(self, records: list[Record], *, now: float | None = None) -> int:
        """Store ``records`` in one transaction; returns the seq of the last one (the current last
        seq if ``records`` is empty). ``now`` (the agent's clock) is what the age bound is measured
        from; every ``check_every`` appends the size and age bounds are enforced in the same
        transaction."""
        rows = [(int(record["ts"]), encode_record(record)) for record in records]
        with self._lock, self._transaction():
            if rows:
                self._db.executemany("INSERT INTO records (ts, body) VALUES (?, ?)", rows)
                newest = max(ts for ts, _body in rows)
                self._db.execute(
                    "UPDATE meta SET value = ? WHERE key = 'last_ts' AND CAST(value AS INTEGER) < ?",
                    (str(newest), newest),
                )
            self._appends_since_check += 1
            if self._appends_since_check >= self.check_every:
                self._appends_since_check = 0
                if now is not None:
                    self._drop_older_than(now - self.max_age_s)
                self._drop_to_size()
            return self._last_seq()

    def _drop(self, upto_seq: int) -> None:
        dropped = self._db.execute("DELETE FROM records WHERE seq <= ?", (upto_seq,)).rowcount
        if dropped:
            total = int(self._meta("dropped_total")) + dropped
            self._set_meta("dropped_total", total)

    def _drop_older_than(self, cutoff: float) -> None:
        # Uses the ts index; the newest too-old row bounds a seq range because seq follows ts.
        (upto,) = self._db.execute("SELECT max(seq) FROM records WHERE ts < ?", (math.floor(cutoff),)).fetchone()
        if upto is not None:
            self._drop(upto)

    def used_bytes(self) -> int:
        """Bytes of the database file in use (pages not on the freelist): cheap, two header reads.
        The file itself does not shrink after a drop; its free pages are reused by later appends."""
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * self._page_size

    def _drop_to_size(self) -> None:
        # Each round drops an estimate of the surplus rows from the mean row size; the loop is for
        # the rare case where the estimate falls short (uneven row sizes), so it runs once or twice.
        for _round in range(8):
            used = self.used_bytes()
            if used <= self.max_bytes:
                return
            low, high = self._db.execute("SELECT min(seq), max(seq) FROM records").fetchone()
            if low is None:
                return
            count = high - low + 1
            surplus = used - self.max_bytes * _LOW_WATER
            self._drop(low - 1 + min(count, max(1, math.ceil(surplus / (used / count)))))

    def ack(self, upto: int) -> None:
        """The collector has stored every record with ``seq <= upto``: prune them.

        Only seqs this spool has actually served are pruned (``served_seq``). A collector that still
        holds the cursor of an older spool (the file was deleted and recreated, seqs restarted at
        1) would otherwise wipe the new spool's records before it notices the new ``spool_id``.
        """
        with self._lock:
            served = int(self._meta("served_seq"))
            upto = min(upto, served)
            if upto <= 0:
                return
            (low,) = self._db.execute("SELECT min(seq) FROM records").fetchone()
            if low is None or low > upto:
                return
            with self._transaction():
                self._db.execute("DELETE FROM records WHERE seq <= ?", (upto,))

    # -- reading -------------------------------------------------------------------------------

    def read_raw(self, after: int, limit: int) -> tuple[list[tuple[int, str]], int, bool]:
        """Up to ``limit`` records with ``seq > after``, oldest first, as ``(seq, json body)`` pairs;
        plus ``last_seq`` (the seq of the last one returned, or ``after`` when none is) and ``more``
        (records beyond this page exist). Records served this way count as served for :meth:`ack`."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, body FROM records WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit + 1)
            ).fetchall()
            more = len(rows) > limit
            rows = rows[:limit]
            last_seq = rows[-1][0] if rows else after
            if rows and last_seq > int(self._meta("served_seq")):
                with self._transaction():
                    self._set_meta("served_seq", last_seq)
            return rows, last_seq, more

    def read(self, after: int, limit: int) -> tuple[list[Record], int, bool]:
        """:meth:`read_raw` with each record decoded and carrying its ``seq``."""
        rows, last_seq, more = self.read_raw(after, limit)
        return [{"seq": seq, **json.loads(body)} for seq, body in rows], last_seq, more

    def _last_seq(self) -> int:
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
        return row[0] if row else 0

    def stats(self) -> dict[str, int]:
        """Counters for /healthz and /metrics: records held, last seq, drops, newest ts, bytes."""
        with self._lock:
            low, high = self._db.execute("SELECT min(seq), max(seq) FROM records").fetchone()
            return {
                "records": 0 if low is None else high - low + 1,
                "last_seq": self._last_seq(),
                "dropped_total": int(self._meta("dropped_total")),
                "last_ts": int(self._meta("last_ts")),
                "used_bytes": self.used_bytes(),
            }

    def last_ts(self) -> int | None:
        """The newest record time ever spooled (None for a spool that never held a record)."""
        with self._lock:
            value = int(self._meta("last_ts"))
        return value or None

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection; nests
    as a no-op, so a method may open one inside another's."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._outer = False

    def __enter__(self) -> _Transaction:
        if not self._db.in_transaction:
            self._db.execute("BEGIN IMMEDIATE")
            self._outer = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._outer:
            return
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
