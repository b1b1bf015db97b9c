"""What ``make load`` and ``make soak`` share: a scratch database with the application's role, a fleet of
simulated agents registered as nodes (every node its own port, token, spool and cursor), the server
processes of ``make demo`` (gunicorn, Celery worker(s), beat) on loopback and free ports, and the check
that every record the agents produced was stored once.

A run's processes are started in sessions of their own and stopped whole (``stop_all``); their logs are
``<run_dir>/<name>.log``. CPU and memory of a process and its descendants are read from /proc.

Long because both runs share every step, from the scratch database to reading /proc.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

FLEET_MIX = (("H200", 0.6), ("H100", 0.25), ("L40S", 0.15))  # what a mid-size lab's nodes are


@dataclass(frozen=True)
class Scratch:
    """A prepared scratch run: its folder, the repository, and the URL the servers connect with."""

    run_dir: Path
    base_dir: Path
    app_url: str


def prepare_scratch(name: str) -> Scratch:
    """Servers (embedded, or DATABASE_URL's and REDIS_URL's), a fresh database ``cardhour_<name>`` migrated,
    the application's role (embedded only, as ``make demo``), an empty broker and ``var/<name>/run``; Django
    is set up on that database when this returns."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import dj_database_url

    from bench.scratch import recreate_database, with_database
    from config.embedded import BASE_DIR, VAR_DIR, local_environment

    embedded_db = not os.environ.get("DATABASE_URL")
    os.environ.update(local_environment(name))
    base = os.environ["DATABASE_URL"]
    os.environ["DATABASE_URL"] = with_database(base, f"cardhour_{name}")
    recreate_database(dj_database_url.parse(base), f"cardhour_{name}")
    run_dir = VAR_DIR / name / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    flush_broker(os.environ["REDIS_URL"])

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from config.launcher import app_database_url

    if embedded_db and os.environ.get("CARDHOUR_DB_APP_ROLE", "cardhour_app"):
        call_command("db_app_role", login=True, stdout=open(os.devnull, "w"))  # noqa: SIM115
    return Scratch(run_dir=run_dir, base_dir=BASE_DIR, app_url=app_database_url(embedded=embedded_db))


def flush_broker(url: str) -> None:
    """A run starts with an empty queue: no task left by an earlier run's worker."""
    import redis

    redis.Redis.from_url(url).flushdb()


# ---- the fleet -----------------------------------------------------------------------------------------


def fleet_mix(nodes: int) -> list[tuple[str, int]]:
    """``nodes`` split over FLEET_MIX's models (each at least one node)."""
    counts = [max(1, round(nodes * share)) for _short, share in FLEET_MIX]
    counts[0] += nodes - sum(counts)
    return [(short, count) for (short, _share), count in zip(FLEET_MIX, counts, strict=True) if count > 0]


@dataclass(frozen=True)
class Fleet:
    """One ``python -m agents fleet`` process: its share of the nodes (consecutive ports), in plan order."""

    models: str
    base_port: int
    prefix: str
    plan: list


def plan_fleets(*, nodes: int, processes: int, base_port: int) -> list[Fleet]:
    """``nodes`` on consecutive ports from ``base_port``, split into ``processes`` fleets as even as possible.
    One fleet keeps the hostnames ``gpu-<model>-NN``; several are told apart by prefix (``gpu2-h200-01``)."""
    from agents.fleet import plan_fleet

    fleets, port = [], base_port
    for number in range(processes):
        share = nodes // processes + (1 if number < nodes % processes else 0)
        if share == 0:
            continue
        models = ",".join(f"{short}:{count}" for short, count in fleet_mix(share))
        prefix = "gpu-" if processes == 1 else f"gpu{number + 1}-"
        plan = plan_fleet(nodes=None, models=models, base_port=port, prefix=prefix)
        fleets.append(Fleet(models=models, base_port=port, prefix=prefix, plan=plan))
        port += len(plan)
    return fleets


