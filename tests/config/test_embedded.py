"""The embedded servers are real PostgreSQL and Redis, started by the supervisor (not by settings)."""

import os
import shutil
import subprocess
import sys

import psycopg
import redis

from config import embedded
from config.embedded import BASE_DIR


def test_it_starts_a_real_postgresql_and_creates_the_database():
    # Under var/, not /tmp/pytest-of-root: that is mode 0700 and the server runs as its own user.
    pgdata = BASE_DIR / "var" / "test" / f"pgdata-probe-{os.getpid()}"
    try:
        url = embedded.start_postgres(pgdata)
        from config.settings import database_from_url

        config = database_from_url(url)
        with psycopg.connect(host=config["HOST"], user=config["USER"], dbname=config["NAME"]) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()[0]
        assert int(version) >= 150000
        assert config["NAME"] == "cardhour"
    finally:
        embedded.stop_postgres(pgdata)
    assert not (pgdata / "postmaster.pid").exists()
    shutil.rmtree(pgdata, ignore_errors=True)


def test_it_starts_a_real_redis_on_a_socket_under_the_given_dir_and_reuses_it(tmp_path):
    url = embedded.start_redis(tmp_path / "redis")
    assert url == f"unix://{tmp_path}/redis/redis.sock?db=0"
    client = redis.Redis.from_url(url)
    client.set("cardhour:probe", "1")
    assert embedded.start_redis(tmp_path / "redis") == url  # a second call attaches, not restarts
    assert client.get("cardhour:probe") == b"1"
    embedded._redis_shutdown(tmp_path / "redis" / "redis.sock")
    assert not embedded._redis_answers(tmp_path / "redis" / "redis.sock")


def test_it_keeps_the_secrets_so_a_restart_still_decrypts(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "VAR_DIR", tmp_path)
    environ = {"DATABASE_URL": "postgres://x@h/db", "REDIS_URL": "redis://h:1/0"}
    first = embedded.local_environment("one", environ=environ)
    second = embedded.local_environment("one", environ=environ)
    assert set(first) == {"SECRET_KEY", "FIELD_ENCRYPTION_KEY"}  # servers given: nothing started
    assert first == second
    assert oct((tmp_path / "one" / "field_encryption_key").stat().st_mode & 0o777) == "0o600"


def test_importing_the_settings_starts_nothing(tmp_path):
    """settings.py never starts a server: with no DATABASE_URL it refuses, and no postgres appears."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings"], cwd=BASE_DIR, env=env, capture_output=True, text=True
    )
    assert "DATABASE_URL is not set" in result.stderr


def test_manage_py_runs_against_the_embedded_servers_when_no_url_is_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    code = (
        "import sys; sys.argv=['manage.py','shell','-c',"
        "'from django.db import connection; connection.ensure_connection(); print(connection.settings_dict[\"HOST\"])'];"
        "import runpy; runpy.run_path('manage.py', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith(str(BASE_DIR / "var" / "local"))
