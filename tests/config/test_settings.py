"""The settings module reads every deployment difference from the environment and fails early, naming
the variable and the rule, when a value is missing or malformed."""

import os
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet

from config.embedded import BASE_DIR

GOOD_ENV = {
    "DATABASE_URL": "postgres://cardhour:secret@db.example:5433/cardhour",
    "REDIS_URL": "redis://cache.example:6380/2",
    "SECRET_KEY": "x" * 50,
    "FIELD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
}


def load_settings(**overrides) -> subprocess.CompletedProcess:
    """Import config.settings in a fresh interpreter with exactly this environment; print a few values."""
    env = {k: v for k, v in os.environ.items() if k not in GOOD_ENV and not k.startswith(("DJANGO", "CARDHOUR"))}
    env.update(GOOD_ENV)
    env.update(overrides)
    env = {k: v for k, v in env.items() if v is not None}
    code = (
        "import config.settings as s;"
        "print(s.DATABASES['default']['HOST'], s.DATABASES['default']['PORT'], s.DATABASES['default']['NAME']);"
        "print(s.CELERY_BROKER_URL); print(s.DEBUG, s.TIME_ZONE, s.CARDHOUR_BUSINESS_TIME_ZONE);"
        "print(s.ALLOWED_HOSTS)"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True)


def test_it_reads_the_servers_from_the_environment():
    result = load_settings()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "db.example 5433 cardhour"
    assert lines[1] == "redis://cache.example:6380/2"
    assert lines[2] == "False UTC UTC"


def test_it_turns_a_unix_socket_redis_into_celerys_spelling():
    result = load_settings(REDIS_URL="unix:///srv/redis/redis.sock?db=0")
    assert result.stdout.splitlines()[1] == "redis+socket:///srv/redis/redis.sock?db=0"


def test_it_takes_the_business_zone_and_debug_and_hosts():
    result = load_settings(CARDHOUR_BUSINESS_TIME_ZONE="Asia/Shanghai", DEBUG="yes", ALLOWED_HOSTS="a.example, b.example")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2] == "True Asia/Shanghai Asia/Shanghai"
    assert result.stdout.splitlines()[3] == "['a.example', 'b.example']"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"DATABASE_URL": None}, "DATABASE_URL is not set"),
        ({"REDIS_URL": None}, "REDIS_URL is not set"),
        ({"SECRET_KEY": None}, "SECRET_KEY is not set"),
        ({"FIELD_ENCRYPTION_KEY": None}, "FIELD_ENCRYPTION_KEY is not set"),
        ({"DATABASE_URL": "sqlite:///db.sqlite3"}, "DATABASE_URL must be a PostgreSQL URL"),
        ({"REDIS_URL": "amqp://guest@localhost//"}, "REDIS_URL must be a redis://"),
        ({"DEBUG": "maybe"}, "DEBUG must be a boolean"),
        ({"CARDHOUR_BUSINESS_TIME_ZONE": "Mars/Olympus"}, "CARDHOUR_BUSINESS_TIME_ZONE must be an IANA time zone"),
        ({"FIELD_ENCRYPTION_KEY": "not-a-key"}, "FIELD_ENCRYPTION_KEY must be url-safe base64 of 32 bytes"),
        ({"CELERY_TASK_TIME_LIMIT_S": "ten"}, "CELERY_TASK_TIME_LIMIT_S must be an integer"),
        ({"CELERY_TASK_TIME_LIMIT_S": "0"}, "CELERY_TASK_TIME_LIMIT_S must be at least 1"),
    ],
)
def test_it_fails_early_naming_the_variable_and_the_rule(overrides, message):
    result = load_settings(**overrides)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_the_broker_visibility_timeout_outlasts_the_task_time_limit():
    from django.conf import settings

    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > settings.CELERY_TASK_TIME_LIMIT
    assert settings.CELERY_TASK_SOFT_TIME_LIMIT < settings.CELERY_TASK_TIME_LIMIT
