"""The native policy set as generated: one MutatingAdmissionPolicy per class that changes something, what each
writes taken from the class's settings, and none of the shapes a v1.36 API server cannot take. Whether the CEL
gives the webhook's answer is tested through a real API server (tests/e2e/test_native.py): the ApplyConfiguration
expressions build typed objects, which no CEL evaluator outside the API server knows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from webhook.core import names
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import NAME as FACTS
from webhook.generate import backstop, native, native_record


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_each_class_has_its_policy_bound_outside_the_excluded_namespaces(rules: Rules) -> None:
    objects = [o for w in rules.classes for o in native.class_policy(rules, w, [{"key": "x", "operator": "Exists"}])]
    policies, bindings = by_kind(objects, "MutatingAdmissionPolicy"), by_kind(objects, "MutatingAdmissionPolicyBinding")
    assert set(policies) == set(bindings) == {f"ai-admission-native-{w}" for w in rules.classes}
    for name, binding in bindings.items():
        expressions = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert expressions[0]["operator"] == "NotIn" and "kube-system" in expressions[0]["values"]
        assert expressions[1] == {"key": "x", "operator": "Exists"} and binding["spec"]["policyName"] == name


def test_a_class_policy_writes_what_the_class_sets_and_guards_every_write(rules: Rules) -> None:
    for workload, settings in rules.classes.items():
        (policy, _) = native.class_policy(rules, workload)
        condition = policy["spec"]["matchConditions"][0]["expression"]
        assert f"'{names.WORKLOAD_TYPE}'" in condition and condition.endswith(f"== '{workload}'")
        # one JSON Patch for every write: each mutation costs the API server a conversion of the pod and back, an
        # apply configuration a structured merge on top, and each evaluates its variables afresh
        (mutation,) = policy["spec"]["mutations"]
        assert mutation["patchType"] == "JSONPatch"
        joined = mutation["jsonPatch"]["expression"]
        tolerations = backstop.TOLERATIONS_PATCH
        assert joined.startswith(f"({tolerations}) + (") and joined.endswith(f"({native_record.forged_patch()})"), workload
        plan = settings.mutate
        assert ("/spec/affinity" in joined) == (plan.pod_affinity is not None), workload
        assert ("/spec/topologySpreadConstraints" in joined) == (plan.topology_spread is not None), workload
        # plain maps as values: a typed list in a JSON Patch value made a v1.36 API server panic
        assert "Object." not in joined.removeprefix(f"({tolerations})"), workload
        priority = settings.priority_class
        assert priority is not None
        # all three: the Priority plugin has already resolved the pod's, and refuses a value that disagrees
        assert (f"variables.countable && object.spec.?priorityClassName.orValue('') == '' ? "
                f"[JSONPatch{{op: 'add', path: '/spec/priorityClassName', value: '{priority.name}'}}, "
                f"JSONPatch{{op: 'add', path: '/spec/priority', value: {priority.value}}}, "
                f"JSONPatch{{op: 'add', path: '/spec/preemptionPolicy', value: '{priority.preemption_policy}'}}] : []"
                ) in joined, workload
        assert ("'emptyDir': dyn({'medium': 'Memory', 'sizeLimit': variables.shmSize})" in joined) == \
            (settings.mutate.shm is not None), workload
        deadline = settings.mutate.active_deadline_seconds
        assert ("'/spec/activeDeadlineSeconds'" in joined) == (deadline is not None), workload
        assert f"'/metadata/labels/ai-admission.io~1workload-type', value: '{workload}'" in joined, workload


def test_a_class_that_changes_nothing_has_no_policy(rules: Rules) -> None:
    training = rules.classes["training"]
    bare = replace(training, priority_class=None, mutate=replace(training.mutate, shm=None, labels={}, annotations={},
                                                                   active_deadline_seconds=None, pod_affinity=None,
                                                                   topology_spread=None))
    quiet = replace(rules, classes={**rules.classes, "training": bare},
                    mutation=replace(rules.mutation, record_profile=False))
    assert native.class_policy(quiet, "training") == []
    assert native.class_policy(quiet, "inference") != []


def test_the_set_holds_the_classes_the_tolerations_for_the_rest_and_the_backstop(rules: Rules) -> None:
    found = native.native_set(rules)
    policies = by_kind(found, "MutatingAdmissionPolicy")
    assert set(policies) == {*(f"ai-admission-native-{w}" for w in rules.classes), native.TOLERATIONS}
    assert "ValidatingAdmissionPolicy" in [o["kind"] for o in found]
    # a pod a class policy takes gets its tolerations there, in the same merge, and skips the toleration policy
    (unless, accelerators) = policies[native.TOLERATIONS]["spec"]["matchConditions"]
    assert unless["name"] == "names-no-native-class" and all(f"'{w}'" in unless["expression"] for w in rules.classes)
    for workload in rules.classes:
        (mutation,) = policies[f"ai-admission-native-{workload}"]["spec"]["mutations"]
        assert backstop.TOLERATIONS_PATCH in mutation["jsonPatch"]["expression"]
    # the kind of the parameter the policies read: the server creates the object and fills it
    (facts,) = [o for o in found if o["kind"] == "CustomResourceDefinition"]
    assert facts["spec"]["group"] == "ai-admission.io" and facts["spec"]["names"]["kind"] == "ClusterFacts"
    assert not any(o["kind"] == "ClusterFacts" for o in found)


def test_the_class_policies_read_the_nodes_facts_from_the_parameter_the_server_writes(rules: Rules) -> None:
    """A policy whose parameter is not there is not run at all (Allow), so the webhook does everything then. A kind of
    our own, not a ConfigMap: a v1.36 API server stops reading a built-in paramKind for good once no binding names
    it (the native set reinstalled), and its policies then read a frozen copy (kubernetes/kubernetes#130887)."""
    for workload in rules.classes:
        policy, binding = native.class_policy(rules, workload)
        assert policy["spec"]["paramKind"] == {"apiVersion": "ai-admission.io/v1alpha1", "kind": "ClusterFacts"}
        assert binding["spec"]["paramRef"] == {"name": FACTS, "namespace": "ai-admission",
                                               "parameterNotFoundAction": "Allow"}
        variables = [v["name"] for v in policy["spec"]["variables"]]
        assert variables[variables.index("facts"):variables.index("facts") + 3] == ["facts", "synced", "model"]
        assert ("packBy" in variables) == (rules.classes[workload].mutate.pod_affinity is not None)
        assert ("spreadKeys" in variables) == (rules.classes[workload].mutate.topology_spread is not None)
    quiet = replace(rules, mutation=replace(rules.mutation, gpu_tolerations=False, record_profile=False))
    (hpo, binding) = native.class_policy(quiet, "hpo")  # places, tolerates, judges nothing: reads nothing
    assert "paramKind" not in hpo["spec"] and "paramRef" not in binding["spec"]


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
        verdict = mutate_verdict(copy.deepcopy(pod), rules=rules, mode="deny", namespace="ml-team")
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
