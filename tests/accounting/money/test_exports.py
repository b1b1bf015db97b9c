"""CSV, XLSX and JSON exports (DESIGN.md §5): the same columns, numbers as numbers, no text a spreadsheet
would run as a formula, times in the business zone. Files are read back with the csv module and openpyxl."""

import csv
import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openpyxl import load_workbook
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE

from accounting.money.exports import (
    CARD_HOURS_FORMAT,
    FORMULA_PREFIXES,
    MAX_COLUMN_WIDTH,
    amount_format,
    rows_as_json,
    safe_text,
    text_width,
    total_row,
    write_csv,
    write_xlsx,
)

COLUMNS = ["start", "team", "cost_centre", "card_hours", "note"]
START = datetime(2026, 10, 31, 16, 0, tzinfo=UTC)  # 2026-11-01 00:00 in Shanghai
ROWS = [
    {"start": START, "team": "=HYPERLINK(\"http://evil.example\",\"click\")", "cost_centre": "CC-A1",
     "card_hours": Decimal("12.5000"), "note": None},
    {"start": START, "team": "-rm", "cost_centre": "+1", "card_hours": Decimal("-3.2500"), "note": "@SUM(A1)"},
    {"start": START, "team": "\tTab", "cost_centre": "\rCR", "card_hours": 7, "note": "#N/A"},
]


def naive(*args) -> datetime:
    """A datetime without a zone, as openpyxl reads one back (and as exports refuse)."""
    return datetime(*args, tzinfo=UTC).replace(tzinfo=None)


