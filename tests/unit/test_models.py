"""Where a pod states its GPU model and memory, and how far its work is spread (webhook.models, webhook.parallelism).

The fixtures (tests/fixtures/pods) show each source end to end; these pin down the rules of each at their edges.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.support.contexts import as_context
from webhook.core.admission import judge_pod
from webhook.core.podview import PodFacts
from webhook.core.profile import Profile, build_profile
from webhook.core.rules import Rules
from webhook.core.workloads.parallelism import tensor_parallel

MIB = 2**20


def gpu_pod(*, gpus: int = 1, resource: str = "nvidia.com/gpu", selector: dict[str, str] | None = None,
            terms: list[list[dict[str, Any]]] | None = None, annotations: dict[str, str] | None = None,
            env: dict[str, str] | None = None, extra: dict[str, str] | None = None,
            args: list[str] | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {resource: str(gpus), "memory": "64Gi", **(extra or {})}
    container: dict[str, Any] = {"name": "main", "image": "registry.example.com/ml/x:1", "resources": {"limits": limits}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if args:
        container["args"] = args
    spec: dict[str, Any] = {"containers": [container]}
    if selector:
        spec["nodeSelector"] = selector
    if terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml-team",
                                                            "annotations": dict(annotations or {})}, "spec": spec}


def profile(pod: dict[str, Any], rules: Rules) -> Profile:
    return build_profile(pod, as_context(rules))


def models(pod: dict[str, Any], rules: Rules) -> list[str]:
    return [m.name for m in profile(pod, rules).models]


def deny_codes(pod: dict[str, Any], rules: Rules) -> list[str]:
    return [f.code for f in judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod").findings if f.severity == "deny"]


# -- instance types and provisioner GPU names ----------------------------------------------------------------------

def test_instance_types_in_affinity_name_every_model_and_the_largest_node(rules: Rules) -> None:
    pod = gpu_pod(gpus=4, terms=[[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": ["g5.xlarge", "g5.12xlarge"]}]], annotations={"ai-admission.io/gpu-memory": "8Gi"})
    found = profile(pod, rules)
    assert [m.name for m in found.models] == ["a10g-24g"]
    assert found.choice is not None and found.choice.node_gpus == 4  # g5.12xlarge: the pod fits there
    assert deny_codes(pod, rules) == []


def test_an_unknown_instance_type_is_an_unknown_model(rules: Rules) -> None:
    pod = gpu_pod(selector={"node.kubernetes.io/instance-type": "x9.superlarge"},
                  annotations={"ai-admission.io/gpu-memory": "8Gi"})
    verdict = judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod")
    assert [f.code for f in verdict.findings if f.severity == "deny"] == ["gpu-model-unknown"]
    assert 'GPU model "x9.superlarge" (nodeSelector node.kubernetes.io/instance-type) is not in the catalog' in (
        verdict.message or "")


def test_instance_types_of_one_fabric_name_it(rules: Rules) -> None:
    one = profile(gpu_pod(selector={"node.kubernetes.io/instance-type": "p5.48xlarge"}), rules)
    assert one.choice is not None and one.choice.fabric == "efa"
    mixed = profile(gpu_pod(terms=[[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                     "values": ["p5.48xlarge", "Standard_ND96isr_H100_v5"]}]]), rules)
    assert mixed.choice is not None and mixed.choice.fabric is None


@pytest.mark.parametrize("memory, expected", [
    (None, ["a100-40g", "a100-80g"]),
    ({"operator": "Gt", "values": ["40960"]}, ["a100-80g"]),
    ({"operator": "In", "values": ["40960"]}, ["a100-40g"]),
    ({"operator": "In", "values": ["16384"]}, []),
])
def test_a_provisioner_gpu_name_narrowed_by_its_memory(rules: Rules, memory: dict[str, Any] | None,
                                                       expected: list[str]) -> None:
    terms = [[{"key": "karpenter.k8s.aws/instance-gpu-memory", **memory}]] if memory else None
    pod = gpu_pod(selector={"karpenter.k8s.aws/instance-gpu-name": "a100"}, terms=terms)
    found = profile(pod, rules)
    assert [m.name for m in found.models] == expected
    assert found.choice is not None and bool(found.choice.unknown) is (not expected)


# -- affinity -------------------------------------------------------------------------------------------------------

def test_some_values_unknown_are_named(rules: Rules) -> None:
    pod = gpu_pod(terms=[[{"key": "gpu-type", "operator": "In", "values": ["h100-80g", "rtx-4090", "gtx-1080"]}]],
                  annotations={"ai-admission.io/gpu-memory": "8Gi"})
    verdict = judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod")
    assert 'GPU models "rtx-4090", "gtx-1080" (required node affinity gpu-type In [h100-80g, rtx-4090, gtx-1080]) are ' \
           "not in the catalog" in (verdict.message or "")


def test_not_in_and_exists_name_no_model(rules: Rules) -> None:
    pod = gpu_pod(terms=[[{"key": "gpu-type", "operator": "NotIn", "values": ["t4-16g"]},
                          {"key": "nvidia.com/gpu.product", "operator": "Exists"}]])
    assert profile(pod, rules).model_name is None


def test_the_annotation_must_be_one_of_the_pinned_models(rules: Rules) -> None:
    terms = [[{"key": "gpu-type", "operator": "In", "values": ["a100-80g", "h100-80g"]}]]
    agree = gpu_pod(terms=terms, annotations={"ai-admission.io/gpu-model": "a100-80g", "ai-admission.io/gpu-memory": "8Gi"})
    assert deny_codes(agree, rules) == []
    differ = gpu_pod(terms=terms, annotations={"ai-admission.io/gpu-model": "l4", "ai-admission.io/gpu-memory": "8Gi"})
    assert deny_codes(differ, rules) == ["gpu-model-conflict"]


# -- GPU sharing and memory labels ------------------------------------------------------------------------------------

def test_hami_types_match_as_parts_of_a_name_as_hami_does(rules: Rules) -> None:
    """HAMi's "A10" also accepts A100s and A10Gs: the pod can land on any, so it is judged against the smallest."""
    a10 = models(gpu_pod(annotations={"nvidia.com/use-gputype": "A10"}), rules)
    assert {"a10-24g", "a10g-24g", "a100-80g", "a100-40g"} <= set(a10)
    assert models(gpu_pod(annotations={"nvidia.com/use-gputype": "NVIDIA A100-SXM4-80GB"}), rules) == ["a100-80g"]
    assert profile(gpu_pod(annotations={"nvidia.com/use-gputype": "Z9"}), rules).choice.unknown == ("Z9",)  # type: ignore[union-attr]


