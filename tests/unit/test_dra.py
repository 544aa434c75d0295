"""GPUs claimed through DRA: claims and templates judged where the information lives, and pods profiled from them.

Every denial message is asserted whole: they are what a user reads to fix a claim. The device classes are the
rules' (`dra:` in rules/default.yaml); the catalog's names are read from the rules, so a catalog change does not
break these tests, only a change of what the messages say.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.support.builders import CLI, DEFAULT
from tests.support.contexts import as_context
from tests.support.dra import A100, MEM_40, PRODUCT_FIX, request, template
from tests.support.reviews import admission_review, apply_verdict, assert_valid_pod
from webhook.cluster.claims import PATHS, ClaimWatch
from webhook.cluster.informer import Api
from webhook.core.admission import decide, judge_claim, judge_object, judge_pod, mutate_verdict
from webhook.core.dra.claims import claim_findings
from webhook.core.profile import build_profile
from webhook.core.review import parse_review
from webhook.core.rules import Rules, RulesError, compile_rules
from webhook.core.view.claims import CLAIM, ClaimIndex
from webhook.core.view.claims import CLAIM_TEMPLATE as TEMPLATE

H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'






MEMORY_FIX = ('add the selector device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 (per GPU), '
              'or annotation "ai-admission.io/gpu-memory: 40Gi" on the {kind}')






def claim(*requests: dict[str, Any], name: str = "shared", annotations: dict[str, str] | None = None,
          namespace: str = "ml-team") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": CLAIM,
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"devices": {"requests": list(requests)}}}


def findings(obj: dict[str, Any], rules: Rules) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in claim_findings(obj, obj["kind"], as_context(rules))]


def with_dra(change: Any) -> Rules:
    document = copy.deepcopy(DEFAULT)
    change(document["dra"])
    return compile_rules(document, source="rules.yaml")


def test_pinned_model_and_memory_are_allowed(rules: Rules) -> None:
    assert findings(template(request(A100, MEM_40, count=2)), rules) == []
    assert findings(template(request(f"{A100} && {MEM_40}", count=8)), rules) == []
    assert findings(claim(request(A100, count=2), annotations={"ai-admission.io/gpu-memory": "40Gi"}), rules) == []


def test_nvidias_single_gpu_template_is_denied_with_the_cel_to_add(rules: Rules, known: str) -> None:
    """docs/gpu-allocation.md's template: any GPU, any memory."""
    assert findings(template(request()), rules) == [
        ("gpu-model-missing", f'request "gpu" (1 x gpu.nvidia.com) does not pin the GPU model: '
                              f'{PRODUCT_FIX.format(known=known)}'),
        ("gpu-memory-missing", 'request "gpu" (1 x gpu.nvidia.com) does not say how much GPU memory it needs: '
                               + MEMORY_FIX.format(kind="ResourceClaimTemplate")),
    ]
    assert findings(claim(request(MEM_40, count=2)), rules) == [
        ("gpu-model-missing", f'request "gpu" (2 x gpu.nvidia.com) does not pin the GPU model: '
                              f'{PRODUCT_FIX.format(known=known)}')]
    assert findings(claim(request(A100)), rules) == [
        ("gpu-memory-missing", 'request "gpu" (1 x gpu.nvidia.com) does not say how much GPU memory it needs: '
                               + MEMORY_FIX.format(kind="ResourceClaim"))]


@pytest.mark.parametrize("notes", [
    {"ai-admission.io/gpu-memory": "40Gi"},
    {"ai-admission.io/model-params": "7B", "ai-admission.io/model-precision": "bf16"},
])
def test_annotations_state_the_memory_on_the_template_or_on_its_claims(rules: Rules, notes: dict[str, str]) -> None:
    assert findings(template(request(A100), annotations=notes), rules) == []
    spec_notes = template(request(A100))
    spec_notes["spec"]["metadata"] = {"annotations": notes}  # copied to every claim made from the template
    assert findings(spec_notes, rules) == []


def test_a_capacity_request_states_the_memory(rules: Rules) -> None:
    """capacity.requests (consumable capacity) is the API's own way to write memory >= 40Gi."""
    assert findings(template(request(A100, capacity={"requests": {"memory": "40Gi"}})), rules) == []
    assert findings(template(request(A100, capacity={"requests": {"gpu.nvidia.com/memory": "40Gi"}})), rules) == []
    other = template(request(A100, capacity={"requests": {"example.com/memory": "40Gi"}}))
    assert [code for code, _ in findings(other, rules)] == ["gpu-memory-missing"]


