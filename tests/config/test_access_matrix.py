"""The access matrix (issue 17, DESIGN.md §2): every route of the URL resolver (pages, API with its format
suffixes, exports) × role (anonymous, engineer, lead, finance, admin) × an object of the caller's own team
and of another team, against a table of what each must answer. Another team's object answers exactly as
a missing one (status and body). Writes: the roles without the right are refused and nothing in the
database changed; the roles with it are not refused. A route that the table does not name, or a table row
with no route, fails. The Django admin site is one rule: staff only.

Long because the table is the point: one row a route, read side by side with DESIGN.md §2."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
import time_machine
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.messages import get_messages
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from openpyxl import load_workbook
from rest_framework.test import APIClient

from accounting.models import MoneyChange
from accounting.money.close import close_period
from accounting.money.services import energy_tariff_save, quota_save, rate_card_save
from cluster.bookings.services import booking_create
from cluster.jobs.services import JobInput, job_upsert
from cluster.models import CollectionState, Gpu, GpuModel, Job, Node
from teams.models import ApiToken, Membership, Project, Team
from teams.roles import ADMIN_GROUP, FINANCE_GROUP, TeamRole

NOW = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)  # November is over (and closed); the bookings lie ahead
OCTOBER, NOVEMBER = date(2026, 10, 1), date(2026, 11, 1)
ROLES = ("anonymous", "engineer", "lead", "finance", "admin")
LOGIN = "login"  # 302 to the sign-in page, ?next= the asked page
REFUSED_302 = "refused"  # 302 back with an error message (a page form's refusal of a row the caller sees)
NOT_ALLOWED = (401, 403, 404, 405, LOGIN, REFUSED_302)  # answers after which nothing may have changed
HIDDEN = (401, 403, 404, 405, LOGIN)  # answers that do not show whether the row exists


@dataclass(frozen=True)
class Write:
    """A write: the expected status per role (layout of ``Route.get``) for ``body``."""

    expect: tuple
    body: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """A route's expected answers. ``get`` holds one entry per role of ROLES: a status, LOGIN, or for an
    object route (``obj`` names the kind) a pair (own team's object, another team's) where they differ.
    ``queries`` are the query strings tried (required parameters, export formats)."""

    get: tuple
    obj: str | None = None
    queries: tuple[str, ...] = ("",)
    writes: dict[str, Write] = field(default_factory=dict)


SIGNED_IN = (LOGIN, 200, 200, 200, 200)
API_READ = (401, 200, 200, 200, 200)
ADMIN_WRITES = (401, 403, 403, 403)  # anonymous, engineer, lead, finance: the inventory is admin's
TEAM_SCOPED = ((200, 404), (200, 404), 200, 200)  # engineer, lead, finance, admin on a team's object
PRICES = (401, 403, 200, 200, 200)  # leads read prices and the policy; engineers do not
FINANCE_PAGE = (LOGIN, 403, 403, 200, 200)
WEEK, MONTH_Q = "?week=2026-11-23", "?month=2026-11"
USAGE_WINDOW = "?start=2026-11-01T00:00:00Z&end=2026-12-01T00:00:00Z"
LATER = "2026-12-01T07:00"  # a later end for the seeded bookings (04:00–06:00 UTC)
# A backtest of the lead's own team (alpha) over November, one rule set (issue 19)
BACKTEST_Q = ("?team=alpha&gpu_model=H200&start=2026-11-01&end=2026-11-30"
              "&r1-up=80&r1-down=20&r1-group=1&r1-min=0&r1-max=2&r1-cooldown=0")
NEW_BOOKING = {"gpu_model": "H200", "count": 1, "start": "2026-12-01T08:00:00Z", "end": "2026-12-01T09:00:00Z"}

TABLE: dict[str, Route] = {
    # ---- signing in, language ------------------------------------------------------------------------------
    "login": Route(get=(200, 302, 302, 302, 302), writes={  # a signed-in person is sent on
        "POST": Write((200, 302, 302, 302, 302)), "PUT": Write((200, 302, 302, 302, 302))}),
    "logout": Route(get=(405,) * 5, writes={"POST": Write((302,) * 5)}),
    "set_language": Route(get=(302,) * 5, writes={"POST": Write((302,) * 5, {"language": "en"})}),
    # ---- boards: cluster-wide figures for every role (costs only in what the selectors give) ---------------
    "boards:daily": Route(get=SIGNED_IN),
    "boards:daily-live": Route(get=SIGNED_IN),
    "boards:idle-allocations": Route(get=SIGNED_IN),
    "boards:profile": Route(get=SIGNED_IN, queries=(
        "", MONTH_Q, *(f"{MONTH_Q}&format=csv&table={t}" for t in ("models", "teams", "need")))),
    "boards:week": Route(get=SIGNED_IN, queries=("", WEEK, f"{WEEK}&format=csv&table=teams",
                                                  f"{WEEK}&format=csv&table=models")),
    "boards:month": Route(get=SIGNED_IN, queries=("", MONTH_Q, f"{MONTH_Q}&format=csv&table=teams",
                                                   f"{MONTH_Q}&format=csv&table=models")),
    # the threshold backtest: admins, finance and leads (their own teams); engineers 403 (issue 19)
    "boards:backtest": Route(get=(LOGIN, 403, 200, 200, 200), queries=("", BACKTEST_Q)),
    "boards:backtest-csv": Route(get=(LOGIN, 403, 200, 200, 200), queries=("", BACKTEST_Q)),
    # ---- a person's own tokens (pages): another person's token is a 404, for admins too --------------------
    "teams:token-list": Route(get=SIGNED_IN, writes={"POST": Write((LOGIN, 200, 200, 200, 200), {"name": "cli"})}),
    "teams:token-revoke": Route(obj="token", get=(LOGIN, 405, 405, 405, 405), writes={
        "POST": Write((LOGIN, (302, 404), (302, 404), (302, 404), (302, 404)))}),
    # ---- inventory: every role reads --------------------------------------------------------------------
    "cluster:inventory": Route(get=SIGNED_IN),
    "cluster:node-detail": Route(obj="node", get=SIGNED_IN),
    # ---- jobs: a team's runs for its people, all for admin and finance -------------------------------------
    "cluster:job-list": Route(get=SIGNED_IN),
    "cluster:job-detail": Route(obj="job", get=(LOGIN, *TEAM_SCOPED)),
    # ---- bookings: occupancy is public; a booking is its team's (finance sees, never changes) --------------
    "cluster:booking-calendar": Route(get=SIGNED_IN),
    "cluster:booking-mine": Route(get=SIGNED_IN),
    "cluster:booking-new": Route(get=SIGNED_IN, writes={"POST": Write(
        (LOGIN, 302, 302, 400, 302),  # finance belongs to no team: the form offers none (400 on team)
        {"team": "alpha", "mode": "model", "gpu_model": "H200", "count": 1, "start": "2026-12-01T08:00", "hours": "1"},
    )}),
    "cluster:booking-cancel": Route(obj="booking", get=(405,) * 5, writes={
        "POST": Write((LOGIN, (302, 404), (302, 404), (REFUSED_302, REFUSED_302, 404), 302))}),
    "cluster:booking-extend": Route(obj="booking", get=(405,) * 5, writes={
        "POST": Write((LOGIN, (302, 404), (302, 404), (REFUSED_302, REFUSED_302, 404), 302), {"end": LATER})}),
    # ---- team pages --------------------------------------------------------------------------------------
    "accounting:team-list": Route(get=SIGNED_IN),
    "accounting:team-detail": Route(obj="team", get=(LOGIN, *TEAM_SCOPED)),
    "accounting:team-plan": Route(obj="team", get=(LOGIN, *TEAM_SCOPED), queries=("", "?period=2026-11")),
    "accounting:notifications": Route(get=SIGNED_IN, writes={"POST": Write((LOGIN, 302, 302, 302, 302))}),
    # ---- finance: admin and finance only; the downloads are exports ----------------------------------------
    "accounting:finance": Route(get=FINANCE_PAGE, queries=("", "?period=2026-11"), writes={
        "POST": Write((LOGIN, 403, 403, 400, 400))}),
    "accounting:finance-close": Route(get=(LOGIN, 403, 403, 405, 405), writes={
        "POST": Write((LOGIN, 403, 403, 302, 302), {"period": "2026-11"})}),
    "accounting:finance-reopen": Route(get=(LOGIN, 403, 403, 405, 405), writes={
        "POST": Write((LOGIN, 403, 403, 302, 302), {"period": "2026-10", "reason": "late samples"})}),
    "accounting:finance-download-statement": Route(get=FINANCE_PAGE, queries=(
        "", "?format=xlsx", "?period=2026-11&format=csv", "?period=2026-10&format=xlsx")),
    "accounting:finance-download-usage": Route(get=FINANCE_PAGE, queries=(
        "", "?format=xlsx", "?period=2026-11&format=csv")),
    # ---- API ------------------------------------------------------------------------------------------------
    "api-schema": Route(get=(200,) * 5),  # the schema describes the API; it holds no data
    "api-root": Route(get=API_READ),
    "gpumodel-list": Route(get=API_READ, writes={
        "POST": Write((*ADMIN_WRITES, 201), {"name": "NVIDIA B200", "short_name": "B200", "memory_mib": 183359})}),
    "gpumodel-detail": Route(obj="gpumodel", get=API_READ, writes={
        "PUT": Write((*ADMIN_WRITES, 400)),
        "PATCH": Write((*ADMIN_WRITES, 200), {"memory_mib": 143000}),
        "DELETE": Write((*ADMIN_WRITES, 409)),  # its GPUs refer to it
    }),
    "node-list": Route(get=API_READ, writes={"POST": Write((*ADMIN_WRITES, 201), {"hostname": "n9", "pool": "train"})}),
    "node-detail": Route(obj="node", get=API_READ, writes={
        "PUT": Write((*ADMIN_WRITES, 400)),
        "PATCH": Write((*ADMIN_WRITES, 200), {"pool": "infer"}),
        "DELETE": Write((*ADMIN_WRITES, 409)),
    }),
    "node-rotate-token": Route(obj="node", get=(401, 405, 405, 405, 405), writes={
        "POST": Write((*ADMIN_WRITES, 200))}),
    "gpu-list": Route(get=API_READ, writes={"POST": Write((*ADMIN_WRITES, 400))}),
    "gpu-detail": Route(obj="gpu", get=API_READ, writes={
        "PUT": Write((*ADMIN_WRITES, 400)),
        "PATCH": Write((*ADMIN_WRITES, 200), {"status": "maintenance"}),
        "DELETE": Write((*ADMIN_WRITES, 409)),  # its job's allocation refers to it
    }),
    "job-list": Route(get=API_READ, writes={"POST": Write((401, 403, 400, 403, 400))}),
    "job-detail": Route(obj="job", get=(401, *TEAM_SCOPED), writes={
        "PATCH": Write((401, 403, (200, 404), 403, 200), {"state": "completed"}),
        "DELETE": Write((401, 403, (204, 404), 403, 204)),
    }),
    "booking-list": Route(get=API_READ, writes={
        "POST": Write((401, 201, 201, 403, 201), {"team": "alpha", **NEW_BOOKING})}),
    "booking-detail": Route(obj="booking", get=(401, *TEAM_SCOPED), writes={
        # finance sees every booking and changes none: 403 on a row, 404 on no row
        "PATCH": Write((401, (200, 404), (200, 404), (403, 403, 404), 200), {"end": "2026-12-01T07:00:00Z"}),
        "DELETE": Write((401, (200, 404), (200, 404), (403, 403, 404), 200)),
    }),
    "team-list": Route(get=API_READ, writes={"POST": Write((*ADMIN_WRITES, 400))}),
    "team-detail": Route(obj="team", get=(401, *TEAM_SCOPED), writes={
        "PUT": Write((*ADMIN_WRITES, 400)),
        "PATCH": Write((*ADMIN_WRITES, 200), {"cost_centre": "CC-X9"}),
        "DELETE": Write((*ADMIN_WRITES, 409)),  # its projects refer to it
    }),
    "team-plan": Route(obj="team", get=(401, *TEAM_SCOPED), queries=("", "?period=2026-11")),
    "project-list": Route(get=API_READ, writes={"POST": Write((401, 403, 400, 403, 400))}),
    "project-detail": Route(obj="project", get=(401, *TEAM_SCOPED), writes={
        "PUT": Write((401, 403, (400, 404), 403, 400)),
        "PATCH": Write((401, 403, (200, 404), 403, 200), {"active": False}),
        "DELETE": Write((401, 403, (409, 404), 403, 409)),  # its team's job refers to it
    }),
    "membership-list": Route(get=API_READ),
    "membership-detail": Route(obj="membership", get=(401, *TEAM_SCOPED)),
    # tokens are a person's: "own" is the caller's, "other" another person's (admins see every token)
    "apitoken-list": Route(get=API_READ, writes={"POST": Write((401, 201, 201, 201, 201), {"name": "cli"})}),
    "apitoken-detail": Route(obj="token", get=(401, (200, 404), (200, 404), (200, 404), 200), writes={
        "DELETE": Write((401, (204, 404), (204, 404), (204, 404), 204))}),
    "ratecard-list": Route(get=PRICES, writes={"POST": Write((401, 403, 403, 400, 400))}),
    "ratecard-detail": Route(obj="ratecard", get=PRICES, writes={
        "PUT": Write((401, 403, 403, 400, 400)),
        "PATCH": Write((401, 403, 403, 200, 200), {"price_per_card_hour": "21.00"}),
        "DELETE": Write((401, 403, 403, 204, 204)),
    }),
    "energytariff-list": Route(get=PRICES, writes={"POST": Write((401, 403, 403, 400, 400))}),
    "energytariff-detail": Route(obj="energytariff", get=PRICES, writes={
        "PUT": Write((401, 403, 403, 400, 400)),
        "PATCH": Write((401, 403, 403, 200, 200), {"price_per_kwh": "1.10"}),
        "DELETE": Write((401, 403, 403, 204, 204)),
    }),
    "quota-list": Route(get=API_READ, writes={"POST": Write((401, 403, 403, 400, 400))}),
    "quota-detail": Route(obj="quota", get=(401, *TEAM_SCOPED), writes={
        "PUT": Write((401, 403, 403, 400, 400)),
        "PATCH": Write((401, 403, 403, 200, 200), {"card_hours": "20.000"}),
        "DELETE": Write((401, 403, 403, 204, 204)),
    }),
    "moneychange-list": Route(get=(401, 403, 403, 200, 200)),
    "moneychange-detail": Route(obj="moneychange", get=(401, 403, 403, 200, 200)),
    "guarantee-list": Route(get=API_READ),
    "availability": Route(get=API_READ, queries=(
        "?model=H200&count=1&start=2026-12-01T08:00:00Z&end=2026-12-01T09:00:00Z",)),
    "usage-report": Route(get=API_READ, queries=(
        USAGE_WINDOW, f"{USAGE_WINDOW}&by=project&format=csv", f"{USAGE_WINDOW}&by=gpu&format=xlsx")),
    "board-daily": Route(get=API_READ, queries=("", "?date=2026-11-20")),
    "charge-policy": Route(get=PRICES, writes={
        "PUT": Write((401, 403, 403, 400, 400)),
        "PATCH": Write((401, 403, 403, 200, 200), {"idle_charge_factor": "0.5"}),
    }),
    # statements are costs: engineers 403; a lead sees those with a line of their team (another's: 404)
    "statement-list": Route(get=(401, 403, 200, 200, 200)),
    "statement-detail": Route(obj="statement", get=(401, 403, (200, 404), 200, 200),
                              queries=("", "?format=csv", "?format=xlsx")),
    "statement-priced-usage": Route(get=(401, 403, 200, 200, 200), queries=(
        "?period=2026-11", "?period=2026-11&format=csv", "?period=2026-12&format=xlsx")),
    "statement-close": Route(get=(401, 403, 403, 405, 405), writes={
        "POST": Write((401, 403, 403, 200, 200), {"period": "2026-11"})}),  # already closed: 200, unchanged
    "statement-reopen": Route(get=(401, 403, 403, 405, 405), writes={
        "POST": Write((401, 403, 403, 200, 200), {"period": "2026-10", "reason": "late samples"})}),
}


# ---- the resolver -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One pattern of the resolver: its name (namespaced), text, path parameters and HTTP methods it routes."""

    name: str
    pattern: str
    params: tuple[str, ...]
    methods: frozenset[str] | None  # None: a function view (any method reaches it)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.pattern}]"


