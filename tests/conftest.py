"""The small shared cast: two teams (A and B), a lead and an engineer in each, admin and finance."""

import os
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from accounting.models import ApiToken, Membership, Project, Team
from accounting.roles import ADMIN_GROUP, FINANCE_GROUP, TeamRole
from cluster.models import Gpu, GpuModel, Node

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)  # the fixed time zero of tests
PASSWORD = "correct horse battery staple"


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