@pytest.fixture
def shanghai(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"


def csv_rows(columns, rows, **kwargs) -> list[list[str]]:
    text = io.StringIO(newline="")
    write_csv(columns, rows, text, **kwargs)
    return list(csv.reader(io.StringIO(text.getvalue(), newline="")))


def xlsx_sheet(columns, rows, **kwargs):
    data = io.BytesIO()
    write_xlsx(columns, rows, data, sheet_title=kwargs.pop("sheet_title", "usage"), **kwargs)
    data.seek(0)
    return load_workbook(data).active


def test_csv_escapes_formula_text_and_keeps_numbers(shanghai):
    header, *body = csv_rows(COLUMNS, ROWS)
    assert header == COLUMNS
    assert body == [
        ["2026-11-01T00:00:00+08:00", "'=HYPERLINK(\"http://evil.example\",\"click\")", "CC-A1", "12.5000", ""],
        ["2026-11-01T00:00:00+08:00", "'-rm", "'+1", "-3.2500", "'@SUM(A1)"],  # a negative number stays a number
        ["2026-11-01T00:00:00+08:00", "'\tTab", "'\rCR", "7", "#N/A"],
    ]


def test_a_formula_after_a_separator_or_in_full_width_is_escaped_and_every_csv_field_is_quoted():
    """OWASP's CSV-injection advice: a reader that splits on ``;`` (the list separator of many locales)
    must not find a cell starting with a formula, and full-width ``＝`` reads as ``=`` in some spreadsheets."""
    rows = [{"team": "x;=1+1;y", "note": "＝1+1"}, {"team": "a,@SUM(A1)", "note": "｜ok, fine"},
            {"team": "＋1", "note": "tab\t-2"}]
    text = io.StringIO(newline="")
    write_csv(["team", "note"], rows, text, zone_name="UTC")
    raw = text.getvalue()
    assert raw.splitlines()[1] == '"\'x;=1+1;y","\'＝1+1"'  # quoted: one field whatever the separator
    read = list(csv.reader(io.StringIO(raw, newline="")))
    assert read[1:] == [["'x;=1+1;y", "'＝1+1"], ["'a,@SUM(A1)", "｜ok, fine"], ["'＋1", "'tab\t-2"]]
    for row in list(csv.reader(io.StringIO(raw, newline=""), delimiter=";"))[1:]:  # as a ";" reader splits it
        assert not any(cell.lstrip().startswith(FORMULA_PREFIXES) for cell in row)
    sheet = xlsx_sheet(["team", "note"], rows, zone_name="UTC")
    assert [[c.value for c in row] for row in list(sheet.iter_rows())[1:]] == read[1:]


def test_xlsx_has_numeric_cells_string_cells_and_no_formulas(shanghai):
    sheet = xlsx_sheet(COLUMNS, ROWS)
    assert sheet.title == "usage"
    header, *body = list(sheet.iter_rows())
    assert [cell.value for cell in header] == ["start (Asia/Shanghai)", "team", "cost_centre", "card_hours", "note"]
    first, second, third = body
    assert first[0].value == naive(2026, 11, 1, 0, 0) and first[0].is_date  # naive, in the business zone
    assert first[1].value == "'=HYPERLINK(\"http://evil.example\",\"click\")" and first[1].data_type == "s"
    assert (first[3].data_type, first[3].value, first[3].number_format) == ("n", 12.5, "0.0000")
    assert (second[3].data_type, second[3].value) == ("n", -3.25)
    assert [c.value for c in second[1:3]] + [second[4].value] == ["'-rm", "'+1", "'@SUM(A1)"]
    assert first[4].value is None
    assert (third[4].value, third[4].data_type) == ("#N/A", "s")  # text, not an error value
    for row in sheet.iter_rows():
        for cell in row:
            assert cell.data_type != "f"
            if cell.data_type == "s":
                assert not cell.value.startswith(FORMULA_PREFIXES)


def test_json_has_decimals_as_strings_and_times_with_the_offset(shanghai):
    body = rows_as_json(COLUMNS, ROWS[:1], data_complete_to=START)
    assert json.loads(json.dumps(body)) == {
        "columns": COLUMNS,
        "rows": [{"start": "2026-11-01T00:00:00+08:00", "team": ROWS[0]["team"], "cost_centre": "CC-A1",
                  "card_hours": "12.5000", "note": None}],
        "data_complete_to": "2026-11-01T00:00:00+08:00",
    }


def test_an_explicit_zone_wins_and_dates_stay_dates():
    rows = [{"day": date(2026, 11, 1), "at": START}]
    assert csv_rows(["day", "at"], rows, zone_name="Europe/Berlin")[1] == ["2026-11-01", "2026-10-31T17:00:00+01:00"]
    sheet = xlsx_sheet(["day", "at"], rows, zone_name="Europe/Berlin")
    assert [c.value for c in next(sheet.iter_rows())] == ["day", "at (Europe/Berlin)"]
    assert sheet["B2"].value == naive(2026, 10, 31, 17, 0)


def test_time_columns_name_the_zone_even_when_empty():
    sheet = xlsx_sheet(["start", "data_complete_to"], [{"start": START, "data_complete_to": None}],
                       time_columns=["start", "data_complete_to"])
    assert [c.value for c in next(sheet.iter_rows())] == ["start (UTC)", "data_complete_to (UTC)"]


def test_naive_times_and_non_finite_numbers_are_refused():
    with pytest.raises(ValueError, match="naive"):
        csv_rows(["at"], [{"at": naive(2026, 11, 1)}])
    with pytest.raises(ValueError, match="naive"):
        xlsx_sheet(["at"], [{"at": naive(2026, 11, 1)}])
    with pytest.raises(ValueError, match="finite"):
        csv_rows(["n"], [{"n": Decimal("NaN")}])


def test_characters_xml_cannot_hold_are_replaced_in_xlsx_only():
    rows = [{"text": "a\x00b\x1bc"}]
    assert csv_rows(["text"], rows)[1] == ["a\x00b\x1bc"]
    assert xlsx_sheet(["text"], rows)["A2"].value == "a\ufffdb\ufffdc"


def test_a_sheet_title_is_made_valid():
    assert xlsx_sheet(["a"], [], sheet_title="usage [by]: team/project?*").title == "usage _by__ team_project__"


def test_total_row_sums_exactly_and_leaves_what_has_no_sum_empty():
    rows = [{"team": "A", "card_hours": Decimal("1.00005"), "ticks": 7, "rate": Decimal("20"), "down": None,
             "currency": "CNY"},
            {"team": "B", "card_hours": Decimal("-0.1"), "ticks": -2, "rate": Decimal("18"), "down": None,
             "currency": "CNY"}]
    columns = ["team", "card_hours", "ticks", "rate", "down", "currency"]
    total = total_row(columns, rows, label_column="team", label="Total", summed=["card_hours", "ticks", "down"],
                      kept=["currency"])
    assert total == {"team": "Total", "card_hours": Decimal("0.90005"), "ticks": 5, "rate": None, "down": None,
                     "currency": "CNY"}
    assert type(total["ticks"]) is int
    assert total_row(columns, [*rows, {**rows[0], "currency": "JPY"}], label_column="team", label="Total",
                     summed=[], kept=["currency"])["currency"] is None  # not shared: not kept
    assert csv_rows(columns, rows, total=total)[-1] == ["Total", "0.90005", "5", "", "", "CNY"]


def test_xlsx_headers_number_formats_frozen_header_widths_and_a_bold_total():
    columns = ["start", "team", "card_hours", "amount"]
    rows = [{"start": START, "team": "视觉团队", "card_hours": Decimal("1234.5"), "amount": Decimal("1234567.891")},
            {"start": START, "team": "x" * 200, "card_hours": 3, "amount": Decimal("-2.5")}]
    total = total_row(columns, rows, label_column="team", label="Total", summed=["card_hours", "amount"])
    data = io.BytesIO()
    write_xlsx(columns, rows, data, sheet_title="t", zone_name="UTC", total=total,
               headers={"start": "From", "team": "Team", "card_hours": "Card-hours", "amount": "Amount"},
               number_formats={"card_hours": CARD_HOURS_FORMAT, "amount": amount_format("CNY")})
    data.seek(0)
    sheet = load_workbook(data).active
    header, first, second, last = list(sheet.iter_rows())
    assert [cell.value for cell in header] == ["From (UTC)", "Team", "Card-hours", "Amount"]
    assert sheet.freeze_panes == "A2" and all(cell.font.bold for cell in header + last)
    assert not any(cell.font.bold for cell in first)
    assert [(c.value, c.number_format) for c in first[2:]] == [(1234.5, "#,##0.0000"), (1234567.891, "#,##0.00")]
    assert (second[2].value, second[2].number_format) == (3, "#,##0.0000")  # an int card-hour shows 4 places too
    assert [c.value for c in last] == [None, "Total", 1237.5, 1234565.391]
    widths = {letter: sheet.column_dimensions[letter].width for letter in "ABCD"}
    assert widths["A"] >= len("2026-10-31 16:00:00") and widths["D"] >= len("1,234,567.89")
    assert widths["C"] >= len("1,237.5000") and widths["B"] == MAX_COLUMN_WIDTH  # 200 characters, capped
    assert text_width("视觉团队") == 8 and text_width("Total") == 5  # wide characters count twice
    assert amount_format("JPY") == "#,##0" and amount_format("KWD") == "#,##0.000"


def test_xlsx_without_headers_keeps_the_column_names_and_csv_always_does():
    sheet = xlsx_sheet(["card_hours"], [{"card_hours": Decimal("1.5000")}])
    assert sheet["A1"].value == "card_hours" and sheet["A2"].number_format == "0.0000"
    assert csv_rows(["card_hours"], [{"card_hours": Decimal("1.5000")}])[0] == ["card_hours"]


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
decimals = st.decimals(min_value=-10**9, max_value=10**9, places=4, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(texts, decimals), min_size=1, max_size=5))
def test_any_text_and_number_round_trip_safely(values):

    rows = [{"text": text, "number": number} for text, number in values]
    read = csv_rows(["text", "number"], rows, zone_name="UTC")[1:]
    assert read == [[safe_text(text), format(number, "f")] for text, number in values]
    sheet = xlsx_sheet(["text", "number"], rows, zone_name="UTC")
    for (text, number), (text_cell, number_cell) in zip(values, list(sheet.iter_rows())[1:], strict=True):
        assert text_cell.data_type != "f" and number_cell.data_type == "n"
        assert Decimal(repr(number_cell.value)).quantize(Decimal("0.0001")) == number
        expected = ILLEGAL_CHARACTERS_RE.sub("\ufffd", safe_text(text))
        if text_cell.value is None:
            assert expected == ""
        else:
            assert text_cell.value.replace("\r\n", "\n") == expected.replace("\r\n", "\n").replace("\r", "\n")
            assert not text_cell.value.startswith(FORMULA_PREFIXES)
    for text, _number in values:
        assert not safe_text(text).startswith(FORMULA_PREFIXES)
