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

from accounting.models import ChargePolicy, DailyUsage, MoneyChange, RateCard, Statement
from accounting.money import views as finance_views
from accounting.money.close import close_period
from accounting.money.exports import COLUMN_HEADERS, MAX_COLUMN_WIDTH
from accounting.money.statements import TOTAL_KIND, priced_usage, statement_rows, statement_totals
from accounting.usage.report import usage_report
from accounting.usage.services import usage_process
from cluster.models import CollectionState, Gpu, GpuModel
from core.timeutils import business_day_bounds
from tests.accounting.money.test_close import AFTER, NOVEMBER, month  # noqa: F401 (the fixture)
from tests.accounting.money.test_statement_exports import recomputed

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


def test_the_statement_lines_name_their_kind_in_the_readers_language(finance, aggregated):
    """Seen in the demo: the kind column read busy / idle in the Chinese page."""
    english = finance.get(URL).content.decode()
    assert "<td>Busy</td>" in english and "<td>Idle</td>" in english and "<td>busy</td>" not in english
    finance.post("/i18n/setlang/", {"language": "zh-hans", "next": URL})
    chinese = finance.get(URL).content.decode()
    assert "<td>繁忙</td>" in chinese and "<td>空闲</td>" in chinese and "<td>busy</td>" not in chinese


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


def xlsx_rows(content: bytes) -> list[dict]:
    """The sheet's rows keyed by column name (the XLSX header is the human one, e.g. "Card-hours")."""
    columns = {str(header): column for column, header in COLUMN_HEADERS.items()}
    header, *rows = list(load_workbook(io.BytesIO(content), read_only=True).active.values)
    return [dict(zip([columns[name.split(" (")[0]] for name in header], row, strict=True)) for row in rows]


def totals_rows_xlsx(content: bytes) -> dict[str, Decimal]:
    rows = xlsx_rows(content)
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
        assert len(list(csv.DictReader(io.StringIO(as_csv.content.decode())))) == len(rows) + 1  # and the Total
    assert finance.get(url, {"period": PERIOD, "format": "pdf"}).status_code == 404


def test_the_usage_download_is_the_usage_report_by_team(finance, aggregated):
    response = finance.get(reverse("accounting:finance-download-usage"), {"period": PERIOD, "format": "csv"})
    assert response["Content-Disposition"] == 'attachment; filename="usage-2026-11.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    report = usage_report(start=business_day_bounds(NOVEMBER)[0], end=business_day_bounds(date(2026, 12, 1))[0],
                          by="team", now=AFTER)
    assert [row["team"] for row in rows] == ["Team Alpha", "Team Beta", "Total"]
    assert [(row["team"], Decimal(row["card_hours_allocated"])) for row in rows[:-1]] == [
        (row["team"], row["card_hours_allocated"]) for row in report.rows]
    xlsx = finance.get(reverse("accounting:finance-download-usage"), {"period": PERIOD, "format": "xlsx"})
    assert len(list(load_workbook(io.BytesIO(xlsx.content), read_only=True).active.values)) == len(rows) + 1


def csv_rows(content: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(content.decode())))


def download(client, which: str, file_format: str, period: str = PERIOD):
    return client.get(reverse(f"accounting:finance-download-{which}"), {"period": period, "format": file_format})


