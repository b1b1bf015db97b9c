"""The API keeps its published contract under fuzzing (issue 17): Schemathesis takes ``/api/v1/schema/`` and
sends every operation generated requests, valid and invalid, through the WSGI app in-process (no server, no
port), as an admin, a team lead and an engineer, each with a real bearer token, against the test database
seeded with a small realistic cast (two teams and their projects, GPU models, nodes and GPUs, jobs,
bookings, quotas, rate cards, an energy tariff and October's statement). Every check Schemathesis has runs: no 5xx; every status,
content type, header and body as the schema documents it; invalid input refused with a 4xx, valid input not
(less the refusals by rules no schema can state, listed below with their reasons).

Bounded for a 2-core machine: as the admin, who passes every permission and so reaches every rule of the
input, Schemathesis's coverage phase (each parameter's and property's boundaries, valid and invalid) and
:data:`ADMIN_EXAMPLES` random requests per operation; as the lead and the engineer, :data:`MEMBER_EXAMPLES`
random requests per operation. Hypothesis has no deadline (the suite's profile).

One in three generated requests that name a row (``{id}``, ``{hostname}``, ``{slug}``) is pointed at a row
the cast holds, the caller's team's or the other team's, so lookups, changes and deletes of real rows are
exercised, not only 404s. Writes go to the throwaway test database and are rolled back after each
operation. The seed is fixed, so a run is repeatable; ``CARDHOUR_CONTRACT_SEED`` picks another.
"""

import json
import os
import zlib
from contextlib import contextmanager
from datetime import date, timedelta
from decimal import Decimal

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.test import RequestFactory, override_settings
from django.urls import resolve
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import positive_data_acceptance

from accounting.models import MoneyChange
from accounting.money.close import close_period
from accounting.money.services import energy_tariff_save, quota_save, rate_card_save
from cluster.bookings.services import booking_create
from cluster.jobs.services import JobInput, job_upsert
from cluster.models import CollectionState, Gpu, GpuModel, Node
from teams.models import ApiToken, Membership, Project, Team
from teams.roles import ADMIN_GROUP, FINANCE_GROUP, TeamRole
from tests.conftest import T0

NOW = T0 + timedelta(days=3, hours=8)  # Thursday 5 November 2026, 08:00 UTC: the API's clock in this module
ROLES = ("admin", "lead", "engineer")
ADMIN_EXAMPLES = 6  # random requests per operation as the admin, after the coverage phase's
MEMBER_EXAMPLES = 8  # random requests per operation as the lead and as the engineer

SCHEMA_PATH = "/api/v1/schema/"


def published_schema() -> dict:
    """The document ``/api/v1/schema/`` serves, rendered by its view at collection time: without the
    middleware, whose first step (``config.outage``) opens a database connection, which pytest allows only
    inside a test. :func:`test_the_fuzzed_schema_is_the_served_one` checks it is what the WSGI app serves."""
    view = resolve(SCHEMA_PATH).func
    response = view(RequestFactory().get(SCHEMA_PATH, {"format": "json"}))
    response.render()
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def contract(*, coverage: bool):
    schema = schemathesis.openapi.from_dict(published_schema(), config=schemathesis.Config.from_dict({
        "seed": int(os.environ.get("CARDHOUR_CONTRACT_SEED", "17")),
        "checks": {"enabled": True},  # every check Schemathesis has, as `--checks all`
        "generation": {"mode": "all"},  # valid and invalid requests
        "phases": {"coverage": {"enabled": coverage}},
    }))
    schema.app = get_wsgi_application()  # requests go through the whole middleware stack, in-process
    return schema


ADMIN_CONTRACT = contract(coverage=True)
MEMBER_CONTRACT = contract(coverage=False)


