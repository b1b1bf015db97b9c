"""``python -m agents fleet``: several simulated agents in one process, for demos and load tests.

Each node is a full agent (sim backend, its own spool, sampler thread and HTTP server) on
consecutive ports from ``--base-port``; one thread waits on every node's socket and hands each request to
a thread of its node's server (``agents.http.serve_all``).

Nodes and hostnames. ``--models H200:4,H100:2,L40S:2`` gives 4 H200 nodes, then 2 H100, then 2 L40S;
without counts (``H200,H100,L40S``) the ``--nodes`` are split into groups as even as possible, the
first models taking the remainder. A node is named ``<prefix><model>-<NN>`` (``--hostname-prefix``,
default ``gpu-``), numbered per model: ``gpu-h200-01``. Ports follow the same order. So
``fleet --nodes 8 --models H200:4,H100:2,L40S:2 --mig gpu-h100-01 --maintenance gpu-l40s-02`` is the
cluster of the server's demo data set (demo/cluster.py), with the same hostnames, ports and GPU UUIDs
(seed 0). ``--maintenance`` names the nodes in maintenance: their GPUs run no workload (0 %
utilization, no processes), as the demo's node in maintenance (demo/bookings.py) runs none in its history.

Token file (``--token-file``), the contract with the server's demo loader: a JSON object mapping each
hostname to its agent::

    {"gpu-h200-01": {"url": "http://127.0.0.1:9400", "token": "<bearer token>",
                     "model": "NVIDIA H200", "gpus": 8, "mig": false}, ...}

The fleet reads it at start: a node listed with a token keeps it; a node missing is given a new
random token and the file is rewritten (atomically, mode 0600). Each agent is configured with the
SHA-256 of its token; the loader sets each Node's ``agent_url`` and (encrypted) ``agent_token`` from
the file. Either side may create the file first.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.backends.gpu_models import GpuSpec, find_model
from agents.config import AgentConfig, ConfigError, SimConfig, hash_token, parse_start

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FleetNode:
    hostname: str
    port: int
    spec: GpuSpec
    mig: bool
    maintenance: bool = False


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, help="number of nodes (default: the sum of --models counts, else 8)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node, 1-64 (default 8)")
    parser.add_argument("--models", default="H200", help="models of the nodes in order, e.g. H200,H100,L40S or "
                                                          "H200:4,H100:2,L40S:2 (default H200)")
    parser.add_argument("--base-port", type=int, default=9400, help="port of the first node (default 9400)")
    parser.add_argument("--listen-host", default="127.0.0.1", help="address every node listens on (default 127.0.0.1)")
    parser.add_argument("--token-file", required=True, help="JSON hostname → {url, token, …}; read, or written "
                                                            "for nodes it lacks")
    parser.add_argument("--spool-dir", required=True, help="folder of the spools (<hostname>.sqlite)")
    parser.add_argument("--hostname-prefix", default="gpu-", help="hostname prefix (default gpu-)")
    parser.add_argument("--mig", default="", help="comma-separated hostnames whose GPU 0 is MIG-partitioned")
    parser.add_argument("--maintenance", default="", help="comma-separated hostnames in maintenance: their GPUs "
                                                          "run no workload")
    parser.add_argument("--seed", type=int, default=0, help="workload seed of every node (default 0)")
    parser.add_argument("--speed", default="1", help="clock speed-up while catching up (default 1)")
    parser.add_argument("--start", default="now", help='clock start: "now", a relative time (write --start=-2h), epoch seconds, ISO-8601 '
                                               'with offset (default now)')
    parser.add_argument("--clock-offset", type=float, default=0.0,
                        help="seconds every node's clock is off real time, ahead when positive (write "
                             "--clock-offset=-3600), at most a day; for fault tests (default 0)")
    parser.add_argument("--interval", type=int, default=10, help="sample interval in seconds (default 10)")
    parser.add_argument("--spool-max-mib", type=float, default=512, help="spool size bound per node (default 512)")
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error (default info)")


def plan_fleet(*, nodes: int | None, models: str, base_port: int, prefix: str, mig: str = "",
               maintenance: str = "") -> list[FleetNode]:
    """The nodes a fleet runs, in port order (see the module docstring)."""
    groups: list[tuple[GpuSpec, int | None]] = []
    for item in filter(None, (part.strip() for part in models.split(","))):
        name, _, count = item.partition(":")
        spec = find_model(name)
        if spec is None:
            raise ConfigError("--models", f"unknown model {name!r} (H200, H100, A100, L40S)", models)
        if count and (not count.isdigit() or int(count) < 1):
            raise ConfigError("--models", f"the count of {name} must be a positive integer", models)
        groups.append((spec, int(count) if count else None))
    if not groups:
        raise ConfigError("--models", "names at least one model", models)
    counted = [count for _spec, count in groups if count is not None]
    if counted and len(counted) != len(groups):
        raise ConfigError("--models", "give a count for every model or for none", models)
    if counted:
        if nodes is not None and nodes != sum(counted):
            raise ConfigError("--nodes", f"must equal the sum of the --models counts ({sum(counted)})", nodes)
        counts = counted
    else:
        total = 8 if nodes is None else nodes
        if total < len(groups):
            raise ConfigError("--nodes", f"must be at least the number of models ({len(groups)})", total)
        counts = [total // len(groups) + (1 if i < total % len(groups) else 0) for i in range(len(groups))]
    if not 1 <= base_port <= 65535 - sum(counts) + 1:
        raise ConfigError("--base-port", "leaves no room for every node's port", base_port)
    mig_hosts = {host.strip() for host in mig.split(",") if host.strip()}
    maintenance_hosts = {host.strip() for host in maintenance.split(",") if host.strip()}
    plan = []
    for (spec, _count), count in zip(groups, counts, strict=True):
        for number in range(1, count + 1):
            hostname = f"{prefix}{spec.short_name.lower()}-{number:02d}"
            if hostname in mig_hosts and not spec.mig_layout:
                raise ConfigError("--mig", f"{hostname} is an {spec.name}, which has no MIG", mig)
            plan.append(FleetNode(hostname, base_port + len(plan), spec, hostname in mig_hosts,
                                  hostname in maintenance_hosts))
    for option, hosts, value in (("--mig", mig_hosts, mig), ("--maintenance", maintenance_hosts, maintenance)):
        unknown = hosts - {node.hostname for node in plan}
        if unknown:
            raise ConfigError(option, f"no such node in this fleet: {', '.join(sorted(unknown))}", value)
    return plan


def sync_token_file(path: Path, plan: list[FleetNode], *, url_host: str, gpus: int) -> dict[str, dict[str, Any]]:
    """Read the token file, give nodes without a token a new one, rewrite it if anything changed.
    Returns the file's content (every planned node present)."""
    entries: dict[str, Any] = {}
    if path.exists():
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ConfigError("--token-file", f"cannot read {path}: {error}", show_value=False) from None
        if not isinstance(entries, dict):
            raise ConfigError("--token-file", "must hold a JSON object of hostname → {url, token}", show_value=False)
    changed = not path.exists()
    for node in plan:
        old = entries.get(node.hostname) if isinstance(entries.get(node.hostname), dict) else {}
        token = old.get("token") if isinstance(old.get("token"), str) and old.get("token").strip() else None
        entry = {
            "url": f"http://{url_host}:{node.port}", "token": token or secrets.token_urlsafe(32),
            "model": node.spec.name, "gpus": gpus, "mig": node.mig,
        }
        if entry != old:
            entries[node.hostname], changed = entry, True
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump(entries, file, indent=2, sort_keys=True)
            file.write("\n")
        os.replace(temporary, path)
    return entries


