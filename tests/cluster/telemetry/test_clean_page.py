"""The clean page's path (msgspec + one binary COPY) stores exactly what the SQL statement stores, and
hands every page it cannot take whole to the statement without keeping anything of it."""

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import DataError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.records import FLOAT_RANGES, INT_RANGES
from cluster.models import DirtyBucket, Sample
from cluster.telemetry import clean_page
from cluster.telemetry.clean_page import COPY_TYPES, SAMPLE_COLUMNS, decode_clean_page
from cluster.telemetry.ingest import ingest_json_lines

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
T = int(NOW.timestamp())
UUIDS = ("GPU-h200-a-0", "GPU-h200-a-1")


def record(uuid="GPU-h200-a-0", *, ts=T - 60, seq=1, **fields):
    return {
        "seq": seq, "ts": ts, "gpu_uuid": uuid, "interval_s": 10, "util_gpu": 50.0, "util_gpu_max": 70.0,
        "util_mem": 20.0, "mem_used_mib": 1000, "mem_total_mib": 143771, "power_w": 300.0, "energy_j": 3000.0,
        "temp_c": 55, "sm_clock_mhz": 1980, "xid_count": 0, "ecc_dbe_count": 0,
        "processes": [{"pid": 7, "user": "alice", "used_mib": 900, "job_ref": "job_7", "gi_id": None, "ci_id": None}],
        **fields,
    }


def lines(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def stored_by(blob: bytes, *, clean_path: bool, node_id=None, before: bytes = b""):
    """What one path leaves behind (result, rows, marks), rolled back afterwards."""
    with transaction.atomic():
        if before:
            ingest_json_lines(before, node_id=None, now=NOW, max_future_s=600, max_age_s=7 * 86400, clean_path=False)
            DirtyBucket.objects.all().delete()
        result = ingest_json_lines(blob, node_id=node_id, now=NOW, max_future_s=600, max_age_s=7 * 86400, clean_path=clean_path)
        rows = sorted(Sample.objects.values_list(*(f.attname for f in Sample._meta.concrete_fields)))
        marks = sorted(DirtyBucket.objects.values_list("level", "gpu_id", "bucket"))
        transaction.set_rollback(True)
    return result, rows, marks


def assert_same_either_way(blob: bytes, **kwargs):
    clean = stored_by(blob, clean_path=True, **kwargs)
    sql = stored_by(blob, clean_path=False, **kwargs)
    assert clean == sql
    return clean


def test_the_copy_sends_each_sample_column_as_its_type():
    model = {f.column: f.db_type(connection) for f in Sample._meta.concrete_fields}
    assert set(SAMPLE_COLUMNS) == set(model)  # every column, once
    sent = {"int8": "bigint", "int4": "integer", "int2": "smallint", "float8": "double precision",
            "timestamptz": "timestamp with time zone", "bytea": "jsonb"}  # jsonb goes as its binary form
    assert [sent[t] for t in COPY_TYPES] == [model[c] for c in SAMPLE_COLUMNS]


def test_a_clean_page_stores_what_the_statement_stores(small_cluster):
    blob = lines(
        record(seq=1, xid_count=2), record(UUIDS[1], seq=2, processes=[], ecc_dbe_count=1),
        record(ts=T - 50, seq=3, interval_s=57, processes=None, util_gpu=None, temp_c=-5, xid_count=1),
        record(UUIDS[1], ts=T - 45, seq=4, power_w=100_000, energy_j=1e12, util_gpu=0),
    )
    result, rows, marks = assert_same_either_way(blob)
    assert (result.seen, result.stored, result.max_seq, result.rejected) == (4, 4, 4, {})
    gpu_0, gpu_1 = (row[0] for row in rows[::2])
    assert result.gpu_errors == {gpu_0: (3, 0), gpu_1: (0, 1)}
    assert len(rows) == 4 and marks


def test_a_clean_page_takes_the_copy_and_the_statement_is_not_run(small_cluster, django_assert_num_queries):
    blob = lines(record(seq=1), record(ts=T - 50, seq=2))
    # the page's GPUs, savepoint, release, the dirty marks (COPY is not counted)
    with transaction.atomic(), django_assert_num_queries(4) as captured:
        ingest_json_lines(blob, node_id=None, now=NOW, max_future_s=600, max_age_s=7 * 86400)
    assert not any("sample_staging" in query["sql"] for query in captured.captured_queries)


finite = {"allow_nan": False, "allow_infinity": False}


def _value(name):
    if name in FLOAT_RANGES:
        low, high = FLOAT_RANGES[name]
        return st.one_of(st.none(), st.floats(low, high, **finite), st.integers(int(low), min(int(high), 2**53)))
    low, high = INT_RANGES[name]
    return st.one_of(st.none(), st.integers(low, high))


processes = st.one_of(
    st.none(), st.just([]),
    st.lists(st.fixed_dictionaries({"pid": st.integers(1, 2**22), "user": st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=8),
                                     "used_mib": st.integers(0, 200_000)}), min_size=1, max_size=3),
)
a_record = st.fixed_dictionaries({
    "gpu": st.sampled_from(UUIDS), "step": st.integers(1, 30), "interval_s": st.integers(1, 3600),
    "processes": processes, **{name: _value(name) for name in (*FLOAT_RANGES, *INT_RANGES)},
})


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.lists(a_record, min_size=1, max_size=12))
def test_any_clean_page_is_stored_the_same_either_way(small_cluster, drawn):
    ts = {uuid: T - 3 * 3600 for uuid in UUIDS}
    records = []
    for seq, fields in enumerate(drawn, start=1):
        uuid = fields.pop("gpu")
        ts[uuid] += fields.pop("step")
        records.append({"seq": seq, "ts": ts[uuid], "gpu_uuid": uuid, **fields})
    blob = lines(*records)
    assert decode_clean_page(blob) is not None
    result, rows, _marks = assert_same_either_way(blob)
    assert result.stored == len(records) == len(rows)


