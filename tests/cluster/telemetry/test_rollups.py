"""Rollup maintenance in SQL (cluster/telemetry/rollups.py, dirty_marks.py) against the pure reference (cluster/telemetry/rollup_math.py).

Long because the SQL is checked field by field, workers and writers at once included, against one set of
fixtures and helpers (agent-like records, the collector's path, stored rows as RollupValues).
"""

import random
import threading
from datetime import UTC, datetime, time, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agents.records import GPM_FIELDS
from cluster.models import DirtyBucket, Gpu, HourRollup, MinuteRollup, Sample
from cluster.telemetry import dirty_marks, partitions, rollups
from cluster.telemetry.rollup_math import (
    GPM_MEANS,
    HOUR_S,
    RollupValues,
    SampleRecord,
    bucket_rollups,
    hour_rollups_from_minutes,
    minute_rollups,
)
from tests.conftest import T0

pytestmark = pytest.mark.django_db

EPOCH0 = int(T0.timestamp())
NOW = T0 + timedelta(days=1)  # "now" for retention rules, so tests do not depend on the real clock
FLOAT_FIELDS = ("util_mean", "util_mem_mean", "power_mean_w", "energy_j", *GPM_MEANS)
VALUE_FIELDS = RollupValues.__slots__
SAMPLE_FIELDS = SampleRecord.__slots__[3:]


@pytest.fixture
def gpu_ids(small_cluster):
    return list(Gpu.objects.order_by("pk").values_list("pk", flat=True))


def at(epoch_s: int) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def agent_records(gpu_ids, *, interval_s, start_s, end_s, seed=1, util=True, gpm=True,
                  lone_gpm_failures=False) -> list[SampleRecord]:
    """Agent-like records on interval boundaries in (start_s, end_s], with gaps and failed reads. With
    ``gpm`` (a Hopper GPU) the GPM fields are known together, but now and then all null (the first
    interval after the agent starts); ``lone_gpm_failures``: a metric's own read fails now and then."""
    rnd = random.Random(seed)
    gpm_rnd = random.Random(seed + 1000)  # its own stream: the other fields are drawn as before GPM came
    records = []
    for gpu_id in gpu_ids:
        for ts in range(start_s - start_s % interval_s + interval_s, end_s + 1, interval_s):
            roll = rnd.random()
            if roll < 0.08:
                continue  # a gap: nothing recorded
            failed = roll < 0.12
            value = None if failed or not util else round(rnd.uniform(0, 100), 2)
            records.append(SampleRecord(
                gpu_id=gpu_id, ts=ts, interval_s=interval_s, util_gpu=value,
                util_gpu_max=None if value is None or roll < 0.5 else min(100.0, value + 5),
                util_mem=None if value is None else rnd.uniform(0, 60),
                mem_used_mib=None if failed else rnd.randrange(0, 80_000),
                power_w=None if failed else rnd.uniform(60, 700),
                energy_j=None if failed else rnd.uniform(60, 700) * interval_s,
                temp_c=None if failed else rnd.randrange(30, 90),
                xid_count=1 if roll > 0.97 else 0, ecc_dbe_count=1 if roll > 0.99 else None,
                **(gpm_readings(gpm_rnd, lone_failures=lone_gpm_failures) if gpm and not failed else {}),
            ))
    return records


def gpm_readings(rnd: random.Random, *, lone_failures: bool) -> dict:
    if rnd.random() < 0.05:
        return {}
    readings = {name: rnd.uniform(0, 90_000) if name.endswith("_mibs") else round(rnd.uniform(0, 100), 2)
                for name in GPM_FIELDS}
    if lone_failures:
        for name in GPM_FIELDS:
            if rnd.random() < 0.05:
                readings[name] = None
    return readings


def store(records) -> None:
    """Fixtures write raw rows with the ORM; the rollups learn of them through mark_dirty_range."""
    Sample.objects.bulk_create(
        Sample(gpu_id=r.gpu_id, ts=at(r.ts), interval_s=r.interval_s, **{f: getattr(r, f) for f in SAMPLE_FIELDS})
        for r in records
    )