def test_a_selector_that_cannot_be_read_states_nothing(rules: Rules, known: str) -> None:
    either = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" || true'
    assert [code for code, _ in findings(template(request(either, MEM_40)), rules)] == ["gpu-model-missing"]
    amd_guard = ('cel.bind(cap, device.capacity["gpu.amd.com"], has(cap.memory) && '
                 'cap.memory.compareTo(quantity("16Gi")) >= 0)')
    amd = 'device.attributes["gpu.amd.com"].productName == "AMD_Instinct_MI300X_OAM"'
    assert [code for code, _ in findings(template(request(amd, amd_guard, device_class="gpu.amd.com")), rules)] == [
        "gpu-memory-missing"]


def test_a_selector_on_another_drivers_domain_states_nothing(rules: Rules) -> None:
    amd = 'device.attributes["gpu.amd.com"].productName == "AMD_Instinct_MI300X_OAM"'
    assert [code for code, _ in findings(template(request(amd, MEM_40)), rules)] == ["gpu-model-missing"]


def test_amd_names_and_unknown_memory(rules: Rules) -> None:
    amd = 'device.attributes["gpu.amd.com"].productName == "AMD_Instinct_MI300X_OAM"'
    positive = 'device.capacity["gpu.amd.com"].memory.compareTo(quantity("0")) > 0'  # 0: the driver could not read it
    enough = 'device.capacity["gpu.amd.com"].memory.compareTo(quantity("160Gi")) >= 0'
    assert findings(template(request(amd, enough, device_class="gpu.amd.com", count=8)), rules) == []
    assert [code for code, _ in findings(template(request(amd, positive, device_class="gpu.amd.com")), rules)] == [
        "gpu-memory-missing"]


def test_unknown_product_and_two_products(rules: Rules, known: str) -> None:
    z100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA Z100"'
    assert findings(template(request(z100, MEM_40)), rules) == [
        ("gpu-model-unknown", f'request "gpu": product name "NVIDIA Z100" (selector {z100}) is not in the catalog; '
                              f"known models: {known}")]
    assert findings(template(request(A100, H100, MEM_40)), rules) == [
        ("gpu-model-conflict", 'request "gpu": the selectors pin the product names "NVIDIA A100-SXM4-80GB" and '
                               '"NVIDIA H100 80GB HBM3"; no device has both')]


def test_a_node_label_value_as_product_name_is_warned_about(rules: Rules) -> None:
    gfd = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA-A100-SXM4-80GB"'
    assert findings(template(request(gfd, MEM_40)), rules) == [
        ("gpu-product-name-form", 'request "gpu": product name "NVIDIA-A100-SXM4-80GB" has no spaces, but the driver '
                                  'of gpu.nvidia.com publishes names as nvidia-smi prints them, e.g. "NVIDIA '
                                  'A100-SXM4-80GB"; this selector may match no device')]


def test_count_memory_and_all_against_the_catalog(rules: Rules) -> None:
    assert findings(template(request(A100, MEM_40, count=16)), rules) == [
        ("gpu-count-exceeds-node", 'request "gpu" asks for 16 x a100-80g, but one a100-80g node holds 8; split the '
                                   'work over several pods (one per node) or use fewer GPUs')]
    too_much = 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("100Gi"))'
    assert findings(template(request(A100, too_much)), rules) == [
        ("gpu-memory-exceeds", 'request "gpu": the selector device.capacity["gpu.nvidia.com"].memory > 100Gi asks for '
                               'more memory than a a100-80g card holds (80Gi), so no device can match; use a model '
                               'with more memory (h200-141g, b200-180g, gb200-186g)')]
    assert findings(template(request(A100, count=2), annotations={"ai-admission.io/gpu-memory": "100Gi"}), rules) == [
        ("gpu-memory-exceeds", 'request "gpu": needs 100Gi of GPU memory per GPU (annotation '
                               'ai-admission.io/gpu-memory) but a a100-80g card holds 80Gi; use a model with more '
                               'memory (h200-141g, b200-180g, gb200-186g)')]
    weights = {"ai-admission.io/model-params": "70B", "ai-admission.io/model-precision": "fp16"}
    assert findings(template(request(A100), annotations=weights), rules) == [
        ("gpu-memory-exceeds", "needs 156.5Gi of GPU memory (ai-admission.io/model-params=70B x "
                               "ai-admission.io/model-precision=fp16 x 1.2 (batch memory factor)) but 1 x a100-80g "
                               "give 80Gi; ask for at least 2 GPUs")]
    assert findings(template(request(A100, count=2), annotations=weights), rules) == []
    assert findings(template(request(A100, MEM_40, mode="All")), rules) == [
        ("gpu-allocation-all", 'request "gpu" asks for every gpu.nvidia.com device of a node (allocationMode: All); '
                               'set allocationMode: ExactCount and a count (at most 8 for a100-80g)')]
    allowed = with_dra(lambda d: d.update(allowAllocationModeAll=True))
    assert findings(template(request(A100, MEM_40, mode="All")), allowed) == []


