"""Raw samples by UTC day: the partitions of the ``Sample`` table (migration 0013).

Each UTC day is one partition, ``[day 00:00, next day 00:00)``; a DEFAULT partition catches a record whose
day has none yet, so no record is ever refused or lost for want of a partition. The periodic task
(``cluster.tasks.partitions_ahead``) makes today's and the next ``TELEMETRY_PARTITIONS_AHEAD_DAYS`` days'
partitions, and a partition for every day the DEFAULT partition caught (moving those rows into it).
Retention (``rollups.prune``) drops whole days.

Only a table's owner may attach or drop its partitions, and the web, worker and beat connect as the
application's role: the work is done by three ``SECURITY DEFINER`` functions of the migration, which
that role may execute and nothing more (``teams.audit.grants``).

A record's key ``(gpu, ts)`` holds the partition key, so a record always lands in the one partition of
its day and ``INSERT … ON CONFLICT DO NOTHING`` finds a stored copy there: the collector's exactly-once
rule holds across days, and across a day's move from the DEFAULT partition (the move and the attach are
one transaction that holds the DEFAULT partition locked).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from cluster.telemetry.models import Sample

SAMPLE = Sample._meta.db_table
DEFAULT_PARTITION = f"{SAMPLE}_default"
DAY_PARTITION = re.compile(rf"^{SAMPLE}_p(\d{{8}})$")


def partition_name(day: date) -> str:
    """The table holding ``day``'s samples (UTC)."""
    return f"{SAMPLE}_p{day:%Y%m%d}"


def utc_day(moment: datetime) -> date:
    if moment.tzinfo is None:
        raise ValueError(f"partition times must be aware (UTC), not naive: {moment!r}")
    return moment.astimezone(UTC).date()


def day_partitions() -> list[date]:
    """The days that have a partition, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [SAMPLE],
        )
        names = [row[0] for row in cursor.fetchall()]
    return sorted(datetime.strptime(m[1], "%Y%m%d").date() for m in map(DAY_PARTITION.match, names) if m)  # noqa: DTZ007


def default_days() -> list[date]:
    """The UTC days of the rows the DEFAULT partition caught (normally none)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardhour_sample_default_days()")
        return [row[0] for row in cursor.fetchall()]


def partitions_add(days) -> list[date]:
    """Make the partitions of ``days`` that are missing, each in its own transaction (moving the rows the
    DEFAULT partition holds for it); returns the days made. Safe to run twice at once."""
    made = []
    for day in sorted(set(days)):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT cardhour_sample_partition_add(%s)", [day])
            if cursor.fetchone()[0]:
                made.append(day)
    return made


def partitions_ahead(*, now: datetime, ahead_days: int | None = None) -> dict:
    """Today's partition and the next ``ahead_days`` (TELEMETRY_PARTITIONS_AHEAD_DAYS), and one for every
    day whose rows the DEFAULT partition caught and retention still keeps; returns the days made."""
    ahead_days = settings.TELEMETRY_PARTITIONS_AHEAD_DAYS if ahead_days is None else ahead_days
    today = utc_day(now)
    kept_from = utc_day(now - timedelta(days=settings.TELEMETRY_RAW_RETENTION_DAYS))
    caught = [day for day in default_days() if day >= kept_from]
    made = partitions_add([today + timedelta(days=k) for k in range(ahead_days + 1)] + caught)
    return {"made": made, "from_default": [day for day in caught if day in made]}


def partitions_prune(*, before: datetime) -> dict:
    """Drop every day partition that ends at or before ``before``, and delete the DEFAULT partition's rows
    older than it; returns the days dropped and those rows' count."""
    with transaction.atomic(), connection.cursor() as cursor:
        # PostgreSQL will not drop a table with deferred checks pending (rows this transaction wrote to it, whose
        # foreign key is checked at commit): run them now, as the commit would.
        connection.check_constraints()
        cursor.execute("SELECT dropped, deleted FROM cardhour_sample_prune(%s)", [before])
        dropped, deleted = cursor.fetchone()
    days = [datetime.strptime(DAY_PARTITION.match(name)[1], "%Y%m%d").date() for name in dropped]  # noqa: DTZ007
    return {"dropped": days, "default_rows_deleted": deleted}