def run_fleet(args: argparse.Namespace) -> int:
    from agents.agent import Agent, configure_logging, wait_for_signal
    from agents.backends.sim import SimBackend
    from agents.http import serve_all

    try:
        configure_logging(args.log_level if args.log_level in ("debug", "info", "warning", "error") else "info")
        plan = plan_fleet(nodes=args.nodes, models=args.models, base_port=args.base_port,
                          prefix=args.hostname_prefix, mig=args.mig, maintenance=args.maintenance)
        host = args.listen_host
        url_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 (compared, not bound)
        tokens = sync_token_file(Path(args.token_file), plan, url_host=url_host, gpus=args.gpus)
        sim_start = parse_start(args.start, "--start")
        if sim_start == "first":
            raise ConfigError("--start", '"first" is for the replay backend only', sim_start)
        base = SimConfig(speed=float(args.speed), start=sim_start, seed=args.seed, gpus=args.gpus)
        if not base.speed >= 1:
            raise ConfigError("--speed", "must be a number at least 1", args.speed)
        if not 1 <= args.gpus <= 64:
            raise ConfigError("--gpus", "must be an integer from 1 to 64", args.gpus)
        if not abs(args.clock_offset) <= 86400:  # also refuses nan
            raise ConfigError("--clock-offset", "must be a number of seconds from -86400 to 86400", args.clock_offset)
        if not 1 <= args.interval <= 3600:
            raise ConfigError("--interval", "must be an integer from 1 to 3600", args.interval)
    except (ConfigError, ValueError) as error:
        print(f"cardhour-agent fleet: {error}", file=sys.stderr)
        return 2
    stop = threading.Event()
    running: list[Agent] = []
    try:
        for node in plan:
            config = AgentConfig(
                token_sha256=hash_token(tokens[node.hostname]["token"]), backend="sim", listen_host=host,
                listen_port=node.port, interval_s=args.interval,
                spool_path=Path(args.spool_dir) / f"{node.hostname}.sqlite", spool_max_mib=args.spool_max_mib,
                hostname=node.hostname,
                sim=SimConfig(gpus=base.gpus, model=node.spec.short_name, seed=base.seed, speed=base.speed,
                              start=base.start, mig=node.mig, clock_offset_s=args.clock_offset),
            )
            backend = SimBackend(hostname=node.hostname, gpus=base.gpus, model=node.spec.short_name, seed=base.seed,
                                 mig=node.mig, maintenance=node.maintenance)
            running.append(Agent(config, backend=backend, stop_event=stop))
    except ConfigError as error:
        for agent in running:
            agent.stop()
        print(f"cardhour-agent fleet: {error}", file=sys.stderr)
        return 2
    # One thread waits on every node's socket (agents.http.serve_all): a thread per node polling its own
    # costs a core at 1,250 nodes (make soak).
    server = threading.Thread(target=serve_all, args=([agent.server for agent in running], stop), name="http-fleet",
                              daemon=True)
    server.start()
    for agent, node in zip(running, plan, strict=True):
        agent.start(serve=False)
        print(f"{node.hostname}\t{tokens[node.hostname]['url']}\t{node.spec.short_name} x{args.gpus}"
              f"{' (MIG on GPU 0)' if node.mig else ''}{' (maintenance: no workload)' if node.maintenance else ''}",
              flush=True)
    wait_for_signal(stop)
    server.join(10)
    for agent in running:
        agent.stop()
    return 1 if any(agent.failed for agent in running) else 0
