"""Statement exports (DESIGN.md §5): CSV and XLSX of statement rows read back with csv and openpyxl equal the
rows, numbers stay numbers (negative reversals too), no text cell starts with = + - @ tab or CR and no cell
is a formula; then the closed November through ``manage.py export_statement``."""

import csv
import io
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.management import CommandError, call_command
from hypothesis import given, settings
from hypothesis import strategies as st
from openpyxl import load_workbook
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

from accounting.money.close import close_period, reopen_period
from accounting.money.exports import FORMULA_PREFIXES, safe_text, write_csv, write_xlsx
from accounting.money.pricing import TICKS_PER_CARD_HOUR, Entry, lines_of
from accounting.money.statements import COLUMNS, Names, rows_from_lines, statement_rows
from core.money import MINOR_UNITS
from tests.accounting.money import test_close
from tests.accounting.money.test_close import AFTER, NOVEMBER
from tests.accounting.usage.usage_day import rollups

month = test_close.month  # the hand-priced November (a fixture)
EVIL = "=cmd|' /C calc'!A0"
AMOUNT = COLUMNS.index("amount")


# ---- reading files back ------------------------------------------------------------------------------------

def csv_text(rows) -> str:
    text = io.StringIO(newline="")
    write_csv(COLUMNS, rows, text, zone_name="UTC")
    return text.getvalue()


def read_csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def csv_expected(row: dict) -> list[str]:
    """A row as the CSV must hold it: numbers as plain digits, dates ISO, text escaped."""
    out = []
    for column in COLUMNS:
        value = row[column]
        if value is None:
            out.append("")
        elif isinstance(value, int):
            out.append(str(value))
        elif isinstance(value, Decimal):
            out.append(format(value, "f"))
        elif isinstance(value, date):
            out.append(value.isoformat())
        else:
            out.append(safe_text(value))
    return out


def xlsx_cells(source) -> list[list]:
    book = load_workbook(source)
    sheet = book.active
    cells = [list(row) for row in sheet.iter_rows()]
    for row in cells:
        for cell in row:
            assert cell.data_type != "f"
            if cell.data_type == "s":
                assert not cell.value.startswith(FORMULA_PREFIXES)
    return cells


def xlsx_matches(row: dict, cells) -> None:
    """The XLSX cells of ``row``: numbers numeric and equal, dates as dates, text escaped strings."""
    for column, cell in zip(COLUMNS, cells, strict=True):
        value = row[column]
        if value is None:
            assert cell.value is None, column
        elif isinstance(value, int):
            assert cell.data_type == "n" and cell.value == value, column
        elif isinstance(value, Decimal):
            assert cell.data_type == "n" and isinstance(cell.value, int | float), column
            assert Decimal(repr(cell.value)).quantize(Decimal(1).scaleb(value.as_tuple().exponent)) == value, column
        elif isinstance(value, date):
            assert cell.is_date and cell.value == datetime.combine(value, time()), column  # read back naive
        else:
            expected = ILLEGAL_CHARACTERS_RE.sub("\ufffd", safe_text(value))
            if cell.value is None:
                assert expected == "", column
            else:
                assert cell.data_type == "s", column
                assert cell.value.replace("\r\n", "\n") == expected.replace("\r\n", "\n").replace("\r", "\n"), column


# ---- property tests ------------------------------------------------------------------------------------------

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
names = st.one_of(texts, st.builds(lambda prefix, rest: prefix + rest, st.sampled_from(FORMULA_PREFIXES), texts))
entries = st.builds(
    Entry,
    day=st.just(date(2026, 11, 2)),
    team_id=st.integers(1, 3),
    project_id=st.sampled_from([None, 10]),
    gpu_model_id=st.sampled_from([None, 20]),
    kind=st.sampled_from(["busy", "idle", "unmeasured", "overflow"]),
    rate=st.decimals(min_value=0, max_value=10_000, places=6, allow_nan=False, allow_infinity=False),
    rate_valid_from=st.just(date(2026, 11, 1)),
    ticks=st.integers(min_value=-500 * TICKS_PER_CARD_HOUR, max_value=500 * TICKS_PER_CARD_HOUR).filter(bool),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, min_size=1, max_size=12), st.lists(names, min_size=7, max_size=7, unique=True),
       st.sampled_from(["CNY", "JPY", "KWD"]))