@pytest.mark.parametrize(
    ("why", "odd"),
    [
        ("a value out of range", record(ts=T - 40, seq=3, util_gpu=100.5)),
        ("a count that is not whole", record(ts=T - 40, seq=3, temp_c=55.5)),
        ("a numeric string", record(ts=T - 40, seq=3, util_gpu="50")),
        ("a boolean for a number", record(ts=T - 40, seq=3, xid_count=True)),
        ("processes not a list", record(ts=T - 40, seq=3, processes={"pid": 1})),
        ("an unknown GPU", record("GPU-nowhere", ts=T - 40, seq=3)),
        ("another node's GPU", record("GPU-h200-b-0", ts=T - 40, seq=3)),
        ("a time too far ahead", record(ts=T + 601, seq=3)),
        ("a time older than the spool keeps", record(ts=T - 7 * 86400 - 1, seq=3)),
        ("no seq", {k: v for k, v in record(ts=T - 40).items() if k != "seq"}),
        ("a repeated key", record(ts=T - 50, seq=3)),
        ("a record out of order", record(ts=T - 55, seq=3)),
        ("not an object", [1, 2]),
    ],
)
def test_a_page_that_is_not_clean_goes_to_the_statement_whole(small_cluster, why, odd):
    # The odd record comes last: the COPY has streamed the others when it is found, and keeps none.
    node = small_cluster["nodes"][0]
    blob = lines(record(seq=1), record(ts=T - 50, seq=2), odd)
    result, rows, _marks = assert_same_either_way(blob, node_id=node.pk)
    assert result.seen == 3, why
    assert len(rows) == result.stored >= 2, why


def test_a_page_meeting_a_stored_row_is_rolled_back_and_repeats_are_skipped(small_cluster):
    stored_before = lines(record(ts=T - 50, seq=2, util_gpu=99.0))
    blob = lines(record(seq=1), record(ts=T - 50, seq=2), record(ts=T - 40, seq=3))
    result, rows, _marks = assert_same_either_way(blob, before=stored_before)
    assert (result.seen, result.stored, result.max_seq) == (3, 2, 3)
    assert [row[3] for row in rows] == [50.0, 99.0, 50.0]  # util_gpu: the stored record is kept as it was


def test_a_blank_line_is_not_a_clean_page():
    assert decode_clean_page(b'{"ts": 1}\n\n') is None
    assert decode_clean_page(b"") is None


def test_a_character_jsonb_refuses_fails_the_page_as_the_statement_does(small_cluster):
    blob = lines(record(seq=1), record(ts=T - 50, seq=2, processes=[{"user": "a\u0000b"}]))
    for clean_path in (True, False):
        with pytest.raises((DataError, psycopg.DataError)), transaction.atomic():
            ingest_json_lines(blob, node_id=None, now=NOW, max_future_s=600, max_age_s=7 * 86400, clean_path=clean_path)
        assert not Sample.objects.exists()


def test_the_copy_streams_every_row_once_and_the_marks_follow(small_cluster, monkeypatch):
    written = []
    real = clean_page._Page.rows

    def counting(self, *args, **kwargs):
        for row in real(self, *args, **kwargs):
            written.append(row)
            yield row

    monkeypatch.setattr(clean_page._Page, "rows", counting)
    with transaction.atomic():
        ingest_json_lines(lines(*(record(ts=T - 600 + 10 * i, seq=i) for i in range(1, 31))), node_id=None, now=NOW,
                          max_future_s=600, max_age_s=7 * 86400)
    assert len(written) == 30 == Sample.objects.count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(bucket), max(bucket) FROM cluster_dirtybucket")
        first, last = cursor.fetchone()
    assert (first, last) == (NOW - timedelta(minutes=10), NOW - timedelta(minutes=6))