def store_as_collector(records) -> tuple[int, int]:
    """The collector's path: rows in a staging table, inserted and marked dirty in one statement."""
    cols = ", ".join(dirty_marks.SAMPLE_COLUMNS)

    def row(r: SampleRecord) -> tuple:
        values = {"gpu_id": r.gpu_id, "ts": at(r.ts), **{f: getattr(r, f) for f in SampleRecord.__slots__[2:]}}
        return tuple(values.get(column) for column in dirty_marks.SAMPLE_COLUMNS)

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS sample_in (LIKE {dirty_marks.SAMPLE}); TRUNCATE sample_in")
        cursor.executemany(
            f"INSERT INTO sample_in ({cols}) VALUES ({', '.join(['%s'] * len(dirty_marks.SAMPLE_COLUMNS))})",  # noqa: S608
            [row(r) for r in records],
        )
        return dirty_marks.insert_samples_marking_dirty(cursor, source_sql=f"SELECT {cols} FROM sample_in")  # noqa: S608


def roll_up_everything(records) -> None:
    store(records)
    dirty_marks.mark_dirty_range(start=at(min(r.start for r in records)), end=at(max(r.ts for r in records)))
    rollups.rollup_pending()


def stored(model) -> dict:
    return {
        (row.pop("gpu_id"), int(row.pop("bucket").timestamp())): RollupValues(**row)
        for row in model.objects.values("gpu_id", "bucket", *VALUE_FIELDS)
    }


def assert_rollups(actual: dict, expected: dict, *, fields=VALUE_FIELDS) -> None:
    assert sorted(actual) == sorted(expected)
    for key, want in expected.items():
        for name in fields:
            got_value, want_value = getattr(actual[key], name), getattr(want, name)
            if name in FLOAT_FIELDS and got_value is not None and want_value is not None:
                assert got_value == pytest.approx(want_value, rel=1e-9, abs=1e-6), (key, name)
            else:
                assert got_value == want_value, (key, name)


@pytest.mark.parametrize("interval_s", [10, 57, 300])
def test_it_matches_the_reference_across_minute_and_hour_boundaries(gpu_ids, interval_s):
    records = agent_records(gpu_ids[:3], interval_s=interval_s, start_s=EPOCH0 - 5400 + 7, end_s=EPOCH0 + 4500,
                            lone_gpm_failures=True)
    records += agent_records(gpu_ids[3:4], interval_s=interval_s, start_s=EPOCH0, end_s=EPOCH0 + 900, util=False,
                             gpm=False)
    roll_up_everything(records)
    reference = minute_rollups(records)
    assert_rollups(stored(MinuteRollup), reference)
    assert_rollups(stored(HourRollup), hour_rollups_from_minutes(reference))
    assert not DirtyBucket.objects.exists()


def test_hours_equal_an_hour_computed_from_raw(gpu_ids):
    records = agent_records(gpu_ids, interval_s=10, start_s=EPOCH0, end_s=EPOCH0 + 2 * HOUR_S, seed=3)
    roll_up_everything(records)
    assert_rollups(stored(HourRollup), bucket_rollups(records, bucket_s=HOUR_S))


def test_a_partly_covered_minute_counts_only_its_covered_seconds(gpu_ids):
    records = [SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 10 * k, interval_s=10, util_gpu=40.0) for k in (1, 2, 5)]
    roll_up_everything(records)
    minute = MinuteRollup.objects.get()
    assert (minute.covered_s, minute.util_covered_s, minute.sample_count, minute.util_mean) == (30, 30, 3, 40.0)
    assert HourRollup.objects.get().covered_s == 30


