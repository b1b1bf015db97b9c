"""Raw samples partitioned by UTC day (issue 18): partitions made ahead, records of a day with no partition
kept (the DEFAULT partition) and moved into their day's partition when it is made, retention dropping whole
days and leaving the rollups and daily aggregates alone, the collector's exactly-once rule across midnight,
and all of it under the application's database role.

Each test starts with no day partition at all (dropped in its transaction), so what the migration made for
the real date when the test database was created plays no part."""
# ruff: noqa: S608 (the SQL names tables from the models' own meta, never input)

import json
from datetime import UTC, date, datetime, timedelta

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from psycopg import sql

from accounting.models import DailyUsage
from accounting.usage.services import aggregate_day
from cluster.models import CollectionState, Gpu, HourRollup, MinuteRollup, Sample
from cluster.telemetry import partitions, rollups
from cluster.telemetry.agent_client import NDJSON, parse_samples_page
from cluster.telemetry.collector import collect_node
from cluster.telemetry.ingest import ingest_json_lines
from tests.conftest import T0

pytestmark = pytest.mark.django_db
SAMPLE = Sample._meta.db_table
DAY = T0.date()  # 2 November 2026, a Monday
MIDNIGHT = T0 + timedelta(days=1)  # the end of DAY, UTC


@pytest.fixture(autouse=True)
def no_partitions():
    partitions.partitions_prune(before=datetime(2100, 1, 1, tzinfo=UTC))
    assert partitions.day_partitions() == []


