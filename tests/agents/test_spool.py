"""The SQLite spool: append, read, acknowledge, bounds, drops and the spool id."""

import json
import sqlite3

import pytest

from agents.records import empty_record
from agents.spool import Spool

GPU = "GPU-00000000-0000-0000-0000-000000000001"


def records(start_ts, count, *, gpu=GPU, pad=0):
    out = []
    for i in range(count):
        record = empty_record(ts=start_ts + 10 * i, gpu_uuid=gpu, interval_s=10)
        record["util_gpu"] = 50.0
        if pad:
            record["processes"] = [{"pid": i, "user": "x" * pad, "used_mib": 1, "job_ref": None, "gi_id": None,
                                    "ci_id": None}]
        out.append(record)
    return out


@pytest.fixture
def spool(tmp_path):
    spool = Spool(tmp_path / "spool.sqlite")
    yield spool
    spool.close()


def test_it_appends_and_reads_in_order(spool):
    assert spool.append(records(1000, 3)) == 3
    assert spool.append(records(1030, 2)) == 5
    page, last_seq, more = spool.read(after=0, limit=10)
    assert [r["seq"] for r in page] == [1, 2, 3, 4, 5]
    assert [r["ts"] for r in page] == [1000, 1010, 1020, 1030, 1040]
    assert page[0] == {"seq": 1, **records(1000, 1)[0]}
    assert (last_seq, more) == (5, False)


def test_it_pages_with_more(spool):
    spool.append(records(1000, 5))
    page, last_seq, more = spool.read(after=1, limit=2)
    assert [r["seq"] for r in page] == [2, 3]
    assert (last_seq, more) == (3, True)
    page, last_seq, more = spool.read(after=3, limit=2)
    assert ([r["seq"] for r in page], last_seq, more) == ([4, 5], 5, False)


def test_it_returns_after_as_last_seq_for_an_empty_page(spool):
    spool.append(records(1000, 2))
    assert spool.read(after=2, limit=10) == ([], 2, False)


def test_it_stores_compact_json(spool, tmp_path):
    spool.append(records(1000, 1))
    body = sqlite3.connect(tmp_path / "spool.sqlite").execute("SELECT body FROM records").fetchone()[0]
    assert " " not in body
    assert json.loads(body)["gpu_uuid"] == GPU


def test_it_prunes_acknowledged_records_only_once_served(spool):
    spool.append(records(1000, 5))
    spool.ack(3)  # nothing served yet: a stale cursor must not prune
    assert spool.stats()["records"] == 5
    spool.read(after=0, limit=4)
    spool.ack(3)
    page, _last, _more = spool.read(after=0, limit=10)
    assert [r["seq"] for r in page] == [4, 5]
    spool.ack(99)  # capped at what was served (5)
    assert spool.stats()["records"] == 0
    assert spool.stats()["dropped_total"] == 0  # acknowledged is not dropped


def test_it_never_reuses_a_seq_after_everything_was_acknowledged(tmp_path):
    spool = Spool(tmp_path / "s.sqlite")
    spool.append(records(1000, 3))
    spool.read(after=0, limit=10)
    spool.ack(3)
    spool.close()
    spool = Spool(tmp_path / "s.sqlite")
    assert spool.append(records(1030, 1)) == 4
    assert spool.last_ts() == 1030
    spool.close()


def test_it_keeps_its_id_across_reopen_and_gets_a_new_one_when_recreated(tmp_path):
    path = tmp_path / "s.sqlite"
    first = Spool(path)
    first_id = first.spool_id
    first.close()
    again = Spool(path)
    assert again.spool_id == first_id
    assert len(first_id) == 32 and int(first_id, 16) >= 0
    again.close()
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    fresh = Spool(path)
    assert fresh.spool_id != first_id
    assert fresh.append(records(1000, 1)) == 1
    fresh.close()


def test_it_uses_wal_and_full_sync(spool):
    assert spool._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert spool._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_it_drops_the_oldest_when_over_size_and_counts_them(tmp_path):
    spool = Spool(tmp_path / "s.sqlite", max_bytes=256 * 1024, check_every=4)
    appended = 0
    for batch in range(200):
        spool.append(records(1000 + batch * 100, 10, pad=200), now=None)
        appended += 10
    stats = spool.stats()
    assert stats["dropped_total"] > 0
    assert stats["used_bytes"] <= 256 * 1024 * 1.1
    assert stats["records"] + stats["dropped_total"] == appended  # every record is kept or counted
    page, _last, _more = spool.read(after=0, limit=1)
    assert page[0]["seq"] == stats["dropped_total"] + 1  # oldest first
    spool.close()


def test_it_checks_the_size_only_every_n_appends(tmp_path):
    spool = Spool(tmp_path / "s.sqlite", max_bytes=64 * 1024, check_every=1000)
    for batch in range(30):
        spool.append(records(batch * 100, 10, pad=200))
    assert spool.stats()["dropped_total"] == 0
    spool.close()


def test_it_drops_records_older_than_the_age_bound(tmp_path):
    spool = Spool(tmp_path / "s.sqlite", max_age_s=3600, check_every=1)
    spool.append(records(10_000, 6))  # 10000 … 10050
    spool.append(records(20_000, 2), now=10_025 + 3600)  # cutoff 10025: 10000, 10010, 10020 go
    page, _last, _more = spool.read(after=0, limit=100)
    assert [r["ts"] for r in page] == [10_030, 10_040, 10_050, 20_000, 20_010]
    assert spool.stats()["dropped_total"] == 3
    spool.close()


def test_it_counts_records_without_a_scan_as_a_contiguous_range(spool):
    spool.append(records(1000, 7))
    spool.read(after=0, limit=3)
    spool.ack(3)
    assert spool.stats()["records"] == 4
    assert spool.stats()["last_seq"] == 7


def test_it_stores_nothing_of_a_batch_with_a_record_that_is_not_json(spool):
    spool.append(records(1000, 2))
    bad = records(1020, 2)
    bad[1]["util_gpu"] = float("nan")  # not JSON: the whole append must fail
    with pytest.raises(ValueError):
        spool.append(bad)
    assert spool.stats()["records"] == 2
    assert spool.append(records(1020, 1)) == 3


WRITER = """
import sys
from agents.records import empty_record
from agents.spool import Spool
spool = Spool(sys.argv[1])
ts = 1000
while True:
    ts += 10
    seq = spool.append([empty_record(ts=ts, gpu_uuid="GPU-x", interval_s=10)])
    print(seq, flush=True)
"""


def test_it_keeps_every_committed_record_when_the_writer_is_killed_9(tmp_path):
    import signal
    import subprocess
    import sys

    from tests.agents.agent_helpers import ROOT

    path = tmp_path / "s.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    committed = []
    try:
        for line in writer.stdout:  # each line is printed after its append committed
            committed.append(int(line))
            if len(committed) >= 200:
                break
        writer.send_signal(signal.SIGKILL)  # mid-loop: very likely inside a transaction
    finally:
        writer.kill()
        writer.wait(10)
        writer.stdout.close()
    assert committed == list(range(1, 201))
    spool = Spool(path)
    rows, last_seq, _more = spool.read(after=0, limit=100_000)
    assert [r["seq"] for r in rows][:200] == committed
    assert [r["seq"] for r in rows] == list(range(1, last_seq + 1))
    assert spool.append(records(10**6, 1)) == last_seq + 1
    spool.close()
