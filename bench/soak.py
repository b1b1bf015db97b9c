"""``make soak``: the fleet soak of issue 18. 1,250 simulated nodes × 8 GPUs sample every 10 s (1,000
records/s), collected every 30 s, for 30 minutes, on this one machine; then every record the agents
produced is looked for in the database.

    python -m bench.soak [--minutes 30] [--nodes 1250] [--gpus 8] [--workers 2] [--concurrency 4] [--shards 8]

It runs what ``make demo`` runs (gunicorn 2 × 4 threads, ``--workers`` Celery workers on every queue with
``--concurrency`` pool processes each, beat) on a scratch database ``cardhour_soak`` of the embedded
PostgreSQL and Redis (or DATABASE_URL's and REDIS_URL's servers), with ``--fleets`` processes of simulated
agents (``python -m agents fleet``: every node its own port, token, spool and cursor, clocks real time),
all on loopback and free ports. Logs are in var/soak/run. It prints:

- collection lag: per node, the server's clock minus its newest stored record, every 10 s (p50/p95/max);
- records produced against stored plus rejected (equal, or the run fails), and the fleet's records/s;
- rollup lag (the server's clock minus ``rollup_watermark``: the oldest bucket waiting) and aggregation lag (the server's clock
  minus the last usage aggregation's), every 10 s; the time the workers' tasks took (their INFO log);
- CPU (cores, over the measured window) and memory (PSS, mean and peak) of each process: web, worker(s),
  beat, the fleet(s), PostgreSQL, Redis, read from /proc;
- the daily board's time over HTTP with a signed-in admin's session, 3 requests every ``--board-every`` s
  (p50/p95; after 4 untimed ones, since each gunicorn worker's first request imports the board's code);
- database growth: the telemetry tables' size (pg_total_relation_size over their partitions) after the
  window minus before it, per day of data and per GPU-day.

Aim (the issue's): collection lag p95 under 60 s, nothing lost, the board under 1 s. Exit code 1 when a
record is lost or doubled.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from bench.stack import (
    agents_produced,
    balance_line,
    check_running,
    collection_lags,
    fleet_commands,
    free_port_range,
    percentile,
    plan_fleets,
    prepare_scratch,
    process_table,
    produced_vs_stored,
    register_fleets,
    server_commands,
    server_pids,
    start_processes,
    stop_all,
    stored_once_caught_up,
    tree_cpu_s,
    tree_memory_mib,
    wait_for_first_collection,
    wait_for_port,
)

SAMPLE_EVERY_S = 10.0
BOARD_RUNS = 3  # board requests at each timing
BOARD_WARM_UP = 4  # untimed requests before the window
TASK_LINE = re.compile(r"Task (?P<name>[\w.]+)\[[^\]]+\] succeeded in (?P<seconds>[\d.]+)s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the measured window (30)")
    parser.add_argument("--nodes", type=int, default=1250, help="simulated nodes (1250)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (8)")
    parser.add_argument("--interval", type=int, default=10, help="the agents' sample interval, s (10)")
    parser.add_argument("--collect-every", type=int, default=30, help="collection interval, s (30)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes, each on every queue (2)")
    parser.add_argument("--concurrency", type=int, default=4, help="pool processes per worker (4)")
    parser.add_argument("--shards", type=int, default=8,
                        help="collect tasks per round (TELEMETRY_COLLECT_SHARDS, 8; 0: the setting's)")
    parser.add_argument("--fleets", type=int, default=1, help="agent fleet processes sharing the nodes (1)")
    parser.add_argument("--board-every", type=float, default=60.0, help="seconds between board timings (60)")
    args = parser.parse_args(argv)
    for name in ("minutes", "nodes", "gpus", "interval", "collect_every", "workers", "concurrency", "fleets",
                 "board_every"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be more than 0")
    if args.shards < 0:
        parser.error("--shards must be 0 (the setting's) or more")

    scratch = prepare_scratch("soak")
    agent_port = free_port_range(args.nodes)
    web_port = free_port_range(1, start=agent_port + args.nodes)
    fleets = plan_fleets(nodes=args.nodes, processes=min(args.fleets, args.nodes), base_port=agent_port)
    tokens = register_fleets(fleets, scratch.run_dir, gpus=args.gpus)
    print(f"Soak: {args.nodes} nodes × {args.gpus} GPUs every {args.interval} s, collected every "
          f"{args.collect_every} s, for {args.minutes:g} min (logs in {scratch.run_dir}) …", flush=True)
    result = run_soak(fleets=fleets, tokens=tokens, run_dir=scratch.run_dir, base_dir=scratch.base_dir,
                      database_url=scratch.app_url, minutes=args.minutes, gpus=args.gpus,
                      interval_s=args.interval, collect_every_s=args.collect_every, workers=args.workers,
                      concurrency=args.concurrency, web_port=web_port, session=board_session(),
                      board_every_s=args.board_every, progress=print,
                      environment={"TELEMETRY_COLLECT_SHARDS": str(args.shards)} if args.shards else None)
    print_report(result)
    return 1 if result["balance"]["wrong"] else 0


def board_session() -> str:
    """A session cookie of a signed-in superuser (made here), for timing the board as a person sees it."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    admin = get_user_model().objects.create_user(username="soak-admin", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(admin)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def run_soak(*, fleets, tokens: dict[str, str], run_dir: Path, base_dir: Path, database_url: str, minutes: float,
             gpus: int, interval_s: int = 10, collect_every_s: int = 30, workers: int = 1, concurrency: int = 2,
             web_port: int | None = None, session: str = "", board_every_s: float = 60.0,
             environment: dict[str, str] | None = None, progress=lambda *_args, **_kw: None) -> dict:
    """Start the fleet(s) and servers on the registered nodes, wait for a first collection of every node,
    measure for ``minutes``, then compare what the agents produced with what was stored. Without
    ``web_port`` no web server runs and the board is not timed."""
    plan = [node for fleet in fleets for node in fleet.plan]
    commands = {**fleet_commands(fleets, run_dir, gpus=gpus, interval_s=interval_s),
                **server_commands(run_dir, web_port=web_port, workers=workers, concurrency=concurrency,
                                  worker_log_level="INFO")}
    environment = {**os.environ, **(environment or {}), "DATABASE_URL": database_url,
                   "TELEMETRY_COLLECT_EVERY_S": str(collect_every_s)}
    run_started = time.monotonic()
    processes = start_processes(commands, run_dir=run_dir, base_dir=base_dir, environment=environment)
    try:
        if web_port is not None:
            wait_for_port(web_port, processes["web"], what=f"the web server (see {run_dir}/web.log)")
        # A node's first collection also reads its inventory and makes its GPUs: slower than the later ones.
        patience_s = max(240.0, 10 * collect_every_s, 0.5 * len(plan))
        collected = wait_for_first_collection(len(plan), timeout_s=patience_s, processes=processes, run_dir=run_dir,
                                              required=False)
        progress(f"{collected:,} of {len(plan):,} nodes collected once; measuring for {minutes:g} min …", flush=True)
        roots = {name: process.pid for name, process in processes.items()} | server_pids()
        before = _snapshot(plan, tokens, roots)
        samples = _measure(minutes * 60, nodes=len(plan), run_started=run_started, processes=processes,
                           run_dir=run_dir, roots=roots, web_port=web_port, session=session,
                           board_every_s=board_every_s)
        after = _snapshot(plan, tokens, roots)
        stored = stored_once_caught_up(after["produced"], timeout_s=patience_s)
        caught_up = _stored_now()
    finally:
        stop_all(processes)
    from django.conf import settings

    return _result(plan, before, after, stored, caught_up, samples, run_dir=run_dir, gpus=gpus,
                   interval_s=interval_s, collect_every_s=collect_every_s, workers=workers, concurrency=concurrency,
                   fleets=len(fleets),
                   shards=int(environment.get("TELEMETRY_COLLECT_SHARDS") or settings.TELEMETRY_COLLECT_SHARDS))


