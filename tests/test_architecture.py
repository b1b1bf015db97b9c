"""The house rules of docs/architecture.md, checked on every module with ``ast`` (no Django, no database).

- Imports only go down the floors (or stay on one). The floors are read from the table in
  docs/architecture.md, so the page and the rule cannot drift apart.
- A domain's reads, writes and maths never import its pages (views, API, admin, forms).
- A file past 400 lines says why at its top; a folder holds at most 15 modules side by side.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 400
LONG_REASON = "Long because"
MAX_MODULES_PER_FOLDER = 15
# The modules that serve pages and the API: what a person or client sees, above the domain's own rules.
WEB_MODULES = {"views", "api", "statement_api", "admin", "forms", "estimator_forms", "serializers", "urls",
               "context_processors"}


def floors() -> dict[str, int]:
    """{top-level package: floor} from the table under "## Floors" (| floor | `pkg`, `pkg` | … |)."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if match:
            for package in re.findall(r"`([a-z_]+)/?`", match.group(2)):
                table[package] = int(match.group(1))
    return table


FLOORS = floors()


def first_party(name: str) -> str | None:
    top = name.split(".", 1)[0]
    return top if (ROOT / top / "__init__.py").exists() or (ROOT / f"{top}.py").exists() else None


def product_modules() -> list[Path]:
    paths = []
    for package in FLOORS:
        if (ROOT / package).is_dir():
            paths += sorted((ROOT / package).rglob("*.py"))
    return paths


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every import in the module, those inside functions included (an import hidden in a function is
    still an arrow between rooms). Relative imports are resolved against the module's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    if package is None:
        package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def test_the_floor_table_names_every_top_level_package():
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages - set(FLOORS) == set(), "a package with no floor: add it to docs/architecture.md"
    assert {"agents", "core", "teams", "cluster", "accounting", "config", "demo", "bench", "chaos"} <= set(FLOORS)
    assert FLOORS["agents"] < FLOORS["core"] < FLOORS["teams"] < FLOORS["cluster"] < FLOORS["accounting"]
    assert FLOORS["accounting"] < FLOORS["config"] < FLOORS["demo"] == FLOORS["bench"] == FLOORS["chaos"]


def floor_problems(where: str, source: str, imports: list[tuple[int, str]]) -> list[str]:
    problems = []
    for line, target in imports:
        top = first_party(target)
        if top is None or top == source or top == "tests":
            continue
        if top not in FLOORS:
            problems.append(f"{where}:{line} imports {target}, which has no floor")
        elif FLOORS[top] > FLOORS[source]:
            problems.append(f"{where}:{line} imports {target}: floor {FLOORS[source]} ({source}) reaches up "
                            f"to floor {FLOORS[top]} ({top})")
    return problems


def test_no_module_imports_a_higher_floor():
    problems = []
    for path in product_modules():
        problems += floor_problems(str(path.relative_to(ROOT)), module_name(path).split(".", 1)[0], imports_of(path))
    assert problems == []


def test_config_is_imported_only_by_entry_points_and_the_tools():
    problems = []
    for path in product_modules():
        source = module_name(path).split(".", 1)[0]
        if source in {"config", "demo", "bench", "chaos"}:
            continue
        problems += [f"{path.relative_to(ROOT)}:{line} imports {target}"
                     for line, target in imports_of(path) if target.split(".", 1)[0] == "config"]
    assert problems == []


def test_agents_import_no_django_and_nothing_of_the_server():
    problems = []
    for path in (ROOT / "agents").rglob("*.py"):
        for line, target in imports_of(path):
            top = target.split(".", 1)[0]
            if top in {"django", "rest_framework", "celery"} or (first_party(target) not in {None, "agents"}):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert problems == []


def test_domain_rules_never_import_pages():
    """models, services, selectors and pure maths sit below the views, API, admin and forms."""
    problems = []
    for path in product_modules():
        name = module_name(path)
        if name.split(".", 1)[0] in {"config", "demo", "bench", "chaos"} or "migrations" in name:
            continue
        if name.rsplit(".", 1)[-1] in WEB_MODULES or name.endswith(".tasks") or ".management." in name:
            continue
        for line, target in imports_of(path):
            if first_party(target) and target.rsplit(".", 1)[-1] in WEB_MODULES and (ROOT / (target.replace(".", "/") + ".py")).exists():
                problems.append(f"{path.relative_to(ROOT)}:{line} imports the page module {target}")
    assert problems == []


@pytest.mark.parametrize("path", product_modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_a_long_file_says_why(path):
    lines = path.read_text().count("\n")
    if lines <= MAX_LINES or "migrations" in path.parts:
        return
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert LONG_REASON in docstring, f"{lines} lines: split it, or say '{LONG_REASON} …' in its docstring"


def test_no_folder_holds_more_than_15_modules():
    crowded = {}
    for package in FLOORS:
        for folder in [ROOT / package, *(ROOT / package).rglob("*")] if (ROOT / package).is_dir() else []:
            if not folder.is_dir() or folder.name in {"migrations", "__pycache__"}:
                continue
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > MAX_MODULES_PER_FOLDER:
                crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert crowded == {}


def test_the_rule_catches_an_upward_import_even_inside_a_function(tmp_path):
    """The checker itself can fail: a core module that imports accounting, hidden in a function."""
    probe = tmp_path / "probe.py"
    probe.write_text("from core.units import WHOLE_GPU_SHARE\n\ndef f():\n    from accounting.models import Statement\n")
    problems = floor_problems("core/probe.py", "core", imports_of(probe, package="core"))
    assert problems == [
        "core/probe.py:4 imports accounting.models: floor 2 (core) reaches up to floor 5 (accounting)",
        "core/probe.py:4 imports accounting.models.Statement: floor 2 (core) reaches up to floor 5 (accounting)",
    ]
