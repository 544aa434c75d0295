"""The generated matchConditions and the webhook agree: a pod the condition keeps from the API server's calls is
one the webhook would leave alone (no patch, no finding, no warning), for every fixture pod and generated ones.

The condition is evaluated with a CEL implementation (cel-rust, whose regular expressions, like the API server's
RE2, have no look-around); tests/e2e/test_apiserver.py shows the real API server accepting it and skipping the
calls.
"""

from __future__ import annotations

import copy
from typing import Any

import cel
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import RULES_FILE
from tests.support.contexts import as_context
from tests.support.fixtures import PodCase, pod_cases
from tests.support.strategies import pods
from webhook.config.rules_file import load_rules
from webhook.core.admission import judge_pod, mutate_verdict
from webhook.core.rules import Rules, compile_rules
from webhook.generate.match_conditions import match_conditions, pod_condition
from webhook.generate.webhooks import POD_GROUP_WEBHOOK, webhook_configurations

RULES = load_rules(RULES_FILE)
POD_REQUEST = {"resource": {"group": "", "version": "v1", "resource": "pods"}}


def condition_holds(expression: str, pod: dict[str, Any]) -> bool:
    return bool(cel.evaluate(expression, {"object": pod, "request": POD_REQUEST}))


def webhook_leaves_alone(pod: dict[str, Any], rules: Rules) -> bool:
    """No patch from /mutate, and /validate allows with nothing to say, in every mode."""
    mutation = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    verdict = judge_pod(copy.deepcopy(pod), ctx=as_context(rules), mode="deny", subject="pod")
    return not mutation.patch and not mutation.warnings and verdict.allowed and not verdict.findings


def assert_agree(pod: dict[str, Any], rules: Rules = RULES) -> None:
    for pods_only in (True, False):  # the mutating entry's condition, and the validating entries'
        (condition,) = match_conditions(rules, pods_only=pods_only)
        if not condition_holds(condition["expression"], pod):
            assert webhook_leaves_alone(pod, rules), "the condition keeps a pod from the webhook that it would change"


@pod_cases()
def test_fixture_pods(case: PodCase) -> None:
    assert_agree(case.pod)
    # every fixture the webhook acts on is sent (a pod of class none with a path to a GPU too); a plain pod is not
    sent = condition_holds(pod_condition(RULES) or "", case.pod)
    if case.workload != "none" or case.codes or case.warnings:
        assert sent
    if case.name == "nginx-no-gpu":
        assert not sent


NOT_ACCELERATORS = ["cpu", "memory", "example.com/fpga", "nvidia.com/gpucores", "gpu.intel.com/millicores",
                    "aws.amazon.com/neuron", "google.com/tpu"]


def _gpu_pod(resources: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "i"}
    if resources:
        container["resources"] = {"limits": resources}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [container]}}


@pytest.mark.parametrize("pod", [
    _gpu_pod({"gpu.intel.com/xe": "1"}),                     # another vendor's GPU
    _gpu_pod({"aliyun.com/gpu-mem": "3"}),                   # a share of one GPU by its memory
    _gpu_pod({"example.com/gpu": "1"}),                      # a GPU-looking resource no rule names
    _gpu_pod({"Example.com/VGPU": "1"}),                     # ... matched without case, as the webhook does
    _gpu_pod(annotations={"gpu-fraction": "0.5"}),           # KAI-Scheduler's share by annotation, no resource
    _gpu_pod(annotations={"gpu-memory": "2000"}),
    _gpu_pod({"volcano.sh/gpu-memory": "1024"}),             # Volcano's device plugin: a share by its memory
    _gpu_pod({"deviceclass.resource.kubernetes.io/mig.nvidia.com": "1"}),  # a MIG slice by DRA's implicit name
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i", "envFrom": [{"configMapRef": {"name": "gpu-env"}}]}]}},  # keys unseen: voided
], ids=["intel", "gpushare", "unknown", "unknown-case", "kai-fraction", "kai-memory", "volcano-share", "dra-mig",
        "env-from"])
def test_every_new_way_to_ask_for_a_gpu_is_sent(pod: dict[str, Any]) -> None:
    assert condition_holds(pod_condition(RULES) or "", pod)
    assert not webhook_leaves_alone(pod, RULES)
    assert_agree(pod)


