"""Statements' interfaces: ``/api/v1/statements/…`` (list, detail as JSON, CSV and XLSX, the priced usage report,
close and reopen with their 409s), role scoping (a lead sees their teams' lines, another team's statement is a
404, engineers get 403), pinned query counts, the schema, and ``manage.py close_period``."""

import csv
import io
from datetime import date, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from openpyxl import load_workbook

from accounting.models import LedgerEntry, RateCard, Statement
from accounting.money.close import close_period, reopen_period
from accounting.money.exports import safe_text
from accounting.money.statements import COLUMNS, statement_rows
from accounting.usage.services import usage_process
from cluster.models import CollectionState
from tests.accounting.money import test_close
from tests.accounting.money.test_close import AFTER, NOVEMBER
from tests.accounting.usage.usage_day import rollups

month = test_close.month  # the hand-priced November (a fixture)
URL = "/api/v1/statements/"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: AFTER)


@pytest.fixture
def closed(month):
    return close_period(period=NOVEMBER, now=AFTER)


def reclose(month, finance_user):
    """Reopen November, let 30 min of g0 turn from unmeasured to busy, close again: r2 has team A lines only."""
    reopen_period(period=NOVEMBER, user=finance_user, reason="late samples", now=AFTER + timedelta(hours=1))
    rollups(month["g0"], 2.5, 3, 60.0)
    return close_period(period=NOVEMBER, user=finance_user, now=AFTER + timedelta(hours=2))


def as_json(row: dict) -> dict:
    return {k: None if v is None else v if isinstance(v, str | int) else format(v, "f") if not hasattr(v, "isoformat")
            else v.isoformat() for k, v in row.items()}


# ---- list and detail -------------------------------------------------------------------------------------------

def test_finance_lists_every_statement_with_its_total(api, closed, finance_user):
    response = api.as_user(finance_user).get(URL)
    assert response.status_code == 200, response.content
    assert response.json()["results"] == [{
        "id": closed.pk, "period": "2026-11", "revision": 1, "status": "closed",
        "closed_at": response.json()["results"][0]["closed_at"], "reopened_at": None, "reopen_reason": "",
        "currency": "CNY", "total": "218.23",
    }]


def test_leads_list_their_teams_statements_with_their_totals(api, month, closed, lead_a, lead_b, finance_user):
    second = reclose(month, finance_user)
    assert [(s["revision"], s["status"], s["total"]) for s in api.as_user(lead_a).get(URL).json()["results"]] == [
        (2, "closed", "0.00"), (1, "reopened", "155.09")]
    assert [(s["id"], s["total"]) for s in api.as_user(lead_b).get(URL).json()["results"]] == [(closed.pk, "63.14")]
    listed = api.as_user(finance_user).get(URL).json()["results"]
    assert [(s["id"], s["reopen_reason"], s["total"]) for s in listed] == [
        (second.pk, "", "0.00"), (closed.pk, "late samples", "218.23")]


def test_engineers_get_403_and_strangers_401(api, closed, engineer_a):
    assert api.get(URL).status_code == 401
    client = api.as_user(engineer_a)
    for path in (URL, f"{URL}{closed.pk}/", f"{URL}priced-usage/?period=2026-11"):
        response = client.get(path)
        assert response.status_code == 403, path
        assert "engineers see their team's usage" in response.json()["detail"]


def test_the_detail_as_json(api, closed, finance_user, lead_a):
    body = api.as_user(finance_user).get(f"{URL}{closed.pk}/").json()
    assert body["statement"]["total"] == "218.23" and body["columns"] == COLUMNS
    assert body["rows"] == [as_json(row) for row in statement_rows(closed)]
    totals = [(r["team"], r["card_hours"], r["amount"]) for r in body["rows"] if r["kind"] == "total"]
    assert totals == [("Team Alpha", "8.0000", "155.09"), ("Team Beta", "3.3571", "63.14")]
    mine = api.as_user(lead_a).get(f"{URL}{closed.pk}/").json()
    assert mine["statement"]["total"] == "155.09" and {r["team"] for r in mine["rows"]} == {"Team Alpha"}
    assert len(mine["rows"]) == 6


