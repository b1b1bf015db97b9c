"""Tables as files (DESIGN.md §5, Exports): CSV, XLSX and JSON with the same columns, safe to open in a
spreadsheet. Any report can use them: ``columns`` is the list of keys, ``rows`` an iterable of dicts.

- **Numbers** (``int``, ``Decimal``, ``float``) stay numbers: numeric XLSX cells, plain digits in CSV
  (``format(value, "f")``, never an exponent), so a negative reversal is still a number. JSON carries
  Decimals as strings: usage and money never become floats.
- **Text** that begins with ``=``, ``+``, ``-``, ``@``, tab or CR (or their full-width forms ``＝＋－＠``), or
  holds one after a separator (``x;=1+1;y``), is escaped with a leading single quote in CSV and XLSX, so no
  spreadsheet reads it as a formula; numbers are never escaped. Every CSV field is quoted, so a reader
  that splits on ``;`` keeps the cell whole (OWASP's CSV-injection advice). XLSX text cells are
  written as strings (data type ``"s"``), never formulas nor error values. Characters that XML cannot hold
  (control characters other than tab, LF and CR) become U+FFFD in XLSX; CSV keeps them.
- **Times** are shown in the business time zone (or ``zone_name``): CSV and JSON as ISO-8601 with the
  offset (``2026-11-01T00:00:00+08:00``); XLSX as date-time cells, converted to the zone with the tzinfo
  then dropped (openpyxl refuses aware datetimes), under a header naming the zone, e.g.
  ``start (Asia/Shanghai)``. CSV headers are the bare column names: each value carries its offset.
  A naive datetime is refused: its zone cannot be known. Dates are written as dates.
- ``None`` is an empty cell (``null`` in JSON).

**Headers.** CSV headers are always the machine column names (``card_hours``): CSV is read by scripts,
and the columns are the same as the JSON keys and the API's. XLSX is read by people: a caller may pass
``headers`` (column → header text, e.g. :data:`COLUMN_HEADERS`, translated: "Card-hours"), as the finance
page's downloads do; without them the XLSX header is the column name too (the command line and the API).

**XLSX layout**: the header row is bold and frozen (it stays in view while scrolling); each column is as
wide as its longest shown value or header (wide characters count twice), at most
:data:`MAX_COLUMN_WIDTH`; ``number_formats`` (column → Excel format, e.g. :data:`CARD_HOURS_FORMAT`,
:func:`amount_format`) sets how numbers show (the cell keeps the exact value), else a ``Decimal`` shows
its own places (``0.0000``).

**A grand-total row** (``total``, built by :func:`total_row`) comes after the rows, bold in XLSX: its label
in the first text column, every summed column the exact sum of the rows' numbers.
"""

from __future__ import annotations

import csv
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import IO, Any
from zoneinfo import ZoneInfo

from django.utils.translation import gettext_lazy
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.styles import Font
from openpyxl.utils import get_column_letter

from core.money import MINOR_UNITS
from core.timeutils import business_zone

# OWASP's CSV-injection list, and the full-width forms some spreadsheets read as the same operators.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠")
# A formula after a separator a spreadsheet may split the cell on (a `;` in locales whose lists use it).
_INNER_FORMULA = re.compile(r"[,;\t|]\s*[=+\-@＝＋－＠]")
XLSX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
_SHEET_TITLE_FORBIDDEN = str.maketrans(dict.fromkeys("[]:*?/\\", "_"))
CARD_HOURS_FORMAT = "#,##0.0000"
INTEGER_FORMAT = "#,##0"
MAX_COLUMN_WIDTH = 50  # characters; longer text wraps off the edge rather than widening the sheet
DATETIME_FORMAT = "yyyy-mm-dd hh:mm:ss"

# The human header of each column name the reports export (statements' and the usage report's).
COLUMN_HEADERS = {
    "period": gettext_lazy("Period"), "team": gettext_lazy("Team"), "cost_centre": gettext_lazy("Cost centre"),
    "project": gettext_lazy("Project"), "gpu_model": gettext_lazy("GPU model"), "kind": gettext_lazy("Kind"),
    "rate_valid_from": gettext_lazy("Rate from"), "card_hours": gettext_lazy("Card-hours"),
    "ticks": gettext_lazy("Ticks"), "rate": gettext_lazy("Rate"), "exact_rate": gettext_lazy("Exact rate"),
    "amount": gettext_lazy("Amount"), "currency": gettext_lazy("Currency"),
    "start": gettext_lazy("From"), "end": gettext_lazy("To"), "node": gettext_lazy("Node"), "gpu": gettext_lazy("GPU"),
    "card_hours_allocated": gettext_lazy("Allocated card-hours"), "card_hours_busy": gettext_lazy("Busy card-hours"),
    "card_hours_idle": gettext_lazy("Idle card-hours"), "card_hours_unmeasured": gettext_lazy("Unmeasured card-hours"),
    "card_hours_unallocated": gettext_lazy("Unallocated card-hours"),
    "card_hours_down": gettext_lazy("Down card-hours"), "capacity_card_hours": gettext_lazy("Capacity card-hours"),
    "data_complete_to": gettext_lazy("Data complete to"),
}


