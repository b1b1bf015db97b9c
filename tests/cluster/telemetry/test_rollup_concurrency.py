"""No committed sample is left out of its rollup while collection and rollups run at the same time.

The fault run of issue 12 found minute rollups that counted fewer records than the raw table held,
with nothing left marked to redo them: a rollup that took its snapshot before it claimed a mark could
consume a mark committed by a collection whose rows its snapshot lacked. Here collectors and rollup
workers race on the same hot minutes, many times, and every minute and hour rollup is then compared
with one computed from the raw records by the pure reference (cluster/telemetry/rollup_math.py).
"""

import random
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from cluster.models import DirtyBucket, Gpu, HourRollup, MinuteRollup, Sample
from cluster.telemetry import rollups
from cluster.telemetry.rollup_math import SampleRecord, hour_rollups_from_minutes, minute_rollups
from tests.cluster.telemetry.test_rollups import assert_rollups, at, store_as_collector, stored
from tests.conftest import T0

pytestmark = pytest.mark.django_db(transaction=True)

EPOCH0 = int(T0.timestamp())


def hot_records(gpu_ids, *, minutes: int, seed: int) -> list[SampleRecord]:
    """One record every 10 s per GPU, shuffled, so that every collection lands in minutes that
    other collections and the workers are busy with."""
    rnd = random.Random(seed)
    records = [
        SampleRecord(gpu_id=gpu_id, ts=EPOCH0 + 10 * k, interval_s=10, util_gpu=round(rnd.uniform(0, 100), 2),
                     power_w=rnd.uniform(60, 700), energy_j=rnd.uniform(600, 7000), xid_count=0)
        for gpu_id in gpu_ids for k in range(1, minutes * 6 + 1)
    ]
    rnd.shuffle(records)
    return records


def run_all(targets) -> None:
    """Start every ``(function, args)`` in its own thread and connection, together; re-raise the first error."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(function, args):
        try:
            barrier.wait(30)
            function(*args)
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
        assert not thread.is_alive(), "a collector or worker hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_sample_is_left_out_of_its_rollup_while_collection_and_rollups_overlap(small_cluster, seed):
    gpu_ids = list(Gpu.objects.order_by("pk").values_list("pk", flat=True)[:2])
    records = hot_records(gpu_ids, minutes=6, seed=seed)  # 144 records in 12 GPU-minutes
    writers = 3
    done = threading.Event()
    finished = []

    def collector(mine: list[SampleRecord]):
        rnd = random.Random(len(mine))
        for start in range(0, len(mine), 2):  # a page of one or two records a transaction
            with transaction.atomic():
                store_as_collector(mine[start:start + 2])
                if rnd.random() < 0.3:
                    connection.cursor().execute("SELECT pg_sleep(0.002)")  # commit a little later
        finished.append(1)
        if len(finished) == writers:
            done.set()

    def worker():
        rnd = random.Random()
        while not done.is_set():
            rollups.process_dirty(limit=rnd.choice([1, 3, 50]))
            rollups.process_dirty(level="hour", limit=rnd.choice([1, 50]))

    shares = [records[i::writers] for i in range(writers)]
    run_all([(collector, (share,)) for share in shares] + [(worker, ()), (worker, ())])

    rollups.rollup_pending()
    assert not DirtyBucket.objects.exists()
    assert Sample.objects.count() == len(records)  # stored exactly once
    reference = minute_rollups(records)
    assert_rollups(stored(MinuteRollup), reference)
    assert_rollups(stored(HourRollup), hour_rollups_from_minutes(reference))
    per_minute = {key: value.sample_count for key, value in stored(MinuteRollup).items()}
    assert set(per_minute.values()) == {6}  # every minute counts every one of its six records


def test_a_recomputed_range_agrees_with_what_the_race_left(small_cluster):
    """Recomputing from raw changes nothing after the race: the incremental rollups were complete."""
    gpu_ids = list(Gpu.objects.order_by("pk").values_list("pk", flat=True)[:2])
    records = hot_records(gpu_ids, minutes=3, seed=7)
    done = threading.Event()

    def collector():
        for record in records:
            with transaction.atomic():
                store_as_collector([record])
        done.set()

    def worker():
        while not done.is_set():
            rollups.process_dirty(limit=2)

    run_all([(collector, ()), (worker, ())])
    rollups.rollup_pending()
    incremental = stored(MinuteRollup)
    rollups.recompute_range(start=at(EPOCH0), end=at(EPOCH0) + timedelta(minutes=4), now=T0 + timedelta(hours=1))
    assert_rollups(stored(MinuteRollup), incremental)