def where_stored() -> list[tuple[str, int, datetime]]:
    """Each stored sample's partition, GPU and time."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text, gpu_id, ts FROM {SAMPLE} ORDER BY gpu_id, ts")
        return cursor.fetchall()


def record(uuid: str, ts: datetime, seq: int) -> dict:
    return {"seq": seq, "ts": int(ts.timestamp()), "gpu_uuid": uuid, "interval_s": 10, "util_gpu": 40.0}


def ingest(records, *, node, now):
    blob = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    with transaction.atomic():
        return ingest_json_lines(blob, node_id=node.pk, now=now, max_future_s=600, max_age_s=7 * 86400)


def test_the_task_makes_today_and_the_days_ahead_once(settings):
    settings.TELEMETRY_PARTITIONS_AHEAD_DAYS = 3
    result = partitions.partitions_ahead(now=T0 + timedelta(hours=23, minutes=59))
    ahead = [DAY + timedelta(days=k) for k in range(4)]
    assert result == {"made": ahead, "from_default": []}
    assert partitions.day_partitions() == ahead
    assert partitions.partitions_ahead(now=T0 + timedelta(hours=23, minutes=59))["made"] == []
    assert partitions.partitions_ahead(now=MIDNIGHT)["made"] == [DAY + timedelta(days=4)]


def test_a_record_of_a_day_with_no_partition_is_stored_then_moved_into_its_day(small_cluster):
    node = small_cluster["nodes"][0]
    at = T0 + timedelta(hours=12)
    first = ingest([record("GPU-h200-a-0", at, 1), record("GPU-h200-a-1", at, 2)], node=node, now=at)
    assert (first.stored, first.rejected) == (2, {})
    gpu0, gpu1 = Gpu.objects.filter(node=node).order_by("index").values_list("pk", flat=True)
    assert where_stored() == [(f"{SAMPLE}_default", gpu0, at), (f"{SAMPLE}_default", gpu1, at)]

    made = partitions.partitions_ahead(now=at + timedelta(hours=1), ahead_days=1)
    assert made == {"made": [DAY, DAY + timedelta(days=1)], "from_default": [DAY]}
    assert where_stored() == [(f"{SAMPLE}_p20261102", gpu0, at), (f"{SAMPLE}_p20261102", gpu1, at)]
    assert partitions.default_days() == []
    again = ingest([record("GPU-h200-a-0", at, 1), record("GPU-h200-a-1", at, 2)], node=node, now=at)
    assert (again.seen, again.stored) == (2, 0)  # a repeated record changes nothing after the move
    assert Sample.objects.count() == 2


def test_a_page_spanning_midnight_fetched_twice_is_stored_once(small_cluster):
    """The agent serves the same page twice (it ignores the cursor): records on both sides of midnight, in
    two partitions, each stored once; the second collection stores nothing and the cursor stays."""
    partitions.partitions_add([DAY, DAY + timedelta(days=1)])
    node = small_cluster["nodes"][0]
    CollectionState.objects.create(node=node, inventory_refreshed_at=MIDNIGHT)  # no inventory call
    times = [MIDNIGHT + timedelta(seconds=s) for s in (-20, -10, 0, 10)]
    spooled = [record(f"GPU-h200-a-{gpu}", ts, 2 * k + gpu + 1) for k, ts in enumerate(times) for gpu in (0, 1)]
    asked = []

    def fetch(*, after, spool_id, **_):
        asked.append(after)
        head = {"spool_id": "s1", "last_seq": 8, "more": False, "dropped_total": 0, "count": 8,
                "agent_time": MIDNIGHT.timestamp() + 30}
        body = b"".join(json.dumps(line).encode() + b"\n" for line in [head, *spooled])
        return parse_samples_page(body, NDJSON)

    now = MIDNIGHT + timedelta(seconds=30)
    assert collect_node(node_id=node.pk, now=now, fetch=fetch).stored == 8
    assert collect_node(node_id=node.pk, now=now + timedelta(seconds=30), fetch=fetch).stored == 0
    assert asked == [0, 8]
    state = CollectionState.objects.get(node=node)
    assert (state.cursor, state.records_stored, state.records_rejected) == (8, 8, 0)
    by_partition = {}
    for partition, _gpu, ts in where_stored():
        by_partition.setdefault(partition, []).append(ts)
    assert {name: sorted(set(ts)) for name, ts in by_partition.items()} == {
        f"{SAMPLE}_p20261102": times[:2], f"{SAMPLE}_p20261103": times[2:]}
    assert sorted(len(ts) for ts in by_partition.values()) == [4, 4]  # two GPUs, no record twice


def usage_snapshot():
    return (
        list(MinuteRollup.objects.order_by("gpu", "bucket").values()),
        list(HourRollup.objects.order_by("gpu", "bucket").values()),
        list(DailyUsage.objects.order_by("pk").values()),
    )


def test_retention_drops_whole_days_and_leaves_rollups_and_daily_aggregates(small_cluster, settings):
    settings.TELEMETRY_RAW_RETENTION_DAYS = 8
    partitions.partitions_add([DAY + timedelta(days=k) for k in range(-1, 4)])
    node = small_cluster["nodes"][0]
    at = T0 + timedelta(hours=2)
    ingest([record("GPU-h200-a-0", at + timedelta(seconds=10 * k), k + 1) for k in range(360)], node=node,
           now=at + timedelta(hours=1))
    late = T0 + timedelta(days=1, hours=2)  # the next day's record, kept
    ingest([record("GPU-h200-a-0", late, 400)], node=node, now=late)
    rollups.rollup_pending()
    aggregate_day(day=DAY, now=T0 + timedelta(days=2))
    before = usage_snapshot()
    assert all(before) and sum(row["ticks"] for row in before[2]) > 0

    # Eight days and two hours later: DAY ends 8 days before, the next day does not yet.
    now = MIDNIGHT + timedelta(days=8, hours=2)
    result = rollups.prune(now=now)
    assert result["raw_cutoff"] == now - timedelta(days=8)
    assert (result["sample_days_dropped"], result["samples_deleted_from_default"]) == (
        [DAY - timedelta(days=1), DAY], 0)
    assert partitions.day_partitions() == [DAY + timedelta(days=k) for k in range(1, 4)]
    assert list(Sample.objects.values_list("ts", flat=True)) == [late]
    assert usage_snapshot() == before


def test_retention_waits_for_the_rollups_and_deletes_old_rows_of_the_default_partition(small_cluster, settings):
    settings.TELEMETRY_RAW_RETENTION_DAYS = 8
    partitions.partitions_add([DAY])
    node = small_cluster["nodes"][0]
    at = T0 + timedelta(hours=2)
    ingest([record("GPU-h200-a-0", at, 1)], node=node, now=at)
    older = T0 - timedelta(days=2)  # no partition: kept in the DEFAULT partition
    ingest([record("GPU-h200-a-1", older, 2)], node=node, now=T0)
    now = T0 + timedelta(days=10)

    held = rollups.prune(now=now)  # both records' minutes are still dirty: nothing raw goes
    assert held["raw_cutoff"] == older - timedelta(minutes=1)  # the oldest dirty minute
    assert (held["sample_days_dropped"], held["samples_deleted_from_default"]) == ([], 0)
    assert Sample.objects.count() == 2

    rollups.rollup_pending()
    done = rollups.prune(now=now)
    assert (done["sample_days_dropped"], done["samples_deleted_from_default"]) == ([DAY], 1)
    assert not Sample.objects.exists()
    assert MinuteRollup.objects.count() == 2


def as_app_role(work):
    """Run ``work()`` as the application's database role (``SET LOCAL ROLE``, in a savepoint kept); return
    its result, or the SQLSTATE of the database error it raised."""
    role = sql.Identifier(settings.CARDHOUR_DB_APP_ROLE)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL("SET LOCAL ROLE {}").format(role).as_string(cursor.connection))
                cursor.execute("SELECT current_user")
                assert cursor.fetchone()[0] == settings.CARDHOUR_DB_APP_ROLE
            result = work()
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE")
            return result
    except DatabaseError as error:
        return getattr(error.__cause__, "sqlstate", "?")


def test_the_app_role_makes_and_drops_partitions_through_the_functions_only(small_cluster):
    node = small_cluster["nodes"][0]
    at = T0 + timedelta(hours=12)
    assert as_app_role(lambda: ingest([record("GPU-h200-a-0", at, 1)], node=node, now=at).stored) == 1
    made = as_app_role(lambda: partitions.partitions_ahead(now=at, ahead_days=1))
    assert made == {"made": [DAY, DAY + timedelta(days=1)], "from_default": [DAY]}
    assert where_stored()[0][0] == f"{SAMPLE}_p20261102"

    def create_directly():
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLE {SAMPLE}_p20261110 PARTITION OF {SAMPLE} "
                           "FOR VALUES FROM ('2026-11-10 00:00+00') TO ('2026-11-11 00:00+00')")

    def drop_directly():
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE {SAMPLE}_p20261103")

    assert as_app_role(create_directly) == "42501"  # must be owner of table cluster_sample
    assert as_app_role(drop_directly) == "42501"
    rollups.rollup_pending()
    pruned = as_app_role(lambda: rollups.prune(now=at + timedelta(days=9)))
    assert pruned["sample_days_dropped"] == [DAY]
    assert partitions.day_partitions() == [DAY + timedelta(days=1)]


def test_a_day_outside_the_supported_window_is_refused():
    assert as_app_role(lambda: partitions.partitions_add([date(2101, 1, 1)])) == "22023"
