"""The backstop policy as generated: bindings that resolve a namespace's mode as the webhooks do, every kind the
webhook judges read, and CEL the admission environment compiles (tests/e2e/test_backstop.py sends it through a
real API server and holds it to the webhook's verdicts)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import RULES_FILE
from webhook.config.rules_file import load_rules
from webhook.core.rules import Rules, compile_rules
from webhook.core.workloads.kinds import KINDS
from webhook.generate import backstop
from webhook.generate.cel.text import cel_string, without_bind
from webhook.generate.cel.views import EXPERIMENT

RULES = load_rules(RULES_FILE)


def with_modes(default: str, namespaces: dict[str, str]) -> Any:
    document = copy.deepcopy(RULES.raw)
    document["modes"] = {"default": default, "namespaces": namespaces}
    return compile_rules(document)


def selected(binding: dict[str, Any]) -> list[dict[str, Any]]:
    return binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]


def test_bindings_follow_labels_then_the_rules_namespace_map_then_the_default() -> None:
    bindings = {b["metadata"]["name"].removeprefix(backstop.NAME + "-"): b
                for b in backstop.bindings(with_modes("deny", {"sandbox": "warn", "legacy": "audit"}))}
    assert sorted(bindings) == ["audit", "audit-label", "deny", "warn", "warn-label"]
    assert {k: b["spec"]["validationActions"] for k, b in bindings.items()} == {
        "deny": ["Deny"], "warn": ["Warn"], "warn-label": ["Warn"], "audit": ["Audit"], "audit-label": ["Audit"]}
    unlabelled = {"key": "ai-admission.io/mode", "operator": "NotIn", "values": ["warn", "audit"]}
    assert selected(bindings["deny"]) == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", "kube-node-lease", "ai-admission", "legacy", "sandbox"]}, unlabelled]
    assert selected(bindings["warn"])[1:] == [unlabelled, {"key": "kubernetes.io/metadata.name", "operator": "In",
                                                           "values": ["sandbox"]}]
    assert selected(bindings["audit-label"])[1:] == [{"key": "ai-admission.io/mode", "operator": "In",
                                                      "values": ["audit"]}]
    # cluster-scoped kinds (no namespace) take the default; every other binding is for namespaced objects only
    assert "resourceRules" not in bindings["deny"]["spec"]["matchResources"]
    for name in ("warn", "warn-label", "audit", "audit-label"):
        assert bindings[name]["spec"]["matchResources"]["resourceRules"][0]["scope"] == "Namespaced"


def test_a_default_of_warn_binds_deny_only_where_the_rules_say_deny() -> None:
    bindings = {b["metadata"]["name"].removeprefix(backstop.NAME + "-"): b
                for b in backstop.bindings(with_modes("warn", {"prod": "deny"}))}
    assert sorted(bindings) == ["audit-label", "deny", "warn", "warn-label"]
    assert selected(bindings["deny"])[-1] == {"key": "kubernetes.io/metadata.name", "operator": "In",
                                              "values": ["prod"]}
    assert "resourceRules" not in bindings["warn"]["spec"]["matchResources"]


def test_extra_namespace_expressions_narrow_every_binding() -> None:
    extra = {"key": "team", "operator": "In", "values": ["ml"]}
    assert all(selected(b)[-1] == extra for b in backstop.bindings(RULES, [extra]))


def test_shipped_as_two_policies_one_for_pods_one_for_the_kinds_templates() -> None:
    """Pods, the hot path, get a policy of their own, which reads no kind; the kinds' policy reads no pod.
    Together they read what one would."""
    pods, templates, *found = backstop.manifests(RULES)
    assert (pods["metadata"]["name"], templates["metadata"]["name"]) == (backstop.NAME, f"{backstop.NAME}-templates")
    assert [r["resources"] for r in pods["spec"]["matchConstraints"]["resourceRules"]] == [["pods"]]
    assert all("pods" not in r["resources"] for r in templates["spec"]["matchConstraints"]["resourceRules"])
    both = backstop.validating_policy(RULES)["spec"]["matchConstraints"]["resourceRules"]
    assert (pods["spec"]["matchConstraints"]["resourceRules"] + templates["spec"]["matchConstraints"]["resourceRules"]
            == both)
    variables = {p["metadata"]["name"]: {v["name"]: v["expression"] for v in p["spec"]["variables"]}
                 for p in (pods, templates)}
    assert not any(name.startswith("of_") for name in variables[backstop.NAME])
    assert variables[backstop.NAME]["views"].startswith("variables.subjects.map(o, [{'p': dyn('pod')")
    kinds = variables[f"{backstop.NAME}-templates"]
    assert "'pod'" not in kinds["views"] and "k == 'batch/Job' ? variables.of_batch_Job[i]" in kinds["views"]


def test_each_kind_is_read_by_a_variable_of_its_own_so_the_api_server_compiles_the_policy_in_time() -> None:
    """The API server does not enforce a policy before it has compiled it, and cel-go's type checker takes time
    quadratic in the size of one expression: the kinds' readers in one expression (76,541 characters) took 10 s to
    compile on a v1.36 API server, one variable per kind 0.47 s for the whole policy. A variable is evaluated only
    when read, so a request runs only its own kind's reader (an Experiment's trial, its trial kind's)."""
    templates = backstop.validating_policy(RULES, backstop.TEMPLATES)
    expressions = {v["name"]: v["expression"] for v in templates["spec"]["variables"]}
    readers = {name for name in expressions if name.startswith("of_")}
    assert len(readers) == len(backstop.readable_kinds()) - 1  # an Experiment is read through its trial's kind
    assert all(f"variables.{name}[i]" in expressions["views"] for name in readers)
    every = [(len(expression), policy["metadata"]["name"], where)
             for policy in [*backstop.manifests(RULES), *backstop.toleration_policy(RULES)]
             for where, expression in _expressions(policy["spec"])]
    assert every and max(every)[0] < 16_000, max(every)