def test_both_downloads_end_with_a_grand_total_of_what_they_show(finance, aggregated):
    close(finance)
    statement = csv_rows(download(finance, "statement", "csv").content)
    *body, total = statement
    teams = [row for row in body if row["kind"] == TOTAL_KIND]
    assert (total["period"], total["team"], total["kind"], total["rate"], total["exact_rate"], total["currency"]) == (
        "Total", "", "", "", "", "CNY")
    assert (total["card_hours"], total["ticks"], total["amount"]) == ("11.3571", str(34_344_000_000), "218.23")
    assert Decimal(total["amount"]) == sum(Decimal(row["amount"]) for row in teams) == Decimal("218.23")
    assert Decimal(total["card_hours"]) == sum(Decimal(row["card_hours"]) for row in teams)
    assert int(total["ticks"]) == sum(int(row["ticks"]) for row in teams)
    *_body, xlsx_total = xlsx_rows(download(finance, "statement", "xlsx").content)
    assert (xlsx_total["period"], xlsx_total["ticks"], xlsx_total["amount"], xlsx_total["rate"]) == (
        "Total", 34_344_000_000, 218.23, None)

    usage = csv_rows(download(finance, "usage", "csv").content)
    *body, total = usage
    assert [row["team"] for row in usage] == ["Team Alpha", "Team Beta", "Total"]
    assert total["card_hours_allocated"] == "11.3571" and total["cost_centre"] == ""
    for column in ("card_hours_allocated", "card_hours_busy", "card_hours_idle", "card_hours_unmeasured"):
        assert Decimal(total[column]) == sum(Decimal(row[column]) for row in body), column
    assert total["card_hours_down"] == total["capacity_card_hours"] == ""  # team rows have none: no sum
    assert total["start"] == body[0]["start"] and total["end"] == body[0]["end"]
    assert xlsx_rows(download(finance, "usage", "xlsx").content)[-1]["card_hours_allocated"] == 11.3571


def test_xlsx_downloads_have_human_headers_a_frozen_header_formats_and_fitted_widths(finance, aggregated, team_a):
    team_a.name = "Team Alpha, the very long name of a team with many projects and many GPUs"
    team_a.save()
    close(finance)
    sheet = load_workbook(io.BytesIO(download(finance, "statement", "xlsx").content)).active
    header, *rows = list(sheet.iter_rows())
    assert [cell.value for cell in header] == [
        "Period", "Team", "Cost centre", "Project", "GPU model", "Kind", "Rate from", "Card-hours", "Ticks", "Rate",
        "Exact rate", "Amount", "Currency"]
    assert all(cell.font.bold for cell in header + rows[-1])  # the header and the grand total
    assert sheet.freeze_panes == "A2"
    formats = {header[index].value: {row[index].number_format for row in rows} for index in (7, 8, 11)}
    assert formats == {"Card-hours": {"#,##0.0000"}, "Ticks": {"#,##0"}, "Amount": {"#,##0.00"}}
    for column in sheet.iter_cols():
        width = sheet.column_dimensions[column[0].column_letter].width
        longest = max(len(cell.number_format) if cell.is_date else len(str(cell.value or "")) for cell in column)
        assert min(longest, MAX_COLUMN_WIDTH) <= width <= MAX_COLUMN_WIDTH, column[0].value
    assert sheet.column_dimensions["B"].width == MAX_COLUMN_WIDTH  # the long team name, capped
    assert csv_rows(download(finance, "statement", "csv").content)[0].keys() >= {"card_hours", "ticks", "amount"}

    usage = load_workbook(io.BytesIO(download(finance, "usage", "xlsx").content)).active
    header = [cell.value for cell in next(usage.iter_rows())]
    assert header[:4] == ["From (UTC)", "To (UTC)", "Team", "Cost centre"] and "Allocated card-hours" in header
    assert usage.freeze_panes == "A2"
    assert usage.cell(row=2, column=header.index("Allocated card-hours") + 1).number_format == "#,##0.0000"
    assert next(csv.reader(io.StringIO(download(finance, "usage", "csv").content.decode())))[:3] == [
        "start", "end", "team"]  # CSV keeps the column names