def _methods(callback) -> frozenset[str] | None:
    actions = getattr(callback, "actions", None)
    if actions:  # a DRF viewset route: its method → action map
        return frozenset(method.upper() for method in actions)
    view_class = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if view_class is None:
        return None
    return frozenset(m.upper() for m in view_class.http_method_names if hasattr(view_class, m) and m != "options")


def _walk(resolver: URLResolver, prefix: str = "", namespace: str = ""):
    for item in resolver.url_patterns:
        if isinstance(item, URLResolver):
            inner = f"{namespace}:{item.namespace}" if namespace and item.namespace else item.namespace or namespace
            yield from _walk(item, prefix + str(item.pattern), inner)
        elif isinstance(item, URLPattern):
            name = f"{namespace}:{item.name}" if namespace and item.name else item.name or f"<unnamed {prefix}{item.pattern}>"
            pattern = prefix + str(item.pattern)
            yield Entry(name, pattern, tuple(item.pattern.regex.groupindex), _methods(item.callback))


ENTRIES = list(_walk(get_resolver()))
ADMIN_ENTRIES = [e for e in ENTRIES if e.pattern.startswith("admin/")]
APP_ENTRIES = [e for e in ENTRIES if not e.pattern.startswith("admin/")]


def test_every_route_is_in_the_table_and_every_row_is_a_route():
    routed = {e.name for e in APP_ENTRIES}
    missing = sorted(f"{e.name} ({e.pattern})" for e in APP_ENTRIES if e.name not in TABLE)
    assert not missing, f"routes with no row in the access matrix (tests/config/test_access_matrix.py): {missing}"
    assert not sorted(set(TABLE) - routed), f"rows of the access matrix with no route: {sorted(set(TABLE) - routed)}"
    assert len(ADMIN_ENTRIES) > 50  # the admin site is there, and covered by its one rule below