def test_requests_of_one_claim_share_a_node(rules: Rules) -> None:
    two = template(request(A100, MEM_40, name="a", count=6), request(A100, MEM_40, name="b", count=6))
    assert findings(two, rules) == [
        ("gpu-count-exceeds-node", 'requests "a", "b" ask for 12 x a100-80g in one claim, but one a100-80g node holds '
                                   '8; split the work over several pods (one per node) or use fewer GPUs')]


def test_each_first_available_alternative_is_judged(rules: Rules, known: str) -> None:
    prioritized = template({"name": "gpu", "firstAvailable": [
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "count": 4, "selectors": [{"cel": {"expression": H100}}]},
        {"name": "a100", "deviceClassName": "gpu.nvidia.com", "count": 8,
         "selectors": [{"cel": {"expression": f"{A100} && {MEM_40}"}}]},
        {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 16},
    ]})
    assert findings(prioritized, rules) == [
        ("gpu-memory-missing", 'request "gpu/h100" (4 x gpu.nvidia.com) does not say how much GPU memory it needs: '
                               + MEMORY_FIX.format(kind="ResourceClaimTemplate")),
        ("gpu-model-missing", f'request "gpu/any" (16 x gpu.nvidia.com) does not pin the GPU model: '
                              f'{PRODUCT_FIX.format(known=known)}'),
        ("gpu-memory-missing", 'request "gpu/any" (16 x gpu.nvidia.com) does not say how much GPU memory it needs: '
                               + MEMORY_FIX.format(kind="ResourceClaimTemplate")),
    ]


def test_mig_slices_need_their_memory_not_a_model(rules: Rules) -> None:
    assert findings(template(request('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',
                                     device_class="mig.nvidia.com", count=16)), rules) == []
    assert findings(template(request(device_class="mig.nvidia.com")), rules) == [
        ("gpu-memory-missing", 'request "gpu" (1 x mig.nvidia.com) does not say how much GPU memory it needs: add the '
                               'selector device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 '
                               '(per GPU) or device.attributes["gpu.nvidia.com"].profile == "1g.10gb", or annotation '
                               '"ai-admission.io/gpu-memory: 40Gi" on the ResourceClaimTemplate')]


def test_a_device_class_can_pin_the_model(known: str) -> None:
    pinned = with_dra(lambda d: d["deviceClasses"].update({"h100.example.com": {
        "domain": "gpu.nvidia.com", "productAttribute": "productName", "memoryCapacity": "memory",
        "productExample": "NVIDIA H100 80GB HBM3", "model": "h100-80g"}}))
    assert findings(template(request(MEM_40, device_class="h100.example.com", count=8)), pinned) == []
    assert findings(template(request(A100, MEM_40, device_class="h100.example.com")), pinned) == [
        ("gpu-model-conflict", 'request "gpu": device class "h100.example.com" is h100-80g but the selector pins '
                               '"NVIDIA A100-SXM4-80GB" (a100-80g); no device is both')]


def test_other_device_classes_and_admin_access_are_not_gpus(rules: Rules) -> None:
    channel = request(device_class="compute-domain-default-channel.nvidia.com")
    assert findings(template(channel), rules) == []
    assert findings(template(request(adminAccess=True)), rules) == []


def test_the_flat_v1beta1_form_is_read(rules: Rules) -> None:
    """``check`` reads files as written; the API server converts them to v1 before calling the webhook."""
    flat = template({"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 16,
                     "selectors": [{"cel": {"expression": A100}}, {"cel": {"expression": MEM_40}}]})
    assert [code for code, _ in findings(flat, rules)] == ["gpu-count-exceeds-node"]