def amount_format(currency: str) -> str:
    """The Excel number format of amounts in ``currency``: its minor unit's places, thousands grouped
    (``#,##0.00`` for CNY, ``#,##0`` for JPY)."""
    places = MINOR_UNITS[currency]
    return INTEGER_FORMAT + ("." + "0" * places if places else "")


def total_row(columns: Sequence[str], rows: Iterable[Mapping], *, label_column: str, label: str,
              summed: Iterable[str], kept: Iterable[str] = ()) -> dict:
    """A grand-total row of ``rows``: ``label`` in ``label_column``; each column of ``summed`` the exact sum
    of the numbers the rows hold in it (None when none holds one: a sum of nothing is not zero); each of
    ``kept`` the value every row shares (None when they differ); every other column empty."""
    rows = list(rows)
    total = dict.fromkeys(columns)
    for column in kept:
        values = {row.get(column) for row in rows}
        total[column] = values.pop() if len(values) == 1 else None
    for column in summed:
        numbers = [row[column] for row in rows if _is_number(row.get(column))]
        total[column] = sum(numbers[1:], numbers[0]) if numbers else None
    total[label_column] = label
    return total


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def safe_text(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would read it, or a part of it after a separator, as
    a formula (``=1+1``, ``＝1+1``, ``x;=1+1;y``)."""
    return "'" + text if text.startswith(FORMULA_PREFIXES) or _INNER_FORMULA.search(text) else text


def _zone(zone_name: str | None) -> ZoneInfo:
    return ZoneInfo(zone_name) if zone_name else business_zone()


def _local(moment: datetime, zone: ZoneInfo) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"naive datetime {moment!r}: exports need aware times")
    return moment.astimezone(zone)


def _number_text(value: int | float | Decimal) -> str:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
        return format(value, "f")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number")
        return repr(value)
    return str(value)


def csv_value(value: Any, zone: ZoneInfo) -> str:
    """One CSV field (see the module docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return _number_text(value)
    if isinstance(value, datetime):
        return _local(value, zone).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return safe_text(str(value))


def json_value(value: Any, zone: ZoneInfo) -> Any:
    """One JSON value: Decimals as strings, times as ISO-8601 in the zone; text as it is."""
    if isinstance(value, Decimal):
        return _number_text(value)
    if isinstance(value, datetime):
        return _local(value, zone).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def write_csv(columns: Sequence[str], rows: Iterable[Mapping], stream: IO[str], *, zone_name: str | None = None,
              total: Mapping | None = None) -> int:
    """Write the header, ``rows`` and the ``total`` row if any to a text ``stream`` (open it with
    ``newline=""``). Returns the rows written, the total not counted."""
    zone = _zone(zone_name)
    writer = csv.writer(stream, quoting=csv.QUOTE_ALL)  # OWASP: every field quoted, so no reader splits a cell
    writer.writerow([safe_text(column) for column in columns])
    written = 0
    for row in rows:
        writer.writerow([csv_value(row.get(column), zone) for column in columns])
        written += 1
    if total is not None:
        writer.writerow([csv_value(total.get(column), zone) for column in columns])
    return written


def rows_as_json(columns: Sequence[str], rows: Iterable[Mapping], *, data_complete_to: datetime | None = None,
                 zone_name: str | None = None) -> dict:
    """``{"columns": [...], "rows": [{column: value}], "data_complete_to": ...}``, ready for ``json.dumps``."""
    zone = _zone(zone_name)
    return {
        "columns": list(columns),
        "rows": [{column: json_value(row.get(column), zone) for column in columns} for row in rows],
        "data_complete_to": json_value(data_complete_to, zone),
    }


def xlsx_value(value: Any, zone: ZoneInfo) -> tuple[Any, str | None]:
    """(cell value, number format or None) of one XLSX cell; text comes back escaped (see the module docstring)."""
    if value is None or isinstance(value, bool):
        return value, None
    if isinstance(value, int | float | Decimal):
        _number_text(value)  # refuses NaN and infinities
        exponent = value.as_tuple().exponent if isinstance(value, Decimal) else 0
        return value, ("0." + "0" * -exponent if exponent < 0 else None)
    if isinstance(value, datetime):
        return _local(value, zone).replace(tzinfo=None), DATETIME_FORMAT
    if isinstance(value, date):
        return value, None
    return ILLEGAL_CHARACTERS_RE.sub("\ufffd", safe_text(str(value))), None


def _xlsx_cell(sheet, converted: tuple[Any, str | None], *, bold: Font | None = None) -> WriteOnlyCell:
    value, number_format = converted
    cell = WriteOnlyCell(sheet, value=value)
    if isinstance(value, str):
        cell.data_type = "s"  # never a formula ("=…") nor an error value ("#N/A")
    if number_format:
        cell.number_format = number_format
    if bold:
        cell.font = bold
    return cell


def text_width(text: str) -> int:
    """Columns ``text`` takes on screen: wide (CJK) characters count twice; the longest line counts."""
    return max((sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)
                for line in text.splitlines()), default=0)


def _shown_text(value: Any, number_format: str | None) -> str:
    """About what a spreadsheet shows for a cell (for the column width): numbers in their format."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return "0000-00-00 00:00:00"
    if isinstance(value, date):
        return "0000-00-00"
    if _is_number(value):
        places = len(number_format.rpartition(".")[2]) if number_format and "." in number_format else 0
        grouping = "," if number_format and "," in number_format else ""
        return format(Decimal(str(value)) if isinstance(value, float) else value, f"{grouping}.{places}f")
    return str(value)


def _column_widths(lines: Sequence[Sequence[tuple[Any, str | None]]]) -> list[int]:
    widths = [0] * (max((len(line) for line in lines), default=0))
    for line in lines:
        for index, (value, number_format) in enumerate(line):
            widths[index] = max(widths[index], text_width(_shown_text(value, number_format)))
    return [min(width + 2, MAX_COLUMN_WIDTH) for width in widths]  # a little room either side


def write_xlsx(columns: Sequence[str], rows: Iterable[Mapping], path_or_stream, *, sheet_title: str,
               zone_name: str | None = None, time_columns: Iterable[str] | None = None,
               headers: Mapping[str, str] | None = None, number_formats: Mapping[str, str] | None = None,
               total: Mapping | None = None) -> int:
    """Write one sheet (header, then ``rows``, then the ``total`` row if any) to a path or a binary stream.
    The header is ``headers[column]`` (else the column name); that of a time column names the zone; time
    columns are ``time_columns``, else those holding a datetime. ``number_formats`` formats the numbers of
    its columns. Returns the rows written, the total not counted."""
    zone = _zone(zone_name)
    rows = list(rows)
    if time_columns is None:
        time_columns = {c for c in columns if any(isinstance(row.get(c), datetime) for row in rows)}
    time_columns = set(time_columns)
    headers = headers or {}
    number_formats = number_formats or {}

    def line(row: Mapping) -> list[tuple[Any, str | None]]:
        cells = []
        for column in columns:
            value, number_format = xlsx_value(row.get(column), zone)
            if column in number_formats and _is_number(value):
                number_format = number_formats[column]
            cells.append((value, number_format))
        return cells

    names = [str(headers.get(c, c)) for c in columns]
    header = [xlsx_value(f"{name} ({zone.key})" if c in time_columns else name, zone) for c, name in zip(columns, names, strict=True)]
    body = [line(row) for row in rows]  # refuse before writing
    footer = [line(total)] if total is not None else []
    book = Workbook(write_only=True)
    sheet = book.create_sheet(title=(sheet_title.translate(_SHEET_TITLE_FORBIDDEN)[:31] or "Sheet"))
    sheet.freeze_panes = "A2"  # layout goes before the first row on a write-only sheet
    for index, width in enumerate(_column_widths([header, *body, *footer]), start=1):
        sheet.column_dimensions[get_column_letter(index)].width = width
    bold = Font(bold=True)
    sheet.append([_xlsx_cell(sheet, converted, bold=bold) for converted in header])
    for values in body:
        sheet.append([_xlsx_cell(sheet, converted) for converted in values])
    for values in footer:
        sheet.append([_xlsx_cell(sheet, converted, bold=bold) for converted in values])
    book.save(path_or_stream)
    return len(rows)


def download_response(columns, rows, *, file_format: str, filename: str, sheet_title: str, time_columns=None,
                      headers: Mapping[str, str] | None = None, number_formats: Mapping[str, str] | None = None,
                      total: Mapping | None = None):
    """An HTTP download of ``rows`` (and the ``total`` row if any) as ``file_format`` ("csv" or "xlsx"), named
    ``filename`` (with its extension); ``headers`` and ``number_formats`` are for XLSX (see the module docstring)."""
    import io

    from django.http import HttpResponse

    if file_format == "csv":
        text = io.StringIO(newline="")
        write_csv(columns, rows, text, total=total)
        response = HttpResponse(text.getvalue().encode(), content_type=CSV_MEDIA_TYPE)
    else:
        data = io.BytesIO()
        write_xlsx(columns, rows, data, sheet_title=sheet_title, time_columns=time_columns, headers=headers,
                   number_formats=number_formats, total=total)
        response = HttpResponse(data.getvalue(), content_type=XLSX_MEDIA_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