def register_fleets(fleets: list[Fleet], run_dir: Path, *, gpus: int) -> dict[str, str]:
    """Register every node through the services (its agent URL and a new token) and write each fleet's
    token file; returns hostname → agent token."""
    from cluster.inventory.services import node_register

    tokens = {}
    for number, fleet in enumerate(fleets):
        entries = {}
        for node in fleet.plan:
            url = f"http://127.0.0.1:{node.port}"
            _node, tokens[node.hostname] = node_register(
                hostname=node.hostname, agent_url=url, pool="train" if node.spec.short_name != "L40S" else "infer")
            entries[node.hostname] = {"url": url, "token": tokens[node.hostname], "model": node.spec.name,
                                      "gpus": gpus, "mig": node.mig}
        (run_dir / f"fleet-tokens-{number + 1}.json").write_text(json.dumps(entries))
    return tokens


def fleet_commands(fleets: list[Fleet], run_dir: Path, *, gpus: int, interval_s: int = 10) -> dict[str, list[str]]:
    """The command of each fleet process (named ``agents`` when there is one, else ``agents-1``, …)."""
    commands = {}
    for number, fleet in enumerate(fleets):
        name = "agents" if len(fleets) == 1 else f"agents-{number + 1}"
        commands[name] = [
            sys.executable, "-m", "agents", "fleet", "--gpus", str(gpus), "--models", fleet.models,
            "--base-port", str(fleet.base_port), "--hostname-prefix", fleet.prefix,
            "--interval", str(interval_s), "--token-file", str(run_dir / f"fleet-tokens-{number + 1}.json"),
            "--spool-dir", str(run_dir / "spools"), "--log-level", "warning"]
    return commands


# ---- the servers ---------------------------------------------------------------------------------------


def server_commands(run_dir: Path, *, web_port: int | None, workers: int = 1, concurrency: int = 2,
                    worker_log_level: str = "WARNING") -> dict[str, list[str]]:
    """gunicorn (as ``make demo``: 2 workers × 4 threads; none when ``web_port`` is None), ``workers``
    Celery workers on every queue, and beat."""
    python = sys.executable
    commands = {}
    if web_port is not None:
        commands["web"] = [python, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{web_port}",
                           "--workers", "2", "--threads", "4", "--graceful-timeout", "5"]
    for number in range(workers):
        name = "worker" if workers == 1 else f"worker-{number + 1}"
        commands[name] = [python, "-m", "celery", "-A", "config", "worker", "-Q", "collect,rollup,default",
                          "--concurrency", str(concurrency), "--loglevel", worker_log_level,
                          "-n", f"{run_dir.parent.name}-{number + 1}@%h"]
    commands["beat"] = [python, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                        "--schedule", str(run_dir / "celerybeat-schedule"), "--pidfile", ""]
    return commands


