"""The sample ingest path: JSON lines → COPY → one validating, upserting statement."""

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from agents.records import (
    FLOAT_RANGES,
    GPM_FIELDS,
    INT_RANGES,
    PROCESS_FIELDS,
    RECORD_FIELDS,
    SPOOL_FIELDS,
    empty_record,
)
from cluster.models import DirtyBucket, Gpu, Sample
from cluster.telemetry.ingest import IMPORT_FIELDS, NOT_STORED, SAMPLE_COLUMNS, STORED_AS, ingest_json_lines

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
T = int(NOW.timestamp())
# A Hopper GPU's GPM readings for one interval
GPM = {
    "sm_active": 81.5, "sm_occupancy": 42.0, "tensor_active": 55.25, "dram_active": 37.0, "fp16_active": 12.5,
    "fp32_active": 3.0, "fp64_active": 0.0, "nvlink_rx_mibs": 20_480.0, "nvlink_tx_mibs": 19_000.5,
    "pcie_rx_mibs": 1_200.0, "pcie_tx_mibs": 640.0,
}


def record(uuid="GPU-h200-a-0", *, ts=T - 60, seq=1, **fields):
    base = {
        "seq": seq, "ts": ts, "gpu_uuid": uuid, "interval_s": 10, "util_gpu": 50.0, "util_gpu_max": 70.0,
        "util_mem": 20.0, "mem_used_mib": 1000, "mem_total_mib": 143771, "power_w": 300.0, "energy_j": 3000.0,
        "temp_c": 55, "sm_clock_mhz": 1980, "xid_count": 0, "ecc_dbe_count": 0, "processes": [],
        **GPM,
    }
    base.update(fields)
    return base


def lines(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def ingest(blob, node=None, **kwargs):
    with transaction.atomic():
        return ingest_json_lines(
            blob, node_id=node.pk if node else None, now=NOW, max_future_s=600, max_age_s=7 * 86400, **kwargs
        )


def test_it_stores_good_records_and_marks_their_minutes_dirty(small_cluster):
    node = small_cluster["nodes"][0]
    result = ingest(lines(record(ts=T - 60, seq=1), record(ts=T - 50, seq=2), record("GPU-h200-a-1", seq=3)), node)
    assert (result.seen, result.stored, result.rejected, result.max_seq) == (3, 3, {}, 3)
    sample = Sample.objects.get(gpu__uuid="GPU-h200-a-0", ts=NOW - timedelta(seconds=60))
    assert (sample.util_gpu, sample.mem_used_mib, sample.power_w, sample.processes) == (50.0, 1000, 300.0, None)
    # [T-70, T-60) lies in the minute 11:58 (T-70 = 11:58:50) and 11:59 holds nothing of it: T-60 = 11:59:00.
    buckets = set(DirtyBucket.objects.filter(gpu__uuid="GPU-h200-a-0").values_list("bucket", flat=True))
    assert buckets == {NOW - timedelta(minutes=2), NOW - timedelta(minutes=1)}


def test_a_record_straddling_minutes_dirties_both(small_cluster):
    ingest(lines(record(ts=T - 30, interval_s=57)))
    buckets = sorted(DirtyBucket.objects.values_list("bucket", flat=True))
    assert buckets == [NOW - timedelta(minutes=2), NOW - timedelta(minutes=1)]


def test_a_repeated_record_changes_nothing(small_cluster):
    blob = lines(record(seq=1), record(ts=T - 50, seq=2))
    assert ingest(blob).stored == 2
    DirtyBucket.objects.all().delete()
    again = ingest(lines(record(seq=1, util_gpu=99.0), record(ts=T - 50, seq=2)))
    assert (again.seen, again.stored) == (2, 0)
    assert Sample.objects.get(ts=NOW - timedelta(seconds=60)).util_gpu == 50.0
    assert not DirtyBucket.objects.exists()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"util_gpu": 101}, "util_gpu: above 100"),
        ({"util_gpu": -1}, "util_gpu: below 0"),
        ({"util_gpu": "busy"}, "util_gpu: not a number"),
        ({"mem_used_mib": -5}, "mem_used_mib: below 0"),
        ({"mem_used_mib": 12.5}, "mem_used_mib: not a whole number"),
        ({"gpu_uuid": "GPU-nobody"}, "gpu_uuid: unknown GPU"),
        ({"gpu_uuid": None}, "gpu_uuid: missing or not a string"),
        ({"xid_count": 1.5}, "xid_count: not a whole number"),
        ({"seq": "x"}, "seq: missing or not a number"),
        ({"ts": T + 601}, "ts: too far in the future"),
        ({"ts": T - 7 * 86400 - 1}, "ts: older than the agent spool keeps"),
        ({"ts": "yesterday"}, "ts: missing or not a number"),
        ({"interval_s": 0}, "interval_s: not a whole number of seconds in 1..3600"),
        ({"processes": "many"}, "processes: not a list"),
        ({"temp_c": 500}, "temp_c: above 200"),
        ({"sm_active": 100.5}, "sm_active: above 100"),
        ({"fp64_active": -0.1}, "fp64_active: below 0"),
        ({"tensor_active": "busy"}, "tensor_active: not a number"),
        ({"nvlink_rx_mibs": -1}, "nvlink_rx_mibs: below 0"),
        ({"pcie_tx_mibs": 2e9}, "pcie_tx_mibs: above 1000000000.0"),
    ],
)
def test_a_bad_record_is_rejected_with_its_reason_and_the_rest_stored(small_cluster, fields, reason):
    result = ingest(lines(record(seq=1), record(**{"seq": 2, "ts": T - 50, **fields}), record(ts=T - 40, seq=3)))
    assert result.rejected == {reason: 1}
    assert result.stored == 2
    assert result.max_seq == 3
    assert Sample.objects.count() == 2