# ---- measuring -----------------------------------------------------------------------------------------


def _snapshot(plan, tokens: dict[str, str], roots: dict[str, int]) -> dict:
    """The fleet's seqs, the processes' CPU seconds and the telemetry tables' rows and size, at one moment."""
    table = process_table()
    return {"at": time.monotonic(), "produced": agents_produced(plan, tokens),
            "cpu_s": {name: tree_cpu_s(pid, table) for name, pid in roots.items()}, **_stored_now()}


def _stored_now() -> dict:
    """Rows of the samples table and the telemetry tables' sizes."""
    from cluster.telemetry.models import Sample

    return {"samples": Sample.objects.count(), "bytes": _telemetry_bytes()}


def _measure(seconds: float, *, nodes: int, run_started: float, processes: dict, run_dir: Path,
             roots: dict[str, int], web_port: int | None, session: str, board_every_s: float) -> dict:
    """Every SAMPLE_EVERY_S until ``seconds`` are up: lags and memory; every ``board_every_s``: the board."""
    samples = {"lag": [], "rollup": [], "aggregation": [], "dirty": [], "memory": {name: [] for name in roots},
               "board_s": []}
    if web_port is not None:
        for _run in range(BOARD_WARM_UP):  # each gunicorn worker's first request imports the board's modules
            _time_board(web_port, session)
    started = time.monotonic()
    next_board = started + min(board_every_s, seconds / 2)
    while (elapsed := time.monotonic() - started) < seconds:
        time.sleep(min(SAMPLE_EVERY_S, seconds - elapsed))
        check_running(processes, run_dir)
        lags = collection_lags()
        # A node not collected yet is as late as the run is old: counted, not left out.
        samples["lag"].extend(lags + [time.monotonic() - run_started] * (nodes - len(lags)))
        rollup_age, dirty, aggregation_age = _backlogs()
        samples["rollup"].append(rollup_age)
        samples["dirty"].append(dirty)
        if aggregation_age is not None:
            samples["aggregation"].append(aggregation_age)
        table = process_table()
        for name, pid in roots.items():
            samples["memory"][name].append(tree_memory_mib(pid, table))
        if web_port is not None and time.monotonic() >= next_board:
            samples["board_s"].extend(_time_board(web_port, session) for _run in range(BOARD_RUNS))
            next_board += board_every_s
    return samples


