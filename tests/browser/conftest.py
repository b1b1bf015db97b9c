"""Browser fixtures: Debian's Chromium driven through Playwright's sync API against ``live_server``.

Nothing is downloaded: Chromium must already be at /usr/bin/chromium (``make browser-deps``).
Every browser test runs at one fixed moment (``NOW``): the live server runs in this process, so
time-machine freezes its clock too, and the pages show the same days whatever the real date.
"""

from datetime import timedelta
from pathlib import Path

import pytest
import time_machine

from tests.conftest import PASSWORD, T0

CHROMIUM = Path("/usr/bin/chromium")
# The machine has no network: without these Chromium floods the log with refused connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 10_000
HERE = Path(__file__).resolve().parent
NOW = T0 + timedelta(hours=10)  # Monday 2 November 2026, 10:00 UTC: October is over, November is not
SCREENSHOTS = HERE.parents[1] / "var" / "screenshots"


def pytest_collection_modifyitems(config, items):
    """Every test under tests/browser is a browser test (``-m "not browser"`` leaves them out)."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(autouse=True)
def frozen_clock():
    """The server's clock (and the test's) stands at NOW; Chromium's own clock is not ours to move."""
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian's chromium is not installed at /usr/bin/chromium: run `make browser-deps` as root"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh page in its own browser context (no cookies shared between tests)."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


def log_in(page, live_server, username):
    """Fill in and submit the real login form, as a person would."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("main form button[type=submit]")


@pytest.fixture
def login():
    """``login(page, live_server, username)`` signs in through the login page with the test password."""
    return log_in


@pytest.fixture
def screenshot():
    """``screenshot(page, name)`` saves a full-page PNG as var/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name):
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