def test_gpm_means_weigh_each_record_by_the_seconds_it_owns(gpu_ids):
    # One minute: [0, 10) at SM 80 %, [10, 30) without GPM (the agent's first interval), [30, 60) at SM 20 %;
    # the next minute: 60 s at SM 50 %, tensor unknown (its own read failed).
    gpu = gpu_ids[0]
    records = [
        SampleRecord(gpu_id=gpu, ts=EPOCH0 + 10, interval_s=10, util_gpu=90.0, sm_active=80.0, tensor_active=60.0,
                     pcie_rx_mibs=500.0),
        SampleRecord(gpu_id=gpu, ts=EPOCH0 + 30, interval_s=20, util_gpu=50.0),
        SampleRecord(gpu_id=gpu, ts=EPOCH0 + 60, interval_s=30, util_gpu=10.0, sm_active=20.0, tensor_active=10.0,
                     pcie_rx_mibs=2000.0),
        SampleRecord(gpu_id=gpu, ts=EPOCH0 + 120, interval_s=60, util_gpu=40.0, sm_active=50.0, pcie_rx_mibs=800.0),
    ]
    roll_up_everything(records)
    first, second = MinuteRollup.objects.order_by("bucket")
    assert (first.covered_s, first.util_covered_s, first.gpm_covered_s) == (60, 60, 40)
    assert first.sm_active_mean == pytest.approx((80 * 10 + 20 * 30) / 40)
    assert first.tensor_active_mean == pytest.approx((60 * 10 + 10 * 30) / 40)
    assert first.pcie_rx_mibs_mean == pytest.approx((500 * 10 + 2000 * 30) / 40)
    assert first.fp64_active_mean is None  # no record has it: unknown, not 0
    assert (second.gpm_covered_s, second.sm_active_mean, second.tensor_active_mean) == (60, 50.0, None)
    hour = HourRollup.objects.get()
    assert hour.gpm_covered_s == 100
    assert hour.sm_active_mean == pytest.approx((80 * 10 + 20 * 30 + 50 * 60) / 100)
    assert hour.tensor_active_mean == pytest.approx((60 * 10 + 10 * 30) / 40)
    assert hour.fp64_active_mean is None
    assert_rollups(stored(HourRollup), bucket_rollups(records, bucket_s=HOUR_S))


def test_a_10_s_and_a_50_s_record_weigh_by_their_seconds(gpu_ids):
    records = [
        SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 10, interval_s=10, sm_active=80.0, nvlink_tx_mibs=100.0),
        SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 60, interval_s=50, sm_active=20.0, nvlink_tx_mibs=400.0),
    ]
    assert store_as_collector(records) == (2, 1)
    rollups.rollup_pending()
    for rollup in (MinuteRollup.objects.get(), HourRollup.objects.get()):
        assert rollup.sm_active_mean == pytest.approx((80 * 10 + 20 * 50) / 60)
        assert rollup.nvlink_tx_mibs_mean == pytest.approx((100 * 10 + 400 * 50) / 60)
        assert (rollup.gpm_covered_s, rollup.util_covered_s, rollup.util_mean) == (60, 0, None)


def test_an_unmeasured_mig_instance_is_covered_with_no_utilization(gpu_ids):
    records = [
        SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 10 * k, interval_s=10, mem_used_mib=9000, util_mem=None)
        for k in range(1, 7)
    ]
    roll_up_everything(records)
    for rollup in (MinuteRollup.objects.get(), HourRollup.objects.get()):
        assert (rollup.covered_s, rollup.util_covered_s, rollup.util_mean, rollup.util_max) == (60, 0, None, None)
        assert rollup.mem_used_max_mib == 9000
        assert (rollup.gpm_covered_s, rollup.sm_active_mean) == (0, None)