def test_claims_kubernetes_makes_and_unchanged_updates_are_not_judged(rules: Rules) -> None:
    bare = claim(request())
    generated = claim(request(), annotations={"resource.kubernetes.io/pod-claim-name": "gpu"})
    assert judge_claim(generated, ctx=as_context(rules), mode="deny", kind=CLAIM) is None
    finalized = copy.deepcopy(bare)
    finalized["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    assert judge_claim(finalized, ctx=as_context(rules), mode="deny", kind=CLAIM, old=bare) is None
    annotated = claim(request(), annotations={"ai-admission.io/gpu-memory": "40Gi"})
    verdict = judge_claim(annotated, ctx=as_context(rules), mode="deny", kind=CLAIM, old=bare)
    assert verdict is not None and not verdict.allowed and verdict.reason_codes == ["gpu-model-missing"]


def test_the_verdict_follows_the_mode(rules: Rules, known: str) -> None:
    denied = judge_claim(template(request(MEM_40)), ctx=as_context(rules), mode="deny", kind=TEMPLATE, namespace="ml-team")
    assert denied is not None and denied.message == (
        'ResourceClaimTemplate "ml-team/gpus" was denied by ai-admission:\n'
        f'- request "gpu" (1 x gpu.nvidia.com) does not pin the GPU model: {PRODUCT_FIX.format(known=known)}')
    warned = judge_claim(template(request(MEM_40)), ctx=as_context(rules), mode="warn", kind=TEMPLATE)
    assert warned is not None and warned.allowed and warned.warnings[0].startswith(
        'ai-admission (warn mode) would deny: request "gpu" (1 x gpu.nvidia.com) does not pin the GPU model')


def test_dra_rules_errors_name_the_path() -> None:
    with pytest.raises(RulesError, match=r"^rules.yaml: dra.deviceClasses.gpu.nvidia.com.model: 'z100' is not a "
                                         r"catalog model$"):
        with_dra(lambda d: d["deviceClasses"]["gpu.nvidia.com"].update(model="z100"))
    with pytest.raises(RulesError, match=r"^rules.yaml: dra.deviceClasses.gpu.nvidia.com.productAttribute: "
                                         r"'product name' does not match"):
        with_dra(lambda d: d["deviceClasses"]["gpu.nvidia.com"].update(productAttribute="product name"))
    with pytest.raises(RulesError, match=r"^rules.yaml: dra: 'deviceClasses' is a required property$"):
        with_dra(lambda d: d.pop("deviceClasses"))


def test_device_class_extended_resources_are_accelerators(rules: Rules) -> None:
    """KEP-5004: any DeviceClass can be asked for as deviceclass.resource.kubernetes.io/<class> in limits; every GPU
    class's name is a GPU request, MIG slices included (it was left out, and such a pod was class none)."""
    assert rules.accelerators.is_accelerator("deviceclass.resource.kubernetes.io/gpu.nvidia.com")
    assert rules.accelerators.is_accelerator("deviceclass.resource.kubernetes.io/gpu.amd.com")
    assert rules.accelerators.is_accelerator("deviceclass.resource.kubernetes.io/mig.nvidia.com")
    assert not rules.accelerators.is_accelerator("deviceclass.resource.kubernetes.io/compute-domain-default-channel.nvidia.com")


claim_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 20) | st.sampled_from(
        ["gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "All", "ExactCount", "gpu", A100, MEM_40, "1g.10gb"])
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(
        ["name", "exactly", "firstAvailable", "deviceClassName", "count", "allocationMode", "selectors", "cel",
         "expression", "adminAccess", "requests", "devices", "spec", "metadata", "annotations"]), children, max_size=4),
    max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=claim_json, notes=st.dictionaries(st.sampled_from(
    ["ai-admission.io/gpu-memory", "ai-admission.io/model-params", "ai-admission.io/model-precision",
     "ai-admission.io/workload-type"]), st.sampled_from(["40Gi", "7B", "bf16", "training", "x", ""]), max_size=3))
def test_damaged_claims_never_raise(rules: Rules, spec: Any, notes: dict[str, str]) -> None:
    for kind in (TEMPLATE, CLAIM):
        obj = {"kind": kind, "metadata": {"name": "x", "annotations": notes}, "spec": spec}
        assert all(f.code for f in claim_findings(obj, kind, as_context(rules)))
        pod = {"metadata": {"name": "p", "namespace": "ml-team"}, "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu",
                                "resourceClaimTemplateName" if kind == TEMPLATE else "resourceClaimName": "x"}]}}
        judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod",
                  claims=lambda k, n: obj if k == kind else None)  # noqa: B023 - called before the next iteration


def index(*objects: dict[str, Any]) -> ClaimIndex:
    found = ClaimIndex()
    for obj in objects:
        found.put(obj["kind"], obj)
    return found


