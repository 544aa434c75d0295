"""Fixture files: a realistic pod, its expected verdict and message fragments (tests as data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass(frozen=True)
class PodCase:
    name: str
    description: str
    pod: dict[str, Any]
    allowed: bool
    workload: str
    codes: list[str]
    message: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    warnings: list[str] | None = None
    multi_node: bool | None = None
    namespace: str | None = None
    mutated: dict[str, Any] | None = None
    mutated_at: dict[str, Any] = field(default_factory=dict)
    mutation_warnings: list[str] | None = None
    absent_after_mutation: list[str] = field(default_factory=list)


def load_pod_cases() -> list[PodCase]:
    cases = []
    for path in sorted((FIXTURES / "pods").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        expect = data["expect"]
        cases.append(PodCase(
            name=path.stem, description=data["description"], pod=data["pod"], allowed=expect["allowed"],
            workload=expect["class"], codes=expect.get("codes", []), message=expect.get("message", []),
            absent=expect.get("absent", []), warnings=expect.get("warnings"), multi_node=expect.get("multiNode"),
            namespace=(data.get("request") or {}).get("namespace"),
            mutated=data.get("mutated"), mutated_at=data.get("mutatedAt") or {}, mutation_warnings=expect.get("mutationWarnings"),
            absent_after_mutation=expect.get("absentAfterMutation", []),
        ))
    return cases


POD_CASES = load_pod_cases()


def pod_cases() -> Any:
    return pytest.mark.parametrize("case", POD_CASES, ids=[c.name for c in POD_CASES])
