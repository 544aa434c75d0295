"""The native policy set as generated: one MutatingAdmissionPolicy for every class (their settings as CEL maps keyed
by the class), what it writes taken from the classes' settings, and none of the shapes a v1.36 API server cannot
take. Whether the CEL gives the webhook's answer is tested offline over thousands of pods
(tests/unit/test_native_parity.py) and through a real API server (tests/e2e/test_native.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.support.cel_engine import evaluate
from tests.support.contexts import as_context
from webhook.core import names
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import NAME as FACTS
from webhook.generate import native, native_record
from webhook.generate.cel.text import without_bind
from webhook.generate.cel.tolerations import TOLERATIONS_PATCH


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_one_policy_takes_every_class_bound_outside_the_excluded_namespaces(rules: Rules) -> None:
    """One policy for all classes: each policy the API server dispatches costs a pod a conversion and a match."""
    objects = native.class_policy(rules, [{"key": "x", "operator": "Exists"}])
    policies, bindings = by_kind(objects, "MutatingAdmissionPolicy"), by_kind(objects, "MutatingAdmissionPolicyBinding")
    assert set(policies) == set(bindings) == {native.POLICY}
    (binding,) = bindings.values()
    expressions = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expressions[0]["operator"] == "NotIn" and "kube-system" in expressions[0]["values"]
    assert expressions[1] == {"key": "x", "operator": "Exists"} and binding["spec"]["policyName"] == native.POLICY
    (condition,) = policies[native.POLICY]["spec"]["matchConditions"]
    assert all(f"'{w}'" in condition["expression"] for w in rules.classes)


def test_the_policy_writes_what_each_class_sets_and_guards_every_write(rules: Rules) -> None:
    (policy, _) = native.class_policy(rules)
    # one JSON Patch for every write: each mutation costs the API server an activation, an encoding and a decoding
    # of the pod, and evaluates its variables afresh
    (mutation,) = policy["spec"]["mutations"]
    assert mutation["patchType"] == "JSONPatch"
    joined = mutation["jsonPatch"]["expression"]
    assert joined.startswith(f"({without_bind(TOLERATIONS_PATCH)}) + (")
    assert joined.endswith(f"({without_bind(native_record.forged_patch())})")
    # plain maps as values: a typed list in a JSON Patch value made a v1.36 API server panic
    assert "Object." not in joined
    assert "'/spec/affinity'" in joined and "'/spec/topologySpreadConstraints'" in joined
    assert "'emptyDir': dyn({'medium': 'Memory', 'sizeLimit': variables.shmSize})" in joined
    assert "'/spec/activeDeadlineSeconds'" in joined
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    # each class's constants, keyed by the class: the PriorityClass (all three fields), /dev/shm, the deadline
    for workload, settings in rules.classes.items():
        priority = settings.priority_class
        assert priority is not None
        assert (f"'{workload}': dyn([dyn('{priority.name}'), dyn({priority.value}), "
                f"dyn('{priority.preemption_policy}')])") in joined, workload
        shm = settings.mutate.shm
        assert shm is not None and f"'{workload}': dyn([{float(shm.per_gpu)}, {float(shm.max)}, " in variables["shm"]
    assert "'hpo': dyn(7200)" in joined
    assert "'training': [dyn(false), dyn(100), dyn('')]" in variables["packing"]
    assert set(variables["spreading"].split("'")[1::2]) >= {"inference"}
    assert "training" not in variables["spreading"]


def test_each_class_gets_its_own_settings(rules: Rules) -> None:
    """The per-class maps, evaluated: a pod of each class reads its class's constants, a pod of none reads none."""
    (policy, _) = native.class_policy(rules)
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    for workload, settings in rules.classes.items():
        pod = {"metadata": {"annotations": {names.WORKLOAD_TYPE: workload}}, "spec": {"containers": []}}
        shm = evaluate(variables["shm"], object=pod, variables={"cls": workload})
        assert settings.mutate.shm is not None and shm[0] == float(settings.mutate.shm.per_gpu), workload
        packing = evaluate(variables["packing"], object=pod, variables={"cls": workload})
        assert bool(packing) == (settings.mutate.pod_affinity is not None), workload
    assert evaluate(variables["shm"], object={}, variables={"cls": ""}) == []


def test_a_class_that_changes_nothing_is_not_in_the_policy(rules: Rules) -> None:
    training = rules.classes["training"]
    bare = replace(training, priority_class=None, mutate=replace(training.mutate, shm=None, labels={}, annotations={},
                                                                   active_deadline_seconds=None, pod_affinity=None,
                                                                   topology_spread=None))
    quiet = replace(rules, classes={**rules.classes, "training": bare},
                    mutation=replace(rules.mutation, record_profile=False))
    assert "training" not in native.native_classes(quiet) and "inference" in native.native_classes(quiet)
    nothing = replace(quiet, classes={"training": bare})
    assert native.class_policy(nothing) == []
    # where no class writes anything, the set's GPU tolerations are the toleration policy's
    assert [o["metadata"]["name"] for o in native.policies(nothing)] == [native.TOLERATIONS] * 2


