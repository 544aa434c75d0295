"""The pod the native policy judges whole (`webhook.generate.native_record`): the record it writes is the webhook's
to the byte, each clause of its judgement turns a pod down for what the webhook would add or say, and the
webhooks' condition leaves out only a pod that carries the policy's mark.

Each pod goes through the admission chain emulated in-process (`tests.support.policy_chain`: the native set alone,
its CEL evaluated by cel-cpp), on nodes that have its model (`tests.support.clusters.a100_cluster`); the webhook's
own answer comes from the core.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from tests.support.cel_engine import evaluate
from tests.support.parity import CONTEXTS, NAMESPACE, Installations, installations, judged
from tests.support.policy_chain import Outcome
from webhook.core import names
from webhook.core.rules import Rules
from webhook.generate import native, native_record

A100 = next(c for c in CONTEXTS if c.name.startswith("A100"))
NO_NODE = next(c for c in CONTEXTS if c.name == "no node known")


@pytest.fixture(scope="module")
def setup(rules: Rules) -> Installations:
    return installations(rules, A100)


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


def natively(setup: Installations, pod: dict[str, Any]) -> Outcome:
    return setup.native.create(pod, NAMESPACE)


@pytest.mark.parametrize("memory", ["40Gi", "1536Mi", "1024Mi", "80Gi", "1Ti", "100Mi"])
@pytest.mark.parametrize("workload", ["training", "inference", "hpo", "batch"])
def test_the_record_is_the_webhooks_to_the_byte(setup: Installations, workload: str, memory: str) -> None:
    pod = course_pod(workload, memory)
    webhook = setup.alone.create(pod, NAMESPACE)
    ours = natively(setup, pod)
    if memory in ("1Ti",):  # more than a card holds: the webhook denies it, and the policy judges nothing
        assert not webhook.allowed and not judged(ours)
        return
    if workload in ("inference", "batch") and memory in ("1536Mi", "1024Mi", "100Mi"):
        # one L4 card of the cluster holds it: the webhook says so (training and hpo are not told, by the rules),
        # and the policy, whose facts' card says the same, judges nothing
        assert [w for w in webhook.warnings if "fits one l4-24g card" in w], webhook.warnings
        assert not judged(ours)
        return
    assert judged(ours), (workload, memory)
    assert ours.pod["metadata"]["annotations"][names.PROFILE] == webhook.pod["metadata"]["annotations"][names.PROFILE]


def test_the_course_pod_is_judged_whole_and_costs_the_webhooks_no_call(setup: Installations) -> None:
    for workload in ("training", "inference", "hpo", "batch"):
        pod = course_pod(workload)
        assert judged(natively(setup, pod)), workload
        both = setup.both.create(pod, NAMESPACE)
        assert both.webhook_calls == 0 and both.allowed, workload


def _privileged(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def _sidecar(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"].append({"name": "log", "image": "busybox:1.36",
                                      "resources": {"limits": {"memory": "1Gi", "cpu": "1"}}})


def _init_container(pod: dict[str, Any]) -> None:
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox:1.36",
                                      "resources": {"limits": {"memory": "1Gi", "cpu": "1"},
                                                    "requests": {"memory": "1Gi", "cpu": "1"}}}]


def _resource(name: str, amount: str) -> Any:
    def change(pod: dict[str, Any]) -> None:
        for part in ("limits", "requests"):
            pod["spec"]["containers"][0]["resources"][part][name] = amount
    return change


def _set(path: tuple[str, ...], value: Any) -> Any:
    def change(pod: dict[str, Any]) -> None:
        target = pod
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
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
    "a DeviceClass's extended resource (the webhook warns of one it does not know)":
        _resource("deviceclass.resource.kubernetes.io/example", "1"),
    "an instance type beside the model label": _set(("spec", "nodeSelector", "node.kubernetes.io/instance-type"),
                                                    "a2-ultragpu-8g"),
    "a model the index lacks": _set(("spec", "nodeSelector", "gpu-type"), "z9000"),
    "a model no node has (the webhook warns)": _set(("spec", "nodeSelector", "gpu-type"), "t4-16g"),
    "more GPUs than a node holds": _resource("nvidia.com/gpu", "16"),
    "two accelerators": _resource("amd.com/gpu", "1"),
    "another vendor's card": lambda pod: (pod["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
                                          pod["spec"]["containers"][0]["resources"]["requests"].pop("nvidia.com/gpu"),
                                          _resource("amd.com/gpu", "2")(pod)),
    "an init container with GPUs": lambda pod: pod["spec"].__setitem__("initContainers", [
        {"name": "warm", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}}]),
    "a multi-node job (NCCL)": _set(("metadata", "annotations", names.MULTI_NODE), "true"),
    "GPUs CEL cannot count (a share by memory)": lambda pod: (
        pod["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
        pod["spec"]["containers"][0]["resources"]["requests"].pop("nvidia.com/gpu"),
        _resource("aliyun.com/gpu-mem", "8")(pod)),
    "no memory limit (the webhook warns of /dev/shm)": lambda pod: [
        pod["spec"]["containers"][0]["resources"][part].pop("memory") for part in ("limits", "requests")],
    "requests that differ from the limits": _resource("nvidia.com/gpu", "2") and (
        lambda pod: pod["spec"]["containers"][0]["resources"]["requests"].__setitem__("nvidia.com/gpu", "1")),
}


@pytest.mark.parametrize("what", list(POD_CHANGES))
def test_the_webhook_keeps_a_pod_it_would_add_to_or_judge(setup: Installations, what: str) -> None:
    pod = course_pod()
    POD_CHANGES[what](pod)
    assert not judged(natively(setup, pod)), what
    assert setup.both.create(pod, NAMESPACE).webhook_calls > 0, what


def test_with_no_node_known_no_pod_is_judged(rules: Rules) -> None:
    outcome = installations(rules, NO_NODE).native.create(course_pod(), NAMESPACE)
    assert outcome.allowed and not judged(outcome)
    # but it gets what its class's settings give it
    assert outcome.pod["spec"]["priorityClassName"] == "ai-training" and outcome.pod["spec"]["volumes"]


def test_only_training_asks_for_guaranteed_qos_and_only_inference_for_every_spread_key(setup: Installations,
                                                                                      rules: Rules) -> None:
    burstable = course_pod("training")
    del burstable["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    burstable["spec"]["containers"][0]["resources"]["limits"].pop("cpu")
    assert not judged(natively(setup, burstable))  # the webhook warns: not Guaranteed
    burstable["metadata"]["annotations"][names.WORKLOAD_TYPE] = "inference"
    assert judged(natively(setup, burstable))
    # H100 nodes of the cluster are all in one zone: the webhook warns that replicas are not spread over zones
    one_zone = copy.deepcopy(burstable)
    one_zone["spec"]["nodeSelector"] = {"gpu-type": "h100-80g"}
    assert not judged(natively(setup, one_zone))
    training = course_pod("training")
    training["spec"]["nodeSelector"] = {"gpu-type": "h100-80g"}
    assert judged(natively(setup, training))


def test_no_policy_judges_where_the_webhook_has_more_to_say(rules: Rules) -> None:
    """A queueing backend's words, a class's pool tolerations, no record: the webhooks keep every pod."""
    unrecorded = replace(rules, mutation=replace(rules.mutation, record_profile=False))
    assert native.judging_classes(unrecorded) == [] and native.webhook_patch(unrecorded) == []
    assert native.judging_classes(rules) == ["batch", "hpo", "inference", "training"]
    pooled = replace(rules, classes={**rules.classes, "batch": replace(rules.classes["batch"], mutate=replace(
        rules.classes["batch"].mutate, tolerations=({"key": "pool", "operator": "Exists"},)))})
    assert native.judging_classes(pooled) == ["hpo", "inference", "training"]


def test_the_policy_writes_the_record_and_its_mark_and_removes_a_mark_it_did_not_write(setup: Installations) -> None:
    """In its one JSON Patch: the API server evaluates each mutation's variables afresh against the pod the mutations
    before it left, and the judgement must see the pod as sent, not with the /dev/shm volume already added."""
    ours = natively(setup, course_pod()).pod["metadata"]["annotations"]
    assert ours[names.JUDGED_BY] == native_record.JUDGE and ours[names.PROFILE].startswith('{"class":"training"')
    forged = course_pod()
    forged["metadata"]["annotations"][names.JUDGED_BY] = native_record.JUDGE
    forged["metadata"]["annotations"][names.PREEMPTIBLE] = "true"  # not judged whole
    outcome = natively(setup, forged)
    assert native.POLICY in outcome.applied and names.JUDGED_BY not in outcome.pod["metadata"]["annotations"]
    stale = course_pod()
    stale["metadata"]["annotations"][names.PROFILE] = "{}"  # a record of another day is replaced, as the webhook does
    assert natively(setup, stale).pod["metadata"]["annotations"][names.PROFILE] == ours[names.PROFILE]


def _condition(rules: Rules) -> str:
    """The mutating webhook's condition, as the native component leaves it."""
    (expression,) = {c["expression"] for p in native.webhook_patch(rules) if p["kind"] == "MutatingWebhookConfiguration"
                     for w in p["webhooks"] for c in w["matchConditions"] if c["name"] == "may-concern-ai-admission"}
    return expression