@contextmanager
def requests_keep_the_transaction():
    """The WSGI handler closes the database connection when a request ends, which would end the test's
    transaction: Django's test client disconnects that handler the same way while it sends a request."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture(scope="module")
def cast(django_db_setup, django_db_blocker):
    """Rows of every kind the API serves, in both teams, made once for the module through the services and
    kept in an outer transaction; each test runs in a savepoint inside it (pytest-django's ``db``), so its
    writes roll back and the next operation finds the cast as it was. The API's clock reads :data:`NOW`.
    Schemathesis's ignored_auth check resends requests with no token and a wrong one, all from one address:
    the failure limit is lifted, or that address would be answered 429 for everything that follows."""
    with (django_db_blocker.unblock(), transaction.atomic(), pytest.MonkeyPatch.context() as patch,
          override_settings(API_TOKEN_FAILURE_LIMIT=10**6), requests_keep_the_transaction()):
        patch.setattr(timezone, "now", lambda: NOW)
        yield make_cast()
        transaction.set_rollback(True)


def make_cast() -> dict:
    User = get_user_model()
    team_a = Team.objects.create(name="Team Alpha", slug="alpha", cost_centre="CC-A1")
    team_b = Team.objects.create(name="Team Beta", slug="beta", cost_centre="CC-B2")
    alpha_pre = Project.objects.create(team=team_a, name="Alpha pretraining", slug="alpha-pre")
    beta_vision = Project.objects.create(team=team_b, name="Beta vision", slug="beta-vision")
    users = {role: User.objects.create_user(f"contract-{role}") for role in ("admin", "finance", "lead", "engineer")}
    users["admin"].groups.add(Group.objects.get_or_create(name=ADMIN_GROUP)[0])
    users["finance"].groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])
    Membership.objects.create(user=users["lead"], team=team_a, role=TeamRole.LEAD)
    Membership.objects.create(user=users["engineer"], team=team_a, role=TeamRole.ENGINEER)
    lead_b = User.objects.create_user("contract-lead-b")
    Membership.objects.create(user=lead_b, team=team_b, role=TeamRole.LEAD)
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    for hostname, pool, model in (("h200-a", "train", h200), ("h200-b", "train", h200), ("l40s-a", "infer", l40s)):
        node = Node.objects.create(hostname=hostname, pool=pool)
        CollectionState.objects.create(node=node, data_complete_to=NOW)
        for index in range(2):
            Gpu.objects.create(node=node, index=index, uuid=f"GPU-{hostname}-{index}", model=model,
                               memory_mib=model.memory_mib)
    h200_a = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    jobs = [
        job_upsert(JobInput(source="slurm", external_id="1001", start_time=T0 + timedelta(hours=1), team=team_a,
                            project=alpha_pre, user="ed", gpu_count=Decimal(2), gpu_model=h200, gpus=h200_a,
                            state="completed", end_time=T0 + timedelta(hours=5), name="pretrain"))[0],
        job_upsert(JobInput(source="slurm", external_id="2002", start_time=T0 + timedelta(days=1), team=team_b,
                            project=beta_vision, user="bea", gpu_count=Decimal(1), gpu_model=l40s,
                            state="running", name="vision"))[0],
    ]
    bookings = [
        booking_create(user=users["lead"], team=team_a, start=NOW + timedelta(hours=2),
                       end=NOW + timedelta(hours=6), gpu_model=h200, count=1, project=alpha_pre, now=NOW),
        booking_create(user=lead_b, team=team_b, start=NOW + timedelta(days=1), end=NOW + timedelta(days=1, hours=4),
                       gpu_model=h200, count=1, now=NOW),
    ]
    finance = users["finance"]
    november, december = date(2026, 11, 1), date(2026, 12, 1)
    quotas = [
        quota_save(user=finance, team=team_a, gpu_model=h200, period_start=november, expires=december,
                   card_hours=Decimal(100)),
        quota_save(user=finance, team=team_b, gpu_model=None, period_start=november, expires=december,
                   card_hours=Decimal(50)),
    ]
    cards = [
        rate_card_save(user=finance, gpu_model=h200, valid_from=november, valid_until=None,
                       price_per_card_hour=Decimal("18.50")),
        rate_card_save(user=finance, gpu_model=l40s, valid_from=november, valid_until=None,
                       price_per_card_hour=Decimal(6)),
    ]
    tariff = energy_tariff_save(user=finance, valid_from=november, valid_until=None, price_per_kwh=Decimal("0.85"))
    october = close_period(period=date(2026, 10, 1), user=finance, now=NOW)
    tokens = {role: ApiToken.issue(user=users[role], name=f"contract {role}")[1] for role in ROLES}
    # Tokens the fuzzing may revoke: each user's second one (revoking the caller's own would end the run).
    spare = [ApiToken.issue(user=users[role], name=f"spare {role}")[0] for role in ROLES]
    keys = {
        "bookings": [b.pk for b in bookings],
        "energy-tariffs": [tariff.pk],
        "gpu-models": [h200.pk, l40s.pk],
        "gpus": list(Gpu.objects.order_by("pk").values_list("pk", flat=True)[:3]),
        "jobs": [j.pk for j in jobs],
        "memberships": list(Membership.objects.order_by("pk").values_list("pk", flat=True)),
        "money-changes": list(MoneyChange.objects.order_by("pk").values_list("pk", flat=True)[:3]),
        "nodes": ["h200-a", "l40s-a"],
        "projects": [alpha_pre.pk, beta_vision.pk],
        "quotas": [q.pk for q in quotas],
        "rate-cards": [c.pk for c in cards],
        "statements": [october.pk],
        "teams": [team_a.slug, team_b.slug],
        "tokens": [token.pk for token in spare],
    }
    return {"tokens": tokens, "keys": keys}


def existing_keys(case, cast) -> list:
    return cast["keys"].get(case.operation.path.removeprefix("/api/v1/").split("/")[0], [])


def negated(case, location: ParameterLocation) -> bool:
    component = case.meta.components.get(location) if case.meta else None
    return component is not None and component.mode.is_negative


def point_at_a_row(case, cast) -> None:
    """Point one generated request in three that names a row at a row the cast holds (chosen from the
    generated value, so a run stays repeatable). A path generated as invalid is left as it is."""
    keys = existing_keys(case, cast)
    if len(case.path_parameters or {}) != 1 or not keys or negated(case, ParameterLocation.PATH):
        return
    ((name, value),) = case.path_parameters.items()
    pick = zlib.crc32(repr(value).encode())
    if pick % 3 == 0:
        case.path_parameters[name] = keys[pick // 3 % len(keys)]


# Rules no OpenAPI schema states, by operation and field: a name that must be an existing row's (that the
# caller may see) or no other row's (unique), one time after another, a time in the supported window
# 2000–2100 (DESIGN.md §2; JSON Schema's date-time has no bounds), the configured currency, a state of the
# row (a booking that has ended). A request valid by the schema may break one and get a 400 naming the field.
# Schemathesis's positive_data_acceptance counts that as a valid request refused, so it is replaced by
# :func:`accepted_or_refused_by_a_stated_rule`: the same check, which also lets through exactly a 400 naming
# only these fields, or the NUL refusal below.
RULES_THE_SCHEMA_CANNOT_STATE: dict[str, set[str]] = {
    "GET /api/v1/availability/": {"model", "team", "start", "end"},
    "GET /api/v1/boards/daily/": {"team", "pool", "gpu_model", "node", "date"},  # date: up to today
    "GET /api/v1/bookings/": {"team", "start_after", "start_before"},
    "POST /api/v1/bookings/": {"team", "project", "booker", "start", "end", "gpu_model", "count", "gpus", "node"},
    "PATCH /api/v1/bookings/{id}/": {"id", "end"},
    "DELETE /api/v1/bookings/{id}/": {"id"},  # a booking that has ended
    "POST /api/v1/energy-tariffs/": {"valid_from", "valid_until", "currency"},  # the configured currency
    "PUT /api/v1/energy-tariffs/{id}/": {"valid_from", "valid_until", "currency"},
    "PATCH /api/v1/energy-tariffs/{id}/": {"valid_from", "valid_until", "currency"},
    "POST /api/v1/gpu-models/": {"name", "short_name"},  # unique
    "PUT /api/v1/gpu-models/{id}/": {"name", "short_name"},
    "PATCH /api/v1/gpu-models/{id}/": {"name", "short_name"},
    # uuid, (node, index): unique; share: less than a whole GPU only with a mig_parent
    "POST /api/v1/gpus/": {"node", "model", "mig_parent", "uuid", "index", "share"},
    "PUT /api/v1/gpus/{id}/": {"node", "model", "mig_parent", "uuid", "index", "share"},
    "PATCH /api/v1/gpus/{id}/": {"node", "model", "mig_parent", "uuid", "index", "share"},
    "GET /api/v1/jobs/": {"team", "project", "gpu_model", "started_after", "started_before"},
    "POST /api/v1/jobs/": {"team", "project", "gpu_model", "node", "gpu_indices", "submit_time", "start_time",
                           "end_time", "job_id", "data_ready_at"},
    # source, job_id, start_time: the run's key, which a PATCH may repeat but not change
    "PATCH /api/v1/jobs/{id}/": {"team", "project", "gpu_model", "node", "gpu_indices", "submit_time",
                                 "start_time", "end_time", "source", "job_id", "data_ready_at"},
    # hostname: unique; agent_url: Django's URL rules (host labels of at most 63 characters, a top-level
    # domain of letters) are narrower than the schema's format "uri" (RFC 3986).
    "POST /api/v1/nodes/": {"hostname", "agent_url"},
    "PUT /api/v1/nodes/{hostname}/": {"hostname", "agent_url"},
    "PATCH /api/v1/nodes/{hostname}/": {"hostname", "agent_url"},
    "POST /api/v1/projects/": {"team", "name", "slug"},  # unique in the team
    "PUT /api/v1/projects/{id}/": {"team", "name", "slug"},
    "PATCH /api/v1/projects/{id}/": {"team", "name", "slug"},
    "POST /api/v1/quotas/": {"team", "gpu_model", "period_start", "expires"},
    "PUT /api/v1/quotas/{id}/": {"team", "gpu_model", "period_start", "expires"},
    "PATCH /api/v1/quotas/{id}/": {"team", "gpu_model", "period_start", "expires"},
    "POST /api/v1/rate-cards/": {"gpu_model", "valid_from", "valid_until", "currency"},
    "PUT /api/v1/rate-cards/{id}/": {"gpu_model", "valid_from", "valid_until", "currency"},
    "PATCH /api/v1/rate-cards/{id}/": {"gpu_model", "valid_from", "valid_until", "currency"},
    "GET /api/v1/reports/usage/": {"team", "start", "end"},
    "POST /api/v1/teams/": {"name", "slug"},  # unique
    "PUT /api/v1/teams/{slug}/": {"name", "slug"},
    "PATCH /api/v1/teams/{slug}/": {"name", "slug"},
    "POST /api/v1/tokens/": {"expires_at"},  # in the future
}
# PostgreSQL's text cannot hold U+0000, so the API refuses it in any body string or key and in the address
# (docs/decisions.md, "NUL characters"); OpenAPI 3.0 cannot say so of the keys of an object.
NUL_REFUSALS = {
    "JSON parse error: text cannot hold a NUL character (\\u0000).",
    "The address cannot hold a NUL character (%00).",
}
# A booking's PATCH changes its end alone and names any other key it is sent as one that cannot change;
# OpenAPI 3.0's objects admit other keys unless a schema says otherwise, which drf-spectacular cannot.
ONLY_THESE_MAY_CHANGE = {"PATCH /api/v1/bookings/{id}/": {"end"}}
ACCEPTED = {*range(200, 400), 401, 403, 404, 409, 429}  # positive_data_acceptance's own list, less the 5xx


def accepted_or_refused_by_a_stated_rule(case, response) -> None:
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code in ACCEPTED:
        return
    body = response.json() if response.status_code == 400 else {}
    if body.get("detail") in NUL_REFUSALS:
        return
    named = set(body) - {"detail"}
    allowed = RULES_THE_SCHEMA_CANNOT_STATE.get(case.operation.label, set())
    if case.operation.label in ONLY_THESE_MAY_CHANGE:  # any other key is refused by its name
        allowed = allowed | (named - ONLY_THESE_MAY_CHANGE[case.operation.label])
    assert named and named <= allowed, (
        f"{case.operation.label}: a request valid by the schema got {response.status_code} "
        f"{response.text[:300]} (only a 400 naming {sorted(allowed)} may refuse one)")


def send_and_check(case, cast, role: str) -> None:
    point_at_a_row(case, cast)
    # A request generated with a bad Authorization header is sent with it, so that its 401 is judged.
    bad_token = negated(case, ParameterLocation.HEADER) and "Authorization" in (case.headers or {})
    headers = {} if bad_token else {"Authorization": f"Bearer {cast['tokens'][role]}"}
    response = case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])
    accepted_or_refused_by_a_stated_rule(case, response)


@pytest.mark.django_db
@ADMIN_CONTRACT.parametrize()
@settings(max_examples=ADMIN_EXAMPLES, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_its_contract_for_an_admin(case, cast):
    send_and_check(case, cast, "admin")


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["lead", "engineer"])
@MEMBER_CONTRACT.parametrize()
@settings(max_examples=MEMBER_EXAMPLES, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_its_contract_for_a_team_member(case, role, cast):
    send_and_check(case, cast, role)

@pytest.mark.django_db
def test_the_fuzzed_schema_is_the_served_one(client):
    response = client.get(SCHEMA_PATH, {"format": "json"})
    assert response.status_code == 200
    assert json.loads(response.content) == published_schema()