def test_a_late_record_raises_coverage_and_is_recomputed(gpu_ids):
    gpu = gpu_ids[0]
    on_time = [SampleRecord(gpu_id=gpu, ts=EPOCH0 + 10 * k, interval_s=10, util_gpu=10.0) for k in (1, 2, 3, 5, 6)]
    assert store_as_collector(on_time) == (5, 1)
    rollups.rollup_pending()
    assert MinuteRollup.objects.get().covered_s == 50

    late = SampleRecord(gpu_id=gpu, ts=EPOCH0 + 40, interval_s=10, util_gpu=70.0, xid_count=2)
    assert store_as_collector([late]) == (1, 1)
    rollups.rollup_pending()
    minute = MinuteRollup.objects.get()
    assert (minute.covered_s, minute.util_mean, minute.xid_count) == (60, pytest.approx(20.0), 2)
    assert_rollups(stored(MinuteRollup), minute_rollups([*on_time, late]))
    assert HourRollup.objects.get().covered_s == 60


def test_a_late_300_s_record_marks_every_minute_it_covers(gpu_ids):
    record = SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 600, interval_s=300, util_gpu=50.0, energy_j=3000.0)
    assert store_as_collector([record]) == (1, 5)
    assert store_as_collector([record]) == (0, 0)  # a repeated record changes nothing
    rollups.rollup_pending()
    assert MinuteRollup.objects.count() == 5
    assert HourRollup.objects.get().energy_j == pytest.approx(3000.0)


def test_processing_again_gives_identical_rows(gpu_ids):
    records = agent_records(gpu_ids, interval_s=57, start_s=EPOCH0, end_s=EPOCH0 + 2 * HOUR_S)
    roll_up_everything(records)
    first = (stored(MinuteRollup), stored(HourRollup))
    rollups.recompute_range(start=T0, end=T0 + timedelta(hours=3), now=NOW)
    rollups.recompute_range(start=T0, end=T0 + timedelta(hours=3), now=NOW)
    assert (stored(MinuteRollup), stored(HourRollup)) == first


def test_recomputing_a_range_equals_the_incremental_rollups(gpu_ids):
    records = agent_records(gpu_ids, interval_s=57, start_s=EPOCH0, end_s=EPOCH0 + 3 * HOUR_S, seed=5)
    chunks = [records[i::3] for i in range(3)]  # arrival out of order: each chunk spans the whole range
    for chunk in chunks:
        store_as_collector(chunk)
        rollups.rollup_pending(batch=40)
    incremental = (stored(MinuteRollup), stored(HourRollup))
    MinuteRollup.objects.all().delete()
    HourRollup.objects.all().delete()
    result = rollups.recompute_range(start=T0 - timedelta(hours=1), end=T0 + timedelta(hours=4), now=NOW)
    assert result["marked"] == len(incremental[0])
    assert (stored(MinuteRollup), stored(HourRollup)) == incremental
    assert_rollups(incremental[0], minute_rollups(records))


def test_a_bucket_whose_samples_are_gone_loses_its_rollup(gpu_ids):
    records = [SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 70, interval_s=10, util_gpu=1.0)]
    roll_up_everything(records)
    Sample.objects.all().delete()
    DirtyBucket.objects.create(level="minute", gpu_id=gpu_ids[0], bucket=at(EPOCH0 + 60))
    rollups.rollup_pending()
    assert not MinuteRollup.objects.exists()
    assert not HourRollup.objects.exists()


def test_energy_is_preserved(gpu_ids):
    records = agent_records(gpu_ids, interval_s=57, start_s=EPOCH0, end_s=EPOCH0 + 2 * HOUR_S, seed=9)
    roll_up_everything(records)
    total = sum(r.energy_j for r in records if r.energy_j is not None)
    assert sum(m.energy_j or 0 for m in MinuteRollup.objects.all()) == pytest.approx(total, rel=1e-12)
    assert sum(h.energy_j or 0 for h in HourRollup.objects.all()) == pytest.approx(total, rel=1e-12)


def test_the_query_count_does_not_grow_with_the_batch(gpu_ids):
    def queries_for(minutes: int) -> int:
        records = agent_records(gpu_ids[:1], interval_s=60, start_s=EPOCH0, end_s=EPOCH0 + 60 * minutes)
        store(records)
        dirty_marks.mark_dirty_range(start=T0, end=at(EPOCH0 + 60 * minutes))
        with CaptureQueriesContext(connection) as context:
            claimed = rollups.process_dirty(limit=1000)
        assert claimed > 0
        assert not DirtyBucket.objects.filter(level="minute").exists()
        Sample.objects.all().delete()
        DirtyBucket.objects.all().delete()
        return len(context.captured_queries)

    # savepoint, the claim, the recompute, release (in a test transaction)
    assert queries_for(5) == queries_for(600) == 4