def test_the_webhooks_leave_out_only_a_pod_marked_by_its_class_policy(rules: Rules) -> None:
    condition = _condition(rules)
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
    forged = course_pod()
    forged["metadata"]["annotations"][names.JUDGED_BY] = native_record.JUDGE
    forged["spec"]["priorityClassName"] = "ai-training" if change == "claims" else change
    if change == "claims":
        forged["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    request = {"resource": {"resource": "pods"}, "operation": "CREATE", "subResource": ""}
    assert evaluate(_condition(rules), object=forged, request=request) is True


def test_the_native_component_leads_every_webhooks_condition_with_the_judgement(rules: Rules) -> None:
    """The judgement joined to the front of each entry's first condition: the API server evaluates every condition
    of an entry, and a pod judged whole must not pay for the long one; the rest of each list as generated."""
    from webhook.generate import webhooks
    from webhook.generate.webhooks import webhook_configurations

    patch = native.webhook_patch(rules)
    generated = webhook_configurations(rules)
    assert [(p["kind"], p["metadata"]["name"]) for p in patch] == \
        [(c["kind"], c["metadata"]["name"]) for c in generated]
    judged_natively = native_record.judged_natively({w: f"ai-{w}" for w in native.judging_classes(rules)})
    for patched, configuration in zip(patch, generated, strict=True):
        pods = [w for w in configuration["webhooks"] if w["name"] != webhooks.POD_GROUP_WEBHOOK]  # not a pod's
        assert len(patched["webhooks"]) == len(pods)
        for entry, webhook in zip(patched["webhooks"], pods, strict=True):
            (first, *rest) = webhook["matchConditions"]
            assert entry["name"] == webhook["name"] and entry["matchConditions"][1:] == rest
            assert entry["matchConditions"][0] == {
                "name": first["name"], "expression": f"!({judged_natively})\n&& ({first['expression']})"}
