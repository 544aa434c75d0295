"""The compiled core and the interpreted sources give the same verdicts, on every corpus the suite has.

mypyc compiles webhook/core from the same sources, but compiled code can differ where Python's dynamic behaviour
is relied on (a subclass check, a mutated default). ``ai-admission check -o json`` runs here over the fixture pods,
the AI stack's manifests, the kinds nobody wrote a table entry for and, where ../shared is present, the published
manifests: once with the build under test and once from an interpreted copy of the package (no compiled module
in it), and the two reports must be equal.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.build import expected_compiled_modules

CORPORA = [ROOT / "tests" / "fixtures" / "pods", ROOT / "tests" / "manifests",
           ROOT.parent / "shared" / "published-manifests"]


def _as_objects(corpus: Path, into: Path) -> Path:
    """The corpus as files of objects: each fixture pod file holds its pod under ``pod``, beside its expectations."""
    if corpus.name != "pods":
        return corpus
    into.mkdir()
    for fixture in sorted(corpus.glob("*.yaml")):
        (into / fixture.name).write_text(yaml.safe_dump(yaml.safe_load(fixture.read_text())["pod"]))
    return into


def _check(package_parent: Path | None, corpus: Path) -> str:
    prefix = f"import sys; sys.path.insert(0, {str(package_parent)!r}); " if package_parent else "import sys; "
    code = prefix + "from webhook.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "check", "-f", str(corpus), "-o", "json",
                           "--rules", str(ROOT / "rules" / "default.yaml")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


@pytest.mark.parametrize("corpus", [c for c in CORPORA if c.exists()], ids=lambda c: c.name)
def test_the_compiled_and_the_interpreted_core_agree(corpus: Path, tmp_path: Path) -> None:
    if not expected_compiled_modules():
        pytest.skip("this build is interpreted: nothing compiled to compare")
    pure = tmp_path / "pure"
    shutil.copytree(ROOT / "webhook", pure / "webhook",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    assert not list((pure / "webhook").rglob("*.so"))
    objects = _as_objects(corpus, tmp_path / "objects")
    assert _check(pure, objects) == _check(None, objects)