def test_every_write_method_a_route_takes_is_in_the_table():
    """A class-based route (API) that takes a method beyond GET must have that write in the table."""
    for entry in APP_ENTRIES:
        if entry.methods is None:
            continue
        writes = entry.methods - {"GET", "HEAD", "OPTIONS"}
        assert writes <= set(TABLE[entry.name].writes), f"{entry.id} takes {sorted(writes)}; the table has " \
                                                        f"{sorted(TABLE[entry.name].writes)}"
    for name, route in TABLE.items():
        for entry in (e for e in APP_ENTRIES if e.name == name and e.methods is not None):
            extra = set(route.writes) - entry.methods
            assert not extra, f"the table names {sorted(extra)} for {entry.id}, which does not route them"


# ---- the seed: two teams and their objects, once for the module -----------------------------------------

def _user(username, *, group=None, team=None, role=None, **extra):
    user = get_user_model().objects.create_user(username=username, password=None, **extra)
    if group:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    if team:
        Membership.objects.create(user=user, team=team, role=role)
    return user


def _seed() -> dict:
    alpha = Team.objects.create(name="Team Alpha", slug="alpha", cost_centre="CC-A1")
    beta = Team.objects.create(name="Team Beta", slug="beta", cost_centre="CC-B2")
    alpha_pre = Project.objects.create(team=alpha, name="Alpha pretraining", slug="alpha-pre")
    beta_vision = Project.objects.create(team=beta, name="Beta vision", slug="beta-vision")
    users = {
        "engineer": _user("ed-eng-a", team=alpha, role=TeamRole.ENGINEER),
        "lead": _user("lena-lead-a", team=alpha, role=TeamRole.LEAD),
        "finance": _user("fred-finance", group=FINANCE_GROUP),
        "admin": _user("alice-admin", group=ADMIN_GROUP),
    }
    engineer_b = _user("bea-eng-b", team=beta, role=TeamRole.ENGINEER)
    lead_b = _user("bo-lead-b", team=beta, role=TeamRole.LEAD)
    staff = _user("stan-staff", is_staff=True, is_superuser=True)
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    node = Node.objects.create(hostname="n1", pool="train")
    g0, g1 = (Gpu.objects.create(node=node, index=i, uuid=f"GPU-n1-{i}", model=h200, memory_mib=143771) for i in (0, 1))
    CollectionState.objects.create(node=node, data_complete_to=NOW)
    admin = users["admin"]
    # team A ran in November, team B in October: each month's statement has one team's lines
    job_a, _ = job_upsert(JobInput(source="slurm", external_id="a-1", team=alpha, project=alpha_pre, state="completed",
                                   start_time=datetime(2026, 11, 10, 8, tzinfo=UTC),
                                   end_time=datetime(2026, 11, 10, 10, tzinfo=UTC), gpus=[g0]))
    job_b, _ = job_upsert(JobInput(source="slurm", external_id="b-1", team=beta, project=beta_vision, state="completed",
                                   start_time=datetime(2026, 10, 20, 8, tzinfo=UTC),
                                   end_time=datetime(2026, 10, 20, 10, tzinfo=UTC), gpus=[g1]))
    rate_card = rate_card_save(user=admin, gpu_model=h200, valid_from=OCTOBER, valid_until=None,
                               price_per_card_hour=Decimal("20"))
    tariff = energy_tariff_save(user=admin, valid_from=OCTOBER, valid_until=None, price_per_kwh=Decimal("1.2"))
    quota_a = quota_save(user=admin, team=alpha, gpu_model=None, period_start=NOVEMBER, expires=date(2027, 1, 1),
                         card_hours=Decimal(10))
    quota_b = quota_save(user=admin, team=beta, gpu_model=None, period_start=NOVEMBER, expires=date(2027, 1, 1),
                         card_hours=Decimal(10))
    statement_b = close_period(period=OCTOBER, user=users["finance"], now=NOW)
    statement_a = close_period(period=NOVEMBER, user=users["finance"], now=NOW)
    start, end = NOW + timedelta(hours=2), NOW + timedelta(hours=4)
    booking_a = booking_create(user=users["lead"], team=alpha, booker=users["engineer"], gpus=[g0], start=start,
                               end=end, now=NOW)
    booking_b = booking_create(user=lead_b, team=beta, booker=engineer_b, gpus=[g1], start=start, end=end, now=NOW)
    tokens = {role: ApiToken.issue(user=user, name="matrix") for role, user in users.items()}
    other_token, _ = ApiToken.issue(user=lead_b, name="theirs")
    objects = {  # kind: (team A's, team B's) for team-owned rows; (the one,) for cluster-wide ones
        "team": (alpha, beta),
        "project": (alpha_pre, beta_vision),
        "membership": (Membership.objects.get(user=users["engineer"]), Membership.objects.get(user=engineer_b)),
        "job": (job_a, job_b),
        "booking": (booking_a, booking_b),
        "quota": (quota_a, quota_b),
        "statement": (statement_a, statement_b),
        "node": (node,),
        "gpu": (g0,),
        "gpumodel": (h200,),
        "ratecard": (rate_card,),
        "energytariff": (tariff,),
        "moneychange": (MoneyChange.objects.order_by("pk").first(),),
    }
    return {"users": users, "staff": staff, "tokens": tokens, "other_token": other_token, "objects": objects}


