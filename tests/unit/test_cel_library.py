"""The CEL library (`webhook.generate.cel`): every predicate registered with the Python it stands for
(`webhook.generate.cel.precision.mirrored`) holds as its precision says, over the test corpus: an exact one where
the Python holds and nowhere else, a superset wherever it holds, a subset only where it holds.

Evaluated with `tests.support.cel_engine` (cel-cpp with the Kubernetes libraries), on every pod of the corpus as
the API server hands it to a policy (`tests.support.policy_chain.typed`) and every resource name the corpus asks
for, with more names beside them that look like accelerators or only nearly.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cel_engine import evaluate
from tests.support.parity import corpus
from tests.support.policy_chain import typed
from webhook.core.rules import Rules
from webhook.generate.cel import memory, model, paths, resources  # noqa: F401 - each module registers its predicates
from webhook.generate.cel.precision import MIRRORS, POD, RESOURCE, Exact, Mirror, Subset, Superset
from webhook.generate.cel.text import without_bind

NAMES = ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb",
         "example.com/gpu", "example.com/vgpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "aliyun.com/gpu-mem",
         "nvidia.com/GA102GL_A10", "nvidia.com/GRID_T4-1Q", "nvidia.com/GH100_NVSWITCH", "nvidia.com/mlnxnics",
         "devices.kubevirt.io/kvm", "deviceclass.resource.kubernetes.io/gpu.nvidia.com", "cpu", "memory",
         "hugepages-2Mi", "rdma/ib", "vpc.amazonaws.com/efa", "ephemeral-storage", "nvidia.com/gpu.shared"]


@pytest.fixture(scope="module")
def pods(rules: Rules) -> list[dict[str, Any]]:
    return [typed(pod) for _, pod in corpus(rules, pairs=0)]


def names(pods: list[dict[str, Any]]) -> list[str]:
    found = set(NAMES)
    for pod in pods:
        for kind in ("containers", "initContainers"):
            for container in pod["spec"].get(kind) or []:
                for part in ("limits", "requests"):
                    found.update((container.get("resources") or {}).get(part) or {})
    return sorted(found)


def holds(mirror: Mirror, cel: bool, python: bool) -> bool:
    if mirror.precision is Exact:
        return cel == python
    if mirror.precision is Superset:
        return cel or not python
    assert mirror.precision is Subset
    return python or not cel


@pytest.mark.parametrize("mirror", MIRRORS, ids=[m.name.removeprefix("webhook.generate.cel.") for m in MIRRORS])
def test_each_predicate_holds_as_its_precision_says(mirror: Mirror, rules: Rules, pods: list[dict[str, Any]]) -> None:
    expression = without_bind(mirror.build(rules))
    subjects: list[Any] = names(pods) if mirror.subject == RESOURCE else pods
    assert mirror.subject in (RESOURCE, POD)
    seen = {True: 0, False: 0}
    for subject in subjects:
        data = {"n": subject} if mirror.subject == RESOURCE else {"object": subject}
        cel = evaluate(expression, **data)
        python = mirror.python(subject, rules)
        assert isinstance(cel, bool), (subject, cel)
        assert holds(mirror, cel, bool(python)), (mirror.precision.__name__, cel, python, subject)
        seen[cel] += 1
    assert seen[True] and seen[False], f"{mirror.name} is {'always' if seen[True] else 'never'} true on the corpus"


def test_every_module_of_the_library_registers_its_predicates() -> None:
    modules = {m.name.rsplit(".", 1)[0].rsplit(".", 1)[1] for m in MIRRORS}
    assert modules == {"resources", "model", "memory", "paths"}
    assert len(MIRRORS) >= 8
