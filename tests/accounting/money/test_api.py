"""The money API: rate cards, energy tariffs, the charge policy, the record of changes and quotas — who
reads and writes what, 400s that name the field and the rule, quotas scoped like teams (another team's
is a 404) with where each stands, the admin pages saving through the services, pinned query counts."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from accounting.models import ChargePolicy, EnergyTariff, MoneyChange, Quota, RateCard
from accounting.money.services import energy_tariff_save, quota_save, rate_card_save
from accounting.quotas.selectors import quota_status
from cluster.models import GpuModel
from tests.conftest import T0

pytestmark = pytest.mark.django_db
NOVEMBER, DECEMBER = date(2026, 11, 1), date(2026, 12, 1)
NOW = T0 + timedelta(days=3)


@pytest.fixture(autouse=True)
def fixed(monkeypatch, settings):
    settings.CARDHOUR_CURRENCY = "CNY"
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def h200(db):
    return GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)


@pytest.fixture
def priced(finance_user, h200):
    """Two H200 rate cards (20 → 18 CNY from the 15th) and an energy tariff."""
    rate_card_save(user=finance_user, gpu_model=h200, valid_from=NOVEMBER, valid_until=date(2026, 11, 15),
                   price_per_card_hour=Decimal(20))
    rate_card_save(user=finance_user, gpu_model=h200, valid_from=date(2026, 11, 15), valid_until=None,
                   price_per_card_hour=Decimal(18))
    energy_tariff_save(user=finance_user, valid_from=NOVEMBER, valid_until=None, price_per_kwh=Decimal("0.85"))


@pytest.fixture
def quotas(finance_user, team_a, team_b, h200):
    """Alpha: an H200 quota and a team-wide one; beta: a team-wide one."""
    return {
        "alpha_h200": quota_save(user=finance_user, team=team_a, gpu_model=h200, period_start=NOVEMBER,
                                 expires=DECEMBER, card_hours=Decimal(100)),
        "alpha": quota_save(user=finance_user, team=team_a, gpu_model=None, period_start=NOVEMBER,
                            expires=DECEMBER, card_hours=Decimal(500)),
        "beta": quota_save(user=finance_user, team=team_b, gpu_model=None, period_start=NOVEMBER,
                           expires=DECEMBER, card_hours=Decimal(50)),
    }


# ---- rate cards and tariffs ------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["/api/v1/rate-cards/", "/api/v1/energy-tariffs/"])
@pytest.mark.parametrize(("who", "answer"), [("admin_user", 200), ("finance_user", 200), ("lead_a", 200),
                                             ("engineer_a", 403)])
def test_prices_are_read_by_admin_finance_and_leads_not_engineers(api, priced, request, url, who, answer):
    response = api.as_user(request.getfixturevalue(who)).get(url)
    assert response.status_code == answer, response.content
    if answer == 403:
        assert "admin, finance and team leads" in response.json()["detail"]


def test_the_rate_card_list(api, priced, lead_a):
    rows = api.as_user(lead_a).get("/api/v1/rate-cards/").json()["results"]
    assert [(row["gpu_model"], row["valid_from"], row["valid_until"], row["price_per_card_hour"], row["currency"])
            for row in rows] == [("H200", "2026-11-01", "2026-11-15", "20.0000", "CNY"),
                                 ("H200", "2026-11-15", None, "18.0000", "CNY")]


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_leads_and_engineers_cannot_write_prices(api, priced, request, who):
    client = api.as_user(request.getfixturevalue(who))
    existing = RateCard.objects.first()
    payload = {"gpu_model": "H200", "valid_from": "2027-01-01", "price_per_card_hour": "1"}
    assert client.post("/api/v1/rate-cards/", payload).status_code == 403
    assert client.patch(f"/api/v1/rate-cards/{existing.pk}/", {"price_per_card_hour": "1"}).status_code == 403
    assert client.delete(f"/api/v1/rate-cards/{existing.pk}/").status_code == 403
    assert client.post("/api/v1/energy-tariffs/", {"valid_from": "2027-01-01", "price_per_kwh": "1"}).status_code == 403
    assert RateCard.objects.count() == 2 and MoneyChange.objects.count() == 3


def test_finance_creates_changes_and_deletes_a_rate_card(api, priced, finance_user):
    client = api.as_user(finance_user)
    created = client.post("/api/v1/rate-cards/", {"gpu_model": "H200", "valid_from": "2026-10-01",
                                                  "valid_until": "2026-11-01", "price_per_card_hour": "22.5"})
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["currency"], body["price_per_card_hour"], body["valid_until"]) == ("CNY", "22.5000", "2026-11-01")
    changed = client.patch(f"/api/v1/rate-cards/{body['id']}/", {"price_per_card_hour": "23"})
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["price_per_card_hour"], changed.json()["valid_from"]) == ("23.0000", "2026-10-01")
    assert client.delete(f"/api/v1/rate-cards/{body['id']}/").status_code == 204
    deleted, patched = MoneyChange.objects.all()[:2]
    assert (patched.before["price_per_card_hour"], patched.after["price_per_card_hour"]) == ("22.5000", "23.0000")
    assert deleted.after is None and deleted.changed_by == finance_user


@pytest.mark.parametrize(("payload", "field", "rule"), [
    ({"valid_from": "2026-11-10", "valid_until": None}, "valid_from", "overlaps the rate card valid 2026-11-01 – 2026-11-15 for H200."),
    ({"price_per_card_hour": "-1"}, "price_per_card_hour", "must be zero or more."),
    ({"currency": "XYZ"}, "currency", "XYZ is not a known ISO 4217 currency code"),
    ({"currency": "USD"}, "currency", "rate cards are in the configured currency CNY, not USD."),
    ({"valid_until": "2026-09-30"}, "valid_until", "must be after valid_from"),
    ({"gpu_model": "B200"}, "gpu_model", "does not exist"),
])
def test_bad_rate_cards_are_400s_naming_the_field_and_rule(api, priced, admin_user, payload, field, rule):
    base = {"gpu_model": "H200", "valid_from": "2026-10-01", "valid_until": "2026-11-01", "price_per_card_hour": "20"}
    response = api.as_user(admin_user).post("/api/v1/rate-cards/", {**base, **payload})
    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["detail", field] and rule in body[field][0]
    assert body["detail"].startswith(f"{field}: ")
    assert RateCard.objects.count() == 2


def test_a_put_of_a_tariff_replaces_it_and_a_bad_one_is_a_400(api, priced, finance_user):
    tariff = EnergyTariff.objects.get()
    client = api.as_user(finance_user)
    response = client.put(f"/api/v1/energy-tariffs/{tariff.pk}/", {"valid_from": "2026-11-01",
                                                                   "valid_until": "2027-01-01", "price_per_kwh": "1"})
    assert response.status_code == 200, response.json()
    assert response.json() == {"id": tariff.pk, "valid_from": "2026-11-01", "valid_until": "2027-01-01",
                               "price_per_kwh": "1.0000", "currency": "CNY"}
    refused = client.post("/api/v1/energy-tariffs/", {"valid_from": "2026-12-01", "price_per_kwh": "-2"})
    assert refused.status_code == 400
    assert refused.json()["detail"] == ("price_per_kwh: must be zero or more.; "
                                        "valid_from: overlaps the energy tariff valid 2026-11-01 – 2027-01-01.")
    assert client.get("/api/v1/energy-tariffs/999/").status_code == 404


# ---- the charge policy and the record of changes ----------------------------------------------------------

def test_the_policy_reads_as_the_defaults_until_changed(api, settings, lead_a, engineer_a):
    settings.CHARGE_IDLE_FACTOR, settings.CHARGE_OVERFLOW_MULTIPLIER, settings.CHARGE_UNALLOCATED = "1.0", "1.5", "kept"
    response = api.as_user(lead_a).get("/api/v1/charge-policy/")
    assert response.status_code == 200
    assert response.json() == {"idle_charge_factor": "1.0000", "overflow_multiplier": "1.5000", "unallocated": "kept",
                               "currency": "CNY", "updated_at": None}
    assert not ChargePolicy.objects.exists()
    assert api.as_user(engineer_a).get("/api/v1/charge-policy/").status_code == 403


def test_finance_and_admin_change_the_policy_and_leads_cannot(api, admin_user, finance_user, lead_a):
    assert api.as_user(lead_a).patch("/api/v1/charge-policy/", {"unallocated": "shared"}).status_code == 403
    put = api.as_user(finance_user).put("/api/v1/charge-policy/", {
        "idle_charge_factor": "0.5", "overflow_multiplier": "2", "unallocated": "shared"})
    assert put.status_code == 200, put.json()
    patched = api.as_user(admin_user).patch("/api/v1/charge-policy/", {"idle_charge_factor": "0.75"})
    assert patched.json()["idle_charge_factor"] == "0.7500" and patched.json()["unallocated"] == "shared"
    assert patched.json()["updated_at"] is not None
    changes = api.as_user(finance_user).get("/api/v1/money-changes/").json()["results"]
    assert [(row["changed_by"], row["subject"], row["before"]["idle_charge_factor"], row["after"]["idle_charge_factor"])
            for row in changes] == [("alice-admin", "charge policy", "0.5000", "0.7500"),
                                    ("fred-finance", "charge policy", "1.0000", "0.5000")]
    assert all(row["changed_at"] for row in changes)


def test_bad_policy_values_are_400s_naming_the_rule(api, finance_user):
    client = api.as_user(finance_user)
    unknown = client.patch("/api/v1/charge-policy/", {"unallocated": "split"})
    assert unknown.status_code == 400 and unknown.json()["detail"] == "unallocated: must be kept or shared."
    response = client.patch("/api/v1/charge-policy/", {"idle_charge_factor": "-0.5", "overflow_multiplier": "-1"})
    assert response.status_code == 400
    assert response.json() == {
        "detail": "idle_charge_factor: must be zero or more.; overflow_multiplier: must be zero or more.",
        "idle_charge_factor": ["must be zero or more."], "overflow_multiplier": ["must be zero or more."]}
    incomplete = client.put("/api/v1/charge-policy/", {"idle_charge_factor": "1"})
    assert incomplete.status_code == 400 and set(incomplete.json()) == {"detail", "overflow_multiplier",
                                                                         "unallocated"}
    assert not MoneyChange.objects.exists()


@pytest.mark.parametrize(("who", "answer"), [("admin_user", 200), ("finance_user", 200), ("lead_a", 403),
                                             ("engineer_a", 403)])
def test_the_record_of_changes_is_admins_and_finances(api, priced, request, who, answer):
    client = api.as_user(request.getfixturevalue(who))
    assert client.get("/api/v1/money-changes/").status_code == answer
    change = MoneyChange.objects.first()
    assert client.get(f"/api/v1/money-changes/{change.pk}/").status_code == answer
    assert client.delete(f"/api/v1/money-changes/{change.pk}/").status_code in (403, 405)
    assert MoneyChange.objects.count() == 3


# ---- quotas ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_a_lead_or_engineer_sees_their_teams_quotas_only(api, quotas, request, who):
    client = api.as_user(request.getfixturevalue(who))
    rows = client.get("/api/v1/quotas/").json()["results"]
    assert sorted((row["team"], row["gpu_model"] or "") for row in rows) == [("alpha", ""), ("alpha", "H200")]
    assert client.get(f"/api/v1/quotas/{quotas['beta'].pk}/").status_code == 404
    assert client.get(f"/api/v1/quotas/{quotas['alpha'].pk}/").status_code == 200


def test_finance_sees_every_quota_with_where_it_stands(api, quotas, finance_user):
    rows = api.as_user(finance_user).get("/api/v1/quotas/").json()["results"]
    assert {row["team"] for row in rows} == {"alpha", "beta"}
    row = next(row for row in rows if row["id"] == quotas["alpha_h200"].pk)
    status = quota_status(quota=quotas["alpha_h200"], now=NOW)
    assert (row["card_hours"], row["period_start"], row["expires"]) == ("100.000", "2026-11-01", "2026-12-01")
    assert row["used_card_hours"] == str(status.used_card_hours)
    assert row["remaining_card_hours"] == str(status.remaining_card_hours)
    assert row["used_percent"] == str(status.used_percent)
    assert row["run_out"] == (status.forecast.run_out and status.forecast.run_out.isoformat())
    assert row["runs_out_before_expiry"] is status.forecast.runs_out_before_expiry
    assert row["thresholds_crossed"] == status.thresholds and row["expiry_warning"] is status.expiry_warning


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_leads_and_engineers_cannot_write_quotas(api, quotas, request, who):
    client = api.as_user(request.getfixturevalue(who))
    own = quotas["alpha"].pk
    payload = {"team": "alpha", "period_start": "2026-12-01", "expires": "2027-01-01", "card_hours": "10"}
    assert client.post("/api/v1/quotas/", payload).status_code == 403
    assert client.patch(f"/api/v1/quotas/{own}/", {"card_hours": "1000"}).status_code == 403
    assert client.delete(f"/api/v1/quotas/{own}/").status_code == 403
    assert Quota.objects.count() == 3 and Quota.objects.get(pk=own).card_hours == 500


def test_finance_writes_quotas_and_bad_ones_name_the_rule(api, quotas, finance_user):
    client = api.as_user(finance_user)
    created = client.post("/api/v1/quotas/", {"team": "beta", "gpu_model": "H200", "period_start": "2026-11-01",
                                              "expires": "2026-12-01", "card_hours": "20"})
    assert created.status_code == 201, created.json()
    assert created.json()["remaining_card_hours"] is not None
    expired = client.post("/api/v1/quotas/", {"team": "beta", "period_start": "2027-01-01", "expires": "2026-12-01",
                                              "card_hours": "20"})
    assert expired.status_code == 400
    assert expired.json()["detail"] == "expires: must be after the start (period_start)."
    overlap = client.patch(f"/api/v1/quotas/{created.json()['id']}/", {"gpu_model": None})
    assert overlap.status_code == 400
    assert overlap.json()["period_start"] == ["overlaps the team-wide quota 2026-11-01 – 2026-12-01 of Team Beta."]
    negative = client.patch(f"/api/v1/quotas/{created.json()['id']}/", {"card_hours": "-5"})
    assert negative.json()["card_hours"] == ["must be zero or more."]
    assert client.delete(f"/api/v1/quotas/{quotas['beta'].pk}/").status_code == 204
    assert MoneyChange.objects.first().subject == f"quota {quotas['beta'].pk} (Team Beta)"


# ---- query counts ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "expected"), [
    ("/api/v1/rate-cards/", 4), ("/api/v1/energy-tariffs/", 4), ("/api/v1/money-changes/", 4),
    ("/api/v1/quotas/", 6), ("/api/v1/charge-policy/", 3),
])
def test_list_query_counts_are_pinned(api, priced, quotas, finance_user, h200, url, expected,
                                      django_assert_num_queries):
    """Token, its last use, the caller's groups, then the rows (with a count for a page; quotas: two more
    for their usage) — as many whatever the number of rows."""
    client = api.as_user(finance_user)
    client.get(url)  # warm: the token's last use is written at most once a minute
    with django_assert_num_queries(expected):
        assert client.get(url).status_code == 200
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    rate_card_save(user=finance_user, gpu_model=l40s, valid_from=NOVEMBER, valid_until=None,
                   price_per_card_hour=Decimal(5))
    energy_tariff_save(user=finance_user, valid_from=date(2025, 1, 1), valid_until=NOVEMBER,
                       price_per_kwh=Decimal(1))
    quota_save(user=finance_user, team=quotas["beta"].team, gpu_model=l40s, period_start=NOVEMBER,
               expires=DECEMBER, card_hours=Decimal(5))
    with django_assert_num_queries(expected):
        assert client.get(url).status_code == 200


def test_the_schema_describes_the_money_endpoints(api, engineer_a):
    schema = api.as_user(engineer_a).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ["/api/v1/rate-cards/", "/api/v1/rate-cards/{id}/", "/api/v1/energy-tariffs/", "/api/v1/quotas/",
                 "/api/v1/quotas/{id}/", "/api/v1/money-changes/", "/api/v1/charge-policy/"]:
        assert path in schema["paths"], path
    create = schema["paths"]["/api/v1/rate-cards/"]["post"]["responses"]
    assert {"201", "400", "403"} <= set(create)
    assert {"400", "403", "404"} <= set(schema["paths"]["/api/v1/quotas/{id}/"]["patch"]["responses"])
    assert {"200", "400", "403"} <= set(schema["paths"]["/api/v1/charge-policy/"]["put"]["responses"])


# ---- the admin -------------------------------------------------------------------------------------------

@pytest.fixture
def admin_client(client, admin_user):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    return client


def test_the_admin_adds_a_rate_card_through_the_service(admin_client, admin_user, priced, h200):
    response = admin_client.post("/admin/accounting/ratecard/add/", {
        "gpu_model": h200.pk, "valid_from": "2026-10-01", "valid_until": "2026-11-01", "price_per_card_hour": "25",
        "currency": ""})
    assert response.status_code == 302, response.context["adminform"].form.errors
    created = RateCard.objects.get(valid_from=date(2026, 10, 1))
    assert (created.currency, created.price_per_card_hour) == ("CNY", Decimal(25))
    change = MoneyChange.objects.first()
    assert (change.changed_by, change.subject, change.before) == (admin_user, f"rate card {created.pk} (H200)", None)


@pytest.mark.parametrize(("fields", "field", "rule"), [
    ({"valid_from": "2026-11-10", "valid_until": ""}, "valid_from",
     "overlaps the rate card valid 2026-11-01 – 2026-11-15 for H200."),
    ({"price_per_card_hour": "-3"}, "price_per_card_hour", "must be zero or more."),
    ({"currency": "USD"}, "currency", "rate cards are in the configured currency CNY, not USD."),
    ({"currency": "XYZ"}, "currency", "XYZ is not a known ISO 4217 currency code (e.g. CNY, USD, EUR)."),
])
def test_the_admin_shows_the_services_refusal_on_the_form(admin_client, priced, h200, fields, field, rule):
    data = {"gpu_model": h200.pk, "valid_from": "2026-10-01", "valid_until": "2026-11-01",
            "price_per_card_hour": "25", "currency": "", **fields}
    response = admin_client.post("/admin/accounting/ratecard/add/", data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {field: [rule]}
    assert RateCard.objects.count() == 2 and MoneyChange.objects.count() == 3


def test_the_admin_changes_and_deletes_through_the_services(admin_client, admin_user, priced, quotas, h200):
    later = RateCard.objects.get(valid_from=date(2026, 11, 15))
    response = admin_client.post(f"/admin/accounting/ratecard/{later.pk}/change/", {
        "gpu_model": h200.pk, "valid_from": "2026-11-15", "valid_until": "", "price_per_card_hour": "17.5",
        "currency": "CNY"})
    assert response.status_code == 302
    change = MoneyChange.objects.first()
    assert (change.changed_by, change.before["price_per_card_hour"], change.after["price_per_card_hour"]) == (
        admin_user, "18.0000", "17.5000")
    beta = quotas["beta"]
    response = admin_client.post(f"/admin/accounting/quota/{beta.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not Quota.objects.filter(pk=beta.pk).exists()
    deleted = MoneyChange.objects.first()
    assert (deleted.subject, deleted.after, deleted.changed_by) == (f"quota {beta.pk} (Team Beta)", None, admin_user)
    refused = admin_client.post("/admin/accounting/quota/add/", {
        "team": beta.team.pk, "gpu_model": "", "period_start": "2027-01-01", "expires": "2026-12-01",
        "card_hours": "10"})
    assert refused.context["adminform"].form.errors == {"expires": ["must be after the start (period_start)."]}


def test_the_admin_sets_the_charge_policy_through_the_service(admin_client, admin_user):
    assert admin_client.get("/admin/accounting/chargepolicy/add/").status_code == 200
    response = admin_client.post("/admin/accounting/chargepolicy/add/", {
        "idle_charge_factor": "0.5", "overflow_multiplier": "1.5", "unallocated": "kept"})
    assert response.status_code == 302
    assert ChargePolicy.objects.get().idle_charge_factor == Decimal("0.5")
    assert MoneyChange.objects.get().subject == "charge policy"
    refused = admin_client.post("/admin/accounting/chargepolicy/1/change/", {
        "idle_charge_factor": "-1", "overflow_multiplier": "1.5", "unallocated": "kept"})
    assert refused.context["adminform"].form.errors == {"idle_charge_factor": ["must be zero or more."]}
    assert admin_client.get("/admin/accounting/chargepolicy/add/").status_code == 403  # one row only


def test_the_audit_trail_statements_and_ledger_are_read_only_in_the_admin(admin_client, priced):
    change = MoneyChange.objects.first()
    for model in ("moneychange", "statement", "ledgerentry"):
        assert admin_client.get(f"/admin/accounting/{model}/").status_code == 200
        assert admin_client.get(f"/admin/accounting/{model}/add/").status_code == 403
    page = admin_client.get(f"/admin/accounting/moneychange/{change.pk}/change/")
    assert page.status_code == 200 and "0.8500" in page.content.decode()  # the newest: the tariff
    assert admin_client.post(f"/admin/accounting/moneychange/{change.pk}/change/", {"subject": "x"}).status_code == 403
    assert admin_client.post(f"/admin/accounting/moneychange/{change.pk}/delete/", {"post": "yes"}).status_code == 403
    assert MoneyChange.objects.count() == 3
