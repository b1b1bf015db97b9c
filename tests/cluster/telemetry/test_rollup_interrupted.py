"""A rollup worker killed in the middle of a batch (issue 17): the batches before it stay, its own claim and
rows go with its transaction, and the redo leaves the rows an uninterrupted run leaves.

The kill is a real error inside the batch's transaction: a trigger on the minute rollups that raises once the
table holds more than a given number of rows (the statement that crosses it fails, as a dropped connection
would)."""

from datetime import timedelta

import pytest
from django.db import connection

from cluster.models import DirtyBucket, Gpu, HourRollup, MinuteRollup
from cluster.telemetry import rollups
from cluster.telemetry.rollup_math import HOUR_S, hour_rollups_from_minutes, minute_rollups
from tests.cluster.telemetry.test_rollups import (
    EPOCH0,
    NOW,
    agent_records,
    assert_rollups,
    store_as_collector,
    stored,
)
from tests.conftest import T0

pytestmark = pytest.mark.django_db

MINUTES = MinuteRollup._meta.db_table


def kill_the_batch_beyond(rows: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"""
            CREATE FUNCTION pg_temp.killed_worker() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF (SELECT count(*) FROM {MINUTES}) > {int(rows)} THEN
                    RAISE EXCEPTION 'worker killed mid-batch';
                END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER killed_worker AFTER INSERT OR UPDATE ON {MINUTES}
                FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.killed_worker();
        """)  # noqa: S608 (the model's table)


def revive() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER killed_worker ON {MINUTES}")


def test_a_batch_killed_midway_is_redone_and_equals_an_uninterrupted_run(small_cluster):
    gpu_ids = list(Gpu.objects.order_by("pk").values_list("pk", flat=True))
    records = agent_records(gpu_ids, interval_s=10, start_s=EPOCH0, end_s=EPOCH0 + 2 * HOUR_S, seed=7)
    store_as_collector(records)
    marked = DirtyBucket.objects.count()
    assert marked > 200

    kill_the_batch_beyond(100)
    with pytest.raises(Exception, match="worker killed mid-batch"):
        rollups.rollup_pending(batch=40)
    # Two batches of 40 committed; the third went with its transaction, its marks still dirty.
    assert MinuteRollup.objects.count() == 80
    assert DirtyBucket.objects.filter(level="minute").count() == marked - 80
    revive()

    rollups.rollup_pending(batch=40)  # the task redelivered
    assert not DirtyBucket.objects.exists()
    redone = (stored(MinuteRollup), stored(HourRollup))
    reference = minute_rollups(records)
    assert_rollups(redone[0], reference)
    assert_rollups(redone[1], hour_rollups_from_minutes(reference))

    # An uninterrupted run over the same samples gives the same rows.
    MinuteRollup.objects.all().delete()
    HourRollup.objects.all().delete()
    rollups.recompute_range(start=T0 - timedelta(hours=1), end=T0 + timedelta(hours=3), now=NOW)
    assert (stored(MinuteRollup), stored(HourRollup)) == redone