def _backlogs() -> tuple[float, int, float | None]:
    """The server's clock minus the rollups' watermark (the oldest bucket waiting for its rollup, else the
    current minute's start) and how many buckets wait; the server's clock minus the last usage
    aggregation's (None before the first)."""
    from django.utils import timezone

    from accounting.usage.models import UsageAggregateState
    from cluster.telemetry.models import DirtyBucket
    from cluster.telemetry.rollups import rollup_watermark

    now = timezone.now()
    aggregated_to = UsageAggregateState.objects.filter(id=1).values_list("aggregated_to", flat=True).first()
    return ((now - rollup_watermark(now=now)).total_seconds(), DirtyBucket.objects.count(),
            (now - aggregated_to).total_seconds() if aggregated_to else None)


def _time_board(web_port: int, session: str) -> float:
    """Seconds for the daily board (today, all teams) to answer a signed-in person over HTTP."""
    request = urllib.request.Request(f"http://127.0.0.1:{web_port}/", headers={"Cookie": session})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (loopback)
        answer.read()
        if answer.status != 200 or answer.url.rstrip("/") != f"http://127.0.0.1:{web_port}":
            raise RuntimeError(f"the board answered {answer.status} at {answer.url} (not signed in?)")
    return time.perf_counter() - started


def _telemetry_bytes() -> dict[str, int]:
    """pg_total_relation_size of each telemetry table, summed over its partitions if it has any."""
    from django.db import connection

    from cluster.telemetry.models import HourRollup, MinuteRollup, Sample

    sizes = {}
    with connection.cursor() as cursor:
        for model in (Sample, MinuteRollup, HourRollup):
            # pg_partition_tree lists nothing for a table that is not partitioned: then the table's own size.
            cursor.execute("SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%s::regclass)),"
                           " pg_total_relation_size(%s::regclass))", [model._meta.db_table] * 2)
            sizes[model._meta.db_table] = int(cursor.fetchone()[0])
    return sizes


def task_seconds(log_text: str) -> dict[str, list[float]]:
    """Task name → run times of the tasks that succeeded, from a Celery worker's INFO log."""
    runs: dict[str, list[float]] = {}
    for match in TASK_LINE.finditer(log_text):
        runs.setdefault(match["name"], []).append(float(match["seconds"]))
    return runs


# ---- the result and the report -------------------------------------------------------------------------


