"""``make load``: the load scenario of issue 17. Simulated agents for 1,000 GPUs are collected while 50
people browse the boards and book (Locust, bench/locustfile.py), for a few minutes; then every record
the agents produced is looked for in the database.

    python -m bench.load [--minutes 3] [--users 50] [--nodes 125] [--gpus 8]

It runs what ``make demo`` runs (gunicorn with 2 workers × 4 threads, one Celery worker for every queue,
beat) on a scratch database ``cardhour_load`` of the embedded PostgreSQL (or DATABASE_URL's server),
with a fleet of simulated agents (``python -m agents fleet``: every node its own port, token, spool and
cursor), all on loopback and free ports. It prints:

- per page: requests, failures, median (p50) and p95 answer times, from Locust's own figures;
- collection lag: how old each node's newest stored record was, sampled every 10 s (p50/p95/max);
- records produced (each agent's last spool seq, read with its token at the end) against records stored
  (rows of that node's GPUs up to that record's time) plus records rejected: equal, or the run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path

from bench.stack import (
    agents_produced,
    balance_line,
    collection_lags,
    fleet_commands,
    free_port_range,
    percentile,
    plan_fleets,
    prepare_scratch,
    produced_vs_stored,
    register_fleets,
    server_commands,
    start_processes,
    stop_all,
    stored_once_caught_up,
    wait_for_first_collection,
    wait_for_port,
)

TEAMS = (("llm", "LLM Training"), ("vision", "Vision"), ("speech", "Speech"), ("rec", "Recommendation"),
         ("infra", "ML Platform"))
PASSWORD = "cardhour-load"  # noqa: S105 (the scratch database's made-up accounts)
LAG_EVERY_S = 10.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the people browse (3)")
    parser.add_argument("--users", type=int, default=50, help="people browsing at once (50)")
    parser.add_argument("--nodes", type=int, default=125, help="simulated nodes (125)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (8)")
    args = parser.parse_args(argv)

    scratch = prepare_scratch("load")
    run_dir = scratch.run_dir
    agent_port = free_port_range(args.nodes)
    web_port = free_port_range(1, start=agent_port + args.nodes)
    fleets = plan_fleets(nodes=args.nodes, processes=1, base_port=agent_port)
    plan = [node for fleet in fleets for node in fleet.plan]
    agent_tokens = register_fleets(fleets, run_dir, gpus=args.gpus)
    _seed(plan, run_dir, agent_tokens)
    commands = {**fleet_commands(fleets, run_dir, gpus=args.gpus), **server_commands(run_dir, web_port=web_port)}
    processes = start_processes(commands, run_dir=run_dir, base_dir=scratch.base_dir,
                                environment={**os.environ, "DATABASE_URL": scratch.app_url})
    try:
        wait_for_port(web_port, processes["web"], what="the web server (see var/load/run/web.log)")
        print(f"Waiting for the first collection of {len(plan)} nodes …", flush=True)
        wait_for_first_collection(len(plan), timeout_s=240)
        lags, stop = [], threading.Event()
        sampler = threading.Thread(target=_sample_lag, args=(lags, stop), daemon=True)
        sampler.start()
        print(f"{args.users} people browse for {args.minutes:g} min …", flush=True)
        stats = _run_locust(args, web_port=web_port, run_dir=run_dir, base_dir=scratch.base_dir)
        stop.set()
        sampler.join()
        produced = agents_produced(plan, agent_tokens)
        stored = stored_once_caught_up(produced, timeout_s=240)
    finally:
        stop_all(processes)
    return _report(stats, lags, produced_vs_stored(produced, stored), nodes=len(plan), gpus=args.gpus,
                   users=args.users)


# ---- the people ----------------------------------------------------------------------------------------


def _seed(plan, run_dir: Path, agent_tokens: dict[str, str]) -> None:
    """Teams and their people (a lead and engineers, each with an API token), made through the models;
    writes the people's file for Locust."""
    from django.contrib.auth import get_user_model

    from teams.models import ApiToken, Membership, Project, Team
    from teams.roles import TeamRole

    users = []
    per_team = -(-50 // len(TEAMS))
    for slug, name in TEAMS:
        team = Team.objects.create(name=name, slug=slug, cost_centre=f"CC-{slug.upper()}")
        Project.objects.create(team=team, name=f"{name} main", slug=f"{slug}-main")
        for number in range(per_team):
            username = f"{slug}-{'lead' if number == 0 else f'eng{number}'}"
            user = get_user_model().objects.create_user(username=username, password=PASSWORD)
            Membership.objects.create(user=user, team=team, role=TeamRole.LEAD if number == 0 else TeamRole.ENGINEER)
            users.append({"username": username, "password": PASSWORD, "team": slug,
                          "token": ApiToken.issue(user=user, name="load")[1]})
    people = {"users": users, "nodes": [node.hostname for node in plan],
              "models": sorted({node.spec.name for node in plan}), "agent_tokens": agent_tokens}
    (run_dir / "people.json").write_text(json.dumps(people))


def _sample_lag(lags: list[float], stop: threading.Event) -> None:
    """Every LAG_EVERY_S: per node, the server's clock minus the newest record it has stored of the node."""
    from django.db import connection

    try:
        while not stop.wait(LAG_EVERY_S):
            lags.extend(collection_lags())
    finally:
        connection.close()


# ---- Locust and the report -----------------------------------------------------------------------------


def _run_locust(args, *, web_port: int, run_dir: Path, base_dir: Path) -> list[dict]:
    import csv

    environment = {**os.environ, "CARDHOUR_LOAD_USERS": str(run_dir / "people.json")}
    with open(run_dir / "locust.log", "w") as log:
        subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(base_dir / "bench" / "locustfile.py"), "--headless",
             "--users", str(args.users), "--spawn-rate", str(max(1, args.users // 10)),
             "--run-time", f"{round(args.minutes * 60)}s", "--host", f"http://127.0.0.1:{web_port}",
             "--csv", str(run_dir / "locust"), "--only-summary", "--exit-code-on-error", "0"],
            cwd=base_dir, env=environment, stdout=log, stderr=subprocess.STDOUT, check=True,
        )
    with open(run_dir / "locust_stats.csv") as handle:
        return list(csv.DictReader(handle))


def _report(stats: list[dict], lags: list[float], balance: dict, *, nodes: int, gpus: int, users: int) -> int:
    print(f"\nload scenario: {nodes} nodes × {gpus} GPUs collected while {users} people browse and book")
    print(f"  {'page':<26} {'requests':>8} {'failures':>8} {'p50 ms':>7} {'p95 ms':>7}")
    for row in stats:
        print(f"  {row['Name']:<26} {int(row['Request Count']):>8} {int(row['Failure Count']):>8} "
              f"{row['50%']:>7} {row['95%']:>7}")
    if lags:
        print(f"  collection lag (newest stored record, per node, every {LAG_EVERY_S:.0f} s): "
              f"p50 {statistics.median(lags):.0f} s, p95 {percentile(lags, 0.95):.0f} s, max {max(lags):.0f} s")
    print(f"  {balance_line(balance)}")
    return 1 if balance["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
