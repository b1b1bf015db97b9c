"""Reading import files line by line so that no byte in them can end an import in a traceback.

Every importer (``import_samples``, ``import_jobs``, ``import_sacct``) reads through :class:`ImportLines`:

- UTF-8, with or without a byte-order mark. Bytes that are not UTF-8 (a Latin-1 ``é``, binary
  garbage) are replaced with U+FFFD and the line is noted in :attr:`ImportLines.replaced`: the row is
  kept if it still reads, and the importer reports the line as a warning.
- A UTF-16 file with a byte-order mark (Excel's "Unicode text") is decoded as UTF-16. A file whose
  first line holds NUL bytes but has no byte-order mark (UTF-16 without one, or a binary file) is
  refused as a whole with :class:`ImportRefused`: no line of it could be read correctly.
- A line holding a NUL byte, or longer than :data:`MAX_LINE_BYTES`, is a bad line
  (:attr:`ImportLines.bad`): the row it belongs to is rejected with that reason. An over-long line is
  skipped without being held in memory whole.

Lines are numbered from 1, as they are in an editor; a quoted CSV cell may span lines.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

MAX_LINE_BYTES = 1 << 20  # 1 MiB: no real row is near it; a 50 MB "field" is garbage, not data
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class ImportRefused(Exception):
    """The file cannot be imported at all (missing columns, unreadable encoding, or ``--strict`` and a bad row)."""


class ImportLines:
    """The physical lines of an import file as text (each with its line ending), with their problems noted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bad: dict[int, str] = {}  # line → why its row is rejected
        self.replaced: dict[int, str] = {}  # line → which bytes were not UTF-8 (replaced, row kept)
        self.encoding = "utf-8"

    def __iter__(self) -> Iterator[str]:
        with self.path.open("rb") as handle:
            head = handle.read(4)
            handle.seek(0)
            if head.startswith(UTF16_BOMS):
                self.encoding = "utf-16"
                yield from self._utf16(handle)
            else:
                if head.startswith(codecs.BOM_UTF8):
                    handle.seek(len(codecs.BOM_UTF8))
                yield from self._utf8(handle)

    def _utf8(self, handle) -> Iterator[str]:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # skip the rest of the over-long line without holding it
                self.bad[number] = f"longer than {MAX_LINE_BYTES:,} bytes (skipped)"
                yield "\n"
                continue
            if b"\x00" in raw:
                self._nul(number)
                yield "\n"
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as error:
                byte = raw[error.start]
                self.replaced[number] = (
                    f"not UTF-8 (byte 0x{byte:02x} at byte {error.start + 1}); undecodable bytes replaced with U+FFFD"
                )
                yield raw.decode("utf-8", errors="replace")

    def _utf16(self, handle) -> Iterator[str]:
        text = io.TextIOWrapper(handle, encoding="utf-16", errors="replace", newline="")
        number = 0
        while True:
            line = text.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(("\n", "\r")):
                while (rest := text.readline(MAX_LINE_BYTES)) and not rest.endswith(("\n", "\r")):
                    pass
                self.bad[number] = f"longer than {MAX_LINE_BYTES:,} characters (skipped)"
                yield "\n"
            elif "\x00" in line:
                self._nul(number)
                yield "\n"
            else:
                if "\ufffd" in line:
                    self.replaced[number] = "not UTF-16; undecodable bytes replaced with U+FFFD"
                yield line

    def _nul(self, number: int) -> None:
        if number == 1:
            raise ImportRefused(
                "line 1 holds NUL bytes: the file is binary, or UTF-16 without a byte-order mark. "
                "Save it as UTF-8 text (e.g. iconv -f UTF-16LE -t UTF-8 in.csv > out.csv)"
            )
        self.bad[number] = "holds NUL bytes (binary data?)"

    def problem(self, first: int, last: int) -> str | None:
        """Why the row on lines ``first``…``last`` must be rejected, or None."""
        for number in range(first, last + 1):
            if number in self.bad:
                return self.bad[number] if first == last else f"line {number}: {self.bad[number]}"
        return None

    def replacements(self, first: int, last: int) -> list[str]:
        """Warnings for the row on lines ``first``…``last`` whose bytes were replaced."""
        return [self.replaced[n] for n in range(first, last + 1) if n in self.replaced]


def csv_rows(path: Path, *, required: Sequence[str], report, error_prefix: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV import file with a header, as (first line, cells by column name; the first of
    two columns of one name wins). A header without a ``required`` column refuses the file. Bad lines
    (:class:`ImportLines`) and rows csv cannot read go to ``report.rejected`` (the latter as
    ``"{error_prefix}: …"``), blank rows are skipped, and ``report.rows_read``, ``report.warnings``
    (replaced bytes) and ``report.encoding`` are kept up to date."""
    lines = ImportLines(path)
    reader = csv.reader(lines)
    header = [name.strip() for name in next(reader, [])]
    report.encoding = lines.encoding
    missing = [name for name in required if name not in header]
    if missing:
        raise ImportRefused(
            f"the header lacks the required column(s) {', '.join(missing)} (needs {', '.join(required)})"
        )
    where: dict[str, int] = {}
    for index, name in enumerate(header):
        where.setdefault(name, index)
    while True:
        line = reader.line_num + 1  # a quoted cell may span lines: a row is named by its first
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            report.rows_read += 1
            report.rejected.append((line, f"{error_prefix}: {error}"))
            continue
        problem = lines.problem(line, reader.line_num)
        if problem is None and not any(cell.strip() for cell in row):
            continue
        report.rows_read += 1
        if problem is not None:
            report.rejected.append((line, problem))
            continue
        report.warnings.extend((line, text) for text in lines.replacements(line, reader.line_num))
        yield line, {name: row[i] if i < len(row) else "" for name, i in where.items()}
