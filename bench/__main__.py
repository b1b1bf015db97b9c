"""``make bench``: the figures the issues ask for, from one run, each beside a baseline measured in
the same run where one exists. Runs against a scratch database ``cardhour_bench`` on the embedded
PostgreSQL (or on DATABASE_URL's server), migrated fresh and dropped afterwards.

    python -m bench [--records N] [--close-gpus 1000,10000] [--only collector,rollup,workers,agent,jobs,bookings,usage,close,boards]

``workers`` runs the same collection and rollups in one worker process, then in two (``--workers 1,2``).
``boards`` times the daily board at 1,000 GPUs, then at 10,000 (``boards-10k`` alone: the second only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records for the collector and rollup runs")
    parser.add_argument("--close-gpus", default="1000,10000",
                        help="comma-separated fleet sizes for the month close (each beside its own GROUP BY)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker process counts for ``workers``")
    parser.add_argument("--only", default="collector,rollup,workers,agent,jobs,bookings,usage,close,boards", help="comma-separated subset")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from bench.scratch import recreate_database, with_database
    from config.embedded import local_environment

    os.environ.update(local_environment("bench"))
    import dj_database_url

    base = os.environ["DATABASE_URL"]
    os.environ["DATABASE_URL"] = with_database(base, "cardhour_bench")
    recreate_database(dj_database_url.parse(base), "cardhour_bench")

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results = {}
    if "collector" in only:
        from bench.telemetry import bench_collector

        results["collector"] = bench_collector(records=args.records)
        _print_collector(results["collector"])
    if "rollup" in only:
        from cluster.telemetry.rollups import bench_rollup

        results["rollup"] = bench_rollup(args.records)
        print(f"\nrollup: {results['rollup']}")
    if "workers" in only:
        from bench.workers import bench_workers, print_workers

        results["workers"] = r = bench_workers(processes=tuple(int(n) for n in args.workers.split(",")))
        print_workers(r)
    if "agent" in only:
        from bench.agent import measure_agent

        results["agent"] = measure_agent()
        print(f"\nagent (sim backend, 8 GPUs): {results['agent']}")
    if "jobs" in only:
        from bench.jobs import bench_import_jobs

        results["jobs"] = r = bench_import_jobs()
        print(f"\nimport_jobs, {r['jobs']:,} jobs (half placed, half unplaced; generic CSV → rows committed)")
        print(f"  first import        {r['first_s']:8.2f} s  {r['first_rows_per_s']:>12,.0f} rows/s")
        print(f"  same file again     {r['again_s']:8.2f} s  {r['again_rows_per_s']:>12,.0f} rows/s  (all unchanged)")
        print(f"  a tenth changed     {r['tenth_changed_s']:8.2f} s  {r['tenth_changed_rows_per_s']:>12,.0f} rows/s")
    if "bookings" in only:
        from bench.bookings import bench_availability

        results["bookings"] = r = bench_availability()
        print(f"\navailability search, {r['gpus']:,} GPUs, {r['bookings']:,} bookings, {r['requests']} requests (median)")
        print(f"  earliest-slot search     {r['search_ms']:8.1f} ms  (median wait found {r['median_wait_h']:.1f} h)")
        print(f"  one-window free query    {r['one_window_query_ms']:8.1f} ms  search / it = {r['search_vs_one_window']:.2f}")
        print(f"  naive step-by-step       {r['naive_search_ms']:8.1f} ms  naive / search = {r['naive_vs_search']:.1f}")
    if "usage" in only:
        from bench.usage import bench_usage_day, bench_usage_report

        results["usage_day"] = r = bench_usage_day()
        print(f"\naggregate_day, one business day of {r['gpus']:,} GPUs ({r['rollups']:,} minute rollups, "
              f"{r['allocations']:,} allocations, {r['bookings']} bookings, an outage; median of 3)")
        print(f"  aggregate_day            {r['aggregate_s']:8.2f} s  {r['rollups_per_s']:>12,.0f} rollups/s")
        print(f"  one query over rollups   {r['baseline_s']:8.2f} s  aggregate / it = {r['aggregate_vs_baseline']:.1f}")
        results["usage_report"] = r = bench_usage_report()
        print(f"\nusage_report, a month of daily aggregates ({r['daily_rows']:,} rows: {r['gpus']:,} GPUs, "
              f"{r['teams']} teams, {r['days']} days; median of 3)")
        for by in ("team", "gpu"):
            print(f"  by {by:<4} ({r[f'by_{by}_rows']:>5,} rows)  {r[f'by_{by}_s'] * 1000:8.1f} ms  "
                  f"GROUP BY {r[f'by_{by}_baseline_s'] * 1000:8.1f} ms  report / it = {r[f'by_{by}_vs_baseline']:.1f}")
    if "close" in only:
        from bench.close import bench_close, print_close

        sizes = [int(size) for size in args.close_gpus.split(",")]
        results["close"] = [bench_close(gpus=gpus, runs=3 if gpus <= 1000 else 1) for gpus in sizes]
        print_close(results["close"])
    if "boards" in only:
        from bench.boards import bench_boards, print_boards

        results["boards"] = r = bench_boards()
        print_boards(r)
    if "boards" in only or "boards-10k" in only:
        from bench.boards import bench_boards_at_scale, print_boards_at_scale

        results["boards_10k"] = r = bench_boards_at_scale()
        print_boards_at_scale(r)
    return 0


def _print_collector(r: dict) -> None:
    n = r["records"]
    print(f"\ncollector path, {n:,} records (agent NDJSON in → rows committed, a transaction per page)")
    print("  clean pages (msgspec, one binary COPY):")
    _print_stages(n, r["stages_s"], r["collector_s"])
    print("  the same pages through the SQL statement (the path of a page holding any rejected record):")
    _print_stages(n, r["sql_stages_s"], r["sql_path_s"])
    print(f"  raw text COPY              {r['raw_text_copy_rows_per_s']:>12,.0f} rows/s")
    print(f"  raw binary COPY            {r['raw_binary_copy_rows_per_s']:>12,.0f} rows/s")
    print(f"  collector / text COPY    {r['collector_vs_text_copy']:.2f}")
    print(f"  collector / binary COPY  {r['collector_vs_binary_copy']:.2f}  (aim ≥ 0.5)")
    print(f"  SQL path / binary COPY   {r['sql_path_vs_binary_copy']:.2f}")


def _print_stages(n: int, stages: dict[str, float], total: float) -> None:
    for stage, seconds in stages.items():
        print(f"    {stage:<20} {seconds:8.2f} s")
    print(f"    {'total':<20} {total:8.2f} s  {n / total:>12,.0f} rows/s")


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"\n(bench took {time.monotonic() - started:.0f} s)")
    sys.exit(code)