def gpu_pod(*claims: tuple[str, str], annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            node_selector: dict[str, str] | None = None, init: bool = False) -> dict[str, Any]:
    """A pod whose container ``train`` uses every claim; ``claims`` are (name, template) or (name, "claim:<name>")."""
    resource_claims = [{"name": name, **({"resourceClaimName": source.removeprefix("claim:")}
                                         if source.startswith("claim:") else {"resourceClaimTemplateName": source})}
                       for name, source in claims]
    uses = {"claims": [{"name": name} for name, _ in claims],
            "limits": {"memory": "64Gi", "cpu": "8"}, "requests": {"memory": "64Gi", "cpu": "8"}}
    sidecar = {"limits": {"memory": "1Gi", "cpu": "1"}, "requests": {"memory": "1Gi", "cpu": "1"}}
    spec: dict[str, Any] = {"containers": [{"name": "sidecar", "image": "log:1", "resources": sidecar},
                                           {"name": "train", "image": "train:1", "resources": uses}],
                            "resourceClaims": resource_claims}
    if init:
        spec["initContainers"] = [{"name": "check-gpu", "image": "cuda:12",
                                   "resources": {"claims": [uses["claims"][0]]}}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train", "namespace": "ml-team", "annotations": annotations or {},
        "labels": labels or {"training.kubeflow.org/job-name": "llama"}}, "spec": spec}


A100X2 = template(request(f"{A100} && {MEM_40}", count=2), name="a100x2")


A100X8 = template(request(A100, MEM_40, count=8), name="a100x8")


H100X1 = template(request(H100, MEM_40), name="h100")


ANY_GPU = template(request(count=2), name="any-gpu")


CLAIMS = index(A100X2, A100X8, H100X1, ANY_GPU, claim(request(A100, MEM_40, count=4), name="shared"))


def test_a_pod_gets_count_model_and_memory_from_its_claim(rules: Rules) -> None:
    profile = build_profile(gpu_pod(("gpu", "a100x2"), init=True), as_context(rules), CLAIMS.source("ml-team"))
    assert profile.gpus == {"gpu.nvidia.com (claim gpu)": 2}
    assert profile.model is not None and profile.model.name == "a100-80g"
    assert profile.memory_per_gpu == 40 * 2**30 and profile.memory_total == 80 * 2**30
    assert profile.memory_source == ('ResourceClaimTemplate "a100x2" request "gpu": selector '
                                     'device.capacity["gpu.nvidia.com"].memory >= 40Gi per GPU')
    assert profile.accelerator_containers == (("initContainers", 0), ("containers", 1))  # not the sidecar
    assert profile.pinned_where == ('claim "gpu" (ResourceClaimTemplate "a100x2" request "gpu", selector '
                                    f'{A100})')
    shared = build_profile(gpu_pod(("gpu", "claim:shared")), as_context(rules), CLAIMS.source("ml-team"))
    assert shared.gpus == {"gpu.nvidia.com (claim gpu)": 4}


def test_a_pod_whose_claim_is_not_known_is_judged_as_today(rules: Rules) -> None:
    pod = gpu_pod(("gpu", "made-later"), labels={"app": "x"})
    verdict = judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod", claims=CLAIMS.source("ml-team"))
    assert verdict.allowed and verdict.profile is not None and verdict.profile.workload == "none"
    other_namespace = judge_pod(gpu_pod(("gpu", "a100x2"), labels={"app": "x"}), ctx=as_context(rules), mode="deny",
                                subject="pod", claims=CLAIMS.source("elsewhere"))
    assert other_namespace.profile is not None and other_namespace.profile.gpus == {}