@pytest.fixture(scope="module")
def seed(django_db_setup, django_db_blocker):
    """The rows every test reads, made once and rolled back at the end; each test runs in a savepoint
    inside (the ``db`` fixture), so one test's writes never reach the next. The clock stands at NOW."""
    with time_machine.travel(NOW, tick=False), django_db_blocker.unblock(), transaction.atomic():
        yield _seed()
        transaction.set_rollback(True)


@pytest.fixture
def world(seed, db):
    with time_machine.travel(NOW, tick=False):
        yield seed


# ---- requests ---------------------------------------------------------------------------------------------

def client_for(world, role: str, *, api: bool):
    if role == "anonymous":
        return APIClient() if api else Client()
    if api:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['tokens'][role][1]}")
        return client
    client = Client()
    client.force_login(world["users"][role])
    return client


MISSING = {"slug": "no-such-team", "hostname": "no-such-node", "pk": 987654321}


def object_kwargs(entry: Entry, obj) -> dict:
    """The path parameters naming ``obj`` (None: a missing one)."""
    if entry.name.startswith("<unnamed"):  # the old change URL, redirecting: a path() with converters
        return "/" + re.sub(r"<[^>]+>", "1", entry.pattern)
    kwargs = {}
    for param in entry.params:
        if param == "format":
            kwargs["format"] = "json"
        elif obj is None:
            kwargs[param] = MISSING[param]
        else:
            kwargs[param] = getattr(obj, param)
    return kwargs