def test_a_record_of_another_nodes_gpu_is_unknown_to_this_node(small_cluster):
    node_a, _node_b, _ = small_cluster["nodes"]
    result = ingest(lines(record("GPU-h200-b-0")), node_a)
    assert result.rejected == {"gpu_uuid: unknown GPU": 1}


def test_nulls_stay_null_and_processes_are_kept(small_cluster):
    procs = [{"pid": 42, "user": "alice", "used_mib": 900, "job_ref": "job_7", "gi_id": None, "ci_id": None}]
    ingest(lines(record(util_gpu=None, util_gpu_max=None, power_w=None, energy_j=None, processes=procs)))
    sample = Sample.objects.get()
    assert (sample.util_gpu, sample.power_w, sample.energy_j) == (None, None, None)
    assert sample.processes == procs


def test_gpm_fields_are_stored_as_sent(small_cluster):
    ingest(lines(record()))
    assert Sample.objects.values(*GPM_FIELDS).get() == GPM


def test_unknown_gpm_fields_stay_null_never_zero(small_cluster):
    """A device without GPM (L40S, A100), the agent's first interval, or an older agent that sends no
    GPM keys at all: every GPM column is null; a metric whose own read failed is null beside the rest."""
    no_gpm = record(seq=1, **dict.fromkeys(GPM_FIELDS))
    older_agent = {k: v for k, v in record(seq=2, ts=T - 50).items() if k not in GPM_FIELDS}
    one_failed = record(seq=3, ts=T - 40, fp64_active=None)
    assert ingest(lines(no_gpm, older_agent, one_failed)).stored == 3
    by_ts = {int(s["ts"].timestamp()): s for s in Sample.objects.values("ts", *GPM_FIELDS)}
    assert set(by_ts[T - 60].values()) - {by_ts[T - 60]["ts"]} == {None}
    assert set(by_ts[T - 50].values()) - {by_ts[T - 50]["ts"]} == {None}
    assert by_ts[T - 40]["fp64_active"] is None
    assert {name: by_ts[T - 40][name] for name in GPM_FIELDS if name != "fp64_active"} == {
        name: value for name, value in GPM.items() if name != "fp64_active"
    }


