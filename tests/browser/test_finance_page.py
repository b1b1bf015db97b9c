"""Finance closes a month on the finance page and downloads its statement as CSV and XLSX, whose totals
rows equal the totals the page shows; an engineer cannot reach the page.

The page closes with the clock of the server, frozen at the browser tests' NOW (2 November 2026, see
conftest.py), so the month is October 2026, over and collected by then."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from playwright.sync_api import expect

from accounting.models import RateCard, Statement
from accounting.money.exports import COLUMN_HEADERS
from accounting.money.statements import TOTAL_KIND, statement_totals
from cluster.models import Allocation, CollectionState, Gpu, GpuModel, Job, MinuteRollup, Node
from tests.browser.conftest import NOW

OCTOBER = date(2026, 10, 1)
GPU = 840_000


def busy(team, gpu, start: datetime, hours: int, name: str) -> None:
    """A job of ``team`` on ``gpu`` for ``hours``, busy throughout (80 % every minute)."""
    end = start + timedelta(hours=hours)
    job = Job.objects.create(source="api", external_id=name, team=team, state="completed", start_time=start,
                             end_time=end)
    Allocation.objects.create(job=job, gpu=gpu, share=GPU, start=start, end=end)
    MinuteRollup.objects.bulk_create(
        MinuteRollup(gpu=gpu, bucket=start + timedelta(minutes=m), util_mean=80.0, util_max=80.0, covered_s=60,
                     util_covered_s=60, sample_count=6)
        for m in range(hours * 60)
    )


@pytest.fixture
def october(team_a, team_b, settings):
    """October 2026: team A busy 2 h and team B 1 h on an H200 priced 20 per card-hour, the node collected
    up to now (NOW, 2 November)."""
    model = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    node = Node.objects.create(hostname="fin-n1")
    gpu = Gpu.objects.create(node=node, index=0, uuid="GPU-fin-0", model=model, memory_mib=model.memory_mib)
    RateCard.objects.create(gpu_model=model, valid_from=OCTOBER, price_per_card_hour=Decimal("20"),
                            currency=settings.CARDHOUR_CURRENCY)
    busy(team_a, gpu, datetime(2026, 10, 5, 10, tzinfo=UTC), 2, "a-train")
    busy(team_b, gpu, datetime(2026, 10, 20, 9, tzinfo=UTC), 1, "b-eval")
    CollectionState.objects.create(node=node, data_complete_to=NOW)


def totals_rows(rows) -> dict[str, Decimal]:
    return {row["team"]: Decimal(str(row["amount"])).quantize(Decimal("0.01")) for row in rows
            if row["kind"] == TOTAL_KIND}


def download(page, selector: str) -> bytes:
    with page.expect_download() as info:
        page.click(selector)
    return info.value.path().read_bytes()


def test_finance_closes_a_month_and_downloads_files_with_the_pages_totals(page, live_server, login, screenshot,
                                                                            finance_user, october):
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    login(page, live_server, finance_user.username)
    page.locator("a[data-nav=finance]").click()
    expect(page.locator("h1")).to_have_text("Finance")
    page.goto(f"{live_server.url}/finance/?period=2026-10")
    expect(page.locator("[data-testid=statement-status]")).to_have_attribute("data-status", "open")

    page.get_by_role("button", name="Close period").click()
    expect(page.locator("[data-testid=statement-status]")).to_have_attribute("data-status", "closed")
    expect(page.locator("ul.messages")).to_contain_text("2026-10 closed: statement revision 1.")
    rows = page.locator("[data-testid=team-totals] > tbody > tr")
    expect(rows).to_have_count(2)
    shown = {rows.nth(i).get_attribute("data-team"): Decimal(rows.nth(i).locator("[data-testid=team-amount]").inner_text())
             for i in range(2)}
    assert shown == {"Team Alpha": Decimal("40.00"), "Team Beta": Decimal("20.00")}
    statement = Statement.objects.get(period=OCTOBER)
    assert sum(shown.values()) == statement_totals([statement])[statement.pk]
    expect(page.locator("[data-testid=statement-total]")).to_have_text("60.00")

    rows.first.locator("summary").click()  # a team expands to its lines
    expect(rows.first.locator("details table tbody tr")).to_have_count(1)
    screenshot(page, "finance-page")

    as_csv = download(page, "a[data-download=statement-csv]")
    assert totals_rows(csv.DictReader(io.StringIO(as_csv.decode()))) == shown
    as_xlsx = download(page, "a[data-download=statement-xlsx]")
    header, *values = list(load_workbook(io.BytesIO(as_xlsx), read_only=True).active.values)
    columns = {str(label): column for column, label in COLUMN_HEADERS.items()}  # XLSX headers are human
    assert totals_rows(dict(zip([columns[name] for name in header], row, strict=True)) for row in values) == shown
    usage = download(page, "a[data-download=usage-csv]")
    assert [row["team"] for row in csv.DictReader(io.StringIO(usage.decode()))] == ["Team Alpha", "Team Beta", "Total"]
    assert problems == []


def test_an_engineer_cannot_reach_the_finance_page(page, live_server, login, engineer_a):
    login(page, live_server, engineer_a.username)
    expect(page.locator("a[data-nav=inventory]")).to_be_visible()
    expect(page.locator("a[data-nav=finance]")).to_have_count(0)
    response = page.goto(f"{live_server.url}/finance/")
    assert response.status == 403
    expect(page.locator("h1")).to_contain_text("403")
