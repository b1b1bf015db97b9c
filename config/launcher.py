"""``make demo``: one process that supervises the whole local Cardhour.

Starts the embedded PostgreSQL and Redis (config/embedded.py) and a simulated fleet of node agents
(``python -m agents fleet``: 8 nodes × 8 GPUs, backfilling the last hours at an accelerated clock,
then live), migrates, loads the demo data with the fleet's URLs and tokens, then runs the web server
(gunicorn), a Celery worker for every queue and Celery beat as child processes. Prints the URL and the
demo logins, and on Ctrl-C (or when any child dies) stops every child and then the embedded servers.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import quote, urlsplit, urlunsplit

from config.embedded import BASE_DIR, VAR_DIR, local_environment

FLEET_NODES = 8
# The demo data set's cluster (demo/cluster.py, demo/bookings.py), which config may not import:
# tests/demo/test_live_fleet.py holds them equal. The node in maintenance runs no workload.
FLEET_MODELS, FLEET_MIG, FLEET_MAINTENANCE = "H200:4,H100:2,L40S:2", "gpu-h100-01", "gpu-l40s-02"
DEMO_DEFAULTS = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "CARDHOUR_BUSINESS_TIME_ZONE": "Asia/Shanghai",
    "EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
    "PYTHONUNBUFFERED": "1",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.launcher", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"), help="address to serve on")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")), help="web port (8000)")
    parser.add_argument("--no-load", action="store_true", help="skip loading the demo data set")
    parser.add_argument("--state", default="demo", help="folder under var/ for the embedded servers' data (demo)")
    parser.add_argument("--agent-port", type=int, default=9400, help="port of the first simulated agent (9400)")
    parser.add_argument("--backfill", default="-6h", help="how far back the simulated fleet starts (-6h)")
    parser.add_argument("--history-days", type=int, default=None,
                        help="days of generated usage history (default: since the first day of last month)")
    args = parser.parse_args(argv)

    if _port_taken(args.host, args.port):
        print(f"Port {args.port} on {args.host} is in use: stop what holds it or run `make demo PORT=8001`.")
        return 2
    busy = [p for p in range(args.agent_port, args.agent_port + FLEET_NODES) if _port_taken("127.0.0.1", p)]
    if busy:
        print(f"Agent port(s) {busy} are in use: stop what holds them or run `make demo AGENT_PORT=9500`.")
        return 2
    for key, value in DEMO_DEFAULTS.items():
        os.environ.setdefault(key, value)
    print(f"Starting the embedded services (PostgreSQL, Redis) under var/{args.state} …", flush=True)
    embedded_db = not os.environ.get("DATABASE_URL")
    os.environ.update(local_environment(args.state))
    os.environ.setdefault("ALLOWED_HOSTS", f"{args.host},localhost,127.0.0.1")
    os.environ.setdefault("CARDHOUR_SITE_URL", f"http://{args.host}:{args.port}")  # the weekly report's links

    state = VAR_DIR / args.state
    tokens = state / "fleet-tokens.json"
    fleet = subprocess.Popen(
        [sys.executable, "-m", "agents", *fleet_arguments(agent_port=args.agent_port, tokens=tokens,
                                                          spools=state / "spools", backfill=args.backfill)],
        cwd=BASE_DIR, start_new_session=True,
    )
    manage = [sys.executable, str(BASE_DIR / "manage.py")]
    history = [] if args.history_days is None else ["--history-days", str(args.history_days)]
    try:
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], check=True)
        if embedded_db and os.environ.get("CARDHOUR_DB_APP_ROLE", "cardhour_app"):
            subprocess.run([*manage, "db_app_role", "--login"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*manage, "collectstatic", "--noinput", "-v", "0"], check=True)
        _wait_for_file(tokens, fleet)
        if not args.no_load:
            # The last days first, so the first page is served within a minute; the older months follow in
            # the background (the boards say so until they are in).
            subprocess.run([*manage, "load_demo", "--agents", str(tokens), "--recent-only", *history], check=True)
    except BaseException:
        # The fleet runs in a session of its own: a failed start must not leave it serving (and holding
        # the ports and our stdout) after we exit.
        _stop_all({"agents": fleet})
        raise

    children = {
        "web": [
            sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"{args.host}:{args.port}",
            "--workers", "2", "--threads", "4", "--access-logfile", "-", "--graceful-timeout", "5",
        ],
        "worker": [
            sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "collect,rollup,default",
            "--concurrency", "2", "--loglevel", "INFO", "-n", "demo@%h",
        ],
        "beat": [
            sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
            "--schedule", str(state / "celerybeat-schedule"), "--pidfile", "",
        ],
    }
    processes = {"agents": fleet}
    # Web, worker and beat log in as the application's role: the audit trail and the ledger are append-only
    # to them (docs/decisions.md, "Audit rows and grants"); migrations and the loader stay the owner's.
    app_env = {**os.environ, "DATABASE_URL": app_database_url(embedded=embedded_db)}
    processes.update({name: subprocess.Popen(cmd, cwd=BASE_DIR, start_new_session=True, env=app_env)
                      for name, cmd in children.items()})
    stopping = False

    def stop(*_args):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    _wait_for_port(args.host, args.port, processes["web"])
    if not args.no_load:  # once the web server answers: it is not kept waiting for the CPU
        processes["history"] = subprocess.Popen([*manage, "load_demo", "--older", *history], cwd=BASE_DIR,
                                                start_new_session=True)
    print(
        f"\nCardhour is running at http://{args.host}:{args.port}/  (Ctrl-C stops everything)\n"
        "Logins are printed above (password 'cardhour-demo' for all). The simulated agents backfill\n"
        f"the last hours ({args.backfill}) quickly, then sample live; node pages fill as collection runs.\n"
        + ("" if args.no_load else "The older months of history load in the background (a few minutes; the boards say so).\n"),
        flush=True,
    )
    exit_code = 0
    while not stopping:
        for name, process in list(processes.items()):
            if name == "history" and process.poll() is not None:  # a one-shot loader: the demo goes on
                if process.returncode:
                    print(f"{name} exited with code {process.returncode}; the demo goes on without it.", flush=True)
                del processes[name]
                continue
            if process.poll() is not None:
                print(f"{name} exited with code {process.returncode}; stopping the demo.", flush=True)
                exit_code, stopping = 1, True
                break
        time.sleep(0.5)
    _stop_all(processes)
    print("Stopped web, worker and beat; stopping PostgreSQL and Redis.", flush=True)
    return exit_code


def app_database_url(*, embedded: bool) -> str:
    """The URL web, worker and beat use: the embedded server's as the application's role; a server of
    one's own: ``APP_DATABASE_URL`` if set, else ``DATABASE_URL`` as it is."""
    role = os.environ.get("CARDHOUR_DB_APP_ROLE", "cardhour_app")
    if embedded and role:
        return as_database_user(os.environ["DATABASE_URL"], role)
    return os.environ.get("APP_DATABASE_URL") or os.environ["DATABASE_URL"]


def as_database_user(url: str, user: str) -> str:
    """``url`` with its user replaced by ``user`` and no password (the embedded server trusts local users)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}@{host}"))


def fleet_arguments(*, agent_port: int, tokens, spools, backfill: str) -> list[str]:
    """``python -m agents`` arguments of the demo's simulated fleet (agents/fleet.py)."""
    return [
        "fleet", "--nodes", str(FLEET_NODES), "--gpus", "8", "--models", FLEET_MODELS, "--mig", FLEET_MIG,
        "--maintenance", FLEET_MAINTENANCE, "--base-port", str(agent_port), "--token-file", str(tokens),
        "--spool-dir", str(spools), f"--start={backfill}", "--speed", "120", "--log-level", "warning",
    ]


def _stop_all(processes: dict[str, subprocess.Popen], timeout_s: float = 15.0) -> None:
    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for_file(path, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the simulated fleet did not write {path} (exit code {process.poll()})")
        time.sleep(0.1)


def _port_taken(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def _wait_for_port(host: str, port: int, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None and not _port_taken(host, port):
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