def test_exports_of_random_statements_read_back_equal_the_rows(entry_list, texts_, currency):
    table = Names(teams={1: (texts_[0], texts_[1]), 2: (texts_[2], texts_[3]), 3: (texts_[4], "CC-3")},
                  projects={10: texts_[5]}, models={20: texts_[6]})
    rows = rows_from_lines(lines_of(entry_list, currency), names=table, period=NOVEMBER, currency=currency)
    header, *body = read_csv(csv_text(rows))
    assert header == COLUMNS
    assert body == [csv_expected(row) for row in rows]
    for row, read in zip(rows, body, strict=True):
        assert not any(text.startswith(FORMULA_PREFIXES) for column, text in zip(COLUMNS, read, strict=True)
                       if not isinstance(row[column], Decimal | int))  # numbers are never escaped
    data = io.BytesIO()
    write_xlsx(COLUMNS, rows, data, sheet_title="Statement 2026-11 r1", zone_name="UTC")
    data.seek(0)
    header_cells, *body_cells = xlsx_cells(data)
    assert [cell.value for cell in header_cells] == COLUMNS
    assert len(body_cells) == len(rows)
    for row, cells in zip(rows, body_cells, strict=True):
        xlsx_matches(row, cells)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(names, st.decimals(min_value=-10**9, max_value=10**9, places=2, allow_nan=False,
                                             allow_infinity=False)), min_size=1, max_size=6))
def test_negative_and_positive_amounts_stay_numbers(values):
    rows = [dict.fromkeys(COLUMNS) | {"team": team, "kind": "busy", "amount": amount, "card_hours": -amount}
            for team, amount in values]
    assert read_csv(csv_text(rows))[1:] == [csv_expected(row) for row in rows]
    data = io.BytesIO()
    write_xlsx(COLUMNS, rows, data, sheet_title="t", zone_name="UTC")
    data.seek(0)
    for row, cells in zip(rows, xlsx_cells(data)[1:], strict=True):
        xlsx_matches(row, cells)


def recomputed(ticks: int, rate: Decimal, kind: str, places: int) -> Decimal:
    """ticks ÷ 3,024,000,000 ticks per card-hour (energy: ÷ 3,600,000,000 mJ per kWh) × rate, rounded half
    away from zero to ``places``: what anyone can compute from an exported line."""
    exact = Fraction(ticks) * Fraction(rate) / (3_600_000_000 if kind == "energy" else 840_000 * 3600)
    whole = int(abs(exact) * 10**places + Fraction(1, 2))
    return Decimal(whole if exact >= 0 else -whole).scaleb(-places)


any_entries = st.builds(
    Entry,
    day=st.just(date(2026, 11, 2)),
    team_id=st.integers(1, 2),
    project_id=st.sampled_from([None, 10]),
    gpu_model_id=st.sampled_from([None, 20]),
    kind=st.sampled_from(["busy", "idle", "unmeasured", "overflow", "energy", "unallocated"]),
    rate=st.decimals(min_value=0, max_value=10_000, places=12, allow_nan=False, allow_infinity=False),
    rate_valid_from=st.just(date(2026, 11, 1)),
    ticks=st.integers(min_value=-900 * TICKS_PER_CARD_HOUR, max_value=900 * TICKS_PER_CARD_HOUR).filter(bool),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(any_entries, min_size=1, max_size=12), st.sampled_from(["CNY", "JPY", "KWD"]))
def test_every_lines_amount_recomputes_from_its_exported_row(entry_list, currency):
    """Rates of up to 12 places (a price times a factor): the exported exact rate and ticks give the amount
    to the minor unit, and the card-hours; a totals row's ticks are its lines' (energy left out)."""
    table = Names(teams={1: ("Team Alpha", "CC-A1"), 2: ("Team Beta", "CC-B2")}, projects={10: "pre"},
                  models={20: "H200"})
    rows = rows_from_lines(lines_of(entry_list, currency), names=table, period=NOVEMBER, currency=currency)
    read = list(csv.DictReader(io.StringIO(csv_text(rows), newline="")))
    places = MINOR_UNITS[currency]
    lines: list[dict] = []
    for row in read:
        if row["kind"] != "total":
            lines.append(row)
            ticks, rate = int(row["ticks"]), Decimal(row["exact_rate"])
            assert recomputed(ticks, rate, row["kind"], places) == Decimal(row["amount"]), row
            assert recomputed(ticks, Decimal(1), row["kind"], 4) == Decimal(row["card_hours"]), row
            assert abs(Decimal(row["rate"]) - rate) <= Decimal("0.00005")  # the shown rate is the exact one rounded
            continue
        ticks = sum(int(line["ticks"]) for line in lines if line["kind"] != "energy")
        assert int(row["ticks"]) == ticks
        assert Decimal(row["card_hours"]) == recomputed(ticks, Decimal(1), "busy", 4)
        assert Decimal(row["amount"]) == sum(Decimal(line["amount"]) for line in lines)
        lines = []


