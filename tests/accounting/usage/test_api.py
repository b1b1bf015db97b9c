"""The usage report's interfaces: ``GET /api/v1/reports/usage/`` (JSON, CSV and XLSX downloads, role
scoping, 400s that name the field) and the ``usage_report`` and ``recompute_usage`` commands."""

import csv
import io
import json
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from openpyxl import load_workbook

from accounting.models import DailyUsage
from accounting.money.exports import rows_as_json, safe_text
from accounting.usage.report import COLUMNS, usage_report
from tests.accounting.usage.test_report import NOW, at, make_usage_days
from tests.conftest import T0

URL = "/api/v1/reports/usage/"
WINDOW = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-04T00:00:00Z"}
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def usage_days(team_a, team_b, engineer_a):
    return make_usage_days(team_a, team_b, engineer_a)


def get(api, user, **params):
    return api.as_user(user).get(URL, {**WINDOW, **params})


def test_json_rows_by_team_for_finance(api, usage_days, finance_user):
    response = get(api, finance_user, by="team")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["columns"] == COLUMNS and body["data_complete_to"] is None
    alpha = body["rows"][0]
    assert (alpha["team"], alpha["cost_centre"], alpha["card_hours_allocated"], alpha["card_hours_unmeasured"]) == (
        "Team Alpha", "CC-A1", "8.0000", "5.0000")
    assert (alpha["start"], alpha["end"]) == ("2026-11-02T00:00:00+00:00", "2026-11-04T00:00:00+00:00")
    assert alpha["card_hours_unallocated"] is None
    assert [row["team"] for row in body["rows"]] == ["Team Alpha", "Team Beta", None]


def test_a_lead_sees_only_their_team_and_an_engineer_the_cluster_wide_rows(api, usage_days, lead_a, engineer_b):
    assert [row["team"] for row in get(api, lead_a, by="project").json()["rows"]] == ["Team Alpha"] * 2
    rows = get(api, engineer_b, by="gpu_model").json()["rows"]
    assert [(row["gpu_model"], row["capacity_card_hours"], row["team"]) for row in rows] == [
        ("H200", "96.0000", None), ("L40S", "48.0000", None)]
    assert get(api, engineer_b, by="node").json()["columns"][6] == "node"


def test_it_needs_a_signed_in_user(api, db):
    assert api.get(URL, WINDOW).status_code in (401, 403)


@pytest.mark.parametrize(("params", "field"), [
    ({"start": None}, "start"),
    ({"start": "2026-11-02T00:00:00"}, "start"),  # no offset
    ({"end": "2026-11-03T00:00:30Z"}, "end"),  # not on a whole minute
    ({"end": "2026-11-02T00:00:00Z"}, "end"),  # not after start
    ({"start": "2025-09-01T00:00:00Z"}, "end"),  # over 400 days
    ({"start": "yesterday"}, "start"),
    ({"by": "month"}, "by"),
    ({"format": "pdf"}, "format"),
])
def test_bad_parameters_are_400s_naming_the_field(api, engineer_a, params, field):
    query = {**WINDOW, **params}
    response = api.as_user(engineer_a).get(URL, {k: v for k, v in query.items() if v is not None})
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in body and body["detail"].startswith(f"{field}: ")


def csv_download(response) -> list[dict]:
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.content.decode(), newline="")))


@pytest.mark.parametrize("by", ["team", "project", "gpu"])
def test_csv_and_xlsx_downloads_read_back_equal_the_json_rows(api, usage_days, admin_user, by):
    rows = get(api, admin_user, by=by).json()["rows"]
    response = get(api, admin_user, by=by, format="csv")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="usage-{by}-2026-11-02-2026-11-04.csv"'
    assert csv_download(response) == [{k: "" if v is None else safe_text(v) for k, v in row.items()} for row in rows]
    response = get(api, admin_user, by=by, format="xlsx")
    assert response["Content-Disposition"] == f'attachment; filename="usage-{by}-2026-11-02-2026-11-04.xlsx"'
    sheet = load_workbook(io.BytesIO(response.content)).active
    header, *cells = sheet.iter_rows(values_only=True)
    assert header[0] == "start (UTC)" and header[-1] == "data_complete_to (UTC)"
    columns = get(api, admin_user, by=by).json()["columns"]
    assert [name.split(" (")[0] for name in header] == columns
    assert [dict(zip(columns, values, strict=True)) for values in cells] == [xlsx_expected(row) for row in rows]


def xlsx_expected(row: dict) -> dict:
    """A JSON row as openpyxl reads the XLSX back: numbers as numbers, times naive in the business zone."""
    out = {}
    for key, value in row.items():
        if value is not None and (key.startswith("card_hours") or key == "capacity_card_hours"):
            value = float(Decimal(value))
        elif value is not None and key in ("start", "end", "data_complete_to"):
            value = datetime.fromisoformat(value).astimezone(ZoneInfo("UTC")).replace(tzinfo=None)
        out[key] = value
    return out