def start_processes(commands: dict[str, list[str]], *, run_dir: Path, base_dir: Path,
                    environment: dict[str, str]) -> dict[str, subprocess.Popen]:
    """Start each command in a session of its own, its output in ``<run_dir>/<name>.log``."""
    processes = {}
    for name, command in commands.items():
        log = open(run_dir / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        processes[name] = subprocess.Popen(command, cwd=base_dir, stdout=log, stderr=subprocess.STDOUT,
                                           env=environment, start_new_session=True)
    return processes


def stop_all(processes: dict[str, subprocess.Popen]) -> None:
    """SIGTERM every process group, then SIGKILL what is left after 20 s."""
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


def free_port_range(count: int, *, start: int = 20000) -> int:
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


def wait_for_port(port: int, process: subprocess.Popen, *, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not answer on port {port} within {timeout_s:.0f} s")


def check_running(processes: dict[str, subprocess.Popen], run_dir: Path) -> None:
    """Raise if a process of the run has exited (naming its log)."""
    for name, process in processes.items():
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} (see {run_dir / name}.log)")


# ---- what was collected --------------------------------------------------------------------------------


def wait_for_first_collection(nodes: int, *, timeout_s: float, processes: dict | None = None,
                              run_dir: Path | None = None, required: bool = True) -> int:
    """Wait until ``nodes`` nodes have been collected once; returns how many were. Past ``timeout_s``: raises,
    or with ``required=False`` returns the count so far."""
    from cluster.telemetry.models import CollectionState

    deadline = time.monotonic() + timeout_s
    while True:
        collected = CollectionState.objects.filter(last_success_at__isnull=False).count()
        if collected >= nodes:
            return collected
        if time.monotonic() > deadline:
            if required:
                raise RuntimeError(f"not every node was collected within {timeout_s:.0f} s (see the worker's log)")
            return collected
        if processes and run_dir:
            check_running(processes, run_dir)
        time.sleep(2)


def collection_lags() -> list[float]:
    """Per node, the server's clock minus the newest record it has stored of the node (s)."""
    from django.utils import timezone

    from cluster.telemetry.models import CollectionState

    now = timezone.now()
    return [(now - complete).total_seconds() for complete in
            CollectionState.objects.exclude(data_complete_to=None).values_list("data_complete_to", flat=True)]


def agents_produced(plan, tokens: dict[str, str]) -> dict[str, dict]:
    """Each agent's last spool seq and its record time, read from its /healthz with its token."""
    produced = {}
    for node in plan:
        request = urllib.request.Request(f"http://127.0.0.1:{node.port}/healthz",
                                         headers={"Authorization": f"Bearer {tokens[node.hostname]}"})
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (loopback)
            health = json.load(answer)
        produced[node.hostname] = {"seq": health["last_seq"], "ts": health["last_record_ts"]}
    return produced


def stored_once_caught_up(produced: dict, *, timeout_s: float) -> dict[str, dict]:
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


def produced_vs_stored(produced: dict, stored: dict) -> dict:
    """Totals, and the nodes whose stored rows plus rejected records differ from the records produced."""
    return {
        "behind": [host for host, row in stored.items() if not row["caught_up"]],
        "produced": sum(seen["seq"] for seen in produced.values()),
        "stored": sum(row["rows"] for row in stored.values()),
        "rejected": sum(row["rejected"] for row in stored.values()),
        "wrong": [host for host, seen in produced.items()
                  if stored[host]["rows"] + stored[host]["rejected"] != seen["seq"]],
    }


def balance_line(balance: dict) -> str:
    wrong, behind = balance["wrong"], balance.get("behind", [])
    return (f"records produced {balance['produced']:,}, stored {balance['stored']:,}, rejected "
            f"{balance['rejected']:,}: " + ("nothing lost or doubled" if not wrong else
                                            f"MISMATCH on {len(wrong)} nodes: {', '.join(wrong[:5])}")
            + (f" ({len(behind)} nodes' cursors were still behind their agents when counted)" if behind else ""))


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# ---- CPU and memory of the processes, from /proc ---------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_table() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, CPU seconds of the process and of its reaped children), for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        # After the command's ")": state, ppid, …, utime (14th field of stat), stime, cutime, cstime.
        table[int(entry)] = (int(fields[1]), sum(int(value) for value in fields[11:15]) / CLOCK_TICKS)
    return table


def process_tree(root: int, table: dict[int, tuple[int, float]]) -> list[int]:
    """``root`` and its descendants alive in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _cpu) in table.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = [], [root] if root in table else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_cpu_s(root: int, table: dict[int, tuple[int, float]]) -> float:
    """CPU seconds of a process tree: of the live processes and of the children they reaped (so a backend
    or pool process that exited still counts, through its parent)."""
    return sum(table[pid][1] for pid in process_tree(root, table))


def tree_memory_mib(root: int, table: dict[int, tuple[int, float]]) -> float:
    """Proportional set size of a process tree (MiB): shared pages (PostgreSQL's shared buffers, a prefork
    pool's copy-on-write) counted once between their sharers, not once per process as RSS would."""
    total_kib = 0
    for pid in process_tree(root, table):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                total_kib += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total_kib / 1024


def server_pids() -> dict[str, int]:
    """The PostgreSQL postmaster (the parent of this connection's backend) and redis-server, where they run on
    this machine (a CI service container's are not ours to read)."""
    import redis
    from django.db import connection

    pids = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    postmaster = _parent_named(backend, "postgres")
    if postmaster:
        pids["PostgreSQL"] = postmaster
    redis_pid = redis.Redis.from_url(os.environ["REDIS_URL"]).info("server").get("process_id")
    if redis_pid and _command_name(redis_pid).startswith("redis"):
        pids["Redis"] = int(redis_pid)
    return pids


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _parent_named(pid: int, name: str) -> int | None:
    if not _command_name(pid).startswith(name):
        return None
    with open(f"/proc/{pid}/stat") as handle:
        parent = int(handle.read().rpartition(")")[2].split()[1])
    return parent if _command_name(parent).startswith(name) else None