def _expressions(spec: Any, where: str = "") -> list[tuple[str, str]]:
    """Every CEL expression of a policy's spec, with where it is."""
    if isinstance(spec, dict):
        return [found for key, value in spec.items() for found in
                ([(where, value)] if key in ("expression", "messageExpression") and isinstance(value, str)
                 else _expressions(value, f"{where}.{spec.get('name', key)}"))]
    if isinstance(spec, list):
        return [found for index, value in enumerate(spec) for found in _expressions(value, f"{where}[{index}]")]
    return []


def test_every_kind_the_webhook_judges_is_read_and_matched() -> None:
    assert sorted(backstop.readable_kinds()) == sorted(KINDS)
    policy = backstop.validating_policy(RULES)
    matched = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert {(k.group, k.resource) for k in KINDS.values()} | {("", "pods")} == matched
    views = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "views")
    for (group, kind), entry in KINDS.items():
        if (group, kind) == EXPERIMENT:  # read through its trial's kind
            assert f"variables.resource == '{entry.group}/{entry.resource}'" in next(
                v["expression"] for v in policy["spec"]["variables"] if v["name"] == "trials")
        else:
            assert f"k == '{group}/{kind}' ? variables.of_" in views


def test_the_policy_fails_closed_and_names_what_to_add() -> None:
    spec = backstop.validating_policy(RULES)["spec"]
    assert spec["failurePolicy"] == "Fail"
    (validation,) = spec["validations"]
    assert validation["reason"] == "Forbidden"
    assert '"ai-admission.io/gpu-model: a100-80g"' in validation["messageExpression"]
    assert '"ai-admission.io/gpu-memory: ' in validation["messageExpression"]


def test_no_cel_bind_reaches_the_api_server() -> None:
    """The admission CEL environment has no cel.bind: every one is rewritten into a one-element map."""
    text = str(backstop.manifests(RULES))
    assert "cel.bind" not in text
    assert without_bind("cel.bind(a, f(1, 'x,)'), cel.bind(b, [a, 2], a + b))") == \
        "[dyn(f(1, 'x,)'))].map(a, [dyn([a, 2])].map(b, a + b)[0])[0]"
    with pytest.raises(ValueError):
        without_bind("cel.bind(a, (1, 2)")


def _variables(rules: Rules) -> str:
    """The text of the pods' policy's variables that read the views."""
    return "\n".join(v["expression"] for v in backstop.validating_policy(rules, backstop.PODS)["spec"]["variables"]
                     if v["name"] in ("accelerators", "users", "modelNamed", "memoryStated", "paths"))


def test_the_rules_shape_the_cel() -> None:
    """Accelerators, model keys, memory resources and MIG come from the rules, not from the code."""
    document = copy.deepcopy(RULES.raw)
    document["accelerators"]["resources"]["example.com/npu"] = "nvidia"
    document["modelKeys"] = [*document["modelKeys"], "example.com/accelerator-model"]
    document["accelerators"]["migNeedsModel"] = True
    facts = _variables(compile_rules(document))
    assert "'example.com/npu'" in facts and "'example.com/accelerator-model'" in facts
    default = _variables(RULES)
    # the MIG pattern: to find accelerators and to keep MIG names out of the unknown accelerators, then as the model
    # (unless migNeedsModel) and as the memory
    assert default.count("n.matches('^nvidia") == facts.count("n.matches('^nvidia") + 1 > 6
    # the unknown accelerators from the rules' pattern, and none without it
    assert "(?i)" + RULES.raw["accelerators"]["unknownPattern"] in default
    del document["accelerators"]["unknownPattern"]
    plain = _variables(compile_rules(document))
    assert "(?i)" + RULES.raw["accelerators"]["unknownPattern"] not in plain
    # the device-named resources (passthrough GPUs, vGPU types), matched without case, and none without them
    devices = [d["pattern"] for d in RULES.raw["accelerators"]["deviceResources"]]
    assert all(cel_string("(?i)" + d) in default for d in devices)
    excluded = [d["exclude"] for d in RULES.raw["accelerators"]["deviceResources"] if "exclude" in d]
    assert excluded and all(f"!n.matches({cel_string('(?i)' + e)})" in default for e in excluded)
    del document["accelerators"]["deviceResources"]
    plain = _variables(compile_rules(document))
    assert "(?i)" not in plain


def test_the_toleration_policy_follows_the_rules() -> None:
    policy, binding = backstop.toleration_policy(RULES)
    assert policy["kind"] == "MutatingAdmissionPolicy" and policy["spec"]["failurePolicy"] == "Ignore"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", "kube-node-lease", "ai-admission"]}]
    assert "cel.bind" not in str(policy)
    document = copy.deepcopy(RULES.raw)
    document.setdefault("mutation", {})["gpuTolerations"] = False
    assert backstop.toleration_policy(compile_rules(document)) == []


def test_the_policy_reads_the_namespace_of_a_cluster_scoped_object_as_absent() -> None:
    """A cluster-scoped object's request has no namespace key (a real API server: "no such key: namespace", and the
    policy fails closed on a ClusterTrainingRuntime): every read of it is optional."""
    text = str(backstop.manifests(RULES))
    assert "request.?namespace.orValue('')" in text
    assert "request.namespace" not in text
