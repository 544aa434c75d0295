"""DRA claims and claim templates as users write them (NVIDIA's device class, CEL selectors on product and memory)."""

from __future__ import annotations

from typing import Any

from webhook.core.view.claims import CLAIM_TEMPLATE as TEMPLATE

A100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"'


MEM_40 = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'


PRODUCT_FIX = ('add the selector device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" (the '
               'product name as the driver publishes it; known models: {known}), or use a device class that pins one '
               'model')


def request(*selectors: str, name: str = "gpu", device_class: str = "gpu.nvidia.com", count: int | None = None,
            mode: str | None = None, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    return {"name": name, "exactly": exactly}


def template(*requests: dict[str, Any], name: str = "gpus", annotations: dict[str, str] | None = None,
             namespace: str = "ml-team") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": TEMPLATE,
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}
