"""Tables as files (DESIGN.md §5, Exports): CSV, XLSX and JSON with the same columns, safe to open in a
spreadsheet. Any report can use them: ``columns`` is the list of keys, ``rows`` an iterable of dicts.

- **Numbers** (``int``, ``Decimal``, ``float``) stay numbers: numeric XLSX cells, plain digits in CSV
  (``format(value, "f")``, never an exponent), so a negative reversal is still a number. JSON carries
  Decimals as strings: usage and money never become floats.
- **Text** that begins with ``=``, ``+``, ``-``, ``@``, tab or CR is escaped with a leading single quote
  in CSV and XLSX, so no spreadsheet reads it as a formula; numbers are never escaped. XLSX text cells are
  written as strings (data type ``"s"``), never formulas nor error values. Characters that XML cannot hold
  (control characters other than tab, LF and CR) become U+FFFD in XLSX; CSV keeps them.
- **Times** are shown in the business time zone (or ``zone_name``): CSV and JSON as ISO-8601 with the
  offset (``2026-11-01T00:00:00+08:00``); XLSX as date-time cells, converted to the zone with the tzinfo
  then dropped (openpyxl refuses aware datetimes), under a header naming the zone, e.g.
  ``start (Asia/Shanghai)``. CSV headers are the bare column names: each value carries its offset.
  A naive datetime is refused: its zone cannot be known. Dates are written as dates.
- ``None`` is an empty cell (``null`` in JSON).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import IO, Any
from zoneinfo import ZoneInfo

from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.styles import Font

from core.timeutils import business_zone

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
XLSX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
_SHEET_TITLE_FORBIDDEN = str.maketrans(dict.fromkeys("[]:*?/\\", "_"))


def safe_text(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would read it as a formula."""
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


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


def write_csv(columns: Sequence[str], rows: Iterable[Mapping], stream: IO[str], *, zone_name: str | None = None) -> int:
    """Write the header and ``rows`` to a text ``stream`` (open it with ``newline=""``). Returns the rows written."""
    zone = _zone(zone_name)
    writer = csv.writer(stream)
    writer.writerow([safe_text(column) for column in columns])
    written = 0
    for row in rows:
        writer.writerow([csv_value(row.get(column), zone) for column in columns])
        written += 1
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
        return _local(value, zone).replace(tzinfo=None), "yyyy-mm-dd hh:mm:ss"
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


def write_xlsx(columns: Sequence[str], rows: Iterable[Mapping], path_or_stream, *, sheet_title: str,
               zone_name: str | None = None, time_columns: Iterable[str] | None = None) -> int:
    """Write one sheet (header, then ``rows``) to a path or a binary stream. The header of a time column
    names the zone; time columns are ``time_columns``, else those holding a datetime. Returns the rows written."""
    zone = _zone(zone_name)
    rows = list(rows)
    if time_columns is None:
        time_columns = {c for c in columns if any(isinstance(row.get(c), datetime) for row in rows)}
    time_columns = set(time_columns)
    header = [xlsx_value(f"{c} ({zone.key})" if c in time_columns else c, zone) for c in columns]
    body = [[xlsx_value(row.get(column), zone) for column in columns] for row in rows]  # refuse before writing
    book = Workbook(write_only=True)
    sheet = book.create_sheet(title=(sheet_title.translate(_SHEET_TITLE_FORBIDDEN)[:31] or "Sheet"))
    bold = Font(bold=True)
    sheet.append([_xlsx_cell(sheet, converted, bold=bold) for converted in header])
    for values in body:
        sheet.append([_xlsx_cell(sheet, converted) for converted in values])
    book.save(path_or_stream)
    return len(rows)


def download_response(columns, rows, *, file_format: str, filename: str, sheet_title: str, time_columns=None):
    """An HTTP download of ``rows`` as ``file_format`` ("csv" or "xlsx"), named ``filename`` (with its extension)."""
    import io

    from django.http import HttpResponse

    if file_format == "csv":
        text = io.StringIO(newline="")
        write_csv(columns, rows, text)
        response = HttpResponse(text.getvalue().encode(), content_type=CSV_MEDIA_TYPE)
    else:
        data = io.BytesIO()
        write_xlsx(columns, rows, data, sheet_title=sheet_title, time_columns=time_columns)
        response = HttpResponse(data.getvalue(), content_type=XLSX_MEDIA_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
