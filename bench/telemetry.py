"""Benchmark of the collector path (agent NDJSON in → rows committed), stage by stage, beside raw
text and binary COPY of the same rows into the same table. Run by ``make bench`` (bench/__main__.py)
against a scratch database; it TRUNCATEs the sample tables it measures."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from cluster.models import DirtyBucket, Gpu, GpuModel, Node, Sample
from cluster.telemetry.agent_client import NDJSON, parse_samples_page
from cluster.telemetry.ingest import ingest_json_lines
from cluster.telemetry.partitions import partitions_add

PAGE = 20_000
SAMPLE = Sample._meta.db_table
DIRTY_BUCKET = DirtyBucket._meta.db_table
T0 = 1_793_577_600  # 2026-11-02 00:00 UTC


def _cluster(gpus: int) -> tuple[Node, list[str]]:
    model, _ = GpuModel.objects.get_or_create(name="NVIDIA H200", defaults={"short_name": "H200", "memory_mib": 143771})
    node, _ = Node.objects.get_or_create(hostname="bench-node", defaults={"pool": "bench"})
    existing = set(Gpu.objects.filter(node=node).values_list("uuid", flat=True))
    uuids = [f"GPU-bench-{i:05d}" for i in range(gpus)]
    Gpu.objects.bulk_create(
        [Gpu(node=node, index=i, uuid=u, model=model, memory_mib=143771) for i, u in enumerate(uuids) if u not in existing]
    )
    return node, uuids


def _pages(uuids: list[str], records: int, now_s: int) -> list[bytes]:
    """Agent-shaped NDJSON pages of 10 s records, newest ending a minute before ``now_s``."""
    rng = random.Random(7)
    per_gpu = records // len(uuids)
    start = now_s - 60 - per_gpu * 10
    lines = []
    seq = 0
    for step in range(per_gpu):
        ts = start + (step + 1) * 10
        for uuid in uuids:
            seq += 1
            util = round(rng.uniform(0, 100), 1)
            lines.append(json.dumps({
                "seq": seq, "ts": ts, "gpu_uuid": uuid, "interval_s": 10, "util_gpu": util,
                "util_gpu_max": min(100.0, util + 5), "util_mem": 30.5, "mem_used_mib": 80_000,
                "mem_total_mib": 143771, "power_w": 520.5, "energy_j": 5205.0, "temp_c": 61, "sm_clock_mhz": 1980,
                "xid_count": 0, "ecc_dbe_count": 0,
                "processes": [{"pid": 4242, "user": "alice", "used_mib": 79_000, "job_ref": "job_1234", "gi_id": None, "ci_id": None}],
            }, separators=(",", ":")).encode())
    pages = []
    for first in range(0, len(lines), PAGE):
        chunk = lines[first : first + PAGE]
        meta = {"spool_id": "bench", "last_seq": seq, "more": first + PAGE < len(lines), "dropped_total": 0,
                "count": len(chunk), "agent_time": now_s}
        pages.append(json.dumps(meta).encode() + b"\n" + b"\n".join(chunk) + b"\n")
    return pages


def _truncate() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {SAMPLE}, {DIRTY_BUCKET}")


def bench_collector(records: int = 1_000_000, gpus: int = 1000) -> dict:
    """The collector's path, page by page and commit included, for clean pages (msgspec and one binary
    COPY) and through the SQL statement (the path of a page with any rejected record), beside raw text
    and binary COPY of the same rows, each after a checkpoint so none pays for another's writes."""
    now = datetime.now(UTC)
    node, uuids = _cluster(gpus)
    pages = _pages(uuids, records, int(now.timestamp()))
    # The days' partitions exist, as the periodic task makes them ahead in production.
    first = now - timedelta(seconds=60 + (records // gpus) * 10)
    partitions_add([first.date() + timedelta(days=k) for k in range((now.date() - first.date()).days + 1)])
    n = sum(page.count(b"\n") - 1 for page in pages)
    clean_s, stages = _collect(pages, node, now, clean_path=True)
    sql_s, sql_stages = _collect(pages, node, now, clean_path=False)
    rows = _typed_rows()
    text_s = _raw_copy(rows, binary=False)
    binary_s = _raw_copy(rows, binary=True)
    _truncate()
    return {
        "records": n, "stages_s": stages, "collector_s": clean_s, "collector_rows_per_s": n / clean_s,
        "sql_stages_s": sql_stages, "sql_path_s": sql_s, "sql_path_rows_per_s": n / sql_s,
        "raw_text_copy_rows_per_s": n / text_s, "raw_binary_copy_rows_per_s": n / binary_s,
        "collector_vs_text_copy": text_s / clean_s, "collector_vs_binary_copy": binary_s / clean_s,
        "sql_path_vs_binary_copy": binary_s / sql_s,
    }


def _checkpoint() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def _collect(pages: list[bytes], node: Node, now: datetime, *, clean_path: bool) -> tuple[float, dict[str, float]]:
    """Seconds to store ``pages`` as the collector does (parse, one transaction per page), and by stage."""
    _truncate()
    _checkpoint()
    stages = {"fetch/parse": 0.0}
    total = 0.0
    for body in pages:
        started = time.perf_counter()
        page = parse_samples_page(body, NDJSON)
        stages["fetch/parse"] += time.perf_counter() - started
        timings: dict[str, float] = {}
        with transaction.atomic():
            result = ingest_json_lines(
                page.records, node_id=node.pk, now=now, max_future_s=600, max_age_s=7 * 86400, timings=timings,
                clean_path=clean_path,
            )
            assert result.stored == page.count, result
        total += time.perf_counter() - started
        for stage, seconds in timings.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    stages = {stage: seconds for stage, seconds in stages.items() if seconds >= 0.005}
    stages["commit"] = total - sum(stages.values())
    return total, stages


def _typed_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT gpu_id, ts, interval_s, util_gpu, util_gpu_max, util_mem, mem_used_mib, mem_total_mib, power_w, "  # noqa: S608
            f"energy_j, temp_c, sm_clock_mhz, xid_count, ecc_dbe_count, processes FROM {SAMPLE}"  # a constant table
        )
        return cursor.fetchall()


COLUMNS = ("gpu_id", "ts", "interval_s", "util_gpu", "util_gpu_max", "util_mem", "mem_used_mib", "mem_total_mib",
           "power_w", "energy_j", "temp_c", "sm_clock_mhz", "xid_count", "ecc_dbe_count", "processes")
TYPES = ("int8", "timestamptz", "int4", "float8", "float8", "float8", "int4", "int4", "float8", "float8", "int2",
         "int4", "int4", "int4", "jsonb")


def _raw_copy(rows: list[tuple], *, binary: bool) -> float:
    """Baseline: the already-typed rows straight into the sample table with psycopg's COPY (its C row
    formatting, text or binary), no checks, no upsert."""
    _truncate()
    _checkpoint()
    sql = f"COPY {SAMPLE} ({', '.join(COLUMNS)}) FROM STDIN" + (" (FORMAT BINARY)" if binary else "")
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        copy.set_types(list(TYPES))
        for row in rows:
            copy.write_row(row)
    return time.perf_counter() - started