def targets(world, route: Route, role: str):
    """(label, object or None, expected index): the own team's object, the other team's and a missing one
    for a team-owned kind; the one object and a missing one for a cluster-wide kind; nothing to fill else."""
    if route.obj is None:
        return [("none", None, None)]
    if route.obj == "token":
        mine = world["tokens"].get(role, world["tokens"]["engineer"])[0]
        return [("own", mine, 0), ("other", world["other_token"], 1), ("missing", None, 1)]
    found = world["objects"][route.obj]
    if len(found) == 2:
        return [("own", found[0], 0), ("other", found[1], 1), ("missing", None, 1)]
    return [("own", found[0], 0), ("missing", None, 1)]


def expected(value, index, label):
    """The expected answer for one target. ``value`` is a status, a pair (own, other) or a triple (own, other,
    missing). By default a missing row answers as another team's row where that one is hidden or refused before
    the lookup (401, 403, 404, 405, sign-in), and 404 where the other row is shown or acted on."""
    if isinstance(value, tuple) and label == "missing" and len(value) == 3:
        return value[2]
    status = value[index] if isinstance(value, tuple) else value
    if label == "missing" and status not in HIDDEN:
        return 404
    return status


def check_status(response, want, *, what: str):
    if want == LOGIN:
        assert response.status_code == 302, what
        assert response["Location"].startswith(reverse("login") + "?next="), what
    elif want == REFUSED_302:
        assert response.status_code == 302, what
        assert [m.level_tag for m in get_messages(response.wsgi_request)] == ["error"], what
    else:
        assert response.status_code == want, f"{what}: {response.status_code} {response.content[:300]!r}"