def test_a_formula_as_a_team_name_comes_out_escaped(api, usage_days, finance_user, team_b):
    team_b.name = '=HYPERLINK("http://evil.example","click")'
    team_b.save()
    assert get(api, finance_user)["Content-Type"] == "application/json"
    names = [row["team"] for row in csv_download(get(api, finance_user, format="csv"))]
    assert "'" + team_b.name in names
    sheet = load_workbook(io.BytesIO(get(api, finance_user, format="xlsx").content)).active
    cells = [cell for row in sheet.iter_rows() for cell in row]
    assert "'" + team_b.name in [cell.value for cell in cells]
    assert all(cell.data_type != "f" for cell in cells)


def test_the_query_count_is_pinned(api, usage_days, lead_a, django_assert_num_queries):
    client = api.as_user(lead_a)
    with django_assert_num_queries(18):  # the token and its user, then the report with one live edge and its pending work
        assert client.get(URL, {**WINDOW, "start": "2026-11-01T12:00:00Z"}).status_code == 200


def test_the_schema_describes_the_parameters(api, engineer_a):
    schema = api.as_user(engineer_a).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/v1/reports/usage/"]["get"]
    assert [p["name"] for p in operation["parameters"]] == ["by", "end", "format", "start"]
    assert {"200", "400"} <= set(operation["responses"])


# ---- commands -----------------------------------------------------------------------------------------------

def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_usage_report_writes_csv_to_stdout(usage_days):
    text = run("usage_report", "--start", WINDOW["start"], "--end", WINDOW["end"], "--by", "team")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [(r["team"], r["card_hours_allocated"]) for r in rows] == [
        ("Team Alpha", "8.0000"), ("Team Beta", "6.0000"), ("", "2.0000")]  # the command line sees all


def test_usage_report_writes_json_and_xlsx_files(usage_days, tmp_path):
    start, end = T0, at(48)
    out = run("usage_report", "--start", "2026-11-02T08:00:00+08:00", "--end", WINDOW["end"], "--by", "gpu",
              "--format", "json", "--output", str(tmp_path / "usage.json"))
    assert out == "Wrote 3 rows to " + str(tmp_path / "usage.json") + ".\n"
    report = usage_report(start=start, end=end, by="gpu")
    expected = rows_as_json(report.columns, report.rows, data_complete_to=report.data_complete_to)
    expected.update(pending_buckets=report.pending_buckets, pending_from=report.as_json()["pending_from"])
    assert json.loads((tmp_path / "usage.json").read_text()) == expected
    run("usage_report", "--start", WINDOW["start"], "--end", WINDOW["end"], "--format", "xlsx",
        "--output", str(tmp_path / "usage.xlsx"))
    sheet = load_workbook(tmp_path / "usage.xlsx").active
    assert sheet.max_row == 4 and sheet["C2"].value == "Team Alpha"


@pytest.mark.parametrize(("args", "message"), [
    (["--start", "2026-11-02T00:00:00"], "--start: '2026-11-02T00:00:00' needs a UTC offset"),
    (["--start", "soon"], "--start: 'soon' is not an ISO-8601 time"),
    (["--start", "2026-11-02T00:00:01Z"], "--start: Must be on a whole minute"),
    (["--end", "2026-11-01T00:00:00Z"], "--end: Must be after start"),
    (["--by", "month"], "--by"),
    (["--format", "xlsx"], "--output: an XLSX file is binary"),
    (["--output", "/no/such/folder/usage.csv"], "--output: the folder /no/such/folder does not exist"),
])
def test_usage_report_refuses_bad_arguments(db, args, message):
    base = {"--start": WINDOW["start"], "--end": WINDOW["end"]}
    extra = dict(zip(args[::2], args[1::2], strict=True))
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        run("usage_report", *[item for pair in {**base, **extra}.items() for item in pair])


def test_recompute_usage_rebuilds_the_days(usage_days):
    before = sorted(DailyUsage.objects.values_list("day", "gpu_id", "state", "team_id", "project_id", "ticks"))
    DailyUsage.objects.all().delete()
    out = run("recompute_usage", "--start", "2026-11-02T00:00:00Z", "--end", "2026-11-03T12:00:00Z")
    assert out == "2026-11-02\n2026-11-03\nRebuilt 2 business day(s).\n"
    assert sorted(DailyUsage.objects.values_list("day", "gpu_id", "state", "team_id", "project_id", "ticks")) == before


def test_recompute_usage_refuses_bad_arguments(db):
    with pytest.raises(CommandError, match="--end: must be after --start"):
        run("recompute_usage", "--start", "2026-11-02T00:00:00Z", "--end", "2026-11-02T00:00:00Z")
    with pytest.raises(CommandError, match=r"--start: .* needs a UTC offset"):
        run("recompute_usage", "--start", "2026-11-02T00:00:00", "--end", "2026-11-03T00:00:00Z")
