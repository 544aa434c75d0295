"""Accelerators as data: every vendor's GPU resources, the GPU-sharing resources and annotations, and resources no
rule names that look like GPUs, each judged with where its model and memory are read.

The pods follow the published examples of each scheme: Intel's device-plugin demo jobs
(intel/intel-device-plugins-for-kubernetes demo/intelgpu-job.yaml), Alibaba's gpushare samples
(AliyunContainerService/gpushare-scheduler-extender samples/1.yaml), KAI-Scheduler's GPU-sharing examples
(NVIDIA/KAI-Scheduler docs/gpu-sharing/*.yaml), HAMi's vendor examples, and KServe's accelerator annotation.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.clusters import with_nodes
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.core.admission import Verdict, judge_pod, mutate_verdict
from webhook.core.rules import Rules


def pod(resources: dict[str, str] | None = None, *, annotations: dict[str, str] | None = None,
        selector: dict[str, str] | None = None, containers: int = 1, scheduler: str | None = None) -> dict[str, Any]:
    """A pod as a Job or a user creates it: ``containers`` containers, the GPU resources on the first."""
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [
        {"name": f"c{i}", "image": "registry.example.com/gpu/job:1",
         "resources": {"limits": {"memory": "8Gi", "cpu": "2", **(resources or {} if i == 0 else {})},
                       "requests": {"memory": "8Gi", "cpu": "2"}}} for i in range(containers)]}
    if selector:
        spec["nodeSelector"] = selector
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-x", "namespace": "ml",
                                                           "annotations": annotations or {}}, "spec": spec}


def judged(p: dict[str, Any], rules: Rules) -> Verdict:
    return judge_pod(copy.deepcopy(p), ctx=as_context(rules), mode="deny", subject="pod")


def denials(verdict: Verdict) -> list[str]:
    return [f.code for f in verdict.findings if f.severity == "deny"]


# -- Intel ------------------------------------------------------------------------------------------------------------

def test_an_intel_gpu_is_judged_against_the_intel_catalog(rules: Rules) -> None:
    bare = judged(pod({"gpu.intel.com/i915": "1"}), rules)
    assert denials(bare) == ["gpu-model-missing", "gpu-memory-missing"]
    assert "known intel models: max-1550-128g, max-1100-48g, flex-170-16g, flex-140-12g, arc-a770-16g" in (bare.message or "")
    fits = judged(pod({"gpu.intel.com/xe": "1"}, selector={"gpu.intel.com/product": "Max_1550"},
                      annotations={"ai-admission.io/gpu-memory": "100Gi"}), rules)
    assert fits.allowed and fits.profile is not None and fits.profile.model is not None
    assert fits.profile.model.name == "max-1550-128g" and fits.profile.model_source == "nodeSelector gpu.intel.com/product"
    too_big = judged(pod({"gpu.intel.com/i915": "1"}, selector={"gpu.intel.com/product": "Flex_170"},
                         annotations={"ai-admission.io/gpu-memory": "16Gi"}), rules)
    assert denials(too_big) == ["gpu-memory-exceeds"]  # a Flex 170 reports 14248Mi of its 16 GB


def test_an_intel_resource_with_an_nvidia_model_is_a_vendor_mismatch(rules: Rules) -> None:
    verdict = judged(pod({"gpu.intel.com/i915": "1"}, selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                         annotations={"ai-admission.io/gpu-memory": "10Gi"}), rules)
    assert denials(verdict) == ["gpu-vendor-mismatch"]


def test_intel_nodes_publish_their_model_and_memory_per_gpu(rules: Rules) -> None:
    """The GPU plugin's labels: millicores is GPUs x 1000, memory.max the bytes of all of them."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "pvc-1", "labels": {
        "gpu.intel.com/product": "Max_1550", "gpu.intel.com/family": "Max_Series",
        "gpu.intel.com/millicores": "4000", "gpu.intel.com/memory.max": str(4 * 130048 * 2**20)}},
        "status": {"capacity": {"gpu.intel.com/i915": "4"}, "allocatable": {"gpu.intel.com/i915": "4"}}}
    merged = with_nodes([node], rules)
    model = merged.catalog["max-1550-128g"]
    assert model.memory == 130048 * 2**20 and model.gpus_per_node == 4