def test_a_dra_pod_is_mutated_like_a_device_plugin_pod(rules: Rules) -> None:
    pod = gpu_pod(("gpu", "a100x8"))
    pod["spec"]["containers"][1]["env"] = [{"name": "WORLD_SIZE", "value": "16"}]
    mutated = mutate_verdict(pod, ctx=as_context(rules), mode="deny", claims=CLAIMS.source("ml-team"))
    result = apply_verdict(pod, mutated)
    spec = result["spec"]
    assert spec["priorityClassName"] == "ai-training"
    assert {"name": "ai-admission-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}} in spec["volumes"]
    assert spec["containers"][1]["volumeMounts"] == [{"name": "ai-admission-shm", "mountPath": "/dev/shm"}]
    assert "volumeMounts" not in spec["containers"][0]  # the log sidecar takes no GPU
    # multi-node (WORLD_SIZE 16 over 8 GPUs): NCCL env by the nodes' fabric, unknown by default, so none is set
    assert spec["containers"][1]["env"] == [{"name": "WORLD_SIZE", "value": "16"}]
    assert spec["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert "nodeSelector" not in spec  # the claim pins the model: no node label is assumed
    assert_valid_pod(result)
    assert mutate_verdict(result, ctx=as_context(rules), mode="deny", claims=CLAIMS.source("ml-team")).patch == ()
    infiniband = copy.deepcopy(DEFAULT)
    infiniband["fabrics"]["byModel"] = {"a100-80g": "infiniband"}  # the claim's model decides the fabric
    infiniband["fabrics"]["env"]["infiniband"] = {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "ib0"}  # as its pods see it
    with_ib = mutate_verdict(pod, ctx=as_context(compile_rules(infiniband)), mode="deny", claims=CLAIMS.source("ml-team"))
    env = apply_verdict(pod, with_ib)["spec"]["containers"][1]["env"]
    assert {"name": "NCCL_SOCKET_IFNAME", "value": "ib0"} in env and {"name": "NCCL_IB_DISABLE", "value": "0"} in env


def test_pod_denials_name_the_claim_to_fix(rules: Rules, known: str) -> None:
    verdict = judge_pod(gpu_pod(("gpu", "any-gpu")), ctx=as_context(rules), mode="deny", subject='pod "ml-team/train"',
                        claims=CLAIMS.source("ml-team"))
    assert verdict.message == (
        'pod "ml-team/train" (training: label training.kubeflow.org/job-name=llama) was denied by ai-admission:\n'
        '- 2 gpu.nvidia.com (claim gpu) says how many GPUs but not which model: add the selector '
        f'{A100} to request "gpu" of ResourceClaimTemplate "any-gpu" (known models: {known})\n'
        '- 2 gpu.nvidia.com (claim gpu) does not say how much GPU memory it needs: add the selector '
        f'{MEM_40} to request "gpu" of ResourceClaimTemplate "any-gpu", or annotation '
        '"ai-admission.io/gpu-memory: 40Gi" (per GPU) on the pod')
    annotated = gpu_pod(("gpu", "any-gpu"), annotations={"ai-admission.io/gpu-memory": "40Gi"},
                        node_selector={"gpu-type": "a100-80g"})
    assert judge_pod(annotated, ctx=as_context(rules), mode="deny", subject="pod", claims=CLAIMS.source("ml-team")).allowed


def test_pod_level_checks_over_its_claims(rules: Rules) -> None:
    source = CLAIMS.source("ml-team")
    two = judge_pod(gpu_pod(("a", "a100x8"), ("b", "a100x8")), ctx=as_context(rules), mode="deny", subject="pod", claims=source)
    assert [(f.code, f.message) for f in two.findings if f.severity == "deny"] == [
        ("gpu-count-exceeds-node", "16 GPUs in one pod, but one a100-80g node holds 8; split the work over several "
                                   "pods (one per node) or use fewer GPUs")]
    mixed = judge_pod(gpu_pod(("a", "a100x2"), ("b", "h100")), ctx=as_context(rules), mode="deny", subject="pod", claims=source)
    assert [(f.code, f.message) for f in mixed.findings if f.severity == "deny"] == [
        ("gpu-model-conflict", "the pod's claims pin different GPU models (a100-80g, h100-80g); one pod runs on one "
                               "node, so take one model")]
    pinned = judge_pod(gpu_pod(("gpu", "a100x2"), node_selector={"gpu-type": "h100-80g"}), ctx=as_context(rules), mode="deny",
                       subject="pod", claims=source)
    assert [(f.code, f.message) for f in pinned.findings if f.severity == "deny"] == [
        ("gpu-model-conflict", f'nodeSelector gpu-type pins "h100-80g" (h100-80g) but claim "gpu" '
                               f'(ResourceClaimTemplate "a100x2" request "gpu", selector {A100}) pins a100-80g; '
                               f'keep one of them')]
    weights = {"ai-admission.io/model-params": "70B", "ai-admission.io/model-precision": "fp16",
               "ai-admission.io/workload-type": "inference"}
    big = judge_pod(gpu_pod(("gpu", "h100"), annotations=weights), ctx=as_context(rules), mode="deny", subject="pod",
                    claims=source)
    assert [f.code for f in big.findings if f.severity == "deny"] == ["gpu-memory-exceeds"]
    # the H100's memory as the device reports it (81559 MiB), not its marketing 80 GB
    assert "but 1 x h100-80g give 79.6Gi; ask for at least 2 GPUs" in (big.message or "")


def test_mig_claims_make_a_mig_pod(rules: Rules) -> None:
    slices = template(request('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',
                              device_class="mig.nvidia.com", count=2), name="slices")
    verdict = judge_pod(gpu_pod(("mig", "slices"), labels={"app": "x"}), ctx=as_context(rules), mode="deny", subject="pod",
                        claims=index(slices).source("ml-team"))
    assert verdict.allowed, verdict.message
    assert verdict.profile is not None and verdict.profile.is_mig and verdict.profile.memory_per_gpu == 10 * 10**9


def test_a_claim_shared_with_a_nic_counts_only_its_gpus(rules: Rules) -> None:
    both = template(request(A100, MEM_40, name="gpu"), request(name="nic", device_class="rdma.example.com"),
                    name="gpu-and-nic")
    pod = gpu_pod(("gpu", "gpu-and-nic"))
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu", "request": "nic"}]}  # the sidecar: NIC only
    profile = build_profile(pod, as_context(rules), index(both).source("ml-team"))
    assert profile.gpus == {"gpu.nvidia.com (claim gpu)": 1}
    assert profile.accelerator_containers == (("containers", 1),)


def test_controller_templates_take_claims(rules: Rules) -> None:
    """A KServe predictor carries its pod fields inline, resourceClaims among them."""
    service = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
               "metadata": {"name": "llama", "namespace": "ml-team"},
               "spec": {"predictor": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100x8"}],
                                      "model": {"modelFormat": {"name": "huggingface"}, "resources": {
                                          "claims": [{"name": "gpu"}], "limits": {"memory": "64Gi"}}}}}}
    judged = judge_object(service, ctx=as_context(rules), mode="deny", namespace="ml-team", claims=CLAIMS.source("ml-team"))
    assert judged is not None
    (template,) = judged[1]
    profile = template.verdict.profile
    assert profile is not None and profile.workload == "inference" and profile.gpu_count == 8
    assert judged[0].allowed


