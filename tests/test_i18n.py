"""The Simplified Chinese catalogue: complete, compiled, placeholder-safe, and actually served."""

import ast
import gettext
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import translation

LC_MESSAGES = Path(settings.LOCALE_PATHS[0]) / "zh_Hans" / "LC_MESSAGES"
PO_FILE = LC_MESSAGES / "django.po"
MO_FILE = LC_MESSAGES / "django.mo"
PLACEHOLDER = re.compile(r"%\((\w+)\)[-#0 +]*\d*(?:\.\d+)?[sdifeEgGxXorac]")
ZH_INVENTORY = "资源清单"


@dataclass
class Entry:
    msgid: str = ""
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)  # 0 for a singular entry's msgstr
    flags: set[str] = field(default_factory=set)
    line: int = 0

    @property
    def label(self) -> str:
        return f"{PO_FILE.name}:{self.line} {self.msgid!r}"


def parse_po(text: str) -> list[Entry]:
    """A small PO parser: msgctxt, msgid, msgid_plural, msgstr and msgstr[n], with continuation lines.

    Obsolete (``#~``) entries and comments are skipped; ``#,`` flags are kept."""
    entries: list[Entry] = []
    current: Entry | None = None
    target: tuple[str, int] | None = None  # which string a continuation line extends
    flags: set[str] = set()

    def start(lineno: int) -> Entry:
        nonlocal flags
        entry = Entry(flags=flags, line=lineno)
        flags = set()
        entries.append(entry)
        return entry

    def append(entry: Entry, key: tuple[str, int], value: str) -> None:
        name, index = key
        if name == "msgstr":
            entry.msgstr[index] = entry.msgstr.get(index, "") + value
        else:
            setattr(entry, name, (getattr(entry, name) or "") + value)

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            target = None
            continue
        if line.startswith("#~"):
            continue
        if line.startswith("#,"):
            flags |= {flag.strip() for flag in line[2:].split(",") if flag.strip()}
            continue
        if line.startswith("#"):
            continue
        match = re.match(r'^(msgctxt|msgid_plural|msgid|msgstr)(?:\[(\d+)\])?\s+(".*")$', line)
        if match:
            keyword, index, literal = match.groups()
            # A new entry starts at msgctxt, or at msgid unless a msgctxt just opened it.
            if keyword == "msgctxt" or (keyword == "msgid" and not (current and target == ("msgctxt", 0))):
                current = start(lineno)
            assert current is not None, f"line {lineno}: {keyword} outside an entry"
            target = (keyword, int(index or 0))
            if keyword == "msgctxt":
                current.msgctxt = ""
            append(current, target, ast.literal_eval(literal))
        elif line.startswith('"'):
            assert current is not None and target is not None, f"line {lineno}: stray continuation"
            append(current, target, ast.literal_eval(line))
        else:
            raise AssertionError(f"line {lineno}: cannot parse {raw!r}")
    return entries


@pytest.fixture(scope="module")
def po_entries() -> list[Entry]:
    return parse_po(PO_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def messages(po_entries) -> list[Entry]:
    """Every entry but the header."""
    return [e for e in po_entries if e.msgid or e.msgctxt is not None]


def test_it_has_a_zh_hans_header_with_one_plural_form(po_entries):
    header = po_entries[0]
    assert header.msgid == "" and header.msgctxt is None
    assert "fuzzy" not in header.flags
    assert "Language: zh_Hans\n" in header.msgstr[0]
    assert "charset=UTF-8" in header.msgstr[0]
    assert "Plural-Forms: nplurals=1; plural=0;\n" in header.msgstr[0]


def test_it_translates_every_entry_and_none_is_fuzzy(messages):
    assert len(messages) > 100  # the parser found the catalogue, not an empty file
    problems = []
    for entry in messages:
        if "fuzzy" in entry.flags:
            problems.append(f"{entry.label}: fuzzy")
        if set(entry.msgstr) != {0}:  # a singular msgstr, or msgstr[0] alone: zh_Hans has nplurals=1
            problems.append(f"{entry.label}: msgstr forms {sorted(entry.msgstr)}")
        if any(not text.strip() for text in entry.msgstr.values()):
            problems.append(f"{entry.label}: empty translation")
    assert not problems, "\n".join(problems)


def test_product_words_are_translated_not_left_in_english(messages):
    """Seen on the node page (issue 15): "Agent" stood in the Chinese labels. Words of the product's own
    vocabulary are translated; names of protocols and formats (URL, Bearer, CSV, GPU, XID …) may stay."""
    untranslated = re.compile(r"\b(Agent|agent|Booking|Quota|Idle|Busy)\b")
    problems = [f"{entry.label}: {text!r}" for entry in messages for text in entry.msgstr.values()
                if untranslated.search(PLACEHOLDER.sub("", text))]
    assert not problems, "\n".join(problems)


def test_it_keeps_the_placeholders_of_each_msgid(messages):
    problems = []
    for entry in messages:
        # With one plural form, msgstr[0] serves every count, so it follows the plural msgid.
        source = entry.msgid_plural if entry.msgid_plural is not None else entry.msgid
        wanted = set(PLACEHOLDER.findall(source))
        for index, text in entry.msgstr.items():
            got = set(PLACEHOLDER.findall(text))
            if got != wanted:
                problems.append(
                    f"{entry.label}: msgstr[{index}] has {sorted(got)}, msgid has {sorted(wanted)}"
                )
    assert not problems, "\n".join(problems)


def _without_pot_date(header: str) -> str:
    return "".join(
        line for line in header.splitlines(keepends=True) if not line.startswith("POT-Creation-Date:")
    )


def test_it_compiled_exactly_the_po_into_the_mo(po_entries):
    """A .po edited without running compilemessages fails here: the .mo must hold the same catalogue."""
    expected: dict[object, str] = {}
    for entry in po_entries:
        key = entry.msgid if entry.msgctxt is None else f"{entry.msgctxt}\x04{entry.msgid}"
        if entry.msgid_plural is None:
            expected[key] = entry.msgstr[0]
        else:
            for index, text in entry.msgstr.items():
                expected[(key, index)] = text
    with MO_FILE.open("rb") as mo:
        compiled = dict(gettext.GNUTranslations(mo)._catalog)
    # msgfmt leaves POT-Creation-Date out of the compiled header; compare the rest of it.
    expected[""], compiled[""] = (_without_pot_date(expected[""]), _without_pot_date(compiled.get("", "")))
    missing = sorted(map(str, expected.keys() - compiled.keys()))
    extra = sorted(map(str, compiled.keys() - expected.keys()))
    changed = sorted(str(k) for k in expected.keys() & compiled.keys() if expected[k] != compiled[k])
    assert not (missing or extra or changed), (
        f"django.mo is stale; run compilemessages -l zh_Hans. Not in .mo: {missing}; "
        f"only in .mo: {extra}; different: {changed}"
    )


def test_it_translates_inventory_under_zh_hans():
    with translation.override("zh-hans"):
        text = translation.gettext("Inventory")
    assert text == ZH_INVENTORY
    assert text != "Inventory"


@pytest.mark.django_db
def test_it_serves_the_inventory_in_chinese_after_choosing_the_language(client, engineer_a):
    client.force_login(engineer_a)
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/inventory/"})
    assert response.status_code == 302
    assert response["Location"] == "/inventory/"
    assert reverse("cluster:inventory") == "/inventory/"

    page = client.get("/inventory/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<html lang="zh-hans">' in html
    assert ZH_INVENTORY in html
    assert "<h1>Inventory</h1>" not in html
