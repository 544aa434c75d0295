"""The documentation is held to the tree: the README stays short and names every layer, the architecture page's
module table lists exactly the modules there are, every relative link leads somewhere, the generated reference
pages are current, and every reason code the core gives is documented (and every documented one is given)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webhook.cli.reference import PAGES
from webhook.core.bypasses.rules import PATHS as BYPASS_PATHS
from webhook.core.findings import CODES

README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "contributors" / "architecture.md"
PACKAGE = ROOT / "webhook"
LAYER_LINE = "cli > server > cluster | generate > config > core"

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_TABLE_PATH = re.compile(r"^\|\s*`(webhook/[^`]*)`\s*\|", re.MULTILINE)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def modules() -> set[str]:
    """Every module file under webhook/ except the package markers."""
    return {_relative(p) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts}


def packages() -> set[str]:
    """Every folder of webhook/ that is a package (holds an ``__init__.py``), webhook/ itself included."""
    return {_relative(p.parent) + "/" for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts}


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def links(text: str) -> list[str]:
    """The targets of the Markdown links in ``text``, outside code blocks and code spans."""
    prose = _INLINE_CODE.sub("", _FENCE.sub("", text))
    return _LINK.findall(prose)


def test_the_readme_is_short_and_names_every_layer() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n") + (not text.endswith("\n"))
    assert lines <= 220, f"README.md has {lines} lines: move detail into docs/ (at most 220)"
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert subpackages, "no subpackage of webhook/ found"
    missing = [name for name in subpackages if f"`webhook/{name}/`" not in text]
    assert not missing, f"README.md does not name {', '.join(f'`webhook/{n}/`' for n in missing)}"


def test_the_module_table_lists_exactly_the_modules() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    rows = _TABLE_PATH.findall(text)
    assert len(rows) == len(set(rows)), f"rows listed twice: {sorted({r for r in rows if rows.count(r) > 1})}"
    listed_modules = {r for r in rows if not r.endswith("/")}
    listed_packages = {r for r in rows if r.endswith("/")}
    assert not modules() - listed_modules, f"modules missing from the table: {sorted(modules() - listed_modules)}"
    assert not listed_modules - modules(), f"rows for modules that do not exist: {sorted(listed_modules - modules())}"
    assert not packages() - listed_packages, f"packages missing from the table: {sorted(packages() - listed_packages)}"
    assert not listed_packages - packages(), f"rows for packages that do not exist: {sorted(listed_packages - packages())}"


def test_the_layer_picture_is_there() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    pictures = [block for block in re.findall(r"^```text\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]
    assert any(LAYER_LINE in block.splitlines() for block in pictures), (
        f"architecture.md needs a ```text block with the line {LAYER_LINE!r}")


@pytest.mark.parametrize("page", pages(), ids=lambda p: _relative(p))
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue  # http(s), mailto, ... and anchors within the page
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{_relative(page)}: links to nothing: {broken}"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_reference_pages_are_current(name: str) -> None:
    page = DOCS / "reference" / name
    assert page.exists(), f"docs/reference/{name} is missing: run make generated"
    assert page.read_text(encoding="utf-8") == PAGES[name](), f"docs/reference/{name} is stale: run make generated"


def given_codes() -> dict[str, set[str]]:
    """Every reason code a ``deny("code", ...)`` or ``warn("code", ...)`` call under webhook/ gives, and where."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            first = node.args[0]
            if name in ("deny", "warn") and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.setdefault(first.value, set()).add(_relative(path))
    for code in BYPASS_PATHS.values():  # the bypass findings take their codes from their table, by path
        found.setdefault(code, set()).add("webhook/core/bypasses/rules.py")
    return found


def test_every_reason_code_is_documented_and_every_documented_one_is_given() -> None:
    given = given_codes()
    documented = {code.code for code in CODES}
    assert given, "no deny()/warn() call found under webhook/"
    undocumented = {code: sorted(where) for code, where in given.items() if code not in documented}
    assert not undocumented, f"codes given but not in webhook.core.findings.CODES: {undocumented}"
    assert not documented - given.keys(), f"codes in CODES that nothing gives: {sorted(documented - given.keys())}"


def test_every_top_level_rules_key_has_a_description() -> None:
    schema = json.loads((PACKAGE / "core" / "rules" / "rules.schema.json").read_text(encoding="utf-8"))
    undescribed = [key for key, spec in schema["properties"].items() if not (spec.get("description") or "").strip()]
    assert not undescribed, f"rules.schema.json: top-level keys without a description: {undescribed}"
