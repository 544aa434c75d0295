"""Simulated GPU clusters as their providers label and taint the nodes, for the placement tests (in-process through
the node store, and through a real kube-scheduler in tests/e2e/test_placement.py).

- GKE-like (AI Hypercomputer): 8 A3 nodes of 8 H100 in two blocks of two sub-blocks, labelled as GKE labels
  them (``cloud.google.com/gke-accelerator``, GPU feature discovery's ``nvidia.com/gpu.product`` / ``gpu.memory`` /
  ``gpu.count``, ``topology.kubernetes.io/zone``, ``cloud.google.com/gce-topology-block`` / ``-subblock`` /
  ``-host``; https://docs.cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas) and tainted
  ``nvidia.com/gpu=present:NoSchedule`` as GKE taints GPU pools; and 4 G2 nodes of 4 L4 in two zones.
- EKS-like: 8 p5.48xlarge nodes of 8 H100 with the network-node layers EKS labels
  (``topology.k8s.aws/network-node-layer-1`` broadest .. ``-3``;
  https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html), EFA devices in allocatable
  (``vpc.amazonaws.com/efa``, the EFA device plugin) and no GPU taint (EKS sets none).
- GB200 NVL72-like: 4-GPU trays whose ``nvidia.com/gpu.clique`` (GPU feature discovery) names the NVLink domain.
"""

from __future__ import annotations

import time
from typing import Any

from webhook.cluster.nodes import NodeStore
from webhook.core.context import Context
from webhook.core.rules import Rules
from webhook.core.view.node_facts import DiscoveredCatalog
from webhook.core.view.observe import observe

H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
A100 = "NVIDIA-A100-SXM4-80GB"
GB200 = "NVIDIA-GB200"
GKE_ZONE = "us-central1-a"


def node(name: str, product: str, *, gpus: int, memory_mib: int, labels: dict[str, str],
         taints: list[dict[str, str]] | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as the kubelet, the device plugin and GPU feature discovery leave it (Ready, with its capacity)."""
    resources = {"cpu": "192", "memory": "1800Gi", "pods": "110", "ephemeral-storage": "1000Gi",
                 "nvidia.com/gpu": str(gpus), **(extra or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.memory": str(memory_mib),
                "nvidia.com/gpu.family": "hopper", **labels}},
            "spec": {"taints": list(taints or [])},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}]}}


GPU_PRESENT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def gke_a3(name: str, block: str, subblock: str) -> dict[str, Any]:
    return node(name, H100, gpus=8, memory_mib=81559, taints=GPU_PRESENT, labels={
        "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb",
        "node.kubernetes.io/instance-type": "a3-megagpu-8g", "topology.kubernetes.io/zone": GKE_ZONE,
        "cloud.google.com/gce-topology-block": block, "cloud.google.com/gce-topology-subblock": subblock,
        "cloud.google.com/gce-topology-host": f"host-{name}"})


def gke_g2(name: str, zone: str) -> dict[str, Any]:
    return node(name, L4, gpus=4, memory_mib=23034, taints=GPU_PRESENT, labels={
        "cloud.google.com/gke-accelerator": "nvidia-l4", "node.kubernetes.io/instance-type": "g2-standard-48",
        "topology.kubernetes.io/zone": zone})


def gke_cluster() -> list[dict[str, Any]]:
    """Two blocks (4 nodes each) of two sub-blocks (2 nodes each) of A3 Mega, and 4 G2 nodes in two zones."""
    a3 = [gke_a3(f"a3-{i}", f"block-{(i - 1) // 4 + 1}", f"subblock-{(i - 1) // 2 + 1}") for i in range(1, 9)]
    g2 = [gke_g2(f"g2-{i}", ("us-central1-a", "us-central1-b")[i % 2]) for i in range(1, 5)]
    return a3 + g2


def a100(name: str, zone: str) -> dict[str, Any]:
    """An A100 80GB node labelled as the course example selects it (``gpu-type``), tainted as GKE taints GPUs."""
    return node(name, A100, gpus=8, memory_mib=81920, taints=GPU_PRESENT, labels={
        "gpu-type": "a100-80g", "topology.kubernetes.io/zone": zone})


def a100_cluster() -> list[dict[str, Any]]:
    """GKE's nodes, and four A100 nodes in two zones: the model of the course example, present."""
    return gke_cluster() + [a100(f"a100-{i}", ("us-central1-a", "us-central1-b")[i % 2]) for i in range(1, 5)]


def eks_p5(name: str, layer1: str, layer2: str, layer3: str, zone: str = "us-east-1a") -> dict[str, Any]:
    return node(name, H100, gpus=8, memory_mib=81559, extra={"vpc.amazonaws.com/efa": "32"}, labels={
        "node.kubernetes.io/instance-type": "p5.48xlarge", "topology.kubernetes.io/zone": zone,
        "topology.k8s.aws/network-node-layer-1": layer1, "topology.k8s.aws/network-node-layer-2": layer2,
        "topology.k8s.aws/network-node-layer-3": layer3})


def eks_cluster() -> list[dict[str, Any]]:
    """8 p5.48xlarge under one top layer: two middle layers of two bottom layers (2 nodes each)."""
    return [eks_p5(f"p5-{i}", "nn-top", f"nn-mid-{(i - 1) // 4 + 1}", f"nn-bottom-{(i - 1) // 2 + 1}")
            for i in range(1, 9)]


def gb200(name: str, clique: str, rack_leaf: str) -> dict[str, Any]:
    return node(name, GB200, gpus=4, memory_mib=189471, labels={
        "nvidia.com/gpu.clique": f"9277d399-0674-44a9-b64e-d85bb19ce2b0.{clique}",
        "network.topology.nvidia.com/leaf": rack_leaf, "network.topology.nvidia.com/spine": "spine-1"})


def gb200_cluster() -> list[dict[str, Any]]:
    """Two NVL72 racks (18 trays of 4 GPUs, one clique each) under two leaves of one spine."""
    return [gb200(f"gb-{rack}-{i}", str(32766 + rack), f"leaf-{rack}") for rack in (1, 2) for i in range(1, 19)]


def discovered(nodes: list[dict[str, Any]], rules: Rules) -> DiscoveredCatalog:
    """The catalog and placement facts the node watch would hold for ``nodes``."""
    store = NodeStore(lambda: rules)
    store.replace(nodes)
    return store.catalog(synced_at=time.time())


def with_nodes(nodes: list[dict[str, Any]], rules: Rules) -> Context:
    """The context a request is judged in while the server's node watch sees ``nodes``."""
    return Context(rules, observe(rules, nodes=discovered(nodes, rules)))
