"""The replay backend: one node's CSV rows, each at its own time, with the right UUIDs and intervals."""

import re
import time
import uuid

import pytest

from agents.backends.replay import ReplayBackend, median_gap_interval, replay_gpu_uuid
from agents.backends.sim import sim_gpu_uuid
from agents.records import GPM_FIELDS, RECORD_FIELDS
from tests.agents.agent_helpers import AgentProcess, wait_for

T0 = 1_793_577_600  # 2026-11-02T00:00:00Z
MIG = "MIG-11111111-2222-3333-4444-555555555555"

CSV = f"""ts,node,gpu,util_gpu,mem_used_mib,power_w,interval_s,gpu_model
{T0},n1,0,10,1000,100,,H200
{T0 + 60},n1,0,20,,,,H200
2026-11-02T00:02:00+00:00,n1,0,30,1000,200.5,,H200
2026-11-02T08:05:00+08:00,n1,0,40,,,,H200
{T0},n1,{MIG},,512,,,
{T0 + 57},n1,{MIG},,512,,,
{T0 + 114},n1,{MIG},,512,,,
{T0 + 30},n1,1,99.5,,,15,
{T0 + 45},n2,0,5,,,,
{T0 + 5000},n1,2,0,,,,
{T0 + 6000},n1,2,0,,,,
"""


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "samples.csv"
    path.write_text(CSV)
    return path


def test_it_derives_index_uuids_like_the_demo_and_the_simulator():
    namespace = uuid.UUID("6f1c3a52-8f0e-4c1e-9a53-2b7d7e0c9d11")
    assert replay_gpu_uuid("gpu-h200-01", 3) == f"GPU-{uuid.uuid5(namespace, 'gpu-h200-01/3')}"
    assert replay_gpu_uuid("gpu-h200-01", 3) == sim_gpu_uuid("gpu-h200-01", 3)
    assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", replay_gpu_uuid("n", 0))


def test_median_gap_interval_follows_the_design_rule():
    assert median_gap_interval([0, 60, 120, 180], default=10) == 60
    assert median_gap_interval([0, 57, 114, 1000], default=10) == 57
    assert median_gap_interval([0, 600, 1200], default=10) == 300  # capped at 5 minutes
    assert median_gap_interval([5], default=10) == 10  # nothing to measure
    assert median_gap_interval([0, 0, 10, 10, 20], default=7) == 10  # repeated times ignored


def test_it_emits_every_row_of_its_node_with_the_right_uuid_and_interval(csv_file):
    backend = ReplayBackend(path=csv_file, node="n1", interval_s=10)
    rows = backend.records_between(0, T0 + 10_000)
    assert len(rows) == 10  # n2's row ignored
    assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)
    gpu0 = [r for r in rows if r["gpu_uuid"] == replay_gpu_uuid("n1", 0)]
    assert [(r["ts"] - T0, r["util_gpu"], r["interval_s"]) for r in gpu0] == [
        (0, 10.0, 60), (60, 20.0, 60), (120, 30.0, 60), (300, 40.0, 60),  # median of 60, 60, 180
    ]
    assert gpu0[0]["mem_used_mib"] == 1000 and gpu0[0]["power_w"] == 100.0 and gpu0[0]["energy_j"] == 6000.0
    assert gpu0[1]["mem_used_mib"] is None and gpu0[1]["power_w"] is None and gpu0[1]["energy_j"] is None
    assert gpu0[0]["mem_total_mib"] == 143771  # from the gpu_model column
    mig = [r for r in rows if r["gpu_uuid"] == MIG]
    assert [r["interval_s"] for r in mig] == [57, 57, 57] and mig[0]["util_gpu"] is None
    (gpu1,) = [r for r in rows if r["gpu_uuid"] == replay_gpu_uuid("n1", 1)]
    assert (gpu1["ts"], gpu1["interval_s"], gpu1["util_gpu"]) == (T0 + 30, 15, 99.5)
    gpu2 = [r for r in rows if r["gpu_uuid"] == replay_gpu_uuid("n1", 2)]
    assert [r["interval_s"] for r in gpu2] == [300, 300]  # a 1000 s gap, capped
    assert backend.first_ts() == T0


def test_it_hands_out_rows_by_time_window(csv_file):
    backend = ReplayBackend(path=csv_file, node="n1")
    assert [r["ts"] - T0 for r in backend.records_between(T0, T0 + 60)] == [30, 57, 60]
    assert backend.records_between(T0 + 6000, T0 + 99_999) == []
    assert len(backend.sample(ts=T0 + 60, interval_s=60)) == 3


