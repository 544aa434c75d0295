"""Fixture files: a realistic pod and its whole expected outcome (tests as data).

Each file states everything the webhook answers for its pod, so that any change of a decision fails a test:
the verdict, class and multi-node flag, the deny reason codes, message fragments (for a denial), one fragment
per warning of /validate and of /mutate (an empty list: no warnings), and the exact JSON Patch of /mutate
(``patch: []``: the pod is left as it is). ``mutated`` / ``mutatedAt`` show parts of the result for the reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REQUIRED = ("allowed", "class", "multiNode", "codes", "warnings", "mutationWarnings", "patch")


@dataclass(frozen=True)
class PodCase:
    name: str
    description: str
    pod: dict[str, Any]
    allowed: bool
    workload: str
    multi_node: bool
    codes: list[str]
    warnings: list[str]
    mutation_warnings: list[str]
    patch: list[dict[str, Any]]
    message: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    namespace: str | None = None
    mutated: dict[str, Any] | None = None
    mutated_at: dict[str, Any] = field(default_factory=dict)
    absent_after_mutation: list[str] = field(default_factory=list)


def load_pod_case(path: Path) -> PodCase:
    data = yaml.safe_load(path.read_text())
    expect = data["expect"]
    missing = [key for key in REQUIRED if key not in expect]
    if missing:
        raise ValueError(f"{path.name}: expect must state {', '.join(missing)} (the whole outcome)")
    if not expect["allowed"] and not expect.get("message"):
        raise ValueError(f"{path.name}: a denied pod's expect must give message fragments")
    return PodCase(
        name=path.stem, description=data["description"], pod=data["pod"], allowed=expect["allowed"],
        workload=expect["class"], multi_node=expect["multiNode"], codes=expect["codes"],
        warnings=expect["warnings"], mutation_warnings=expect["mutationWarnings"], patch=expect["patch"],
        message=expect.get("message", []), absent=expect.get("absent", []),
        namespace=(data.get("request") or {}).get("namespace"),
        mutated=data.get("mutated"), mutated_at=data.get("mutatedAt") or {},
        absent_after_mutation=expect.get("absentAfterMutation", []),
    )


def load_pod_cases() -> list[PodCase]:
    return [load_pod_case(path) for path in sorted((FIXTURES / "pods").glob("*.yaml"))]


def assert_warnings(actual: list[str], fragments: list[str]) -> None:
    """Exactly one warning per fragment, each containing its own fragment (in any order)."""
    assert len(actual) == len(fragments), f"expected {len(fragments)} warnings {fragments!r}, got {actual!r}"
    left = list(actual)
    for fragment in fragments:
        found = next((w for w in left if fragment in w), None)
        assert found is not None, f"{fragment!r} not in {left!r}"
        left.remove(found)


POD_CASES = load_pod_cases()


def pod_cases() -> Any:
    return pytest.mark.parametrize("case", POD_CASES, ids=[c.name for c in POD_CASES])


STACK = ROOT / "tests" / "manifests" / "stack"


EXPECTED: dict[str, list[list[Any]]] = yaml.safe_load((ROOT / "tests" / "fixtures" / "stack-expected.yaml").read_text())
