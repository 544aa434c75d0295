"""The GPU catalog discovered from the nodes: what node labels mean, how it merges with the rules, and the
server watching a real API server (Node objects created through it, no kubelet needed).

Node label values follow GPU feature discovery (NVIDIA/k8s-device-plugin internal/lm) and AMD's node labeller
(ROCm/k8s-device-plugin cmd/k8s-node-labeller).
"""

from __future__ import annotations

import copy
import time
from decimal import Decimal
from typing import Any

from tests.support.contexts import as_context, with_discovered
from tests.support.nodes import gfd_node, pod
from webhook.core.rules import Rules, compile_rules
from webhook.core.view.node_catalog import catalog_block, model_name, node_catalog
from webhook.core.view.node_facts import DiscoveredCatalog, build, node_gpu

MIB = Decimal(2**20)




def amd_node(name: str) -> dict[str, Any]:
    """The labeller's documented MI300X example (cu-count 304, vram 192G), 8 GPUs."""
    labels = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "192G",
              "amd.com/gpu.family": "AI", "amd.com/gpu.device-id": "74a1", "amd.com/gpu.cu-count": "304"}
    resources = {"cpu": "192", "amd.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": resources, "allocatable": resources}}


def test_a_gfd_node() -> None:
    gpu = node_gpu(gfd_node("n", "NVIDIA-A100-SXM4-80GB", labels={"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}))
    assert gpu is not None
    assert (gpu.product, gpu.vendor, gpu.count, gpu.memory_mib, gpu.family) == (
        "NVIDIA-A100-SXM4-80GB", "nvidia", 8, 81920, "ampere")
    assert ("cloud.google.com/gke-accelerator", "nvidia-a100-80gb") in gpu.names


def test_a_shared_node_counts_physical_gpus() -> None:
    """Time-slicing: -SHARED on the product, capacity = count x replicas (the count label stays physical)."""
    node = gfd_node("n", "NVIDIA-H100-NVL-SHARED", count=1, memory=95830, capacity={"nvidia.com/gpu": "5"},
                    labels={"nvidia.com/gpu.replicas": "5", "nvidia.com/gpu.sharing-strategy": "time-slicing"})
    gpu = node_gpu(node)
    assert gpu is not None and (gpu.product, gpu.count, gpu.memory_mib) == ("NVIDIA-H100-NVL", 1, 95830)
    del node["metadata"]["labels"]["nvidia.com/gpu.count"]  # an older GFD: capacity / replicas
    assert node_gpu(node).count == 1  # type: ignore[union-attr]


def test_mig_single_and_mixed() -> None:
    single = node_gpu(gfd_node("n", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", count=56, memory=9728))
    assert single is not None
    assert (single.product, single.count, single.memory_mib, single.mig_profiles) == (
        "NVIDIA-A100-SXM4-80GB", None, None, ("1g.10gb",))  # slices, not GPUs
    mixed = gfd_node("n", "NVIDIA-A100-SXM4-80GB", labels={"nvidia.com/mig.strategy": "mixed",
                                                          "nvidia.com/mig-3g.40gb.count": "2"},
                     capacity={"nvidia.com/mig-1g.10gb": "7"})
    assert node_gpu(mixed).mig_profiles == ("1g.10gb", "3g.40gb")  # type: ignore[union-attr]


def test_an_amd_node() -> None:
    gpu = node_gpu(amd_node("m"))
    assert gpu is not None
    assert (gpu.product, gpu.vendor, gpu.count, gpu.memory_mib, gpu.memory_rounded) == (
        "AMD_Instinct_MI300X_OAM", "amd", 8, 192 * 1024, True)


def test_a_node_without_gpus_or_labels() -> None:
    plain = {"metadata": {"name": "cpu"}, "status": {"capacity": {"cpu": "8"}}}
    assert node_gpu(plain) is None
    catalog = build({"cpu": None, "bare": None}, unlabelled=["bare"], synced_at=1.0)
    assert (catalog.gpu_nodes, catalog.unlabelled_nodes, dict(catalog.models)) == (0, ("bare",), {})


def discovered(*nodes: dict[str, Any]) -> DiscoveredCatalog:
    return build({n["metadata"]["name"]: node_gpu(n) for n in nodes}, synced_at=time.time())


def test_nothing_known_keeps_the_rules(rules: Rules) -> None:
    assert node_catalog(rules, DiscoveredCatalog()) is None


def test_nodes_give_memory_and_gpus_per_node(rules: Rules) -> None:
    merged = with_discovered(rules, discovered(
        gfd_node("h1", "NVIDIA-H100-80GB-HBM3", count=8, memory=81559),
        gfd_node("h2", "NVIDIA-H100-80GB-HBM3", count=4, memory=81559),
        gfd_node("a1", "A100-SXM4-40GB", count=4, memory=40536),  # an old driver: no NVIDIA- prefix, less memory
        amd_node("m1")))
    h100 = merged.catalog["h100-80g"]
    assert (h100.memory, h100.gpus_per_node, h100.interconnect) == (81559 * MIB, 8, "nvlink")
    assert merged.find_model("h100") is h100 and merged.find_model("NVIDIA-H100-80GB-HBM3") is h100
    assert merged.catalog["a100-40g"].memory == 40536 * MIB and merged.catalog["a100-40g"].gpus_per_node == 4
    assert merged.find_model("A100-SXM4-40GB") is merged.catalog["a100-40g"]
    assert merged.catalog["mi300x-192g"].memory == rules.catalog["mi300x-192g"].memory  # rounded GiB: not used
    assert merged.nodes is not None
    assert merged.nodes.present == {"a100-40g": "1 node x 4 GPUs", "h100-80g": "2 nodes x 4-8 GPUs",
                                    "mi300x-192g": "1 node x 8 GPUs"}
    assert rules.catalog["a100-40g"].memory == 40960 * MIB  # the rules are untouched


def test_a_model_only_the_nodes_know_is_added(rules: Rules) -> None:
    merged = with_discovered(rules, discovered(gfd_node("n", "NVIDIA-RTX-A6000", count=2, memory=49140)))
    name = model_name("NVIDIA-RTX-A6000")
    assert name == "nvidia-rtx-a6000"
    model = merged.find_model("NVIDIA-RTX-A6000")
    assert model is not None and model is merged.catalog[name]
    assert (model.memory, model.gpus_per_node, model.interconnect, model.vendor) == (49140 * MIB, 2, "unknown", "nvidia")


def test_the_catalog_block_is_a_valid_rules_catalog(rules: Rules) -> None:
    found = discovered(gfd_node("h", "NVIDIA-H100-80GB-HBM3", memory=81559), gfd_node("n", "NVIDIA-RTX-A6000", count=2,
                                                                                   memory=49140))
    block = catalog_block(found, rules)["catalog"]
    assert block["h100-80g"]["memory"] == "81559Mi" and block["nvidia-rtx-a6000"]["gpusPerNode"] == 2
    assert block["nvidia-rtx-a6000"]["vendor"] == "nvidia"
    document = copy.deepcopy(dict(rules.raw))
    document["catalog"].update(block)  # the rules' instance types and GPU names refer to their own models too
    compiled = compile_rules(document)
    assert compiled.catalog["h100-80g"].memory == 81559 * MIB








def judged(rules: Rules, obj: dict[str, Any]) -> Any:
    from webhook.core.admission import judge_pod

    return judge_pod(obj, ctx=as_context(rules), mode="deny", subject='pod "ml-team/p"')


def only_l4(rules: Rules, *, absent: str | None = None) -> Rules:
    if absent:
        rules = compile_rules({**copy.deepcopy(dict(rules.raw)), "nodeCatalog": {"modelWithoutNodes": absent}})
    return with_discovered(rules, discovered(gfd_node("l4-a", "NVIDIA-L4", count=2, memory=23034)))


def test_a_model_no_node_has_is_a_warning(rules: Rules) -> None:
    verdict = judged(only_l4(rules), pod("a100-80g"))
    assert verdict.allowed and verdict.reason_codes == ["gpu-model-not-in-cluster"]
    assert verdict.warnings == ("no node of this cluster has GPU model a100-80g (nodeSelector gpu-type), so the pod "
                                "stays Pending until one joins; this cluster has l4-24g (1 node x 2 GPUs)",)
    assert judged(rules, pod("a100-80g")).warnings == ()  # offline: the rules alone, nothing known about nodes


def test_the_rules_can_make_it_a_denial(rules: Rules) -> None:
    verdict = judged(only_l4(rules, absent="deny"), pod("a100-80g"))
    assert not verdict.allowed and "no node of this cluster has GPU model a100-80g" in verdict.message


def test_an_unknown_model_lists_what_the_cluster_has(rules: Rules) -> None:
    verdict = judged(only_l4(rules), pod("rtx-9000"))
    assert not verdict.allowed and verdict.reason_codes == ["gpu-model-unknown"]
    assert ('GPU model "rtx-9000" (nodeSelector gpu-type) is not in the catalog nor on any node; this cluster has '
            'l4-24g (1 node x 2 GPUs)') in verdict.message


def test_the_fix_names_a_model_the_cluster_has(rules: Rules) -> None:
    bare = pod("x")
    del bare["spec"]["nodeSelector"]
    message = judged(only_l4(rules), bare).message
    assert 'add nodeSelector "gpu-type: l4-24g" or annotation "ai-admission.io/gpu-model: l4-24g" (this cluster has ' \
           'l4-24g (1 node x 2 GPUs))' in message
    assert "known nvidia models: a100-80g" in judged(rules, bare).message  # offline as before


def test_a_long_list_is_cut(rules: Rules) -> None:
    products = ["NVIDIA-L4", "NVIDIA-A10", "Tesla-T4", "NVIDIA-L40S", "NVIDIA-H200", "NVIDIA-B200"]
    merged = with_discovered(rules, discovered(*(gfd_node(f"n{i}", p, count=1, memory=20000) for i, p in enumerate(products))))
    message = judged(merged, pod("rtx-9000")).message
    assert message.endswith("and 2 more") and message.count(" x 1 GPU") == 4