@st.composite
def quiet_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Generated pods, most stripped of accelerators and ai-admission annotations (kept: labels, owners and env
    that signals read, or nearly do): the pods where the condition decides anything."""
    pod = draw(pods())
    if draw(st.integers(0, 3)):
        for container in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]:
            for amounts in (container.get("resources") or {}).values():
                for name in [n for n in amounts if RULES.accelerators.is_accelerator(n)]:
                    amounts[draw(st.sampled_from(NOT_ACCELERATORS))] = amounts.pop(name)
        annotations = pod["metadata"].get("annotations") or {}
        for key in [k for k in annotations if k.startswith("ai-admission.io/")]:
            annotations[draw(st.sampled_from(["example.com/gpu-memory", "ai-admission.io-x/y"]))] = annotations.pop(key)
    return pod


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(quiet_pods())
def test_generated_pods(pod: dict[str, Any]) -> None:
    assert_agree(pod)


def test_other_resources_always_reach_the_validating_webhook() -> None:
    (condition,) = match_conditions(RULES, pods_only=False)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}}
    request = {"resource": {"group": "apps", "version": "v1", "resource": "deployments"}}
    assert cel.evaluate(condition["expression"], {"object": deployment, "request": request}) is True


def _pod(*, labels: dict[str, str] | None = None, owner: tuple[str, str] | None = None,
         env: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    metadata: dict[str, Any] = {"name": "p", "labels": labels or {}}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "o", "uid": "u"}]
    container = {"name": "c", "image": "i", "env": [{"name": name, "value": "2"} for name in env]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container]}}


def _rules_with(signals: list[dict[str, Any]]) -> Rules:
    document = yaml.safe_load(RULES_FILE.read_text())
    document["signals"] = signals
    return compile_rules(document, source="signals under test")


@pytest.mark.parametrize(("signal", "pod", "sent"), [
    # owner kinds in one API group, in the core group, in any group
    ({"owners": [{"kind": "Job", "apiGroup": "batch"}]}, _pod(owner=("batch/v1", "Job")), True),
    ({"owners": [{"kind": "Job", "apiGroup": "batch"}]}, _pod(owner=("batch.volcano.sh/v1alpha1", "Job")), False),
    ({"owners": [{"kind": "Node", "apiGroup": ""}]}, _pod(owner=("v1", "Node")), True),
    ({"owners": [{"kind": "Node", "apiGroup": ""}]}, _pod(owner=("example.com/v1", "Node")), False),
    ({"owners": [{"kind": "Node"}]}, _pod(owner=("example.com/v1", "Node")), True),
    # label values and patterns
    ({"labels": [{"key": "team", "values": ["ml"]}]}, _pod(labels={"team": "ml"}), True),
    ({"labels": [{"key": "team", "values": ["ml"]}]}, _pod(labels={"team": "web"}), False),
    ({"labels": [{"keyPattern": "^example\\.com/", "valuePattern": "^gpu"}]},
     _pod(labels={"example.com/pool": "gpu-a"}), True),
    ({"labels": [{"keyPattern": "^example\\.com/", "valuePattern": "^gpu"}]},
     _pod(labels={"example.com/pool": "cpu"}), False),
    # every condition of a signal: label and env
    ({"labels": [{"key": "team"}], "env": [{"namePattern": "^RANK$"}]}, _pod(labels={"team": "x"}, env=["RANK"]), True),
    ({"labels": [{"key": "team"}], "env": [{"namePattern": "^RANK$"}]}, _pod(labels={"team": "x"}), False),
])
def test_signal_conditions_as_cel(signal: dict[str, Any], pod: dict[str, Any], sent: bool) -> None:
    rules = _rules_with([{"class": "training", **signal}])
    assert condition_holds(pod_condition(rules) or "", pod) is sent
    assert_agree(pod, rules)
    assert webhook_leaves_alone(pod, rules) is not sent  # these conditions are exact: sent means classified


def test_rules_cel_cannot_express_send_every_pod() -> None:
    rules = _rules_with([{"class": "training", "labels": [{"keyPattern": "^(?!kubernetes\\.io/)team"}]}])
    assert pod_condition(rules) is None
    for configuration in webhook_configurations(rules):
        assert all("matchConditions" not in hook for hook in configuration["webhooks"]
                   if hook["name"] != POD_GROUP_WEBHOOK)  # not a pod's entry


# A GPU template of NVIDIA's DRA driver, pinned and sized (dra docs/gpu-allocation.md, with selectors added).
_A100_TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                  "metadata": {"name": "a100", "namespace": "ml"},
                  "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                      "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression":
                          'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" && '
                          'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'}}]}}]}}}}


def _plain(**spec: Any) -> dict[str, Any]:
    """A pod with no label, annotation or owner: only ``spec`` can tie it to GPUs."""
    container = {"name": "main", "image": "vllm/vllm-openai:v0.11.0", **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-", "namespace": "ml"},
            "spec": {"containers": [container], **spec}}


def test_pods_that_take_gpus_through_dra_are_sent() -> None:
    """A pod's claims are looked up by the webhook's watch, which CEL cannot do: any resourceClaims sends it."""
    from webhook.core.view.claims import CLAIM_TEMPLATE as TEMPLATE
    from webhook.core.view.claims import ClaimIndex

    index = ClaimIndex()
    index.put(TEMPLATE, _A100_TEMPLATE)
    claimed = _plain(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "a100"}],
                     container={"resources": {"claims": [{"name": "gpu"}]}})
    mutated = mutate_verdict(copy.deepcopy(claimed), ctx=as_context(RULES), mode="deny", claims=index.source("ml"))
    assert any(op["path"] == "/spec/priorityClassName" for op in mutated.patch)  # the webhook acts on it
    extended = _plain(container={"resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}}})
    for pods_only in (True, False):
        (condition,) = match_conditions(RULES, pods_only=pods_only)
        assert condition_holds(condition["expression"], claimed)
        assert condition_holds(condition["expression"], extended)
        assert not condition_holds(condition["expression"], _plain(resourceClaims=[]))
    without_dra = copy.deepcopy(RULES.raw)
    del without_dra["dra"]  # no GPU device classes: claims are none of ai-admission's business
    assert not condition_holds(pod_condition(compile_rules(without_dra)) or "", claimed)