def test_a_line_that_is_not_json_fails_the_whole_page(small_cluster):
    import psycopg

    with pytest.raises(psycopg.DataError):
        ingest(lines(record(seq=1)) + b"{not json\n")
    assert not Sample.objects.exists()


def test_new_xid_and_ecc_events_are_reported_per_gpu(small_cluster):
    result = ingest(lines(record(seq=1, xid_count=2), record(ts=T - 50, seq=2, xid_count=1, ecc_dbe_count=1)))
    gpu = Gpu.objects.get(uuid="GPU-h200-a-0")
    assert result.gpu_errors == {gpu.pk: (3, 1)}


def test_a_clean_page_is_a_few_statements_around_one_copy(small_cluster, django_assert_max_num_queries):
    blob = lines(*(record(ts=T - 600 + 10 * i, seq=i) for i in range(50)))
    # the page's GPUs, savepoint, release, the dirty marks (COPY is not counted): none per record
    with django_assert_max_num_queries(4):
        result = ingest_json_lines(blob, node_id=None, now=NOW, max_future_s=600, max_age_s=7 * 86400)
    assert result.stored == 50


def test_a_page_with_a_rejected_record_is_one_statement_after_the_copy(small_cluster, django_assert_max_num_queries):
    blob = lines(*(record(ts=T - 600 + 10 * i, seq=i) for i in range(49)), record(ts=T - 100, seq=49, util_gpu=101))
    # staging DDL, savepoint, the ingest, release (COPY is not counted): none per record
    with django_assert_max_num_queries(4):
        result = ingest_json_lines(blob, node_id=None, now=NOW, max_future_s=600, max_age_s=7 * 86400)
    assert (result.stored, result.rejected) == (49, {"util_gpu: above 100": 1})


# --- ingest and the agent's record schema (agents/records.py) agree ---------------------------------


def test_every_field_an_agent_record_carries_is_stored_or_explicitly_not():
    carried = {*RECORD_FIELDS, *SPOOL_FIELDS}
    assert set(STORED_AS) | set(NOT_STORED) == carried
    assert set(STORED_AS) & set(NOT_STORED) == set()
    assert set(IMPORT_FIELDS) & carried == set()
    # and every column of the Sample table is filled from a field, once
    assert sorted(STORED_AS.values()) == sorted(SAMPLE_COLUMNS) == sorted(f.column for f in Sample._meta.concrete_fields)
    assert set(record()) == carried  # this module's helper builds whole records


def test_a_record_with_every_field_set_is_stored_field_by_field(small_cluster):
    full = {**empty_record(ts=T - 60, gpu_uuid="GPU-h200-a-0", interval_s=10), "seq": 1}
    for offset, (name, (_low, high)) in enumerate({**FLOAT_RANGES, **INT_RANGES}.items()):
        full[name] = min(high, 10 + offset + (0.5 if name in FLOAT_RANGES else 0))
    full["processes"] = [dict.fromkeys(PROCESS_FIELDS, 7) | {"user": "alice", "job_ref": "job_7"}]
    assert ingest(lines(full)).stored == 1
    stored = Sample.objects.values(*STORED_AS.values()).get()
    expected = {**full, "ts": NOW - timedelta(seconds=60), "gpu_uuid": Gpu.objects.get(uuid="GPU-h200-a-0").pk}
    assert {column: stored[column] for column in STORED_AS.values()} == {
        column: expected[name] for name, column in STORED_AS.items()
    }


def test_each_measurement_is_held_to_the_schemas_range(small_cluster):
    bad, expected = [], Counter()
    for name, (low, high) in {**FLOAT_RANGES, **INT_RANGES}.items():
        for value, reason in ((low - 1, f"{name}: below {low}"), (high + 1, f"{name}: above {high}")):
            bad.append(record(seq=len(bad) + 1, ts=T - 600 + 10 * len(bad), **{name: value}))
            expected[reason] += 1
    result = ingest(lines(*bad))
    assert (result.rejected, result.stored) == (expected, 0)