def same_refusal(answers: dict) -> bool:
    """Another team's row and a missing one were both refused with one status (403 or 404)."""
    if "other" not in answers:
        return False
    other, missing = answers["other"].status_code, answers["missing"].status_code
    return other == missing and other in (403, 404)


def normalized(response) -> bytes:
    """A body with what differs between two requests by design cut out (the asked path, CSRF tokens)."""
    body = response.content if not getattr(response, "streaming", False) else b"".join(response.streaming_content)
    body = re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", body)
    return re.sub(rb"(/api/v1/[a-z-]+/|/[a-z-]+/)[^\"'\s<>]*", rb"\1<path>", body)


def _entry_params():
    for entry in APP_ENTRIES:
        for role in ROLES:
            yield pytest.param(entry, role, id=f"{entry.id}-{role}")


@pytest.mark.parametrize(("entry", "role"), list(_entry_params()))
def test_get(world, entry, role):
    route = TABLE[entry.name]
    api = entry.pattern.startswith("api/")
    client = client_for(world, role, api=api)
    value = route.get[ROLES.index(role)]
    for query in route.queries:
        answers = {}
        for label, obj, index in targets(world, route, role):
            url = reverse(entry.name, kwargs=object_kwargs(entry, obj)) + query
            response = client.get(url)
            check_status(response, expected(value, index or 0, label), what=f"GET {url} as {role} ({label})")
            answers[label] = response
        if same_refusal(answers):  # another team's row reads exactly as a missing one
            assert normalized(answers["other"]) == normalized(answers["missing"]), f"{entry.id} as {role}"