def test_the_watermark_is_the_oldest_dirty_bucket(gpu_ids):
    assert rollups.rollup_watermark(now=T0 + timedelta(seconds=95)) == T0 + timedelta(minutes=1)
    DirtyBucket.objects.create(level="hour", gpu_id=gpu_ids[0], bucket=T0)
    DirtyBucket.objects.create(level="minute", gpu_id=gpu_ids[1], bucket=T0 - timedelta(minutes=5))
    assert rollups.rollup_watermark(now=NOW) == T0 - timedelta(minutes=5)


def test_prune_keeps_what_retention_keeps(gpu_ids, settings):
    settings.TELEMETRY_RAW_RETENTION_DAYS, settings.TELEMETRY_MINUTE_RETENTION_DAYS = 8, 400
    now_s = int(NOW.timestamp())
    partitions.partitions_add([(NOW - timedelta(days=days)).date() for days in (10, 9, 7)])
    store([SampleRecord(gpu_id=gpu_ids[0], ts=now_s - days * 86400 + 3600, interval_s=10) for days in (9, 7)])
    store([SampleRecord(gpu_id=gpu_ids[1], ts=now_s - 10 * 86400 + 3600, interval_s=10)])  # its bucket is still dirty
    DirtyBucket.objects.create(level="minute", gpu_id=gpu_ids[1], bucket=at(now_s - 10 * 86400 + 3540))
    values = {"covered_s": 60, "util_covered_s": 0, "sample_count": 6}
    MinuteRollup.objects.bulk_create(
        MinuteRollup(gpu_id=gpu_ids[0], bucket=NOW - timedelta(days=days), **values) for days in (401, 399)
    )
    HourRollup.objects.create(gpu_id=gpu_ids[0], bucket=NOW - timedelta(days=1000), **values)

    def days_ending_by(cutoff):  # every day partition wholly before the cut-off, whatever else the database holds
        return [day for day in partitions.day_partitions() if datetime.combine(day, time(), UTC) + timedelta(days=1) <= cutoff]

    held = days_ending_by(at(now_s - 10 * 86400 + 3540))
    result = rollups.prune(now=NOW, batch=1)
    assert result["sample_days_dropped"] == held  # the dirty bucket holds the raw days back
    assert (result["samples_deleted_from_default"], result["minute_rollups"]) == (0, 1)
    assert Sample.objects.count() == 3
    rollups.rollup_pending()
    expected = days_ending_by(NOW - timedelta(days=8))
    assert (NOW - timedelta(days=10)).date() in expected and (NOW - timedelta(days=9)).date() in expected
    assert rollups.prune(now=NOW, batch=1)["sample_days_dropped"] == expected

    assert list(Sample.objects.values_list("ts", flat=True)) == [NOW - timedelta(days=7, hours=-1)]
    assert list(MinuteRollup.objects.order_by("bucket").values_list("bucket", flat=True)) == [
        NOW - timedelta(days=399), NOW - timedelta(days=10, minutes=-59),
    ]
    assert HourRollup.objects.filter(bucket=NOW - timedelta(days=1000)).exists()


def test_recompute_leaves_minutes_older_than_the_raw_retention_alone(gpu_ids):
    old = [SampleRecord(gpu_id=gpu_ids[0], ts=EPOCH0 + 10 * k, interval_s=10, util_gpu=5.0) for k in range(1, 7)]
    roll_up_everything(old)
    Sample.objects.filter(ts__lt=at(EPOCH0 + 30)).delete()  # pruned since
    result = rollups.recompute_range(start=T0, end=T0 + timedelta(hours=1), now=T0 + timedelta(days=9))
    assert result["marked"] == 0
    assert MinuteRollup.objects.get().covered_s == 60


