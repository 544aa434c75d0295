"""The layers of the package are enforced, not just drawn: import-linter's contracts (setup.cfg) hold for the
tree as it is, and break when a core module imports from the server, starts a thread, or imports against the
core's own order (the spine above the features, the features above the profile and the rules)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def copy_of_the_package(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for folder in ("webhook", "certs"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(ROOT / "setup.cfg", root / "setup.cfg")
    return root


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    done = lint(copy_of_the_package(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 4 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("webhook/core/validate.py", "from webhook.server import metrics", "Layers: cli > server"),
    ("webhook/core/mutate.py", "import threading", "The core does no I/O"),
    ("webhook/cluster/nodes.py", "from webhook.generate import webhooks", "Layers: cli > server"),
    ("certs/__init__.py", "from webhook.cluster import client", "The certificate tooling stands alone"),
    # the core's own order: a workload reader that judges, a rules block that reads the profile
    ("webhook/core/workloads/kinds.py", "from webhook.core import admission", "The core's order"),
    ("webhook/core/backends/rules.py", "from webhook.core import profile", "The core's order"),
    ("webhook/core/profile.py", "from webhook.core import validate", "The core's order"),
    # the rules are the file: nothing below the cluster's view reads cluster state
    ("webhook/core/rules/model.py", "from webhook.core.view import cluster_view", "The core's order"),
    ("webhook/core/dra/rules.py", "from webhook.core.view import gpu_classes", "The core's order"),
])
def test_an_import_across_a_layer_breaks_a_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    root = copy_of_the_package(tmp_path)
    source = root / module
    source.write_text(source.read_text() + f"\n{line}  # noqa\n")
    done = lint(root)
    assert done.returncode != 0
    broken = [part for part in done.stdout.split("\n\n") if "BROKEN" in part]
    assert any(contract in part for part in broken), done.stdout


def test_the_core_order_lists_every_core_module() -> None:
    """Every module of webhook/core has its place in the order (itself, or the package it is in)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    layers = config["importlinter:contract:core-order"]["layers"]
    listed = {name for line in layers.split("\n") for name in line.replace("|", " ").split()}
    modules = set()
    for path in (ROOT / "webhook" / "core").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name != "webhook.core":
            modules.add(name)
    placed = {m for m in modules if any(m == entry or m.startswith(entry + ".") for entry in listed)}
    packages = {m for m in modules if any(other.startswith(m + ".") for other in modules)}
    assert modules - packages - placed == set(), "core modules with no place in setup.cfg's core order"
    assert listed <= modules, f"entries of the core order that are no module: {sorted(listed - modules)}"