# -- GPU sharing --------------------------------------------------------------------------------------------------

def test_a_gpushare_pod_takes_one_shared_gpu_and_states_its_memory(rules: Rules) -> None:
    verdict = judged(pod({"aliyun.com/gpu-mem": "3"}, selector={"nvidia.com/gpu.product": "Tesla-T4"}), rules)
    assert verdict.allowed and verdict.profile is not None
    assert dict(verdict.profile.gpus) == {"aliyun.com/gpu-mem": 1}
    assert verdict.profile.memory_source == "resource aliyun.com/gpu-mem: 3 (units of 1Gi), 3Gi per GPU"
    assert denials(judged(pod({"aliyun.com/gpu-mem": "20"}, selector={"nvidia.com/gpu.product": "Tesla-T4"}),
                          rules)) == ["gpu-memory-exceeds"]
    assert denials(judged(pod({"aliyun.com/gpu-mem": "3"}), rules)) == ["gpu-model-missing"]


def test_kai_scheduler_shares_by_annotation_with_no_gpu_resource(rules: Rules) -> None:
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    half = judged(pod(annotations={"gpu-fraction": "0.5"}, selector=a100, scheduler="kai-scheduler"), rules)
    assert half.allowed and half.profile is not None and dict(half.profile.gpus) == {"nvidia.com/gpu": 1}
    assert half.profile.memory_source == "annotation gpu-fraction=0.5 of a a100-80g card"
    two = judged(pod(annotations={"gpu-memory": "2000", "gpu-fraction-num-devices": "2"}, selector=a100), rules)
    assert two.allowed and two.profile is not None and two.profile.gpu_count == 2
    assert two.profile.memory_source == "annotation gpu-memory=2000, 2Gi per GPU"  # 1.95Gi, as messages round
    assert denials(judged(pod(annotations={"gpu-fraction": "0.5"}), rules)) == ["gpu-model-missing"]