def test_its_inventory_lists_the_gpus_of_the_file(csv_file):
    inventory = ReplayBackend(path=csv_file, node="n1").inventory()
    assert inventory["host"] == "n1"
    gpus = inventory["gpus"]
    assert [(g["index"], g["name"], g["memory_mib"]) for g in gpus] == [
        (0, "NVIDIA H200", 143771), (1, None, None), (2, None, None), (None, None, None),
    ]
    assert gpus[3]["uuid"] == MIG


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("ts,node,util_gpu\n1,n1,5\n", "missing: gpu"),
        ("ts,node,gpu,util_gpu\n1,n1,0,150\n", ":2: util_gpu: '150' is out of range"),
        ("ts,node,gpu,util_gpu\n1,n1,0,5\n2026-11-02T00:00:00,n1,0,5\n", ":3: ts: an ISO-8601 time needs a UTC offset"),
        ("ts,node,gpu,util_gpu,interval_s\n1,n1,0,5,zero\n", ":2: interval_s: 'zero' is not a number"),
        ("ts,node,gpu,util_gpu,sm_active\n1,n1,0,5,50\n2,n1,0,5,100.5\n", ":3: sm_active: '100.5' is out of range"),
        ("ts,node,gpu,util_gpu,nvlink_tx_mibs\n1,n1,0,5,-1\n", ":2: nvlink_tx_mibs: '-1' is out of range"),
        ("ts,node,gpu,util_gpu,fp64_active\n1,n1,0,5,lots\n", ":2: fp64_active: 'lots' is not a number"),
    ],
)
def test_it_names_the_line_and_column_of_a_bad_row(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(message)):
        ReplayBackend(path=path, node="n1")


def test_it_reads_the_gpm_columns_named_as_the_record_fields(tmp_path):
    """Optional columns, named exactly as the record's GPM fields; an empty cell (or no column) is null."""
    values = dict(zip(GPM_FIELDS, (61.5, 30, 42, 25.5, 40, 5, 0, 12000, 11900.5, 55, 17), strict=True))
    path = tmp_path / "gpm.csv"
    path.write_text(f"ts,node,gpu,util_gpu,{','.join(GPM_FIELDS)}\n"
                    f"{T0},n1,0,80,{','.join(str(v) for v in values.values())}\n"
                    f"{T0 + 10},n1,0,80,{',' * (len(GPM_FIELDS) - 1)}\n"
                    f"{T0 + 20},n1,0,80,70,,,,,,,,,,\n")
    first, blank, partial = ReplayBackend(path=path, node="n1").records_between(0, T0 + 100)
    assert {name: first[name] for name in GPM_FIELDS} == {name: float(v) for name, v in values.items()}
    assert all(blank[name] is None for name in GPM_FIELDS)
    assert partial["sm_active"] == 70.0 and all(partial[name] is None for name in GPM_FIELDS[1:])
    without = tmp_path / "plain.csv"
    without.write_text(f"ts,node,gpu,util_gpu\n{T0},n1,0,80\n")
    (record,) = ReplayBackend(path=without, node="n1").records_between(0, T0)
    assert tuple(record) == RECORD_FIELDS and all(record[name] is None for name in GPM_FIELDS)


def test_a_replay_agent_emits_every_row_at_its_own_time(tmp_path):
    """A real agent process with an accelerated clock starting at the first row: all rows come out."""
    now = int(time.time())
    first = now - 600
    lines = ["ts,node,gpu,util_gpu,power_w"]
    expected = []
    for i in range(40):  # two GPUs, irregular gaps, the last row a minute ago
        ts = first + i * 13 + (i % 3)
        lines.append(f"{ts},replayed,{i % 2},{i},{100 + i}")
        expected.append((ts, replay_gpu_uuid("replayed", i % 2)))
    lines.append(f"{first + 5},someone-else,0,50,100")
    csv_path = tmp_path / "history.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    with AgentProcess("--backend", "replay", "--replay-file", str(csv_path), "--replay-node", "replayed",
                      "--speed", "400", spool=tmp_path / "spool.sqlite", hostname="replayed") as agent:
        wait_for(lambda: len(agent.samples()["records"]) >= 40, timeout=20, what="all replayed rows")
        records = agent.samples()["records"]
        assert [(r["ts"], r["gpu_uuid"]) for r in records] == sorted(expected)
        for gpu in (0, 1):  # each GPU's median gap
            gpu_uuid = replay_gpu_uuid("replayed", gpu)
            median = median_gap_interval([ts for ts, u in expected if u == gpu_uuid], default=10)
            assert 20 <= median <= 30
            assert {r["interval_s"] for r in records if r["gpu_uuid"] == gpu_uuid} == {median}
        assert [r["seq"] for r in records] == list(range(1, 41))
        assert agent.stop() == 0
