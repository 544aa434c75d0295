"""The pod a class policy judges whole (`webhook.generate.native_record`): the record it writes is the webhook's to
the byte, each clause of its judgement turns it down for what the webhook would add or say, and the webhooks'
condition leaves out only a pod that carries the policy's mark.

The CEL is evaluated here with cel-cpp's binding on the pod and the policy's other variables given as values; the
variables themselves, and the whole judgement against the webhook's answers for every fixture and published pod,
are tests/e2e/test_native.py's, through a real API server.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional, ext_strings

from webhook.core import names
from webhook.core.admission import mutate_verdict
from webhook.core.rules import Rules
from webhook.generate import native, native_record
from webhook.generate.backstop import without_bind

ENV = cel.NewEnv(variables={"object": cel.Type.DYN, "variables": cel.Type.DYN, "request": cel.Type.DYN},
                 extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()])


def evaluate(expression: str, **data: Any) -> Any:
    found = ENV.compile(without_bind(expression), disable_check=True).eval(data=data).plain_value()
    assert not (isinstance(found, str) and found.startswith(("No ", "no such", "Unsupported"))), found
    return found


def course_pod(workload: str = "training", memory: str = "40Gi", gpus: int = 2) -> dict[str, Any]:
    """The course example's shape: the class and the memory by annotation, the model by nodeSelector, requests
    equal to limits."""
    resources = {"nvidia.com/gpu": str(gpus), "memory": "64Gi", "cpu": "8"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train", "labels": {"app": "train"},
                         "annotations": {names.WORKLOAD_TYPE: workload, names.GPU_MEMORY: memory}},
            "spec": {"nodeSelector": {"gpu-type": "a100-80g"},
                     "containers": [{"name": "train", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                                     "resources": {"limits": dict(resources), "requests": dict(resources)}}]}}


def course_variables(gpus: int = 2) -> dict[str, Any]:
    """The policy's other variables for `course_pod` on nodes that have the model (two zones, several hosts)."""
    return {"countable": True, "synced": True, "model": "a100-80g", "card": ["85899345920", "8", "nvidia", "nvlink"],
            "asked": ["nvidia.com/gpu"], "appGpus": [gpus], "initGpus": [], "gpus": gpus, "multiNode": 0, "pods": 0,
            "shmTaken": False, "appLabel": ["app", "train"], "spreadKeys": ["kubernetes.io/hostname",
                                                                            "topology.kubernetes.io/zone"]}


def decided(rules: Rules, workload: str, pod: dict[str, Any], variables: dict[str, Any]) -> bool:
    result = evaluate(native_record.decided(rules, workload, rules.classes[workload]), object=pod, variables=variables)
    assert isinstance(result, bool), result
    return result


@pytest.mark.parametrize("memory", ["40Gi", "1536Mi", "1024Mi", "80Gi", "1Ti", "100Mi"])
@pytest.mark.parametrize("workload", ["training", "inference", "hpo", "batch"])
def test_the_record_is_the_webhooks_to_the_byte(rules: Rules, workload: str, memory: str) -> None:
    pod = course_pod(workload, memory)
    webhook = {op["path"]: op["value"] for op in mutate_verdict(copy.deepcopy(pod), rules=rules, mode="deny").patch}
    ours = evaluate(native_record.record(workload, rules.classes[workload]), object=pod,
                    variables={**course_variables(), "decided": True})
    assert ours == webhook["/metadata/annotations/ai-admission.io~1profile"]
    assert evaluate(native_record.record(workload, rules.classes[workload]), object=pod,
                    variables={**course_variables(), "decided": False}) == ""


def test_the_course_pod_is_judged_whole(rules: Rules) -> None:
    for workload in ("training", "inference", "hpo", "batch"):
        assert decided(rules, workload, course_pod(workload), course_variables()), workload


def _privileged(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def _sidecar(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"].append({"name": "log", "image": "busybox:1.36",
                                      "resources": {"limits": {"memory": "1Gi", "cpu": "1"}}})


def _init_container(pod: dict[str, Any]) -> None:
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox:1.36",
                                      "resources": {"limits": {"memory": "1Gi", "cpu": "1"},
                                                    "requests": {"memory": "1Gi", "cpu": "1"}}}]


