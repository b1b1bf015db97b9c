"""The small shared cast: two teams (A and B), a lead and an engineer in each, admin and finance."""

import os
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from cluster.models import Gpu, GpuModel, Node
from teams.models import ApiToken, Membership, Project, Team
from teams.roles import ADMIN_GROUP, FINANCE_GROUP, TeamRole

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)  # the fixed time zero of tests
PASSWORD = "correct horse battery staple"
TESTS = Path(__file__).resolve().parent

# Modules whose tests touch days, months, quotas, close, digests, bookings or usage: marked ``clock``, so
# ``pytest -m clock`` is the subset that .ci/clock runs again with the whole process clock moved
# (libfaketime). A module named here that does not exist (yet) is simply not collected. Not named: the
# agent-subprocess tests (tests/agents, cluster/telemetry/test_collection_e2e.py), which hang under libfaketime for
# a reason outside our code (a timed thread wait never times out there: see .ci/clock), and touch none of
# the above.
CLOCK_MODULES = frozenset({
    "accounting/money/test_close.py",
    "accounting/money/test_close_interrupted.py",
    "accounting/usage/test_aggregation_interrupted.py",
    "demo/test_money.py",
    "accounting/money/test_exports.py",
    "accounting/money/test_finance_page.py",
    "accounting/money/test_api.py",
    "accounting/money/test_services.py",
    "accounting/notify/test_notify.py",
    "accounting/money/test_pricing.py",
    "accounting/quotas/test_rules.py",
    "accounting/quotas/test_selectors.py",
    "accounting/quotas/test_watch.py",
    "accounting/test_scoping.py",
    "accounting/money/test_statement_api.py",
    "accounting/money/test_statement_exports.py",
    "accounting/money/test_statements.py",
    "accounting/team_pages/test_team_page.py",
    "accounting/team_pages/test_team_list.py",
    "accounting/team_pages/test_quota_banner.py",
    "accounting/team_pages/test_charts.py",
    "accounting/usage/test_services.py",
    "accounting/usage/test_api.py",
    "accounting/usage/test_isolation.py",
    "accounting/usage/test_states.py",
    "accounting/usage/test_states_detail.py",
    "accounting/usage/test_board_tables.py",
    "accounting/usage/test_backfill_migration.py",
    "accounting/usage/test_pending.py",
    "accounting/usage/test_report.py",
    "accounting/usage/test_refinements_db.py",
    "cluster/telemetry/test_activity_pages.py",
    "boards/test_periods.py",
    "boards/test_profile.py",
    "boards/test_projection.py",
    "boards/test_weekly_report.py",
    "browser/test_board.py",
    "browser/test_periods.py",
    "browser/test_profile.py",
    "browser/test_bookings.py",
    "browser/test_finance_page.py",
    "browser/test_node_charts.py",
    "browser/test_team_page.py",
    "cluster/bookings/pages/test_calendar.py",
    "cluster/bookings/pages/test_calendar_maintenance.py",
    "cluster/bookings/pages/test_form_and_mine.py",
    "cluster/bookings/test_concurrency.py",
    "cluster/bookings/test_slots.py",
    "cluster/bookings/test_watch.py",
    "cluster/bookings/test_services.py",
    "cluster/bookings/test_api.py",
    "demo/test_demo.py",
    "demo/test_history.py",
    "demo/test_history_shapes.py",
    "demo/test_live_fleet.py",
    "cluster/jobs/test_import_jobs.py",
    "cluster/jobs/test_import_robustness.py",
    "cluster/jobs/test_import_sacct.py",
    "cluster/jobs/test_kpis.py",
    "cluster/jobs/test_admin_api.py",
    "cluster/jobs/test_api.py",
    "cluster/jobs/test_pages.py",
    "cluster/jobs/test_services.py",
    "cluster/inventory/test_node_page.py",
    "cluster/jobs/test_observed_usage.py",
    "accounting/usage/test_replay.py",
    "core/test_time_window.py",
    "core/test_timeutils.py",
    "config/test_access_matrix.py",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(item.path).resolve().relative_to(TESTS).as_posix() in CLOCK_MODULES:
            item.add_marker(pytest.mark.clock)


# No property test is timed: speed is measured in benchmarks (make bench), and Hypothesis's default 200 ms
# deadline per example failed on this shared 2-core machine when another run took the CPU.
hypothesis_settings.register_profile("cardhour", deadline=None)
hypothesis_settings.load_profile("cardhour")

@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """A test database per test process, so two suites on one server (a developer's and a helper's,
    or xdist workers) never drop each other's database. Worker subprocesses read the name from
    ``connection.settings_dict``."""
    from django.conf import settings as django_settings

    test = django_settings.DATABASES["default"].setdefault("TEST", {})
    # Django fills TEST with NAME None, so setdefault() would not do.
    test["NAME"] = test.get("NAME") or f"test_cardhour_{os.getpid()}"


@pytest.fixture(autouse=True)
def english_by_default():
    """A request through LocaleMiddleware leaves its language active in the thread: start each test in English."""
    from django.utils import translation

    translation.activate("en")
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2's million rounds cost ~0.3 s a user; tests need the check, not the cost."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def make_user(django_user_model):
    def make(username, *, group=None, team=None, role=None, **extra):
        user = django_user_model.objects.create_user(username=username, password=PASSWORD, **extra)
        if group:
            user.groups.add(Group.objects.get_or_create(name=group)[0])
        if team:
            Membership.objects.create(user=user, team=team, role=role)
        return user

    return make


@pytest.fixture
def team_a(db):
    team = Team.objects.create(name="Team Alpha", slug="alpha", cost_centre="CC-A1")
    Project.objects.create(team=team, name="Alpha pretraining", slug="alpha-pre")
    return team


@pytest.fixture
def team_b(db):
    team = Team.objects.create(name="Team Beta", slug="beta", cost_centre="CC-B2")
    Project.objects.create(team=team, name="Beta vision", slug="beta-vision")
    return team


@pytest.fixture
def admin_user(make_user):
    return make_user("alice-admin", group=ADMIN_GROUP)


@pytest.fixture
def finance_user(make_user):
    return make_user("fred-finance", group=FINANCE_GROUP)


@pytest.fixture
def lead_a(make_user, team_a):
    return make_user("lena-lead-a", team=team_a, role=TeamRole.LEAD)


@pytest.fixture
def engineer_a(make_user, team_a):
    return make_user("ed-eng-a", team=team_a, role=TeamRole.ENGINEER)


@pytest.fixture
def lead_b(make_user, team_b):
    return make_user("bo-lead-b", team=team_b, role=TeamRole.LEAD)


@pytest.fixture
def engineer_b(make_user, team_b):
    return make_user("bea-eng-b", team=team_b, role=TeamRole.ENGINEER)


@pytest.fixture
def api():
    """An API client; ``api.as_user(user)`` authenticates with a real hashed token."""

    class Client(APIClient):
        def as_user(self, user):
            _token, raw = ApiToken.issue(user=user, name="test")
            self.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
            return self

    return Client()


@pytest.fixture
def small_cluster(db):
    """Two pools, two models, three nodes with 2 GPUs each; one node in maintenance."""
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    nodes = [
        Node.objects.create(hostname="h200-a", pool="train", agent_url="http://127.0.0.1:9401"),
        Node.objects.create(hostname="h200-b", pool="train", status="unreachable"),
        Node.objects.create(hostname="l40s-a", pool="infer", status="maintenance"),
    ]
    for node, model in zip(nodes, [h200, h200, l40s], strict=True):
        for index in range(2):
            Gpu.objects.create(
                node=node, index=index, uuid=f"GPU-{node.hostname}-{index}", model=model, memory_mib=model.memory_mib
            )
    return {"h200": h200, "l40s": l40s, "nodes": nodes}


class PostCounter(BaseHTTPRequestHandler):
    """A webhook endpoint that answers 200 and counts the posts it got (after ``delay_s``: a slow receiver
    keeps the first poster inside its claim)."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.server.delay_s)
        with self.server.lock:
            self.server.posts += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    """A real HTTP receiver of webhook posts on a free loopback port: ``.url``, ``.posts``, ``.delay_s``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), PostCounter)
    server.posts, server.delay_s, server.lock = 0, 0.0, threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield server
    server.shutdown()
    server.server_close()
