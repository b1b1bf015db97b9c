"""pytest plugin (``-p tests.services``): the test session's supervisor of the embedded services.

Runs before pytest-django reads the settings: with DATABASE_URL / REDIS_URL unset it starts the embedded
PostgreSQL and Redis under ``var/test`` (config/embedded.py); with them set (CI: the machine's own
servers) it uses those. Either way the same variables reach the settings and any worker subprocess.
``CARDHOUR_TEST_STATE=clock`` uses ``var/test-clock`` instead: the moved-clock run (``.ci/clock``) starts
its own servers under the moved clock rather than attach to ones a normal run started.
"""

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Playwright's sync API runs an event loop in the test thread beside live_server (DESIGN.md §7).
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from config.embedded import BASE_DIR, local_environment

    state = os.environ.get("CARDHOUR_TEST_STATE", "")
    os.environ.update(local_environment(f"test-{state}" if state else "test"))
    # WhiteNoise warns about a missing STATIC_ROOT; tests serve static files from the finders.
    (BASE_DIR / "var" / "staticfiles").mkdir(parents=True, exist_ok=True)


def pytest_report_header(config):
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"cardhour: PostgreSQL at {db['HOST'] or 'localhost'}:{db['PORT'] or 5432}, Redis at {settings.REDIS_URL}"