def _device_class(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["resources"]["limits"]["deviceclass.resource.kubernetes.io/example"] = "1"


def _set(path: tuple[str, ...], value: Any) -> Any:
    def change(pod: dict[str, Any]) -> None:
        target = pod
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    return change


def _drop(path: tuple[str, ...]) -> Any:
    def change(pod: dict[str, Any]) -> None:
        target = pod
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return change


# what the webhook would still add or say, and the pod change that makes it so
POD_CHANGES = {
    "a model named by annotation (the webhook pins it)": _set(("metadata", "annotations", names.GPU_MODEL), "a100-80g"),
    "another hint of ours": _set(("metadata", "annotations", names.PREEMPTIBLE), "true"),
    "a memory the webhook reads otherwise": _set(("metadata", "annotations", names.GPU_MEMORY), "40G"),
    "more memory than a card holds": _set(("metadata", "annotations", names.GPU_MEMORY), "96Gi"),
    "a PriorityClass of its own": _set(("spec", "priorityClassName"), "ai-batch"),
    "a privileged container": _privileged,
    "a hostPath volume": _set(("spec", "volumes"), [{"name": "dev", "hostPath": {"path": "/dev"}}]),
    "a CDI annotation": _set(("metadata", "annotations", "cdi.k8s.io/gpu"), "nvidia.com/gpu=all"),
    "a container that asks for no GPU (the webhook voids it)": _sidecar,
    "an init container that asks for no GPU (the webhook voids it too)": _init_container,
    "a DeviceClass's extended resource (the webhook warns of one it does not know)": _device_class,
    "an instance type beside the model label": _set(("spec", "nodeSelector", "node.kubernetes.io/instance-type"),
                                                    "a2-ultragpu-8g"),
}
VARIABLE_CHANGES = {
    "no nodes known": {"synced": False},
    "a model the index lacks": {"model": "?"},
    "a model no node has (the webhook warns)": {"card": []},
    "more GPUs than a node holds": {"gpus": 16, "appGpus": [16]},
    "two accelerators": {"asked": ["nvidia.com/gpu", "amd.com/gpu"]},
    "another vendor's card": {"card": ["85899345920", "8", "amd", "infinity-fabric"]},
    "an init container with GPUs": {"initGpus": [1]},
    "a multi-node job (NCCL)": {"multiNode": 1},
    "a GPU count CEL cannot read": {"countable": False},
}


@pytest.mark.parametrize("what", list(POD_CHANGES))
def test_the_webhook_keeps_a_pod_it_would_add_to_or_judge(rules: Rules, what: str) -> None:
    pod = course_pod()
    POD_CHANGES[what](pod)
    variables = {**course_variables(), "appGpus": [2] + [0] * (len(pod["spec"]["containers"]) - 1),
                 "initGpus": [0] * len(pod["spec"].get("initContainers", []))}
    assert not decided(rules, "training", pod, variables), what


@pytest.mark.parametrize("what", list(VARIABLE_CHANGES))
def test_the_webhook_keeps_a_pod_the_facts_do_not_vouch_for(rules: Rules, what: str) -> None:
    assert not decided(rules, "training", course_pod(), {**course_variables(), **VARIABLE_CHANGES[what]}), what


def test_only_training_asks_for_guaranteed_qos_and_only_inference_for_every_spread_key(rules: Rules) -> None:
    burstable = course_pod("training")
    del burstable["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    burstable["spec"]["containers"][0]["resources"]["limits"].pop("cpu")
    assert not decided(rules, "training", burstable, course_variables())  # the webhook warns: not Guaranteed
    burstable["metadata"]["annotations"][names.WORKLOAD_TYPE] = "inference"
    assert decided(rules, "inference", burstable, course_variables())
    one_zone = {**course_variables(), "spreadKeys": ["kubernetes.io/hostname"]}  # the webhook warns of the zone
    assert not decided(rules, "inference", burstable, one_zone)
    assert decided(rules, "training", course_pod(), one_zone)


def test_no_policy_judges_where_the_webhook_has_more_to_say(rules: Rules) -> None:
    """A queueing backend's words, a class's pool tolerations, no record: the webhooks keep every pod."""
    unrecorded = replace(rules, mutation=replace(rules.mutation, record_profile=False))
    assert native.judging_classes(unrecorded) == [] and native.webhook_patch(unrecorded) == []
    assert native.judging_classes(rules) == ["training", "inference", "hpo", "batch"]


def test_the_policy_writes_the_record_and_its_mark_and_removes_a_mark_it_did_not_write(rules: Rules) -> None:
    """In its one JSON Patch: the API server evaluates each mutation's variables afresh against the pod the mutations
    before it left, and the judgement must see the pod as sent, not with the /dev/shm volume already added."""
    policy, _ = native.class_policy(rules, "training")
    (mutation,) = policy["spec"]["mutations"]
    patch = mutation["jsonPatch"]["expression"]
    assert "path: '/metadata/annotations/ai-admission.io~1profile', value: variables.record}" in patch
    assert f"path: '/metadata/annotations/ai-admission.io~1judged-by', value: '{native_record.JUDGE}'}}" in patch
    assert patch.endswith(f"({native_record.forged_patch()})")
    assert [v["name"] for v in policy["spec"]["variables"]][-4:] == ["card", "gpus", "decided", "record"]


def test_the_webhooks_leave_out_only_a_pod_marked_by_its_class_policy(rules: Rules) -> None:
    (condition,) = {c["expression"] for p in native.webhook_patch(rules) for w in p["webhooks"]
                    for c in w["matchConditions"] if c["name"] == native_record.CONDITION_NAME}
    request = {"resource": {"resource": "pods"}, "operation": "CREATE", "subResource": ""}
    marked = course_pod()  # as the class policy leaves it
    marked["metadata"]["annotations"][names.JUDGED_BY] = native_record.JUDGE
    marked["spec"]["priorityClassName"] = "ai-training"
    assert evaluate(condition, object=marked, request=request) is False
    recorded = copy.deepcopy(marked)  # the webhook's own record: the validating webhooks still judge the pod
    del recorded["metadata"]["annotations"][names.JUDGED_BY]
    recorded["metadata"]["annotations"][names.PROFILE] = "{}"
    assert evaluate(condition, object=recorded, request=request) is True
    assert evaluate(condition, object=marked, request={**request, "subResource": "ephemeralcontainers"}) is True
    assert evaluate(condition, object=marked, request={**request, "operation": "UPDATE"}) is True
    deployment = {"metadata": marked["metadata"], "spec": {}}
    assert evaluate(condition, object=deployment, request={**request, "resource": {"resource": "deployments"}}) is True


@pytest.mark.parametrize("change", ["system-cluster-critical", "", "claims"])
def test_a_hand_written_mark_never_skips_what_the_webhook_denies_of_others_business(rules: Rules, change: str) -> None:
    """Where the policy did not run, a mark written by hand: the pod still goes to the webhooks when it names a
    PriorityClass other than its class's (the webhook denies those not allowed) or takes resource claims."""
    (condition,) = {c["expression"] for p in native.webhook_patch(rules) for w in p["webhooks"]
                    for c in w["matchConditions"] if c["name"] == native_record.CONDITION_NAME}
    forged = course_pod()
    forged["metadata"]["annotations"][names.JUDGED_BY] = native_record.JUDGE
    forged["spec"]["priorityClassName"] = "ai-training" if change == "claims" else change
    if change == "claims":
        forged["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    request = {"resource": {"resource": "pods"}, "operation": "CREATE", "subResource": ""}
    assert evaluate(condition, object=forged, request=request) is True


def test_the_native_component_adds_the_condition_to_every_webhook_keeping_their_own(rules: Rules) -> None:
    from webhook.generate.webhooks import webhook_configurations

    patch = native.webhook_patch(rules)
    generated = webhook_configurations(rules)
    assert [(p["kind"], p["metadata"]["name"]) for p in patch] == \
        [(c["kind"], c["metadata"]["name"]) for c in generated]
    for patched, configuration in zip(patch, generated, strict=True):
        assert len(patched["webhooks"]) == len(configuration["webhooks"])
        for entry, webhook in zip(patched["webhooks"], configuration["webhooks"], strict=True):
            assert entry["name"] == webhook["name"]
            assert entry["matchConditions"][:-1] == webhook["matchConditions"]
            assert entry["matchConditions"][-1]["name"] == native_record.CONDITION_NAME
