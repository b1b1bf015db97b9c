"""The finance page: admin and finance only; a month's team totals open (month to date) and closed (the
statement's), closing and reopening from the page, rate cards and the policy edited with their errors on
the fields, downloads whose totals rows are the page's, and a pinned query count. The month is the
hand-priced November of test_close, on its fixed clock (AFTER: December 1st)."""

import csv
import io
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from openpyxl import load_workbook

from accounting.models import MoneyChange, RateCard, Statement
from accounting.money import views as finance_views
from accounting.money.statements import TOTAL_KIND, priced_usage, statement_rows, statement_totals
from accounting.usage.report import usage_report
from accounting.usage.services import usage_process
from cluster.models import CollectionState, GpuModel
from core.timeutils import business_day_bounds
from tests.accounting.money.test_close import AFTER, NOVEMBER, month  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("month")]
URL = reverse("accounting:finance")
PERIOD = "2026-11"


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch):
    """The page's clock at AFTER: November is over."""
    monkeypatch.setattr(finance_views, "_now", lambda: AFTER)


@pytest.fixture
def finance(client, finance_user):
    client.force_login(finance_user)
    return client


@pytest.fixture
def aggregated():
    """The month with its daily aggregates current (the periodic aggregation's job; a close does it too)."""
    usage_process(now=AFTER)


def page_totals(response) -> dict[str, Decimal]:
    return {team.team: team.amount for team in response.context["statement"].teams}


def close(client):
    return client.post(reverse("accounting:finance-close"), {"period": PERIOD})


def test_it_shows_finance_the_month_to_date_and_defaults_to_last_month(finance, aggregated):
    response = finance.get(URL)
    assert response.status_code == 200
    statement = response.context["statement"]
    assert statement.label == PERIOD and statement.closed is None  # last month by AFTER's clock
    assert 'data-status="open"' in response.content.decode()
    report = priced_usage(period=NOVEMBER, now=AFTER)
    assert page_totals(response) == {"Team Alpha": Decimal("155.09"), "Team Beta": Decimal("63.14")} == {row["team"]: row["amount"] for row in report.rows if row["kind"] == TOTAL_KIND}
    assert 'data-nav="finance"' in response.content.decode()


@pytest.mark.parametrize("who", ["engineer_a", "lead_a"])
def test_it_is_forbidden_to_engineers_and_leads(client, who, request):
    client.force_login(request.getfixturevalue(who))
    for url in (URL, reverse("accounting:finance-download-statement"), reverse("accounting:finance-download-usage")):
        assert client.get(url).status_code == 403
    assert client.post(reverse("accounting:finance-close"), {"period": PERIOD}).status_code == 403
    assert not Statement.objects.exists()
    assert 'data-nav="finance"' not in client.get(reverse("accounting:team-list")).content.decode()


def test_it_sends_anonymous_visitors_to_log_in(client):
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_closing_from_the_page_shows_the_statements_team_totals(finance):
    response = close(finance)
    assert response.status_code == 302 and response["Location"] == f"{URL}?period={PERIOD}"
    statement = Statement.objects.get(period=NOVEMBER)
    response = finance.get(response["Location"])
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["2026-11 closed: statement revision 1."]
    assert response.context["statement"].closed == statement
    totals = page_totals(response)
    assert totals == {"Team Alpha": Decimal("155.09"), "Team Beta": Decimal("63.14")}
    assert sum(totals.values()) == statement_totals([statement])[statement.pk] == response.context["statement"].total
    html = response.content.decode()
    assert 'data-status="closed"' in html and "155.09" in html and "218.23" in html
    assert close(finance).status_code == 302 and Statement.objects.count() == 1  # closing twice adds nothing


def test_a_refused_close_lists_every_problem(finance):
    CollectionState.objects.filter(node__hostname="n2").update(data_complete_to=AFTER - timedelta(days=2))
    RateCard.objects.filter(valid_from=date(2026, 11, 15)).delete()
    response = finance.post(reverse("accounting:finance-close"), {"period": PERIOD}, follow=True)
    html = response.content.decode()
    assert response.status_code == 200 and not Statement.objects.exists()
    assert "2026-11 was not closed:" in html
    assert "node n2: data complete only to" in html
    assert "H200 has no rate card for 1 day(s) with usage (2026-11-20 – 2026-11-20)" in html


def test_reopening_needs_a_reason(finance):
    close(finance)
    response = finance.post(reverse("accounting:finance-reopen"), {"period": PERIOD, "reason": "  "})
    assert response.status_code == 400
    assert "Say why the period is reopened." in response.content.decode()
    assert Statement.objects.get().status == "closed"
    response = finance.post(reverse("accounting:finance-reopen"), {"period": PERIOD, "reason": "late samples"})
    assert response.status_code == 302
    statement = Statement.objects.get()
    assert (statement.status, statement.reopen_reason) == ("reopened", "late samples")
    page = finance.get(response["Location"])
    assert 'data-status="open"' in page.content.decode() and "late samples" in page.content.decode()