def test_the_statement_and_the_usage_table_agree_to_the_last_place(finance, aggregated, team_b):
    """Team Beta also idles 2/7 h on the 3rd: its lines round to 0.5000 + 2.0000 + 0.8571 + 0.2857 = 3.6428,
    its usage is 3.642857… h = 3.6429. Both show the total converted once."""
    DailyUsage.objects.create(day=date(2026, 11, 3), gpu=Gpu.objects.get(uuid="G1"), state="idle", team=team_b,
                              ticks=2 * 3600 * 840_000 // 7)
    response = finance.get(URL, {"period": PERIOD})
    statement = {team.team: team.card_hours for team in response.context["statement"].teams}
    usage = {row["team"]: row["card_hours_allocated"] for row in response.context["usage"].rows}
    assert statement == usage == {"Team Alpha": Decimal("8.0000"), "Team Beta": Decimal("3.6429")}
    html = response.content.decode()
    assert html.count(">3.6429<") == 2  # the team's card-hours in the statement and in the usage table
    lines = [row for row in csv_rows(download(finance, "statement", "csv").content) if row["team"] == "Team Beta"]
    assert sum(int(row["ticks"]) for row in lines[:-1]) == int(lines[-1]["ticks"])
    by_team = {row["team"]: row["card_hours_allocated"] for row in csv_rows(download(finance, "usage", "csv").content)}
    assert lines[-1]["card_hours"] == by_team["Team Beta"] == "3.6429"
    statement_total = csv_rows(download(finance, "statement", "csv").content)[-1]
    assert statement_total["card_hours"] == by_team["Total"] == "11.6429"


def test_every_lines_amount_recomputes_from_its_downloaded_row(finance, aggregated):
    """Rates with more places than the 4 shown (19.9999 per card-hour, idle at 0.3333 of it: 6.66596667)."""
    RateCard.objects.filter(valid_from=NOVEMBER).update(price_per_card_hour=Decimal("19.9999"))
    ChargePolicy.objects.filter(id=1).update(idle_charge_factor=Decimal("0.3333"))
    close(finance)
    rows = [row for row in csv_rows(download(finance, "statement", "csv").content)[:-1] if row["kind"] != TOTAL_KIND]
    assert len(rows) == 8 and "6.66596667" in {row["exact_rate"] for row in rows}
    for row in rows:
        ticks, rate = int(row["ticks"]), Decimal(row["exact_rate"])
        assert recomputed(ticks, rate, row["kind"], 2) == Decimal(row["amount"]), row
        assert recomputed(ticks, Decimal(1), row["kind"], 4) == Decimal(row["card_hours"]), row
    cells = [row for row in xlsx_rows(download(finance, "statement", "xlsx").content)[:-1] if row["kind"] != TOTAL_KIND]
    assert len(cells) == len(rows)
    for row in cells:
        amount = recomputed(row["ticks"], Decimal(repr(row["exact_rate"])), row["kind"], 2)
        assert amount == Decimal(repr(row["amount"])).quantize(Decimal("0.01")), row


def test_closed_by_names_the_system_when_no_one_closed(finance, finance_user):
    close_period(period=NOVEMBER, now=AFTER)  # as the scheduled task closes: no user
    html = finance.get(URL, {"period": PERIOD}).content.decode()
    assert "2026-12-01 02:00 by system (scheduled close or command line)." in html
    assert "2026-12-01 02:00 system (scheduled close or command line)</td>" in html  # the revisions table
    finance.post(reverse("accounting:finance-reopen"), {"period": PERIOD, "reason": "late samples"})
    close(finance)
    response = finance.get(URL, {"period": PERIOD})
    assert response.context["statement"].closed.revision == 2
    assert f"by {finance_user.username}." in response.content.decode()
    assert [who for _revision, who in response.context["statement"].revision_rows] == [
        "system (scheduled close or command line)", finance_user.username]


def test_a_month_not_over_offers_no_close_and_refuses_one_with_400(finance):
    response = finance.get(URL, {"period": "2026-12"})  # AFTER is December 1st: December has just begun
    html = response.content.decode()
    assert 'data-testid="close-form"' not in html
    assert "2026-12 can be closed from 2027-01-01, once the month has ended." in html
    assert 'data-testid="close-later">' in html and "disabled" in html.split('data-testid="close-later">')[1][:200]
    response = finance.post(reverse("accounting:finance-close"), {"period": "2026-12"})
    assert response.status_code == 400
    assert "2026-12 can be closed from 2027-01-01, once the month has ended." in response.content.decode()
    assert not Statement.objects.exists()
    november = finance.get(URL, {"period": PERIOD}).content.decode()  # November has ended: it can close
    assert 'data-testid="close-form"' in november and 'data-testid="close-later"' not in november


def test_the_page_has_a_pinned_query_count(finance, django_assert_num_queries):
    close(finance)
    finance.get(URL, {"period": PERIOD})  # warm the session
    with django_assert_num_queries(QUERIES_CLOSED):
        assert finance.get(URL, {"period": PERIOD}).status_code == 200


QUERIES_CLOSED = 20  # session, user, groups, revisions, entries, names, usage report, money tables, nav