def test_naive_times_are_refused():
    with pytest.raises(ValueError, match="aware"):
        dirty_marks.mark_dirty_range(start=datetime(2026, 11, 2), end=T0)  # noqa: DTZ001 (the point of the test)


def test_bench_rollup_leaves_no_trace(gpu_ids):
    result = rollups.bench_rollup(3000, gpus=5, interval_s=10, batch=200)
    assert result["records"] == 3000
    assert result["minute_rollups"] == 5 * 100
    assert Gpu.objects.count() == len(gpu_ids)
    assert not Sample.objects.exists()


def in_thread(target, *args):
    """Run ``target`` on its own connection (as a second worker would) and close it after."""
    errors = []

    def run():
        try:
            target(*args)
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_give_the_rows_of_one(gpu_ids):
    records = agent_records(gpu_ids, interval_s=57, start_s=EPOCH0, end_s=EPOCH0 + 2 * HOUR_S, seed=11)
    store(records)
    marked = dirty_marks.mark_dirty_range(start=T0 - timedelta(minutes=1), end=T0 + timedelta(hours=3))
    claims = [[], []]

    def work(mine: list, start: threading.Barrier):
        start.wait()
        while claimed := rollups.process_dirty(limit=25):
            mine.append(claimed)

    barrier = threading.Barrier(2)
    workers = [in_thread(work, claims[i], barrier) for i in range(2)]
    for thread, errors in workers:
        thread.join(60)
        assert not errors
    assert sum(claims[0]) + sum(claims[1]) == marked  # each minute claimed exactly once
    assert claims[0] and claims[1]  # both took part
    rollups.rollup_pending()
    reference = minute_rollups(records)
    assert_rollups(stored(MinuteRollup), reference)
    assert_rollups(stored(HourRollup), hour_rollups_from_minutes(reference))


@pytest.mark.django_db(transaction=True)
def test_a_worker_skips_a_bucket_a_writer_is_still_marking(gpu_ids):
    """The bucket is already dirty when a collector stores a second record in it: the worker must not
    recompute it without that record and clear the mark."""
    gpu = gpu_ids[0]
    first, second = (SampleRecord(gpu_id=gpu, ts=EPOCH0 + ts, interval_s=10, util_gpu=50.0) for ts in (10, 20))
    store_as_collector([first])
    written, release = threading.Event(), threading.Event()

    def collector():
        with transaction.atomic():
            store_as_collector([second])
            written.set()
            release.wait(30)

    thread, errors = in_thread(collector)
    assert written.wait(30)
    assert rollups.process_dirty() == 0  # the writer holds the mark
    release.set()
    thread.join(30)
    assert not errors
    assert rollups.process_dirty() == 1
    assert MinuteRollup.objects.get().covered_s == 20


@pytest.mark.django_db(transaction=True)
def test_a_writer_waits_for_a_worker_then_marks_again(gpu_ids):
    gpu = gpu_ids[0]
    first, second = (SampleRecord(gpu_id=gpu, ts=EPOCH0 + ts, interval_s=10, util_gpu=50.0) for ts in (10, 20))
    store_as_collector([first])
    claimed, release = threading.Event(), threading.Event()

    def worker():
        with transaction.atomic():
            rollups.process_dirty()
            claimed.set()
            release.wait(30)

    worker_thread, worker_errors = in_thread(worker)
    assert claimed.wait(30)
    writer_thread, writer_errors = in_thread(store_as_collector, [second])
    writer_thread.join(1)
    assert writer_thread.is_alive()  # blocked on the worker's claim
    release.set()
    worker_thread.join(30)
    writer_thread.join(30)
    assert not worker_errors and not writer_errors
    assert MinuteRollup.objects.get().covered_s == 10
    assert DirtyBucket.objects.filter(level="minute").count() == 1
    rollups.rollup_pending()
    assert MinuteRollup.objects.get().covered_s == 20
