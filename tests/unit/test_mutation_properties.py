"""Property tests over generated pods: the patch always applies, the result always validates against the
Kubernetes schema, a second mutation is always empty, and nothing the user set is changed.

Runs the pure core in-process (the HTTPS path is covered by the fixture tests), with gang scheduling and RDMA
switched on so that every mutation step is exercised.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import yaml
from hypothesis import HealthCheck, given, settings

from tests.conftest import RULES_FILE
from tests.support.contexts import as_context
from tests.support.invariants import assert_user_values_kept, assert_well_formed
from tests.support.strategies import pods
from webhook.core.admission import judge_pod, mutate_verdict
from webhook.core.rules import compile_rules


def _all_steps_rules() -> Any:
    document = yaml.safe_load(RULES_FILE.read_text())
    training = document["classes"]["training"]["mutate"]
    training["gang"] = {"schedulerName": "volcano", "podGroupAnnotation": "scheduling.k8s.io/group-name"}
    training["rdma"] = {"resource": "rdma/ib", "amount": 1, "ipcLock": True}
    document["classes"]["batch"]["mutate"]["labels"] = {"kueue.x-k8s.io/queue-name": "batch"}
    document["classes"]["hpo"]["mutate"]["annotations"] = {"example.com/owner~team": "hpo"}
    return compile_rules(document, source="all-steps")


RULES = _all_steps_rules()









@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_mutation_properties(pod: dict[str, Any]) -> None:
    original = copy.deepcopy(pod)
    verdict = mutate_verdict(pod, ctx=as_context(RULES), mode="deny")
    assert pod == original, "mutation must not touch its input"
    mutated = jsonpatch.apply_patch(copy.deepcopy(pod), list(verdict.patch))
    assert_well_formed(mutated)
    assert_user_values_kept(original, mutated)
    again = mutate_verdict(mutated, ctx=as_context(RULES), mode="deny")
    assert list(again.patch) == []
    # Mutation never changes the class or the validation verdict it was based on.
    assert again.profile is not None and verdict.profile is not None
    assert again.profile.workload == verdict.profile.workload
    before = judge_pod(pod, ctx=as_context(RULES), mode="deny", subject="pod")
    after = judge_pod(mutated, ctx=as_context(RULES), mode="deny", subject="pod")
    assert [f.code for f in after.findings if f.severity == "deny"] == [
        f.code for f in before.findings if f.severity == "deny"]
