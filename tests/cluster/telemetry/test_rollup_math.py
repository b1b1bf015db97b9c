"""The reference rollup rules (cluster/telemetry/rollup_math.py), property-tested: pure functions, no database."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.records import GPM_FIELDS
from cluster.telemetry.rollup_math import (
    GPM_MEANS,
    HOUR_S,
    MINUTE_S,
    RollupValues,
    SampleRecord,
    bucket_rollups,
    hour_rollups_from_minutes,
    minute_rollups,
    owned_spans,
)

T0 = 1_793_577_600  # 2026-11-02 00:00 UTC, the tests' time zero (tests/conftest.py)
INTERVALS = (10, 57, 300)
EXACT_FIELDS = ("covered_s", "util_covered_s", "util_max", "mem_used_max_mib", "temp_max_c", "xid_count", "ecc_dbe_count",
                "gpm_covered_s")
FLOAT_FIELDS = ("util_mean", "util_mem_mean", "power_mean_w", "energy_j", *GPM_MEANS)

pct = st.floats(0, 100, allow_nan=False)
mibs = st.floats(0, 1e6, allow_nan=False)


@st.composite
def gpm_readings(draw) -> dict:
    """The GPM fields of one record, known together (one pair of GPM samples gives them all)."""
    return {name: draw(mibs if name.endswith("_mibs") else pct) for name in GPM_FIELDS}


@st.composite
def measurements(draw, *, has_util: bool, has_power: bool, has_gpm: bool = False) -> dict:
    """One record's fields. A failed read (every field null) now and then, as the agent writes it, on
    GPUs that report utilization: on the others the hour's power weights would not be exact (see
    cluster/telemetry/rollup_math.py). On a GPU with GPM, its fields are now and then all null on
    their own (the agent's first interval, a refused GPM read)."""
    if has_util and draw(st.integers(0, 9)) == 0:
        return {}
    util = draw(pct) if has_util else None
    gpm = draw(gpm_readings()) if has_gpm and draw(st.integers(0, 9)) > 0 else {}
    return {
        **gpm,
        "util_gpu": util,
        "util_gpu_max": draw(st.one_of(st.none(), st.floats(util, 100))) if has_util else None,
        "util_mem": draw(pct) if has_util else None,
        "mem_used_mib": draw(st.one_of(st.none(), st.integers(0, 143_771))),
        "power_w": draw(st.floats(20, 1000)) if has_power else None,
        "energy_j": draw(st.one_of(st.none(), st.floats(0, 300_000))),
        "temp_c": draw(st.one_of(st.none(), st.integers(20, 95))),
        "xid_count": draw(st.one_of(st.none(), st.integers(0, 3))),
        "ecc_dbe_count": draw(st.one_of(st.none(), st.integers(0, 2))),
    }


@st.composite
def aligned_records(draw, *, interval_s: int | None = None, span_s: int = 3 * HOUR_S) -> list[SampleRecord]:
    """Agent-like data: per GPU, records on interval boundaries with gaps, never overlapping; a GPU
    either reports utilization or not (MIG), and power or not."""
    records = []
    for gpu_id in range(draw(st.integers(1, 3))):
        interval = interval_s or draw(st.sampled_from(INTERVALS))
        first = T0 // interval + draw(st.integers(0, 50))
        slots = draw(st.sets(st.integers(first, first + span_s // interval), max_size=60))
        has_util, has_power, has_gpm = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
        for slot in sorted(slots):
            fields = draw(measurements(has_util=has_util, has_power=has_power, has_gpm=has_gpm))
            records.append(SampleRecord(gpu_id=gpu_id, ts=slot * interval, interval_s=interval, **fields))
    return records


@st.composite
def overlapping_records(draw) -> list[SampleRecord]:
    """Imported-like data: any end, any interval, overlaps allowed, within a short stretch."""
    records = {}
    gpm_gpus = draw(st.sets(st.integers(0, 1)))
    for _ in range(draw(st.integers(0, 25))):
        gpu_id, ts = draw(st.integers(0, 1)), T0 + draw(st.integers(1, 900))
        has_util = gpu_id == 0  # per-GPU field presence, as on real GPUs
        fields = draw(measurements(has_util=has_util, has_power=True, has_gpm=gpu_id in gpm_gpus))
        records[gpu_id, ts] = SampleRecord(gpu_id=gpu_id, ts=ts, interval_s=draw(st.integers(1, 400)), **fields)
    return list(records.values())


def assert_same(actual: RollupValues, expected: RollupValues, *, fields=EXACT_FIELDS + FLOAT_FIELDS) -> None:
    for name in fields:
        got, want = getattr(actual, name), getattr(expected, name)
        if name in FLOAT_FIELDS and got is not None and want is not None:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-6), name
        else:
            assert got == want, name


def covered_seconds(records: list[SampleRecord], gpu_id: int, bucket: int, bucket_s: int) -> int:
    """Brute force: the seconds of the bucket that any record of the GPU covers."""
    seconds = set()
    for r in records:
        if r.gpu_id == gpu_id:
            seconds.update(range(max(r.start, bucket), min(r.ts, bucket + bucket_s)))
    return len(seconds)


@given(overlapping_records())
def test_it_counts_each_covered_second_once(records):
    for bucket_s in (MINUTE_S, HOUR_S):
        for (gpu_id, bucket), values in bucket_rollups(records, bucket_s=bucket_s).items():
            assert values.covered_s == covered_seconds(records, gpu_id, bucket, bucket_s)
            assert 0 < values.covered_s <= bucket_s
            assert 0 <= values.util_covered_s <= values.covered_s
            assert 0 <= values.gpm_covered_s <= values.covered_s


@given(overlapping_records())
def test_owned_spans_are_disjoint_and_cover_the_union(records):
    for gpu_id in (0, 1):
        owned = [(s, e) for r, s, e in owned_spans(records) if r.gpu_id == gpu_id and e > s]
        seconds = [t for s, e in owned for t in range(s, e)]
        assert len(seconds) == len(set(seconds))
        assert set(seconds) == {t for r in records if r.gpu_id == gpu_id for t in range(r.start, r.ts)}


@given(overlapping_records(), st.randoms(use_true_random=False))
def test_it_does_not_depend_on_record_order(records, rnd):
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert minute_rollups(shuffled) == minute_rollups(records)


@given(overlapping_records())
def test_a_bucket_depends_only_on_the_records_that_overlap_it(records):
    """What the SQL relies on: a dirty bucket is recomputed from the raw rows overlapping it alone."""
    for (gpu_id, bucket), values in minute_rollups(records).items():
        near = [r for r in records if r.gpu_id == gpu_id and r.ts > bucket and r.start < bucket + MINUTE_S]
        assert minute_rollups(near)[gpu_id, bucket] == values


@given(aligned_records(), st.data())
def test_splitting_records_in_time_keeps_the_totals(records, data):
    """A record cut in two pieces with the same readings (energy shared by length, events on the
    later piece) rolls up to the same seconds, means, maxima, energy and events."""
    pieces = []
    for r in records:
        if r.interval_s == 1:
            pieces.append(r)
            continue
        cut = data.draw(st.integers(r.start + 1, r.ts - 1))
        first = {"ts": cut, "interval_s": cut - r.start, "energy_j": _share(r, cut - r.start), "xid_count": None,
                 "ecc_dbe_count": None}
        pieces.append(SampleRecord(**{**_fields(r), **first}))
        pieces.append(SampleRecord(**{**_fields(r), "interval_s": r.ts - cut, "energy_j": _share(r, r.ts - cut)}))
    whole, split = minute_rollups(records), minute_rollups(pieces)
    assert whole.keys() == split.keys()
    for key, values in whole.items():
        assert_same(split[key], values)


def _share(record: SampleRecord, seconds: int) -> float | None:
    return None if record.energy_j is None else record.energy_j * seconds / record.interval_s


def _fields(record: SampleRecord) -> dict:
    return {name: getattr(record, name) for name in SampleRecord.__slots__}


@given(overlapping_records())
def test_util_mean_lies_between_the_contributing_utilizations(records):
    spans = list(owned_spans(records))
    for (gpu_id, bucket), values in minute_rollups(records).items():
        utils = [
            r.util_gpu for r, s, e in spans
            if r.gpu_id == gpu_id and r.util_gpu is not None and min(e, bucket + 60) > max(s, bucket)
        ]
        if not utils:
            assert values.util_mean is None and values.util_covered_s == 0
            continue
        assert min(utils) - 1e-9 <= values.util_mean <= max(utils) + 1e-9
        assert values.util_mean <= values.util_max + 1e-9


@given(overlapping_records())
def test_each_gpm_mean_lies_between_the_contributing_values(records):
    spans = list(owned_spans(records))
    for (gpu_id, bucket), values in minute_rollups(records).items():
        owners = [r for r, s, e in spans if r.gpu_id == gpu_id and min(e, bucket + 60) > max(s, bucket)]
        for name in GPM_FIELDS:
            known = [getattr(r, name) for r in owners if getattr(r, name) is not None]
            mean = getattr(values, f"{name}_mean")
            if not known:
                assert mean is None, name
                continue
            assert min(known) - 1e-9 * max(1, max(known)) <= mean <= max(known) * (1 + 1e-9) + 1e-9, name
        if not any(r.sm_active is not None for r in owners):
            assert values.gpm_covered_s == 0


@pytest.mark.parametrize("interval_s", INTERVALS)
@settings(max_examples=50)
@given(data=st.data())
def test_energy_is_preserved(interval_s, data):
    records = data.draw(aligned_records(interval_s=interval_s))
    total = sum(r.energy_j for r in records if r.energy_j is not None)
    minutes = minute_rollups(records)
    hours = hour_rollups_from_minutes(minutes)
    assert math.fsum(v.energy_j or 0 for v in minutes.values()) == pytest.approx(total, rel=1e-9, abs=1e-6)
    assert math.fsum(v.energy_j or 0 for v in hours.values()) == pytest.approx(total, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("interval_s", INTERVALS)
@settings(max_examples=50)
@given(data=st.data())
def test_hours_from_minutes_equal_hours_from_raw(interval_s, data):
    records = data.draw(aligned_records(interval_s=interval_s))
    from_minutes = hour_rollups_from_minutes(minute_rollups(records))
    direct = bucket_rollups(records, bucket_s=HOUR_S)
    assert from_minutes.keys() == direct.keys()
    straddles_minutes = MINUTE_S % interval_s != 0
    for key, values in direct.items():
        assert_same(from_minutes[key], values)
        if not straddles_minutes:
            assert from_minutes[key].sample_count == values.sample_count


@given(overlapping_records())
def test_hours_from_minutes_equal_hours_from_raw_for_overlapping_records(records):
    from_minutes = hour_rollups_from_minutes(minute_rollups(records))
    for key, values in bucket_rollups(records, bucket_s=HOUR_S).items():
        assert_same(from_minutes[key], values)


def test_a_57_s_record_weighs_each_minute_by_its_overlap():
    # (T0 + 30, T0 + 87]: 30 s in the first minute, 27 s in the second; events go to the second.
    ts = T0 + 87
    record = SampleRecord(gpu_id=1, ts=ts, interval_s=57, util_gpu=50.0, energy_j=570.0, xid_count=2)
    minutes = minute_rollups([record])
    assert minutes[1, T0] == RollupValues(
        covered_s=30, util_covered_s=30, sample_count=1, util_mean=50.0, util_max=50.0, energy_j=300.0,
    )
    assert minutes[1, T0 + 60].covered_s == 27
    assert minutes[1, T0 + 60].energy_j == pytest.approx(270.0)
    assert (minutes[1, T0].xid_count, minutes[1, T0 + 60].xid_count) == (0, 2)


def test_a_record_ending_on_the_minute_belongs_to_the_minute_before():
    record = SampleRecord(gpu_id=1, ts=T0 + 60, interval_s=10, util_gpu=10.0, ecc_dbe_count=1)
    assert list(minute_rollups([record])) == [(1, T0)]
    assert minute_rollups([record])[1, T0].ecc_dbe_count == 1


def test_a_mig_instance_is_covered_but_unmeasured():
    records = [SampleRecord(gpu_id=1, ts=T0 + 10 * k, interval_s=10, mem_used_mib=900) for k in range(1, 4)]
    values = minute_rollups(records)[1, T0]
    assert (values.covered_s, values.util_covered_s, values.util_mean, values.util_max) == (30, 0, None, None)
    assert values.mem_used_max_mib == 900


def test_an_overlapping_import_does_not_count_seconds_twice():
    collected = [SampleRecord(gpu_id=1, ts=T0 + 10 * k, interval_s=10, util_gpu=20.0) for k in range(1, 7)]
    imported = SampleRecord(gpu_id=1, ts=T0 + 45, interval_s=45, util_gpu=90.0, util_gpu_max=95.0)
    values = minute_rollups([*collected, imported])[1, T0]
    assert values.covered_s == 60
    # In (start, end) order the import follows the record of [0, 10) and owns [10, 45); the
    # collected records of [10, 40) own nothing, [40, 50) owns its last 5 s.
    assert values.util_mean == pytest.approx((10 * 20 + 35 * 90 + 15 * 20) / 60)
    assert values.util_max == 95.0  # maxima look at every overlapping record
    assert values.sample_count == 7


def test_the_rollup_has_a_mean_for_each_gpm_field():
    assert set(GPM_FIELDS) <= set(SampleRecord.__slots__)
    assert {*GPM_MEANS, "gpm_covered_s"} <= set(RollupValues.__slots__)
    assert tuple(f"{name}_mean" for name in GPM_FIELDS) == GPM_MEANS


def test_gpm_means_weigh_each_record_by_the_seconds_it_owns():
    # One minute: [0, 10) at SM 80 %, [10, 60) at SM 20 %.
    short = SampleRecord(gpu_id=1, ts=T0 + 10, interval_s=10, sm_active=80.0, nvlink_rx_mibs=1000.0)
    long = SampleRecord(gpu_id=1, ts=T0 + 60, interval_s=50, sm_active=20.0, nvlink_rx_mibs=4000.0)
    values = minute_rollups([short, long])[1, T0]
    assert values.sm_active_mean == pytest.approx((80 * 10 + 20 * 50) / 60)
    assert values.nvlink_rx_mibs_mean == pytest.approx((1000 * 10 + 4000 * 50) / 60)
    assert values.gpm_covered_s == 60
    assert values.tensor_active_mean is None  # no record has it: unknown, not 0


def test_a_record_without_gpm_is_covered_but_not_in_the_gpm_means():
    # [0, 10) SM 80 %, [10, 30) no GPM (the agent's first interval after a restart), [30, 60) SM 20 %.
    records = [
        SampleRecord(gpu_id=1, ts=T0 + 10, interval_s=10, util_gpu=90.0, sm_active=80.0, fp16_active=40.0),
        SampleRecord(gpu_id=1, ts=T0 + 30, interval_s=20, util_gpu=50.0),
        SampleRecord(gpu_id=1, ts=T0 + 60, interval_s=30, util_gpu=10.0, sm_active=20.0, fp16_active=10.0),
    ]
    values = minute_rollups(records)[1, T0]
    assert (values.covered_s, values.util_covered_s, values.gpm_covered_s) == (60, 60, 40)
    assert values.sm_active_mean == pytest.approx((80 * 10 + 20 * 30) / 40)
    assert values.fp16_active_mean == pytest.approx((40 * 10 + 10 * 30) / 40)
    assert values.util_mean == pytest.approx((90 * 10 + 50 * 20 + 10 * 30) / 60)


def test_a_gpu_without_gpm_has_no_gpm_means():
    records = [SampleRecord(gpu_id=1, ts=T0 + 10 * k, interval_s=10, util_gpu=50.0) for k in range(1, 7)]
    for values in (minute_rollups(records)[1, T0], hour_rollups_from_minutes(minute_rollups(records))[1, T0]):
        assert values.gpm_covered_s == 0
        assert all(getattr(values, mean) is None for mean in GPM_MEANS)


def test_an_hour_weighs_each_minutes_gpm_means_by_its_gpm_seconds():
    # Minute 0: 60 s at SM 90 %. Minute 1: 20 s at SM 30 %, 40 s without GPM. Minute 2: 60 s without
    # fp64 (its own read failed all minute): fp64's hour mean is minute 0's alone.
    records = [
        SampleRecord(gpu_id=1, ts=T0 + 60, interval_s=60, sm_active=90.0, fp64_active=5.0),
        SampleRecord(gpu_id=1, ts=T0 + 80, interval_s=20, sm_active=30.0, fp64_active=1.0),
        SampleRecord(gpu_id=1, ts=T0 + 120, interval_s=40),
        SampleRecord(gpu_id=1, ts=T0 + 180, interval_s=60, sm_active=60.0),
    ]
    hour = hour_rollups_from_minutes(minute_rollups(records))[1, T0]
    assert hour.gpm_covered_s == 140
    assert hour.sm_active_mean == pytest.approx((90 * 60 + 30 * 20 + 60 * 60) / 140)
    assert hour.fp64_active_mean == pytest.approx((5 * 60 + 1 * 20) / 80)
    assert_same(hour, bucket_rollups(records, bucket_s=HOUR_S)[1, T0])


def test_random_agent_data_rolls_up_within_bounds():
    rnd = random.Random(7)
    records = [
        SampleRecord(gpu_id=1, ts=T0 + 10 * k, interval_s=10, util_gpu=rnd.uniform(0, 100))
        for k in range(1, 361) if rnd.random() > 0.1
    ]
    hours = hour_rollups_from_minutes(minute_rollups(records))
    assert hours[1, T0].covered_s == 10 * len(records)
    assert hours[1, T0].sample_count == len(records)