def test_the_set_holds_the_policy_the_parameters_kind_and_the_backstop(rules: Rules) -> None:
    found = native.native_set(rules)
    assert set(by_kind(found, "MutatingAdmissionPolicy")) == {native.POLICY}
    assert "ValidatingAdmissionPolicy" in [o["kind"] for o in found]
    # the policy takes the pods that may ask for GPUs, classed or not, for their tolerations
    (condition,) = by_kind(found, "MutatingAdmissionPolicy")[native.POLICY]["spec"]["matchConditions"]
    assert "nvidia.com/gpu" in condition["expression"]
    # the kind of the parameter the policy reads: the server creates the object and fills it
    (facts,) = [o for o in found if o["kind"] == "CustomResourceDefinition"]
    assert facts["spec"]["group"] == "ai-admission.io" and facts["spec"]["names"]["kind"] == "ClusterFacts"
    assert not any(o["kind"] == "ClusterFacts" for o in found)


def test_the_policy_reads_the_nodes_facts_from_the_parameter_the_server_writes(rules: Rules) -> None:
    """A policy whose parameter is not there is not run at all (Allow), so the webhook does everything then. A kind of
    our own, not a ConfigMap: a v1.36 API server stops reading a built-in paramKind for good once no binding names
    it (the native set reinstalled), and its policies then read a frozen copy (kubernetes/kubernetes#130887)."""
    policy, binding = native.class_policy(rules)
    assert policy["spec"]["paramKind"] == {"apiVersion": "ai-admission.io/v1alpha1", "kind": "ClusterFacts"}
    assert binding["spec"]["paramRef"] == {"name": FACTS, "namespace": "ai-admission",
                                           "parameterNotFoundAction": "Allow"}
    variables = [v["name"] for v in policy["spec"]["variables"]]
    facts = variables.index("facts")
    assert variables[facts:facts + 5] == ["facts", "synced", "modelKeys", "model", "priorityState"]
    assert {"packBy", "spreadKeys", "decided", "record"} <= set(variables)


# -- the webhook after the policies: the pod it makes alone, under every backend ---------------------------------

def _profiled(workload: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{workload}-0", "namespace": "ml-team", "labels": {"app": "llm"},
                         "annotations": {names.WORKLOAD_TYPE: workload, names.GPU_MEMORY: "40Gi"}},
            "spec": {"nodeSelector": {"gpu-type": "a100-80g"},
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "64Gi"}}}]}}


def _as_the_policies_leave_it(pod: dict, by_webhook: dict, rules: Rules) -> dict:
    """``pod`` with what the class policies write, taken from the webhook's own result (the CEL's equivalence to
    it is tests/e2e/test_native.py's): /dev/shm, the PriorityClass triple, the class label, the run-time bound, the
    placement (a pod that names none: its affinity is all placement)."""
    import copy

    result = copy.deepcopy(pod)
    volume = rules.mutation.shm_volume_name
    result["spec"]["volumes"] = [v for v in by_webhook["spec"].get("volumes", []) if v["name"] == volume]
    for mine, theirs in zip(result["spec"]["containers"], by_webhook["spec"]["containers"], strict=True):
        mounts = [m for m in theirs.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
        if mounts:
            mine["volumeMounts"] = mounts
    for key in ("priorityClassName", "priority", "preemptionPolicy", "activeDeadlineSeconds",
                "topologySpreadConstraints", "affinity"):
        if key in by_webhook["spec"]:
            result["spec"][key] = by_webhook["spec"][key]
    result["metadata"]["labels"][names.WORKLOAD_TYPE] = by_webhook["metadata"]["labels"][names.WORKLOAD_TYPE]
    return result


def test_after_the_policies_the_webhook_makes_the_pod_it_makes_alone_under_every_backend() -> None:
    """With both installed the policies run first (the MutatingAdmissionPolicy plugin precedes the webhooks), so
    the webhook sees their writes; it must add exactly what is left, the backend's own words included."""
    import copy

    import jsonpatch

    from tests.support.builders import rules_with
    from webhook.core.admission import mutate_verdict

    def mutated(pod: dict, rules: Rules) -> dict:
        verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny", namespace="ml-team")
        return jsonpatch.apply_patch(copy.deepcopy(pod), list(verdict.patch))

    checked = 0
    for backend in ("default", "kueue", "kai", "volcano", "coscheduling"):
        rules = rules_with({"scheduler": {"backend": backend}})
        for workload in rules.classes:
            pod = _profiled(workload)
            alone = mutated(pod, rules)
            after = mutated(_as_the_policies_leave_it(pod, alone, rules), rules)
            assert after == alone, (backend, workload)
            checked += 1
    assert checked == 20


def test_with_a_backend_the_generator_says_what_the_policies_leave_out(tmp_path: Path) -> None:
    import subprocess

    from tests.conftest import ROOT, RULES_FILE
    from tests.support.builders import CLI

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES_FILE.read_text().replace("\nscheduler:\n  backend: default\n",
                                                         "\nscheduler:\n  backend: kai\n", 1))
    done = subprocess.run([CLI, "manifests", "native", "--rules", str(rules_file)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "kind: MutatingAdmissionPolicy" in done.stdout
    assert "the kai backend's words on pods (queue, scheduler, group) are not in the native policies" in done.stderr
    shipped = subprocess.run([CLI, "manifests", "native"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shipped.returncode == 0 and shipped.stderr == ""


def test_every_manifest_holds_plain_strings(rules: Rules) -> None:
    """The library's predicates are strings typed by their precision; what is installed is plain YAML (a consumer's
    yaml.safe_dump refuses a subclass of str)."""
    import yaml

    from webhook.generate import backstop, webhooks

    for objects in (native.native_set(rules), backstop.manifests(rules), backstop.toleration_policy(rules),
                    webhooks.webhook_configurations(rules), native.webhook_patch(rules)):
        assert yaml.safe_dump_all(objects)