def test_rate_card_errors_show_on_their_fields(finance):
    h200 = GpuModel.objects.get(short_name="H200")
    data = {"action": "rate_card", "gpu_model": h200.pk, "valid_from": "2026-10-01", "valid_until": "2026-11-01",
            "price_per_card_hour": "-1"}
    response = finance.post(URL, data)
    assert response.status_code == 400
    assert response.context["rate_card_form"].errors == {"price_per_card_hour": ["must be zero or more."]}
    assert "must be zero or more." in response.content.decode()
    response = finance.post(URL, {**data, "valid_from": "2026-12-01", "valid_until": "",
                                  "price_per_card_hour": "19"})  # the 18 CNY card runs on
    errors = response.context["rate_card_form"].errors
    assert response.status_code == 400 and list(errors) == ["valid_from"]
    assert "overlaps the rate card valid" in errors["valid_from"][0]
    assert RateCard.objects.count() == 2 and not MoneyChange.objects.exists()


def test_finance_adds_a_rate_card_and_changes_the_policy_and_sees_the_trail(finance):
    l40 = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=1)
    response = finance.post(URL, {"action": "rate_card", "gpu_model": l40.pk, "valid_from": "2026-12-01",
                                  "price_per_card_hour": "7.5"})
    assert response.status_code == 302
    assert RateCard.objects.get(gpu_model=l40).price_per_card_hour == Decimal("7.5")
    response = finance.post(URL, {"action": "policy", "idle_charge_factor": "0.25", "overflow_multiplier": "2",
                                  "unallocated": "shared"})
    assert response.status_code == 302
    page = finance.get(URL)
    audit = page.context["audit"]
    assert [entry["change"].subject for entry in audit] == ["charge policy", f"rate card {RateCard.objects.get(gpu_model=l40).pk} (L40S)"]
    assert ("idle_charge_factor", "0.5000", "0.2500") in audit[0]["changed"]
    assert page.context["policy_form"].initial["unallocated"] == "shared"


def test_it_refuses_a_bad_policy_on_the_field(finance):
    response = finance.post(URL, {"action": "policy", "idle_charge_factor": "-0.5", "overflow_multiplier": "2",
                                  "unallocated": "kept"})
    assert response.status_code == 400
    assert list(response.context["policy_form"].errors) == ["idle_charge_factor"]


def totals_rows_csv(content: bytes) -> dict[str, Decimal]:
    rows = csv.DictReader(io.StringIO(content.decode()))
    return {row["team"]: Decimal(row["amount"]) for row in rows if row["kind"] == TOTAL_KIND}


def totals_rows_xlsx(content: bytes) -> dict[str, Decimal]:
    sheet = load_workbook(io.BytesIO(content), read_only=True).active
    header, *rows = list(sheet.values)
    rows = [dict(zip(header, row, strict=True)) for row in rows]
    return {row["team"]: Decimal(str(row["amount"])).quantize(Decimal("0.01")) for row in rows
            if row["kind"] == TOTAL_KIND}


@pytest.mark.parametrize("closed", [False, True])
def test_downloads_hold_the_pages_totals(finance, aggregated, closed):
    if closed:
        close(finance)
    shown = page_totals(finance.get(URL, {"period": PERIOD}))
    assert shown
    url = reverse("accounting:finance-download-statement")
    as_csv = finance.get(url, {"period": PERIOD, "format": "csv"})
    as_xlsx = finance.get(url, {"period": PERIOD, "format": "xlsx"})
    name = "statement-2026-11-r1" if closed else "priced-usage-2026-11"
    assert as_csv["Content-Disposition"] == f'attachment; filename="{name}.csv"'
    assert totals_rows_csv(as_csv.content) == shown == totals_rows_xlsx(as_xlsx.content)
    if closed:
        rows = statement_rows(Statement.objects.get())
        assert len(list(csv.DictReader(io.StringIO(as_csv.content.decode())))) == len(rows)
    assert finance.get(url, {"period": PERIOD, "format": "pdf"}).status_code == 404


def test_the_usage_download_is_the_usage_report_by_team(finance, aggregated):
    response = finance.get(reverse("accounting:finance-download-usage"), {"period": PERIOD, "format": "csv"})
    assert response["Content-Disposition"] == 'attachment; filename="usage-2026-11.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    report = usage_report(start=business_day_bounds(NOVEMBER)[0], end=business_day_bounds(date(2026, 12, 1))[0],
                          by="team", now=AFTER)
    assert [row["team"] for row in rows] == ["Team Alpha", "Team Beta"]
    assert [(row["team"], Decimal(row["card_hours_allocated"])) for row in rows] == [
        (row["team"], row["card_hours_allocated"]) for row in report.rows]
    xlsx = finance.get(reverse("accounting:finance-download-usage"), {"period": PERIOD, "format": "xlsx"})
    assert len(list(load_workbook(io.BytesIO(xlsx.content), read_only=True).active.values)) == len(rows) + 1


def test_the_page_has_a_pinned_query_count(finance, django_assert_num_queries):
    close(finance)
    finance.get(URL, {"period": PERIOD})  # warm the session
    with django_assert_num_queries(QUERIES_CLOSED):
        assert finance.get(URL, {"period": PERIOD}).status_code == 200


QUERIES_CLOSED = 20  # session, user, groups, revisions, entries, names, usage report, money tables, nav