# ---- writes -----------------------------------------------------------------------------------------------

FINGERPRINTED_APPS = ("teams", "cluster", "accounting")
# An API token's last use is stamped by authenticating with it: every column but that one.
TOKEN_COLUMNS = "id, user_id, name, kind, key_hash, expires_at, revoked_at"


def _fingerprint_sql() -> str:
    selects = []
    for app in FINGERPRINTED_APPS:
        for model in apps.get_app_config(app).get_models():
            if model._meta.proxy or not model._meta.managed:
                continue
            table = connection.ops.quote_name(model._meta.db_table)
            # names from the models' own metadata, nothing from a request
            source = f"(SELECT {TOKEN_COLUMNS} FROM {table})" if model is ApiToken else table  # noqa: S608
            selects.append(f"SELECT '{model._meta.db_table}', "  # noqa: S608
                           f"md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {source} t")
    return " UNION ALL ".join(selects)


def fingerprint() -> dict[str, str]:
    """An MD5 of every row of every table of the domain apps (one query): a refused write leaves each the same."""
    with connection.cursor() as cursor:
        cursor.execute(_fingerprint_sql())
        return dict(cursor.fetchall())


def send(client, method: str, url: str, body: dict, *, api: bool):
    if api:
        return client.generic(method, url, json.dumps(body), content_type="application/json")
    if method == "POST":
        return client.post(url, body)
    return client.generic(method, url, urlencode(body), content_type="application/x-www-form-urlencoded")


def page_body(world, body: dict) -> dict:
    """A page form names rows by primary key: the table writes a team's slug and a model's short name."""
    names = {"team": lambda v: Team.objects.get(slug=v).pk, "gpu_model": lambda v: GpuModel.objects.get(short_name=v).pk}
    return {k: names[k](v) if k in names else v for k, v in body.items()}


def _write_params():
    for entry in APP_ENTRIES:
        for method in TABLE[entry.name].writes:
            for role in ROLES:
                yield pytest.param(entry, method, role, id=f"{entry.id}-{method}-{role}")


@pytest.mark.parametrize(("entry", "method", "role"), list(_write_params()))
def test_write(world, entry, method, role):
    route = TABLE[entry.name]
    write = route.writes[method]
    api = entry.pattern.startswith("api/")
    value = write.expect[ROLES.index(role)]
    answers, before = {}, fingerprint()
    for label, obj, index in targets(world, route, role):
        client = client_for(world, role, api=api)
        url = reverse(entry.name, kwargs=object_kwargs(entry, obj))
        want = expected(value, index or 0, label)
        sid = transaction.savepoint()
        response = send(client, method, url, write.body if api else page_body(world, write.body), api=api)
        what = f"{method} {url} as {role} ({label})"
        check_status(response, want, what=what)
        if want in NOT_ALLOWED or want == 400:
            assert fingerprint() == before, f"{what} answered {response.status_code} but changed the database"
        answers[label] = response
        transaction.savepoint_rollback(sid)  # each target starts from the seed
    if same_refusal(answers):
        assert normalized(answers["other"]) == normalized(answers["missing"]), f"{entry.id} {method} as {role}"


# ---- the Django admin site: staff only --------------------------------------------------------------------

def admin_url(entry: Entry) -> str:
    """A URL of an admin route: id 1 where it names a row, the first app label where it names one (a refusal
    comes before any lookup)."""
    if entry.name.startswith("<unnamed"):  # the old change URL, redirecting: a path() with converters
        return "/" + re.sub(r"<[^>]+>", "1", entry.pattern)
    kwargs = {}
    for param in entry.params:
        if param == "app_label":
            kwargs[param] = re.search(r"\(\?P<app_label>([a-z_]+)", entry.pattern).group(1)
        elif param in ("object_id", "content_type_id"):
            kwargs[param] = "1"
        else:
            kwargs[param] = "x"
    return reverse(entry.name, kwargs=kwargs)


@pytest.mark.parametrize("role", ROLES)
def test_the_admin_site_is_for_staff_only(world, role):
    """Every admin route sends anyone not staff to the admin's sign-in page, the admin group included
    (DESIGN.md's admin role works in the app; the Django admin is for staff)."""
    client = client_for(world, role, api=False)
    login = reverse("admin:login")
    for entry in ADMIN_ENTRIES:
        url = admin_url(entry)
        if entry.name == "admin:login":
            assert client.get(url).status_code == 200, url
            continue
        response = client.get(url)
        if entry.name == "admin:logout":  # not staff: nothing to sign out of, sent to the index (then to sign in)
            assert response.status_code == 302 and response["Location"] == reverse("admin:index"), url
            continue
        assert response.status_code == 302 and response["Location"].startswith(login + "?next="), \
            f"{url} as {role}: {response.status_code}"


