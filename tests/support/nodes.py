"""Nodes as GPU feature discovery labels them, and pods that select them, for the node catalog tests."""

from __future__ import annotations

from typing import Any

from tests.conftest import Server
from tests.support.reviews import admission_review


def gfd_node(name: str, product: str, *, count: int = 8, memory: int | None = 81920,
             labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as GPU feature discovery labels it (capacity as the device plugin advertises it)."""
    node_labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                   "nvidia.com/gpu.count": str(count), "nvidia.com/gpu.family": "ampere", "nvidia.com/mig.strategy": "none"}
    if memory is not None:
        node_labels["nvidia.com/gpu.memory"] = str(memory)
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(count), **(capacity or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**node_labels, **(labels or {})}},
            "status": {"capacity": resources, "allocatable": resources}}


def pod(model: str, memory: str = "40Gi", gpus: int = 1, key: str = "gpu-type") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml-team", "annotations": {"ai-admission.io/gpu-memory": memory}},
            "spec": {"nodeSelector": {key: model},
                     "containers": [{"name": "c", "image": "i", "resources": {
                         "limits": {"nvidia.com/gpu": str(gpus), "memory": "64Gi", "cpu": "8"},
                         "requests": {"nvidia.com/gpu": str(gpus), "memory": "64Gi", "cpu": "8"}}}]}}


def verdict(server: Server, obj: dict[str, Any]) -> dict[str, Any]:
    return server.review("/validate", admission_review(obj))