@pytest.mark.parametrize(("annotations", "message"), [
    ({"gpu-fraction": "2"}, "annotation gpu-fraction='2': expected a fraction of one GPU above 0 and at most 1"),
    ({"gpu-memory": "lots"}, "annotation gpu-memory='lots': expected a positive amount (MiB)"),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"},
     "annotation gpu-fraction-num-devices='0': expected a whole number of devices, 1 or more"),
    ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "trainer"},
     "annotation gpu-fraction-container-name='trainer' names no container of the pod"),
])
def test_a_share_annotation_that_cannot_be_read_is_denied_with_the_fix(annotations: dict[str, str], message: str,
                                                                      rules: Rules) -> None:
    verdict = judged(pod(annotations=annotations, selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
                     rules)
    assert "invalid-annotation" in denials(verdict)
    assert f"- {message}" in (verdict.message or "")


def test_the_share_goes_to_the_container_the_annotation_names(rules: Rules) -> None:
    shared = pod(annotations={"gpu-fraction": "0.5", "gpu-fraction-container-name": "c1",
                              "ai-admission.io/workload-type": "inference"},
                 selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, containers=3)
    verdict = mutate_verdict(copy.deepcopy(shared), ctx=as_context(rules), mode="deny")
    mutated = apply_verdict(shared, verdict)
    mounts = [[m["mountPath"] for m in c.get("volumeMounts", [])] for c in mutated["spec"]["containers"]]
    assert mounts == [[], ["/dev/shm"], []]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in mutated["spec"]["tolerations"]


def test_hami_vendors_state_memory_in_their_own_units(rules: Rules) -> None:
    metax = judged(pod({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "6"}), rules)
    assert denials(metax) == ["gpu-model-missing"]
    assert metax.profile is not None and metax.profile.memory_source == "resource metax-tech.com/vmemory: 6, 6Gi per GPU"
    moore = judged(pod({"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "16"}), rules)
    assert moore.profile is not None and moore.profile.memory_per_gpu == 8 * 2**30


# -- resources no rule names ----------------------------------------------------------------------------------------

def test_a_gpu_looking_resource_is_judged_as_a_gpu_with_a_warning(rules: Rules) -> None:
    verdict = judged(pod({"example.com/gpu": "2"}, annotations={"ai-admission.io/gpu-model": "h100-80g",
                                                               "ai-admission.io/gpu-memory": "40Gi"}), rules)
    assert verdict.allowed and verdict.profile is not None and verdict.profile.gpu_count == 2
    assert verdict.warnings == ("example.com/gpu is not an accelerator the rules know; it is judged as a GPU (vendor "
                                "not checked): add it to accelerators.resources with its vendor, or to "
                                "accelerators.notAccelerators if it is not a GPU",)
    assert denials(judged(pod({"k8s.amazonaws.com/vgpu": "1"}), rules)) == ["gpu-model-missing", "gpu-memory-missing"]


@pytest.mark.parametrize("resource", ["nvidia.com/gpucores", "aliyun.com/gpu-core.percentage",
                                      "gpu.intel.com/millicores", "gpu.intel.com/memory.max", "google.com/tpu",
                                      "aws.amazon.com/neuron", "nvidia.com/gpumem"])
def test_sharing_parameters_and_other_accelerators_are_not_gpus(resource: str, rules: Rules) -> None:
    verdict = judged(pod({resource: "1"}), rules)
    assert verdict.profile is not None and verdict.profile.gpu_count == 0 and verdict.allowed


def test_the_rules_exempt_a_gpu_looking_name_that_is_not_one(rules: Rules) -> None:
    document = copy.deepcopy(dict(rules.raw))
    document["accelerators"]["notAccelerators"] = ["example.com/gpu-reporter"]
    from webhook.core.rules import compile_rules

    exempt = compile_rules(document)
    assert judged(pod({"example.com/gpu-reporter": "1"}), exempt).profile.gpu_count == 0  # type: ignore[union-attr]
    assert judged(pod({"example.com/gpu-reporter": "1"}), rules).profile.gpu_count == 1  # type: ignore[union-attr]


# -- labels and annotations that name the model -------------------------------------------------------------------

@pytest.mark.parametrize(("selector", "model"), [
    ({"karpenter.k8s.aws/instance-family": "g5"}, "a10g-24g"),
    ({"karpenter.k8s.aws/instance-family": "p5"}, "h100-80g"),
    ({"run.googleapis.com/accelerator": "nvidia-l4"}, "l4-24g"),
])
def test_provider_labels_name_the_model(selector: dict[str, str], model: str, rules: Rules) -> None:
    verdict = judged(pod({"nvidia.com/gpu": "1"}, selector=selector, annotations={"ai-admission.io/gpu-memory": "8Gi"}),
                     rules)
    assert verdict.allowed and verdict.profile is not None and verdict.profile.model is not None
    assert verdict.profile.model.name == model


def test_kserves_accelerator_annotation_names_the_model(rules: Rules) -> None:
    """KServe's pod webhook turns serving.kserve.io/gke-accelerator into the GKE nodeSelector."""
    verdict = judged(pod({"nvidia.com/gpu": "1"}, annotations={"serving.kserve.io/gke-accelerator": "nvidia-tesla-t4",
                                                              "ai-admission.io/gpu-memory": "8Gi"}), rules)
    assert verdict.allowed and verdict.profile is not None and verdict.profile.model is not None
    assert verdict.profile.model.name == "t4-16g"
    assert verdict.profile.model_source == ("annotation serving.kserve.io/gke-accelerator "
                                            "(nodeSelector cloud.google.com/gke-accelerator)")


# -- resources whose name is the device (KubeVirt: passthrough GPUs, vGPU types) -----------------------------------

@pytest.mark.parametrize("resource,model", [
    ("nvidia.com/GA102GL_A10", "a10-24g"),                    # pci.ids "GA102GL [A10]", upper-cased
    ("nvidia.com/TU104GL_Tesla_T4", "t4-16g"),                # KubeVirt's docs, before the plugin upper-cased
    ("nvidia.com/GA100_A100_PCIE_80GB", "a100-80g-pcie"),     # the words of GFD's NVIDIA-A100-80GB-PCIe
    ("nvidia.com/GA100_A100_PCIE_40GB", "a100-40g-pcie"),
    ("nvidia.com/GH100_H100_PCIE", "h100-80g-pcie"),
    ("nvidia.com/GH100_H100_SXM5_80GB", "h100-80g"),
    ("nvidia.com/AD102GL_L40S", "l40s-48g"),
])
def test_a_passthrough_gpu_is_named_by_its_resource(resource: str, model: str, rules: Rules) -> None:
    verdict = judged(pod({resource: "1"}, annotations={"ai-admission.io/gpu-memory": "10Gi"}), rules)
    assert verdict.allowed, verdict.message
    profile = verdict.profile
    assert profile is not None and profile.model is not None and profile.model.name == model
    assert profile.model_source == f"resource {resource}" and profile.vendors == ("nvidia",)
    assert profile.card_memory == profile.model.memory  # a whole card


def test_a_passthrough_gpu_still_states_its_memory_need(rules: Rules) -> None:
    verdict = judged(pod({"nvidia.com/GA102GL_A10": "1"}), rules)
    assert denials(verdict) == ["gpu-memory-missing"]
    assert "1 nvidia.com/GA102GL_A10 does not say how much GPU memory it needs" in (verdict.message or "")


def test_a_passthrough_gpu_of_a_model_the_catalog_lacks_is_named_but_unknown(rules: Rules) -> None:
    verdict = judged(pod({"nvidia.com/GP102GL_TESLA_P40": "1"}, annotations={"ai-admission.io/gpu-memory": "10Gi"}),
                     rules)
    assert denials(verdict) == ["gpu-model-unknown"]
    assert 'GPU model "TESLA_P40" (resource nvidia.com/GP102GL_TESLA_P40) is not in the catalog' in (verdict.message or "")


def test_a_vgpu_type_states_its_model_and_the_memory_of_the_device(rules: Rules) -> None:
    verdict = judged(pod({"nvidia.com/GRID_T4-4Q": "1"}), rules)
    assert verdict.allowed and not verdict.findings
    profile = verdict.profile
    assert profile is not None and profile.model is not None and profile.model.name == "t4-16g"
    assert profile.memory_per_gpu == profile.card_memory == 4 * 10**9
    assert profile.memory_source == "vGPU type nvidia.com/GRID_T4-4Q, 3.7Gi per GPU"
    over = judged(pod({"nvidia.com/NVIDIA_A10-4Q": "1"}, annotations={"ai-admission.io/gpu-memory": "8Gi"}), rules)
    assert denials(over) == ["gpu-memory-exceeds"]
    assert "but a a10-24g vGPU NVIDIA_A10-4Q holds 3.7Gi" in (over.message or "")
    # a MIG-backed type of Hopper (H200X-1-18C: a 1-slice profile, 18 GB) of a model the catalog lacks: its memory
    # is stated and, as for a MIG slice, the model is not needed
    mig_backed = judged(pod({"nvidia.com/NVIDIA_H200X-1-18C": "2"}), rules)
    assert mig_backed.allowed and not mig_backed.findings
    assert mig_backed.profile is not None and mig_backed.profile.memory_per_gpu == 18 * 10**9


def test_a_passthrough_gpu_beside_a_vgpu_does_not_state_the_memory_of_both(rules: Rules) -> None:
    """A VM with a passthrough T4 and a GRID T4-1Q: the vGPU's frame buffer is that device's, not the card's."""
    verdict = judged(pod({"nvidia.com/TU104GL_Tesla_T4": "1", "nvidia.com/GRID_T4-1Q": "1"}), rules)
    assert denials(verdict) == ["gpu-memory-missing"]
    assert verdict.profile is not None and verdict.profile.model is not None
    assert verdict.profile.model.name == "t4-16g"


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/hostdev",
                                      "nvidia.com/mlnxnics", "devices.kubevirt.io/kvm", "nvidia.com/GRID",
                                      # a card's other functions and NVSwitches, passed through beside the GPUs
                                      "nvidia.com/GA102_HIGH_DEFINITION_AUDIO_CONTROLLER",
                                      "nvidia.com/TU102_USB_3_1_HOST_CONTROLLER", "nvidia.com/GH100_NVSWITCH"])
def test_other_resources_are_not_device_named(resource: str, rules: Rules) -> None:
    assert rules.accelerators.device_resource(resource) is None
    verdict = judged(pod({resource: "1", "nvidia.com/GA102GL_A10": "1"}, annotations={"ai-admission.io/gpu-memory": "8Gi"}),
                     rules)
    assert verdict.allowed and verdict.profile is not None
    assert verdict.profile.gpus == {"nvidia.com/GA102GL_A10": 1, **({resource: 1} if rules.accelerators.is_accelerator(resource) else {})}


def test_a_device_pattern_must_say_where_the_model_is(rules: Rules) -> None:
    from webhook.core.rules import RulesError, compile_rules
    document = copy.deepcopy(dict(rules.raw))
    document["accelerators"]["deviceResources"] = [{"pattern": "^example\\.com/dev-[0-9]+$", "vendor": "nvidia"}]
    with pytest.raises(RulesError, match=r"accelerators\.deviceResources\[0\]\.pattern: needs a group \(\?P<model>"):
        compile_rules(document)


def volcano_share_pod() -> dict[str, Any]:
    """volcano-sh/devices' GPU-share example ("gpu-pod1"), field for field: a share of one GPU by its memory,
    scheduled by Volcano."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-pod1"},
            "spec": {"schedulerName": "volcano", "containers": [{
                "name": "cuda-container", "image": "nvidia/cuda:9.0-devel", "command": ["sleep"], "args": ["100000"],
                "resources": {"limits": {"volcano.sh/gpu-memory": 1024}}}]}}


def test_a_volcano_gpu_share_is_a_gpu_request_with_the_memory_it_states(rules: Rules) -> None:
    """Read as no GPU at all before: class none, allowed with no word."""
    as_published = judged(volcano_share_pod(), rules)
    assert as_published.profile is not None and dict(as_published.profile.gpus) == {"volcano.sh/gpu-memory": 1}
    assert denials(as_published) == ["gpu-model-missing"]  # the model rule applies as it does to the others
    named = volcano_share_pod()
    named["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-T4"}
    verdict = judged(named, rules)
    assert verdict.allowed and verdict.profile is not None
    assert verdict.profile.memory_source == "resource volcano.sh/gpu-memory: 1024 (units of 1Mi), 1Gi per GPU"
    too_much = copy.deepcopy(named)
    too_much["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/gpu-memory"] = 20480
    assert denials(judged(too_much, rules)) == ["gpu-memory-exceeds"]
    whole = judged(pod({"volcano.sh/gpu-number": "2"}, selector={"nvidia.com/gpu.product": "Tesla-T4"},
                       annotations={"ai-admission.io/gpu-memory": "10Gi"}), rules)
    assert whole.allowed and whole.profile is not None and whole.profile.gpu_count == 2
