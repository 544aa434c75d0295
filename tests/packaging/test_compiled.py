"""The guard against compiled modules older than their sources, and the list of what is compiled.

In a checkout the compiled modules sit next to their sources and win the import; an edit made after `make
compile` must not be silently ignored. These tests build a fake package directory, so they hold whether or not
this checkout is compiled.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from pathlib import Path

import pytest

from setup import CORE
from tests.conftest import ROOT
from tests.support.build import expected_compiled_modules
from webhook import compiled

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def package(tmp_path: Path, *, checkout: bool = True) -> Path:
    root = tmp_path / "repo"
    (root / "webhook" / "core").mkdir(parents=True)
    if checkout:
        (root / "setup.py").write_text("")
    return root / "webhook"


def write(path: Path, mtime: float) -> None:
    path.write_text("")
    os.utime(path, (mtime, mtime))


def test_a_module_older_than_its_source_is_refused_with_the_fix(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    write(pkg / "core" / "profile.py", 2000)
    write(pkg / "core" / f"profile{SUFFIX}", 1000)
    write(pkg / "core" / "mutate.py", 1000)
    write(pkg / "core" / f"mutate{SUFFIX}", 2000)
    write(pkg / f"_core__mypyc{SUFFIX}", 500)  # the shared runtime has no source of its own
    assert compiled.stale(pkg) == ["core.profile"]
    with pytest.raises(ImportError, match=r"older than their sources \(core.profile\).*make compile.*make pure"):
        compiled.check_fresh(pkg)


def test_fresh_modules_and_a_pure_checkout_pass(tmp_path: Path) -> None:
    pkg = package(tmp_path)
    write(pkg / "core" / "profile.py", 1000)
    compiled.check_fresh(pkg)  # nothing compiled
    write(pkg / "core" / f"profile{SUFFIX}", 2000)
    compiled.check_fresh(pkg)
    write(pkg / f"_core__mypyc{SUFFIX}", 2000)
    assert compiled.built_modules(pkg) == ["core.profile"]


def test_an_installed_package_is_not_checked(tmp_path: Path) -> None:
    """A wheel's files get install-time stamps in any order; only a checkout (setup.py beside it) is checked."""
    pkg = package(tmp_path, checkout=False)
    write(pkg / "core" / "profile.py", 2000)
    write(pkg / "core" / f"profile{SUFFIX}", 1000)
    compiled.check_fresh(pkg)


def test_the_compiled_modules_are_the_request_path_and_exist() -> None:
    """The compile boundary is the folder webhook/core: every module in it, nothing outside it."""
    names = {Path(m).stem for m in CORE}
    assert {"review", "admission", "podview", "profile", "classify", "validate", "mutate", "patch"} <= names
    assert "app" not in names and "cli" not in names  # the Flask shell and the tooling stay interpreted
    assert all(m.startswith("webhook/core/") for m in CORE)
    assert {str(p.relative_to(ROOT)) for p in (ROOT / "webhook" / "core").rglob("*.py")
            if p.name != "__init__.py"} == set(CORE)
    assert all((ROOT / m).exists() for m in CORE)


def test_exactly_the_recorded_build_runs() -> None:
    """A compiled build runs every module of the request path compiled; a pure build runs none compiled."""
    for module in expected_compiled_modules() or ["core.admission", "core.documents"]:
        importlib.import_module(f"webhook.{module}")  # the request path, and the rest of the core
    expected = expected_compiled_modules()
    assert compiled.built_modules() == expected
    assert compiled.running_compiled() == expected
