"""Benchmark of scaling by worker processes (issue 18): the same work done by one process, then shared
by two (``make bench BENCH_ARGS="--only workers"``), each figure beside the one-process baseline of the
same run.

- **Collection:** agent-shaped NDJSON pages of ``nodes`` nodes × 8 GPUs, each node's pages ingested in
  order by one process (a node's cursor is never shared), through the collector's own path
  (``parse_samples_page`` and ``ingest_json_lines``, a transaction per page), as a collect task does once
  its HTTP fetch returns. Two processes take half the nodes each.
- **Rollups:** the dirty minutes that collection left, rolled up by ``rollup_pending`` in one process,
  then (after the same collection again) in two processes at once, which share the work by their
  claim's ``SKIP LOCKED``.

The processes are forked from this one with their own database connections; the tables measured are
truncated between the runs. The ratio says how far a second worker process adds capacity on this
machine: it shares its cores with PostgreSQL, so a 2-core machine bounds it well under 2.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.db import connection, connections, transaction

from bench.telemetry import _pages
from cluster.models import DirtyBucket, Gpu, GpuModel, HourRollup, MinuteRollup, Node, Sample
from cluster.telemetry.agent_client import NDJSON, parse_samples_page
from cluster.telemetry.ingest import ingest_json_lines
from cluster.telemetry.partitions import partitions_add
from cluster.telemetry.rollups import rollup_pending

GPUS_PER_NODE = 8
TABLES = ", ".join(model._meta.db_table for model in (Sample, DirtyBucket, MinuteRollup, HourRollup))


def _fleet(nodes: int) -> list[int]:
    model, _ = GpuModel.objects.get_or_create(name="NVIDIA H200", defaults={"short_name": "H200", "memory_mib": 143771})
    node_ids = []
    for n in range(nodes):
        node, _ = Node.objects.get_or_create(hostname=f"bench-workers-{n:03d}", defaults={"pool": "bench"})
        Gpu.objects.bulk_create(
            [Gpu(node=node, index=i, uuid=f"GPU-bench-w{n:03d}-{i}", model=model, memory_mib=143771)
             for i in range(GPUS_PER_NODE)],
            ignore_conflicts=True,
        )
        node_ids.append(node.pk)
    return node_ids


def _collect(work: list[tuple[int, list[bytes]]], now: datetime) -> int:
    """Ingest each node's pages in order (what a collect task does after each fetch); returns records stored."""
    stored = 0
    for node_id, pages in work:
        for body in pages:
            page = parse_samples_page(body, NDJSON)
            with transaction.atomic():
                result = ingest_json_lines(page.records, node_id=node_id, now=now, max_future_s=600,
                                           max_age_s=7 * 86400)
            stored += result.stored
    return stored


def _roll_up() -> int:
    done = rollup_pending(max_batches=10**9)
    return done["minute_buckets"] + done["hour_buckets"]


def _child(target: Callable, args: tuple, results) -> None:
    connections.close_all()  # never the parent's socket: a connection of its own
    try:
        results.put(target(*args))
    finally:
        connections.close_all()


def _in_processes(target: Callable, shares: list[tuple]) -> tuple[float, int]:
    """Run ``target(*share)`` in one forked process per share, at once; (wall seconds, summed results)."""
    connections.close_all()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=_child, args=(target, share, results)) for share in shares]
    started = time.perf_counter()
    for process in processes:
        process.start()
    total = sum(results.get() for _ in processes)
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a worker process failed (exit {process.exitcode})")
    return time.perf_counter() - started, total


def _truncate() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLES}")


def bench_workers(*, nodes: int = 32, records: int = 400_000, processes: tuple[int, ...] = (1, 2)) -> dict:
    """Collection and rollups of the same records by each number of ``processes``; rates and the ratio
    of each to the first."""
    now = datetime.now(UTC)
    node_ids = _fleet(nodes)
    per_node = records // nodes
    uuids = {node_id: list(Gpu.objects.filter(node_id=node_id).order_by("index").values_list("uuid", flat=True))
             for node_id in node_ids}
    pages = {node_id: _pages(uuids[node_id], per_node, int(now.timestamp())) for node_id in node_ids}
    first = now - timedelta(seconds=60 + (per_node // GPUS_PER_NODE) * 10)
    partitions_add([first.date() + timedelta(days=k) for k in range((now.date() - first.date()).days + 1)])
    # An untimed round first (a node's pages by each count of processes), so the first measured run does not
    # also pay for what any first run pays (the staging table's first use, cold caches).
    for count in sorted(set(processes)):
        _truncate()
        _in_processes(_collect, [([(node_ids[k], pages[node_ids[k]][:1])], now) for k in range(count)])
        _in_processes(_roll_up, [() for _ in range(count)])
    runs = []
    for count in processes:
        _truncate()
        shares = [([(node_id, pages[node_id]) for node_id in node_ids[k::count]], now) for k in range(count)]
        collect_s, stored = _in_processes(_collect, shares)
        rollup_s, buckets = _in_processes(_roll_up, [() for _ in range(count)])
        runs.append({"processes": count, "records": stored, "collect_s": collect_s,
                     "records_per_s": stored / collect_s, "buckets": buckets, "rollup_s": rollup_s,
                     "buckets_per_s": buckets / rollup_s})
    _truncate()
    base = runs[0]
    for run in runs:
        run["collect_vs_one"] = run["records_per_s"] / base["records_per_s"]
        run["rollup_vs_one"] = run["buckets_per_s"] / base["buckets_per_s"]
    return {"nodes": nodes, "gpus": nodes * GPUS_PER_NODE, "cores": os.cpu_count(),
            "load_before": os.getloadavg()[0], "runs": runs}


def print_workers(r: dict) -> None:
    print(f"\nworker processes, {r['gpus']:,} GPUs on {r['nodes']} nodes, the same records each run "
          f"({r['cores']} cores shared with PostgreSQL; load average {r['load_before']:.1f} before)")
    for run in r["runs"]:
        print(f"  {run['processes']} process{'es' if run['processes'] > 1 else '  '}  collect "
              f"{run['records']:>9,} records {run['collect_s']:7.2f} s {run['records_per_s']:>9,.0f}/s "
              f"(× {run['collect_vs_one']:.2f})   roll up {run['buckets']:>8,} buckets {run['rollup_s']:7.2f} s "
              f"{run['buckets_per_s']:>8,.0f}/s (× {run['rollup_vs_one']:.2f})")
