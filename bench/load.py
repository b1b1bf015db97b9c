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
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

FLEET_MIX = (("H200", 0.6), ("H100", 0.25), ("L40S", 0.15))  # what a mid-size lab's nodes are
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

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import dj_database_url

    from bench.scratch import recreate_database, with_database
    from config.embedded import BASE_DIR, VAR_DIR, local_environment

    embedded_db = not os.environ.get("DATABASE_URL")
    os.environ.update(local_environment("load"))
    base = os.environ["DATABASE_URL"]
    os.environ["DATABASE_URL"] = with_database(base, "cardhour_load")
    recreate_database(dj_database_url.parse(base), "cardhour_load")
    run_dir = VAR_DIR / "load" / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    _flush_broker(os.environ["REDIS_URL"])

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from config.launcher import app_database_url

    if embedded_db and os.environ.get("CARDHOUR_DB_APP_ROLE", "cardhour_app"):
        call_command("db_app_role", login=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
    app_url = app_database_url(embedded=embedded_db)  # web, worker and beat run as make demo's do
    agent_port = _free_port_range(args.nodes)
    web_port = _free_port_range(1, start=agent_port + args.nodes)
    models = ",".join(f"{short}:{count}" for short, count in _mix(args.nodes))
    from agents.fleet import plan_fleet

    plan = plan_fleet(nodes=None, models=models, base_port=agent_port, prefix="gpu-")
    people = _seed(plan, run_dir)
    processes = _start(args, plan=plan, models=models, agent_port=agent_port, web_port=web_port,
                       run_dir=run_dir, base_dir=BASE_DIR, database_url=app_url)
    try:
        _wait_for_port(web_port, processes["web"])
        print(f"Waiting for the first collection of {len(plan)} nodes …", flush=True)
        _wait_for_first_collection(len(plan), timeout_s=240)
        lags, stop = [], threading.Event()
        sampler = threading.Thread(target=_sample_lag, args=(lags, stop), daemon=True)
        sampler.start()
        print(f"{args.users} people browse for {args.minutes:g} min …", flush=True)
        stats = _run_locust(args, web_port=web_port, run_dir=run_dir, people=people, base_dir=BASE_DIR)
        stop.set()
        sampler.join()
        produced = _agents_produced(plan, people["agent_tokens"])
        stored = _stored_once_caught_up(produced, timeout_s=240)
    finally:
        _stop_all(processes)
    return _report(stats, lags, produced, stored, nodes=len(plan), gpus=args.gpus, users=args.users)


# ---- the cluster and its people ------------------------------------------------------------------------


def _mix(nodes: int) -> list[tuple[str, int]]:
    counts = [max(1, round(nodes * share)) for _short, share in FLEET_MIX]
    counts[0] += nodes - sum(counts)
    return [(short, count) for (short, _share), count in zip(FLEET_MIX, counts, strict=True)]


def _seed(plan, run_dir: Path) -> dict:
    """Teams, their people (a lead and engineers, each with an API token) and the nodes with their agent
    tokens, made through the services; writes the fleet's token file and the people's file."""
    from django.contrib.auth import get_user_model

    from cluster.inventory.services import node_register
    from teams.models import ApiToken, Membership, Project, Team
    from teams.roles import TeamRole

    agent_tokens = {}
    for node in plan:
        _node, token = node_register(hostname=node.hostname, agent_url=f"http://127.0.0.1:{node.port}",
                                     pool="train" if node.spec.short_name != "L40S" else "infer")
        agent_tokens[node.hostname] = token
    (run_dir / "fleet-tokens.json").write_text(json.dumps(
        {host: {"url": f"http://127.0.0.1:{node.port}", "token": agent_tokens[host]}
         for host, node in ((n.hostname, n) for n in plan)}))
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
    return people


# ---- the processes -------------------------------------------------------------------------------------


def _start(args, *, plan, models: str, agent_port: int, web_port: int, run_dir: Path, base_dir: Path,
           database_url: str) -> dict:
    python = sys.executable
    environment = {**os.environ, "DATABASE_URL": database_url}
    commands = {
        "agents": [python, "-m", "agents", "fleet", "--gpus", str(args.gpus), "--models", models,
                   "--base-port", str(agent_port), "--token-file", str(run_dir / "fleet-tokens.json"),
                   "--spool-dir", str(run_dir / "spools"), "--log-level", "warning"],
        "web": [python, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{web_port}", "--workers", "2",
                "--threads", "4", "--graceful-timeout", "5"],
        "worker": [python, "-m", "celery", "-A", "config", "worker", "-Q", "collect,rollup,default",
                   "--concurrency", "2", "--loglevel", "WARNING", "-n", "load@%h"],
        "beat": [python, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                 "--schedule", str(run_dir / "celerybeat-schedule"), "--pidfile", ""],
    }
    processes = {}
    for name, command in commands.items():
        log = open(run_dir / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        processes[name] = subprocess.Popen(command, cwd=base_dir, stdout=log, stderr=subprocess.STDOUT,
                                           env=environment, start_new_session=True)
    return processes


def _stop_all(processes: dict) -> None:
    import signal

    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _free_port_range(count: int, *, start: int = 20000) -> int:
    """The first of ``count`` consecutive free loopback ports from ``start`` on."""
    for first in range(start, 60000, count + 7):
        sockets = []
        try:
            for port in range(first, first + count):
                probe = socket.socket()
                sockets.append(probe)
                probe.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for probe in sockets:
                probe.close()
    raise RuntimeError(f"no {count} consecutive free ports between {start} and 60000")


def _wait_for_port(port: int, process: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the web server exited with {process.returncode} (see var/load/run/web.log)")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"the web server did not answer on port {port} within {timeout_s:.0f} s")


def _flush_broker(url: str) -> None:
    """A run starts with an empty queue: no task left by an earlier run's worker."""
    import redis

    redis.Redis.from_url(url).flushdb()


# ---- what was collected --------------------------------------------------------------------------------


def _wait_for_first_collection(nodes: int, *, timeout_s: float) -> None:
    from cluster.telemetry.models import CollectionState

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if CollectionState.objects.filter(last_success_at__isnull=False).count() >= nodes:
            return
        time.sleep(2)
    raise RuntimeError(f"not every node was collected within {timeout_s:.0f} s (see var/load/run/worker.log)")


def _sample_lag(lags: list[float], stop: threading.Event) -> None:
    """Every LAG_EVERY_S: per node, the server's clock minus the newest record it has stored of the node."""
    from django.db import connection
    from django.utils import timezone

    from cluster.telemetry.models import CollectionState

    try:
        while not stop.wait(LAG_EVERY_S):
            now = timezone.now()
            lags.extend((now - complete).total_seconds() for complete in
                        CollectionState.objects.exclude(data_complete_to=None).values_list("data_complete_to", flat=True))
    finally:
        connection.close()


def _agents_produced(plan, tokens: dict) -> dict[str, dict]:
    """Each agent's last spool seq and its record time, read from its /healthz with its token."""
    produced = {}
    for node in plan:
        request = urllib.request.Request(f"http://127.0.0.1:{node.port}/healthz",
                                         headers={"Authorization": f"Bearer {tokens[node.hostname]}"})
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (loopback)
            health = json.load(answer)
        produced[node.hostname] = {"seq": health["last_seq"], "ts": health["last_record_ts"]}
    return produced


def _stored_once_caught_up(produced: dict, *, timeout_s: float) -> dict[str, dict]:
    """Wait until every node's cursor has passed the seq read above; then count, per node, the rows of its
    GPUs up to that record's time, and the records the collector rejected."""
    from datetime import UTC, datetime

    from django.db.models import Count

    from cluster.telemetry.models import CollectionState, Sample

    deadline = time.monotonic() + timeout_s
    while True:
        cursors = dict(CollectionState.objects.values_list("node__hostname", "cursor"))
        behind = [host for host, seen in produced.items() if cursors.get(host, 0) < seen["seq"]]
        if not behind or time.monotonic() > deadline:
            break
        time.sleep(3)
    stored = {}
    rejected = dict(CollectionState.objects.values_list("node__hostname", "records_rejected"))
    for host, seen in produced.items():
        upto = datetime.fromtimestamp(seen["ts"], tz=UTC) if seen["ts"] else None  # the agent's epoch seconds
        rows = Sample.objects.filter(gpu__node__hostname=host, ts__lte=upto).aggregate(n=Count("ts"))["n"] if upto else 0
        stored[host] = {"rows": rows, "rejected": rejected.get(host, 0), "caught_up": host not in behind}
    return stored


# ---- Locust and the report -----------------------------------------------------------------------------


def _run_locust(args, *, web_port: int, run_dir: Path, people: dict, base_dir: Path) -> list[dict]:
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


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _report(stats: list[dict], lags: list[float], produced: dict, stored: dict, *, nodes: int, gpus: int,
            users: int) -> int:
    print(f"\nload scenario: {nodes} nodes × {gpus} GPUs collected while {users} people browse and book")
    print(f"  {'page':<26} {'requests':>8} {'failures':>8} {'p50 ms':>7} {'p95 ms':>7}")
    for row in stats:
        print(f"  {row['Name']:<26} {int(row['Request Count']):>8} {int(row['Failure Count']):>8} "
              f"{row['50%']:>7} {row['95%']:>7}")
    if lags:
        print(f"  collection lag (newest stored record, per node, every {LAG_EVERY_S:.0f} s): "
              f"p50 {statistics.median(lags):.0f} s, p95 {_percentile(lags, 0.95):.0f} s, max {max(lags):.0f} s")
    made = sum(seen["seq"] for seen in produced.values())
    kept = sum(row["rows"] for row in stored.values())
    rejected = sum(row["rejected"] for row in stored.values())
    wrong = [host for host, seen in produced.items() if stored[host]["rows"] + stored[host]["rejected"] != seen["seq"]]
    print(f"  records produced {made:,}, stored {kept:,}, rejected {rejected:,}: "
          + ("nothing lost or doubled" if not wrong else f"MISMATCH on {len(wrong)} nodes: {', '.join(wrong[:5])}"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