def test_decide_reads_the_namespace_of_the_request(rules: Rules) -> None:
    pod = gpu_pod(("gpu", "a100x2"))
    del pod["metadata"]["namespace"]
    request = parse_review(admission_review(pod, namespace="ml-team"))
    verdict = decide(request, ctx=as_context(rules, claims=CLAIMS), endpoint="mutate")
    assert verdict is not None and verdict.profile is not None and verdict.profile.gpu_count == 2


def test_check_reads_templates_from_the_same_directory(tmp_path: Path, known: str) -> None:
    (tmp_path / "template.yaml").write_text(yaml.safe_dump_all([A100X2, ANY_GPU]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([gpu_pod(("gpu", "a100x2")),
                                                           {**gpu_pod(("gpu", "any-gpu")), "metadata": {
                                                               "name": "unpinned", "namespace": "ml-team",
                                                               "labels": {"training.kubeflow.org/job-name": "x"}}}]))
    done = subprocess.run([CLI, "check", "-f", str(tmp_path), "-o", "json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(done.stdout)["results"]}
    assert rows[("Pod", "train")]["verdict"] == "ALLOW" and rows[("Pod", "train")]["class"] == "training"
    assert rows[("ResourceClaimTemplate", "a100x2")]["verdict"] == "ALLOW"
    assert rows[("ResourceClaimTemplate", "any-gpu")]["denials"] == ["gpu-model-missing", "gpu-memory-missing"]
    assert rows[("Pod", "unpinned")]["denials"] == ["gpu-model-missing", "gpu-memory-missing"]
    assert f'to request "gpu" of ResourceClaimTemplate "any-gpu" (known models: {known})' in \
        rows[("Pod", "unpinned")]["message"]
    mutated = subprocess.run([CLI, "check", "-f", str(tmp_path / "template.yaml"), "-f", str(tmp_path / "pods.yaml"),
                              "-o", "yaml"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    train = next(p for p in yaml.safe_load_all(mutated.stdout)
                 if p and p.get("kind") == "Pod" and p["metadata"].get("name") == "train")
    assert train["spec"]["priorityClassName"] == "ai-training"
    assert train["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    alone = subprocess.run([CLI, "check", "-f", str(tmp_path / "pods.yaml")], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    # without the templates no GPU is seen, so nothing is missing; but each pod is told its claim was not judged
    assert alone.returncode == 0, alone.stdout
    assert alone.stdout.endswith("2 checked: 0 allowed, 2 allowed with warnings, 0 denied\n")
    assert alone.stdout.count('names ResourceClaimTemplate "a100x2", which is not known here') == 1
    assert alone.stdout.count('names ResourceClaimTemplate "any-gpu", which is not known here') == 1


def test_the_dra_jobset_manifest() -> None:
    done = subprocess.run([CLI, "check", "-f", str(ROOT / "tests" / "manifests" / "jobset-dra.yaml"), "-o", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    rows = [(r["kind"], r["name"], r["class"], r["verdict"], r["denials"]) for r in json.loads(done.stdout)["results"]]
    assert rows == [
        ("ResourceClaimTemplate", "gpu-claim-template", "-", "ALLOW", []),
        ("JobSet", "llama-dra", "training", "WARN", []),  # what its pods will be told at /mutate
        ("ResourceClaimTemplate", "any-gpu", "-", "DENY", ["gpu-model-missing", "gpu-memory-missing"]),
        ("JobSet", "llama-dra-any-gpu", "training", "DENY", ["gpu-model-missing", "gpu-memory-missing"]),
    ]


KIND_OF = {path: kind for kind, path in PATHS.items()}


class FakeApi:
    """Lists and watches from scripted answers; a watch ends when its script does (as a server timeout would)."""

    def __init__(self) -> None:
        self.items: dict[str, list[dict[str, Any]]] = {TEMPLATE: [], CLAIM: []}
        self.events: dict[str, list[Any]] = {TEMPLATE: [], CLAIM: []}
        self.lists: dict[str, int] = {TEMPLATE: 0, CLAIM: 0}
        self.fail_next_list: set[str] = set()

    def calls(self) -> Api:
        def lister(path: str) -> tuple[list[dict[str, Any]], str]:
            kind = KIND_OF[path]
            self.lists[kind] += 1
            if kind in self.fail_next_list:
                self.fail_next_list.discard(kind)
                raise ConnectionError("connection refused")
            return copy.deepcopy(self.items[kind]), str(100 + self.lists[kind])

        def watcher(path: str, version: str, seconds: float) -> Iterator[dict[str, Any]]:
            kind = KIND_OF[path]
            while self.events[kind]:
                event = self.events[kind].pop(0)
                if isinstance(event, Exception):
                    raise event
                yield event
            time.sleep(0.05)

        return Api(lister, watcher)


def eventually(check: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_the_watch_lists_follows_events_and_lists_again() -> None:
    api = FakeApi()
    kept = {**A100X2, "status": {"allocation": {}}, "metadata": {**A100X2["metadata"], "resourceVersion": "7",
                                                                  "managedFields": [{"manager": "kubectl"}]}}
    api.items[TEMPLATE] = [kept]
    api.events[TEMPLATE] = [{"type": "ADDED", "object": {**ANY_GPU, "metadata": {**ANY_GPU["metadata"],
                                                                                  "resourceVersion": "9"}}},
                            {"type": "DELETED", "object": A100X2}]
    watch = ClaimWatch(resync=0.2, api=api.calls)
    source = watch.index.source("ml-team")
    try:
        watch.start()
        eventually(lambda: source(TEMPLATE, "any-gpu") is not None and source(TEMPLATE, "a100x2") is None)
        assert watch.status()[TEMPLATE]["synced"] is True
        api.items[TEMPLATE] = [kept]  # the next list (a resync) brings it back
        eventually(lambda: source(TEMPLATE, "a100x2") is not None and source(TEMPLATE, "any-gpu") is None)
        stored = source(TEMPLATE, "a100x2")
        assert stored is not None and set(stored) == {"apiVersion", "kind", "metadata", "spec"}
        assert "managedFields" not in stored["metadata"]
        api.fail_next_list.add(TEMPLATE)
        eventually(lambda: watch.status()[TEMPLATE]["error"] == "ConnectionError: connection refused")
        assert source(TEMPLATE, "a100x2") is not None  # what is known stays while the API is away
        api.events[CLAIM] = [{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]
        before = api.lists[CLAIM]
        eventually(lambda: api.lists[CLAIM] > before)
        assert watch.status()[CLAIM]["error"] is None  # an expired version is no error: it is listed again
    finally:
        watch.stop()


def test_the_watch_says_when_it_cannot_start() -> None:
    def no_config() -> Any:
        raise RuntimeError("Service host/port is not set.")

    watch = ClaimWatch(api=no_config).start()
    no_host = "RuntimeError: Service host/port is not set."
    eventually(lambda: all(s["error"] == no_host for s in watch.status().values()))
    watch.stop()
    assert not any(s["synced"] for s in watch.status().values())