def _result(plan, before: dict, after: dict, stored: dict, caught_up: dict, samples: dict, *, run_dir: Path,
            gpus: int, interval_s: int, collect_every_s: int, workers: int, concurrency: int, fleets: int,
            shards: int) -> dict:
    window_s = after["at"] - before["at"]
    made_in_window = sum(after["produced"][host]["seq"] - before["produced"][host]["seq"] for host in after["produced"])
    gpu_count = len(plan) * gpus
    rows_in_window = caught_up["samples"] - before["samples"]  # everything stored since, caught up
    data_days = rows_in_window / (gpu_count * 86400 / interval_s)
    growth = sum(caught_up["bytes"].values()) - sum(before["bytes"].values())
    tasks: dict[str, list[float]] = {}
    for log in sorted(run_dir.glob("worker*.log")):
        for name, runs in task_seconds(log.read_text(errors="replace")).items():
            tasks.setdefault(name, []).extend(runs)
    return {
        "nodes": len(plan), "gpus": gpus, "interval_s": interval_s, "collect_every_s": collect_every_s,
        "workers": workers, "concurrency": concurrency, "fleets": fleets, "window_s": window_s,
        "shards": shards,
        "balance": produced_vs_stored(after["produced"], stored), "records_per_s": made_in_window / window_s,
        "samples": samples, "tasks": tasks, "rows_in_window": rows_in_window,
        "cores": {name: (after["cpu_s"][name] - before["cpu_s"].get(name, 0.0)) / window_s for name in after["cpu_s"]},
        "bytes_before": before["bytes"], "bytes_after": caught_up["bytes"], "growth_bytes": growth,
        "growth_per_day": growth / data_days if data_days else float("nan"),
        "bytes_per_gpu_day": growth / data_days / gpu_count if data_days else float("nan"),
    }


def _spread(values: list[float], unit: str = "s", scale: float = 1.0, digits: int = 0) -> str:
    if not values:
        return "no samples"
    return (f"p50 {statistics.median(values) * scale:.{digits}f} {unit}, p95 {percentile(values, 0.95) * scale:.{digits}f} "
            f"{unit}, max {max(values) * scale:.{digits}f} {unit}")


def print_report(r: dict) -> None:
    s = r["samples"]
    print(f"\nfleet soak: {r['nodes']:,} nodes × {r['gpus']} GPUs every {r['interval_s']} s, collected every "
          f"{r['collect_every_s']} s in {r['shards']} collect tasks; {r['workers']} worker(s) × {r['concurrency']} "
          f"processes, {r['fleets']} fleet "
          f"process(es); measured {r['window_s'] / 60:.1f} min")
    print(f"  {balance_line(r['balance'])}")
    print(f"  the fleet produced {r['records_per_s']:,.0f} records/s "
          f"(aim {r['nodes'] * r['gpus'] / r['interval_s']:,.0f})")
    print(f"  collection lag (newest stored record, per node, every {SAMPLE_EVERY_S:.0f} s; a node not collected yet "
          f"counts as old as the run): {_spread(s['lag'])}  (aim: p95 under 60 s)")
    print(f"  rollup lag (now minus the rollups' watermark, the oldest bucket waiting): {_spread(s['rollup'])}; "
          f"buckets waiting at most {max(s['dirty'], default=0):,}")
    print(f"  aggregation lag (now minus the last usage aggregation): {_spread(s['aggregation'])}")
    for name, runs in sorted(r["tasks"].items()):
        print(f"    task {name:<36} {len(runs):>5} runs, {_spread(runs, digits=2)}")
    collect = r["tasks"].get("cluster.tasks.collect_nodes", [])
    if collect:
        print(f"  collection: {r['rows_in_window'] / r['window_s']:,.0f} records/s stored; the collect tasks were busy "
              f"{sum(collect) / r['window_s']:.2f} process-seconds a second, "
              f"{r['rows_in_window'] / max(sum(collect), 1e-9):,.0f} records per busy process-second")
    print(f"  daily board over HTTP, signed in, {len(s['board_s'])} times: {_spread(s['board_s'], 'ms', 1000)}"
          f"  (aim: under 1 s)")
    print(f"  {'process':<12} {'CPU cores':>9} {'PSS MiB mean':>12} {'PSS MiB max':>11}")
    for name, cores in r["cores"].items():
        memory = s["memory"].get(name) or [float("nan")]
        print(f"  {name:<12} {cores:>9.2f} {statistics.fmean(memory):>12.0f} {max(memory):>11.0f}")
    tables = ", ".join(f"{table} {(r['bytes_after'][table] - r['bytes_before'][table]) / 2**20:,.0f} MiB"
                       for table in r["bytes_after"])
    print(f"  database growth: {r['growth_bytes'] / 2**20:,.0f} MiB for {r['rows_in_window']:,} records ({tables}): "
          f"{r['growth_per_day'] / 2**30:,.1f} GiB per day of data, {r['bytes_per_gpu_day'] / 2**20:,.1f} MiB per GPU-day")


if __name__ == "__main__":
    sys.exit(main())