def test_a_lead_gets_404_for_a_statement_without_their_lines(api, month, closed, lead_b, finance_user):
    second = reclose(month, finance_user)
    client = api.as_user(lead_b)
    assert client.get(f"{URL}{second.pk}/").status_code == 404  # r2 only has lines of team A
    assert client.get(f"{URL}{closed.pk}/").json()["rows"][-1]["amount"] == "63.14"
    assert client.get(f"{URL}{second.pk + 100}/").status_code == 404


def test_csv_and_xlsx_downloads_equal_the_rows(api, closed, team_b, finance_user, lead_b):
    team_b.name = "=cmd|' /C calc'!A0"
    team_b.save()
    client = api.as_user(finance_user)
    rows = statement_rows(closed)
    response = client.get(f"{URL}{closed.pk}/", {"format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="statement-2026-11-r1.csv"'
    read = list(csv.DictReader(io.StringIO(response.content.decode(), newline="")))
    assert read == [{k: "" if v is None else safe_text(str(v)) for k, v in as_json(row).items()} for row in rows]
    assert read[3]["team"] == "'=cmd|' /C calc'!A0" and read[3]["amount"] == "63.14"  # "=…" sorts first
    response = client.get(f"{URL}{closed.pk}/", {"format": "xlsx"})
    assert response["Content-Disposition"] == 'attachment; filename="statement-2026-11-r1.xlsx"'
    sheet = load_workbook(io.BytesIO(response.content)).active
    assert sheet.title == "Statement 2026-11 r1"
    cells = [cell for row in sheet.iter_rows() for cell in row]
    assert all(cell.data_type != "f" for cell in cells)
    assert sheet["B5"].value == "'=cmd|' /C calc'!A0" and sheet["B5"].data_type == "s"
    assert (sheet["F5"].value, sheet["L5"].value, sheet["L5"].data_type) == ("total", 63.14, "n")  # L: amount
    lead_csv = api.as_user(lead_b).get(f"{URL}{closed.pk}/", {"format": "csv"}).content.decode()
    assert [row["kind"] for row in csv.DictReader(io.StringIO(lead_csv, newline=""))] == [
        "busy", "busy", "unmeasured", "total"]


def test_a_bad_format_is_a_400_naming_it(api, closed, finance_user):
    response = api.as_user(finance_user).get(f"{URL}{closed.pk}/", {"format": "pdf"})
    assert response.status_code == 400 and response.json()["detail"].startswith("format: ")


def test_query_counts_are_pinned(api, month, closed, finance_user, lead_a, django_assert_num_queries):
    reclose(month, finance_user)
    for user, list_queries, detail_queries in ((finance_user, 6, 8), (lead_a, 7, 9)):
        # the token and its user, its first use, the groups (and a lead's teams), the page count and page, and
        # the page's entries
        client = api.as_user(user)
        with django_assert_num_queries(list_queries):
            assert len(client.get(URL).json()["results"]) == 2
        # … the statement, its entries, then team, project and model names
        client = api.as_user(user)
        with django_assert_num_queries(detail_queries):
            assert client.get(f"{URL}{closed.pk}/").status_code == 200


# ---- the priced usage report -----------------------------------------------------------------------------------

def test_priced_usage_of_an_open_or_closed_month(api, month, lead_a, finance_user):
    usage_process(now=AFTER)
    body = api.as_user(lead_a).get(f"{URL}priced-usage/", {"period": "2026-11"}).json()
    assert body["period"] == "2026-11" and body["unpriced"] == [] and body["columns"] == COLUMNS
    assert [(r["kind"], r["amount"]) for r in body["rows"]][-1] == ("total", "155.09")
    assert {r["team"] for r in body["rows"]} == {"Team Alpha"}
    RateCard.objects.filter(valid_from=date(2026, 11, 15)).delete()
    client = api.as_user(finance_user)
    body = client.get(f"{URL}priced-usage/", {"period": "2026-11"}).json()
    assert body["unpriced"] == ["H200 has no rate card for 1 day(s) with usage (2026-11-20 – 2026-11-20)."]
    response = client.get(f"{URL}priced-usage/", {"period": "2026-11", "format": "csv"})
    assert response["Content-Disposition"] == 'attachment; filename="priced-usage-2026-11.csv"'
    assert len(response.content.decode().strip().splitlines()) == 1 + len(body["rows"])
    response = client.get(f"{URL}priced-usage/", {"period": "2026-11", "format": "xlsx"})
    assert load_workbook(io.BytesIO(response.content)).active.title == "Priced usage 2026-11"


@pytest.mark.parametrize("params", [{}, {"period": "2026-13"}, {"period": "November"}, {"period": "2026-11-01"}])
def test_priced_usage_needs_a_month(api, finance_user, params):
    response = api.as_user(finance_user).get(f"{URL}priced-usage/", params)
    assert response.status_code == 400 and response.json()["detail"].startswith("period: ")


@pytest.mark.parametrize("period", ["2026-1", "1999-12", "2100-01", "２０２６-11", "2026-11\n"])
def test_a_period_is_a_month_of_the_window_as_the_schema_states_it(api, finance_user, period):
    client = api.as_user(finance_user)
    message = "A period is a month from 2000-01 to 2099-12 written YYYY-MM, e.g. 2026-11."
    response = client.get(f"{URL}priced-usage/", {"period": period})
    assert response.status_code == 400 and response.json() == {"detail": f"period: {message}", "period": [message]}
    response = client.post(f"{URL}close/", {"period": period})
    assert response.status_code == 400 and response.json()["period"] == [message]
    assert not Statement.objects.exists()
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    parameter = next(p for p in schema["paths"][f"{URL}priced-usage/"]["get"]["parameters"] if p["name"] == "period")
    assert parameter["schema"]["pattern"] == "^20[0-9]{2}-(?:0[1-9]|1[0-2])$"
    assert schema["components"]["schemas"]["CloseRequest"]["properties"]["period"]["pattern"] == (
        parameter["schema"]["pattern"])


# ---- close and reopen ------------------------------------------------------------------------------------------

def test_close_reopen_and_close_again(api, month, finance_user):
    client = api.as_user(finance_user)
    response = client.post(f"{URL}close/", {"period": "2026-11"})
    assert response.status_code == 201, response.content
    first = response.json()
    assert (first["revision"], first["status"], first["total"]) == (1, "closed", "218.23")
    again = client.post(f"{URL}close/", {"period": "2026-11"})
    assert (again.status_code, again.json()) == (200, first)
    assert Statement.objects.count() == 1
    response = client.post(f"{URL}reopen/", {"period": "2026-11", "reason": " "})
    assert response.status_code == 400 and response.json()["detail"].startswith("reason: ")
    response = client.post(f"{URL}reopen/", {"period": "2026-11", "reason": "late samples from n1"})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["reopen_reason"]) == ("reopened", "late samples from n1")
    response = client.post(f"{URL}reopen/", {"period": "2026-11", "reason": "again"})
    assert response.status_code == 409 and response.json()["problems"] == ["2026-11 is not closed."]
    rollups(month["g0"], 2.5, 3, 60.0)
    response = client.post(f"{URL}close/", {"period": "2026-11"})
    assert response.status_code == 201 and (response.json()["revision"], response.json()["total"]) == (2, "0.00")


def test_a_refused_close_is_a_409_listing_every_problem(api, month, admin_user):
    CollectionState.objects.filter(node__hostname="n2").update(data_complete_to=AFTER - timedelta(days=2))
    RateCard.objects.filter(valid_from=date(2026, 11, 15)).delete()
    response = api.as_user(admin_user).post(f"{URL}close/", {"period": "2026-11"})
    assert response.status_code == 409
    problems = response.json()["problems"]
    assert len(problems) == 2 and problems[0].startswith("node n2: data complete only to")
    assert problems[1] == "H200 has no rate card for 1 day(s) with usage (2026-11-20 – 2026-11-20)."
    assert response.json()["detail"] == " ".join(problems)
    assert not Statement.objects.exists()


def test_only_finance_and_admins_close_and_reopen(api, month, lead_a, engineer_a):
    for user in (lead_a, engineer_a):
        client = api.as_user(user)
        assert client.post(f"{URL}close/", {"period": "2026-11"}).status_code == 403
        assert client.post(f"{URL}reopen/", {"period": "2026-11", "reason": "x"}).status_code == 403
    assert not Statement.objects.exists()


def test_close_needs_a_month(api, finance_user):
    response = api.as_user(finance_user).post(f"{URL}close/", {"period": "26-11-2026"})
    assert response.status_code == 400 and response.json()["detail"].startswith("period: ")


def test_the_schema_describes_every_endpoint(api, finance_user):
    schema = api.as_user(finance_user).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = schema["paths"]
    assert {"200", "403"} <= set(paths["/api/v1/statements/"]["get"]["responses"])
    assert {"200", "400", "403", "404"} <= set(paths["/api/v1/statements/{id}/"]["get"]["responses"])
    priced = paths["/api/v1/statements/priced-usage/"]["get"]
    assert {p["name"] for p in priced["parameters"]} == {"period", "format"}
    assert {"200", "400", "403"} <= set(priced["responses"])
    assert {"200", "201", "400", "403", "409"} <= set(paths["/api/v1/statements/close/"]["post"]["responses"])
    assert {"200", "400", "403", "409"} <= set(paths["/api/v1/statements/reopen/"]["post"]["responses"])


# ---- manage.py close_period ------------------------------------------------------------------------------------

def close_command(*args) -> str:
    out = io.StringIO()
    call_command("close_period", *args, stdout=out)
    return out.getvalue()


def test_close_period_prints_the_statement(month):
    assert close_command("2026-11") == (
        "Closed 2026-11: statement r1.\n"
        f"  {LedgerEntry.objects.count()} ledger entries, 10 rows, currency CNY\n"
        "  Team Alpha (CC-A1): 155.09\n"
        "  Team Beta (CC-B2): 63.14\n"
        "  Total: 218.23 CNY\n"
    )
    assert close_command("2026-11").startswith("2026-11 was already closed (2026-12-01T02:00:00+00:00): statement r1")
    assert Statement.objects.count() == 1


def test_close_period_prints_every_problem_and_fails(month):
    CollectionState.objects.filter(node__hostname="n2").update(data_complete_to=AFTER - timedelta(days=2))
    RateCard.objects.filter(valid_from=date(2026, 11, 15)).delete()
    with pytest.raises(CommandError) as refused:
        close_command("2026-11")
    lines = str(refused.value).splitlines()
    assert lines[0] == "2026-11 cannot be closed:"
    assert lines[1].startswith("  - node n2: data complete only to")
    assert lines[2] == "  - H200 has no rate card for 1 day(s) with usage (2026-11-20 – 2026-11-20)."
    assert not Statement.objects.exists()


def test_close_period_reopens_with_a_reason_and_a_finance_user(month, finance_user, lead_a):
    close_command("2026-11", "--user", finance_user.username)
    assert Statement.objects.get().closed_by == finance_user
    for args, message in [
        (["--reopen", "--reason", "late"], "--user: name the finance or admin user"),
        (["--reopen", "--user", finance_user.username], "--reason: say why"),
        (["--reopen", "--reason", "late", "--user", "nobody"], "--user: no user is called 'nobody'"),
        (["--reopen", "--reason", "late", "--user", lead_a.username], "--user: lena-lead-a is neither finance"),
        (["2026/11"], "period: A period is a month written YYYY-MM"),
    ]:
        with pytest.raises(CommandError, match=message):
            close_command(*(args if args[0] == "2026/11" else ["2026-11", *args]))
    out = close_command("2026-11", "--reopen", "--reason", "late samples", "--user", finance_user.username)
    assert out.startswith("Reopened 2026-11: statement r1 is now reopened (reason: late samples).")
    with pytest.raises(CommandError, match=r"2026-11 was not reopened:\n  - 2026-11 is not closed\."):
        close_command("2026-11", "--reopen", "--reason", "again", "--user", finance_user.username)
    assert close_command("2026-11").startswith("Closed 2026-11: statement r2.\n  0 ledger entries, 0 rows")