def test_staff_are_let_in(world):
    """The rule is staff only, not nobody (every admin page opening for staff: tests/test_admin_pages.py)."""
    client = Client()
    client.force_login(world["staff"])
    team = world["objects"]["team"][1]
    for url in (reverse("admin:index"), reverse("admin:teams_team_changelist"),
                reverse("admin:teams_team_change", args=[team.pk])):
        response = client.get(url)
        assert response.status_code == 200, url
        assert team.name in response.content.decode() or url == reverse("admin:index"), url


# ---- regressions found by the matrix ------------------------------------------------------------------------

def test_writes_through_a_format_suffix_reach_their_handler(world):
    """The router also routes ``/api/v1/jobs.json`` and the like, passing ``format`` to the handler; the jobs,
    bookings and tokens handlers and the node's rotate-token action did not take it: a 500 (TypeError)."""
    client = client_for(world, "admin", api=True)
    job, booking = world["objects"]["job"][0], world["objects"]["booking"][0]
    assert client.post("/api/v1/jobs.json", {}, format="json").status_code == 400
    assert client.patch(f"/api/v1/jobs/{job.pk}.json", {"state": "failed"}, format="json").json()["state"] == "failed"
    assert client.post("/api/v1/bookings.json", {"team": "alpha", **NEW_BOOKING}, format="json").status_code == 201
    response = client.patch(f"/api/v1/bookings/{booking.pk}.json", {"end": "2026-12-01T07:00:00Z"}, format="json")
    assert (response.status_code, response.json()["end"]) == (200, "2026-12-01T07:00:00Z")
    assert client.delete(f"/api/v1/bookings/{booking.pk}.json").json()["status"] == "cancelled"
    assert client.delete(f"/api/v1/jobs/{job.pk}.json").status_code == 204
    assert not Job.objects.filter(pk=job.pk).exists()
    assert client.post("/api/v1/tokens.json", {"name": "cli"}, format="json").status_code == 201
    response = client.post("/api/v1/nodes/n1/rotate-token.json")
    assert response.status_code == 200 and response.json()["token"]


# ---- what the exports hold ----------------------------------------------------------------------------------

OCT_NOV = USAGE_WINDOW.replace("2026-11-01", "2026-10-01")
TEAM_EXPORTS = [  # (API path and query, roles that may read it, whether team A has rows there)
    (f"/api/v1/reports/usage/{OCT_NOV}", ("engineer", "lead"), True),
    (f"/api/v1/reports/usage/{OCT_NOV}&by=project&format=csv", ("engineer", "lead"), True),
    (f"/api/v1/reports/usage/{OCT_NOV}&format=xlsx", ("engineer", "lead"), True),
    ("/api/v1/statements/priced-usage/?period=2026-10&format=csv", ("lead",), False),  # October: B's only
    ("/api/v1/statements/priced-usage/?period=2026-10", ("lead",), False),
]


def export_text(response) -> str:
    if response["Content-Type"].startswith("application/vnd.openxmlformats"):
        sheet = load_workbook(io.BytesIO(response.content)).active
        return "\n".join(" ".join(str(cell) for cell in row) for row in sheet.iter_rows(values_only=True)).lower()
    return response.content.decode().lower()


@pytest.mark.parametrize(("path", "roles", "own_rows"), TEAM_EXPORTS)
def test_team_exports_hold_no_row_of_another_team(world, path, roles, own_rows):
    """Team B used October, team A November: what team A's people export names no B (finance's has B)."""
    finance = client_for(world, "finance", api=True).get(path)
    assert finance.status_code == 200 and "beta" in export_text(finance)  # B's rows are there to leak
    for role in roles:
        response = client_for(world, role, api=True).get(path)
        assert response.status_code == 200, (path, role)
        text = export_text(response)
        assert "beta" not in text and "cc-b2" not in text, (path, role)
        assert ("alpha" in text) == own_rows, (path, role)


# ---- the backtest's scope: a query parameter, not a path ----------------------------------------------------

@pytest.mark.parametrize("route", ["boards:backtest", "boards:backtest-csv"])
def test_a_lead_backtesting_another_team_is_answered_as_a_missing_one(world, route):
    """The backtest takes its team in the query: another team's slug answers the lead exactly as a slug of no
    team (status and body), and finance reads it."""
    client = client_for(world, "lead", api=False)
    other = client.get(reverse(route) + BACKTEST_Q.replace("team=alpha", "team=beta"))
    missing = client.get(reverse(route) + BACKTEST_Q.replace("team=alpha", "team=no-such-team"))
    assert other.status_code == missing.status_code == 404
    assert normalized(other) == normalized(missing)
    assert client_for(world, "finance", api=False).get(reverse(route) + BACKTEST_Q.replace("team=alpha", "team=beta")).status_code == 200
