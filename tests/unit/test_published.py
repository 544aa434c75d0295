"""The published manifests as their projects publish them: every GPU spec is judged, and its verdict is what the
manifest's row of SOURCES.md implies.

../shared/published-manifests holds 60 manifests byte for byte from their repositories, with a table (SOURCES.md)
saying of each whether a pod template asks for an accelerator, and whether the manifest names the GPU model and
the GPU memory. They are read in place, never copied here; where ../shared is absent the module skips.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.contexts import as_context
from webhook.cli.check import read_documents
from webhook.core.documents import Report, check
from webhook.core.rules import Rules

PUBLISHED = ROOT.parent / "shared" / "published-manifests"
if not (PUBLISHED / "SOURCES.md").is_file():
    pytest.skip(f"no published manifests at {PUBLISHED}", allow_module_level=True)


@dataclass(frozen=True)
class Row:
    """One row of SOURCES.md: the file and what it names."""

    number: int
    file: str
    gpu: str      # "yes, nvidia.com/gpu 1", "no", "NPU, not GPU: ...", "yes, via DRA resourceClaims ..."
    model: str    # "yes: nodeSelector ...", "no", "partly: ..."
    memory: str

    @property
    def asks_for_gpus(self) -> bool:
        return self.gpu.lower().startswith("yes")

    @property
    def through_claims(self) -> bool:
        return "via dra" in self.gpu.lower()

    @property
    def names_model(self) -> bool:
        return self.model.lower().startswith(("yes", "partly"))

    @property
    def names_memory(self) -> bool:
        return self.memory.lower().startswith("yes")


def rows() -> list[Row]:
    found = []
    for line in (PUBLISHED / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit():
            found.append(Row(int(cells[0]), cells[1].strip("`"), cells[6], cells[7], cells[8]))
    return found


ROWS = rows()


def judged(path: Path, rules: Rules) -> Report:
    return check(list(read_documents([str(path)])), context=as_context(rules))


def test_the_table_lists_every_manifest() -> None:
    assert len(ROWS) == 60
    assert sorted(r.file for r in ROWS) == sorted(p.name for p in PUBLISHED.glob("*.yaml"))


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.number}-{r.file[:60]}" for r in ROWS])
def test_each_manifest_gets_the_verdict_its_row_implies(row: Row, rules: Rules) -> None:
    report = judged(PUBLISHED / row.file, rules)
    gpu_results = [r for r in report.results if r.verdict.profile is not None and r.verdict.profile.gpu_count > 0]
    if row.through_claims:
        # the claim template is not among the published file: the pod spec is judged, and told so
        warned = [r for r in report.results if any("is not known here" in w for w in r.verdict.warnings)]
        assert warned, [r.verdict.warnings for r in report.results]
        return
    if not row.asks_for_gpus:  # no GPU, or an NPU / a TPU: nothing to say about GPU model or memory
        assert gpu_results == [], [(r.kind, r.path) for r in gpu_results]
        assert not any({"gpu-model-missing", "gpu-memory-missing"} & set(r.verdict.reason_codes) for r in report.results)
        return
    assert gpu_results, f"no GPU spec of {row.file} was judged"
    for result in gpu_results:
        reasons = set(result.verdict.reason_codes)
        where = f"{result.kind} {result.name} {result.path}: {result.verdict.message}"
        assert ("gpu-model-missing" in reasons) is not row.names_model, where
        assert ("gpu-memory-missing" in reasons) is not row.names_memory, where
        assert not result.verdict.allowed or (row.names_model and row.names_memory), where


def test_no_manifest_is_skipped_that_asks_for_gpus(rules: Rules) -> None:
    """Objects left out are the ones with no pod template (Services, ConfigMaps, queues): none asks for a GPU."""
    report = judged(PUBLISHED, rules)
    asking = {r.file for r in ROWS if r.asks_for_gpus}
    no_pods = {"Service", "ConfigMap", "Namespace", "ResourceFlavor", "ClusterQueue", "LocalQueue", "StorageClass"}
    for document in report.skipped:
        assert str(document.obj.get("kind")) in no_pods or Path(document.source).name not in asking, document.where
        assert not report.unread_paths(document), document.where
    assert re.search(r"\bgenerically\b", " ".join(w for r in report.results for w in r.verdict.warnings)) is None
