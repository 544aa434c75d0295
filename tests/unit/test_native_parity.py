"""The native set against the webhook, offline, in every ``make test``: thousands of pods through the admission chain
of a v1.36 API server emulated in-process (`tests.support.policy_chain`: the policies' CEL evaluated by cel-cpp
with the Kubernetes libraries, the webhook called as the server calls it), each with the webhooks alone, with the
native set and the webhooks, and with the native set alone, in clusters the server may see (`parity.CONTEXTS`).

The count of pods compared, of those judged whole and of the differences is printed at the end of the run
(``native parity``). What the emulation leaves out is the real API server's: tests/e2e/test_native.py runs the same
set there, on this machine.
"""

from __future__ import annotations

import collections

import pytest

from tests.support import parity
from webhook.core.rules import Rules

REPORT: list[str] = []  # printed by tests/conftest.py at the end of the run


@pytest.fixture(scope="module")
def single(rules: Rules) -> list[tuple[str, dict]]:
    return parity.corpus(rules, pairs=0)


@pytest.fixture(scope="module")
def paired(rules: Rules) -> list[tuple[str, dict]]:
    return parity.corpus(rules, pairs=2)


def _compared(rules: Rules, context: parity.Scenario, pods: list[tuple[str, dict]]) -> tuple[int, int, list[str]]:
    setup = parity.installations(rules, context)
    judged, found, known = 0, [], collections.Counter()
    for name, pod in pods:
        compared = parity.compare(name, pod, setup, rules)
        judged += parity.judged(compared.native)
        found += [f"{name}: {d}" for d in compared.differences]
        if compared.known:
            known[compared.known] += 1
    REPORT.append(f"{context.name}: {len(pods)} pods, {judged} judged whole by the native policy, "
                  f"{len(found)} differences" + "".join(f"; {n} known ({k.split(':')[0]})" for k, n in known.items()))
    return len(pods), judged, found


@pytest.mark.parametrize("context", parity.CONTEXTS, ids=[c.name for c in parity.CONTEXTS])
def test_the_native_set_gives_every_pod_what_the_webhooks_give_it(rules: Rules, context: parity.Scenario,
                                                                   single: list, paired: list) -> None:
    """The richest cluster (A100, H100 and L4 nodes, every PriorityClass as the rules say) with the edits of the
    profiled pods two at a time too; the others with each edit alone."""
    pods = paired if context.nodes is not None and context.priority.missing_priority_classes == frozenset() \
        else single
    count, judged, found = _compared(rules, context, pods)
    assert found == [], f"{len(found)} differences:\n" + "\n".join(found[:30])
    assert count >= (3000 if pods is paired else 600), count
    if context.nodes is None:
        assert judged == 0  # with no node known no pod is judged natively: the model's card is the nodes'
    elif pods is paired:
        assert judged >= 500, judged


def test_the_corpus_holds_what_it_says(rules: Rules, single: list, paired: list) -> None:
    names = [n for n, _ in paired]
    assert len(names) == len(set(names))
    assert any(n.startswith("fixture ") for n in names) and any(" + " in n for n in names)
    assert any(n.endswith("(named class)") for n in names)
    assert sum(" + " in n and n.count(" + ") == 2 for n in names) >= 1000
    if parity.published_present():
        assert sum(n.startswith(("NVIDIA", "kubeflow", "vllm")) for n, _ in single) >= 20