def test_hami_memory_is_mib_per_gpu_and_a_share_is_of_the_card(rules: Rules) -> None:
    mib = profile(gpu_pod(gpus=2, selector={"gpu-type": "l4-24g"}, extra={"nvidia.com/gpumem": "3000"}), rules)
    assert mib.memory_per_gpu == Decimal(3000 * MIB) and mib.memory_source == "resource nvidia.com/gpumem: 3000, 2.9Gi per GPU"
    share = profile(gpu_pod(selector={"gpu-type": "l4-24g"}, extra={"nvidia.com/gpumem-percentage": "50"}), rules)
    assert share.memory_per_gpu == Decimal(23034 * MIB) / 2
    unnamed = profile(gpu_pod(extra={"nvidia.com/gpumem-percentage": "50"}), rules)
    assert unnamed.memory_stated and unnamed.memory_per_gpu is None  # stated, as a share of a card not yet known


@pytest.mark.parametrize("selector, terms, mib", [
    ({"nvidia.com/gpu.memory": "40000"}, None, 40000),
    (None, [[{"key": "nvidia.com/gpu.memory", "operator": "In", "values": ["46068", "81559"]}]], 46068),
    (None, [[{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]], 40001),
    (None, [[{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["20000"]}],
            [{"key": "nvidia.com/gpu.memory", "operator": "In", "values": ["16000"]}]], 16000),
])
def test_a_selected_memory_label_is_the_need(rules: Rules, selector: dict[str, str] | None,
                                             terms: list[list[dict[str, Any]]] | None, mib: int) -> None:
    found = profile(gpu_pod(selector=selector, terms=terms), rules)
    assert found.memory_per_gpu == Decimal(mib * MIB)


def test_a_memory_label_in_only_some_terms_states_nothing(rules: Rules) -> None:
    terms = [[{"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["20000"]}],
             [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]]
    assert profile(gpu_pod(terms=terms), rules).memory_stated is False


# -- world size and tensor parallelism --------------------------------------------------------------------------------

@pytest.mark.parametrize("env, pods, source", [
    ({"PET_NNODES": "64"}, 64, "env PET_NNODES=64"),
    ({"PET_NNODES": "2:8"}, 8, "env PET_NNODES=2:8"),
    ({"WORLD_SIZE": "512", "PET_NPROC_PER_NODE": "8"}, 64, "env WORLD_SIZE=512 / PET_NPROC_PER_NODE=8"),
    ({"WORLD_SIZE": "4"}, 4, "env WORLD_SIZE=4"),
    ({"WORLD_SIZE": "6", "PET_NPROC_PER_NODE": "4"}, 6, "env WORLD_SIZE=6"),
    ({"LWS_GROUP_SIZE": "2"}, 2, "env LWS_GROUP_SIZE=2"),
    ({"VC_WORKER_NUM": "4", "VC_MASTER_NUM": "1"}, 5, "env VC_MASTER_NUM=1 + VC_WORKER_NUM=4"),
    ({"PET_NNODES": "auto", "WORLD_SIZE": "$(N)"}, 1, None),
])
def test_world_size_from_the_operators_env(rules: Rules, env: dict[str, str], pods: int, source: str | None) -> None:
    world = profile(gpu_pod(env=env), rules).world
    assert (world.pods, world.source) == (pods, source)


@pytest.mark.parametrize("args, env, degree", [
    (["--tensor-parallel-size", "8"], None, 8),
    (["vllm serve m --tp 4"], None, 4),
    (["--pipeline-parallel-size", "2"], None, None),
    ([], {"TENSOR_PARALLEL_SIZE": "2"}, 2),
    ([], {"TENSOR_PARALLEL_SIZE": "$(TP)"}, None),
])
def test_tensor_parallel_degree(rules: Rules, args: list[str], env: dict[str, str] | None, degree: int | None) -> None:
    found = tensor_parallel(PodFacts(gpu_pod(args=args, env=env)), rules)
    assert (found[0] if found else None) == degree
    # the profile reads it where it decides something: tensor parallelism over PCIe cards
    pcie = profile(gpu_pod(gpus=2, args=args, env=env, selector={"gpu-type": "l40s-48g"}), rules).tensor_parallel
    assert (pcie[0] if pcie else None) == degree


def test_a_pod_without_accelerators_reads_nothing_of_this(rules: Rules) -> None:
    pod = gpu_pod(gpus=0, selector={"gpu-type": "rtx-4090"}, env={"PET_NNODES": "8"})
    found = profile(pod, rules)
    assert (found.choice, found.world.pods, found.workload) == (None, 1, "none")