# ---- the closed month through manage.py export_statement ---------------------------------------------------

def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("export_statement", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_the_csv_on_stdout_equals_the_statement_rows(month, team_a):
    team_a.name = EVIL
    team_a.save()
    statement = close_period(period=NOVEMBER, now=AFTER)
    rows = statement_rows(statement)
    out, _err = run("2026-11")
    header, *body = read_csv(out)
    assert header == COLUMNS and body == [csv_expected(row) for row in rows]
    assert [line[1] for line in body].count("'" + EVIL) == 6  # five lines and the totals row, escaped
    totals = [(line[1], line[7], line[AMOUNT]) for line in body if line[5] == "total"]
    assert totals == [("'" + EVIL, "8.0000", "155.09"), ("Team Beta", "3.3571", "63.14")]


@pytest.mark.django_db
def test_files_are_written_and_the_xlsx_equals_the_statement_rows(month, team_a, tmp_path):
    team_a.name = EVIL
    team_a.save()
    statement = close_period(period=NOVEMBER, now=AFTER)
    rows = statement_rows(statement)
    out, _err = run("2026-11", "--format", "xlsx", "--output", str(tmp_path / "nov.xlsx"))
    assert out == f"Wrote 10 rows of statement 2026-11 r1 to {tmp_path / 'nov.xlsx'}.\n"
    assert load_workbook(tmp_path / "nov.xlsx").active.title == "Statement 2026-11 r1"
    header, *body = xlsx_cells(tmp_path / "nov.xlsx")
    assert [cell.value for cell in header] == COLUMNS
    for row, cells in zip(rows, body, strict=True):
        xlsx_matches(row, cells)
    assert body[0][1].value == "'" + EVIL and body[0][1].data_type == "s"
    assert [(cells[AMOUNT].value, cells[AMOUNT].data_type) for cells in body if cells[5].value == "total"] == [
        (155.09, "n"), (63.14, "n")]
    run("2026-11", "--output", str(tmp_path / "nov.csv"))
    assert read_csv((tmp_path / "nov.csv").read_text(encoding="utf-8"))[1:] == [csv_expected(row) for row in rows]


@pytest.mark.django_db
def test_revisions_and_a_reopened_period(month, finance_user):
    close_period(period=NOVEMBER, now=AFTER)
    reopen_period(period=NOVEMBER, user=finance_user, reason="late samples", now=AFTER + timedelta(hours=1))
    rollups(month["g0"], 2.5, 3, 60.0)
    out, err = run("2026-11")
    assert err == "2026-11 is reopened: exporting its latest revision, r1.\n"
    second = close_period(period=NOVEMBER, user=finance_user, now=AFTER + timedelta(hours=2))
    out, err = run("2026-11")
    assert err == "" and read_csv(out)[1:] == [csv_expected(row) for row in statement_rows(second)]
    negatives = [line for line in read_csv(out)[1:] if line[AMOUNT].startswith("-")]
    assert [(line[5], line[7], line[AMOUNT]) for line in negatives] == [
        ("busy", "-1.0000", "-20.00"), ("unmeasured", "-4.5083", "-90.17")]  # numbers, not escaped text
    assert len(read_csv(run("2026-11", "--revision", "1")[0])) == 11


@pytest.mark.parametrize(("args", "message"), [
    (["2026-10"], "period: 2026-10 has no statement; close it first with manage.py close_period 2026-10"),
    (["November"], "period: A period is a month written YYYY-MM"),
    (["2026-11", "--revision", "3"], r"--revision: 2026-11 has no revision 3 \(it has r1\)"),
    (["2026-11", "--format", "xlsx"], "--output: an XLSX file is binary"),
    (["2026-11", "--output", "/no/such/folder/s.csv"], "--output: the folder /no/such/folder does not exist"),
])
@pytest.mark.django_db
def test_export_statement_refuses_naming_the_argument(month, args, message):
    close_period(period=NOVEMBER, now=AFTER)
    with pytest.raises(CommandError, match=message):
        run(*args)
