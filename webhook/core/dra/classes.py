"""The cluster's DeviceClasses: which of them hand out GPUs, what they pin, and which extended resources they serve.

The rules describe the device classes of the drivers they know (``dra.deviceClasses``). A cluster has more: a
driver's own class under another name, a platform team's class that pins one product or one MIG profile, and since
KEP-5004 (DRAExtendedResource, beta and on by default in Kubernetes 1.36) classes that serve a plain extended
resource: every class can be asked for as ``deviceclass.resource.kubernetes.io/<class>``, and a class with
``spec.extendedResourceName`` serves that name, so ``nvidia.com/gpu: 1`` may be a DRA allocation (NVIDIA's DRA
driver chart sets it on ``gpu.nvidia.com``). A pod asking for such a resource gets a device of the class: its
model and memory are what the class's selectors pin.

A DeviceClass object (from the cluster, or among ``check``'s input) is read here into a `GpuDeviceClass` when its
devices are GPUs: its selectors name a driver the rules describe (``device.driver == "gpu.nvidia.com"``), or a
driver or class whose name says GPU, or a device type ``gpu``/``mig``. Attribute names come from the rules' class
of that driver; a driver the rules do not describe is read with the usual names (``productName``, ``model``).
Of two classes serving one extended resource, the scheduler picks the one created last, then the name sorting
first (kubernetes/kubernetes dynamic-resource-allocation/deviceclass/extendedresourcecache): so does this.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Iterable, Mapping

from webhook.core import podview
from webhook.core.quantity import QuantityError, parse_quantity
from webhook.core.rules import Rules

from .cel import ATTRIBUTE, CAPACITY, read_selector
from .rules import GpuDeviceClass, mig_profile_memory

GROUP = "resource.k8s.io"
KIND = "DeviceClass"
_DRIVER = re.compile(r"""device\s*\.\s*driver\s*==\s*(["'])([^"']+)\1|(["'])([^"']+)\3\s*==\s*device\s*\.\s*driver""")
_PRODUCT_ATTRIBUTES = ("productName", "model", "product")


def is_device_class(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == KIND and str(obj.get("apiVersion", "")).startswith(GROUP + "/")


def _expressions(obj: Mapping[str, Any]) -> list[str]:
    spec = podview.as_dict(obj.get("spec"))
    found = []
    for selector in podview.as_list(spec.get("selectors")):
        expression = podview.as_dict(podview.as_dict(selector).get("cel")).get("expression")
        if isinstance(expression, str):
            found.append(expression)
    return found


def _drivers(expressions: list[str]) -> set[str]:
    drivers = set()
    for expression in expressions:
        for match in _DRIVER.finditer(expression):
            drivers.add(match.group(2) or match.group(4))
    return drivers


def read_device_class(obj: Mapping[str, Any], rules: Rules, *, source: str) -> GpuDeviceClass | None:
    """The GPU class ``obj`` is, or None when its devices are not GPUs (a NIC, an FPGA) or cannot be told."""
    meta = podview.metadata(obj)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    configured = rules.dra.device_classes.get(name)
    expressions = _expressions(obj)
    drivers = _drivers(expressions)
    domain = next(iter(drivers)) if len(drivers) == 1 else (configured.domain if configured else None)
    if domain is None:
        return None
    known = [c for c in rules.dra.device_classes.values() if c.domain == domain]
    terms = [t for e in expressions for t in read_selector(e) if t.domain == domain]
    types = {t.value for t in terms if t.kind == ATTRIBUTE and t.name == "type"}
    base = configured or next((c for c in known if c.mig == ("mig" in types)), known[0] if known else None)
    if base is None and not ("gpu" in domain.lower() or "gpu" in name.lower() or types & {"gpu", "mig"}):
        return None
    product_attribute = base.product_attribute if base else next(
        (t.name for t in terms if t.kind == ATTRIBUTE and t.name in _PRODUCT_ATTRIBUTES), "productName")
    memory_capacity = base.memory_capacity if base else "memory"
    mig = "mig" in types or bool(base and base.mig and not types)
    profile_attribute = base.profile_attribute if base and base.profile_attribute else ("profile" if mig else None)
    products = sorted({t.value for t in terms if t.kind == ATTRIBUTE and t.name == product_attribute})
    product = products[0] if len(products) == 1 else (base.product if base else None)
    model = base.model if base else None
    if product is not None:
        found = rules.find_model("-".join(product.split()))
        model = found.name if found else None
    memory = base.memory if base else None
    for term in terms:
        if term.kind == ATTRIBUTE and term.name == profile_attribute and \
                (profile_memory := mig_profile_memory(term.value)) is not None:
            memory = profile_memory
        elif term.kind == CAPACITY and term.name == memory_capacity and term.op in (">=", ">", "=="):
            try:
                amount = parse_quantity(term.value)
            except QuantityError:
                continue
            if amount > 0:
                memory = max(memory or Decimal(0), amount)
    extended = podview.as_dict(obj.get("spec")).get("extendedResourceName")
    return GpuDeviceClass(
        name=name, domain=domain, product_attribute=product_attribute, memory_capacity=memory_capacity,
        product_example=base.product_example if base else (product or "<product name>"),
        product_name_has_spaces=base.product_name_has_spaces if base else False,
        taint_key=base.taint_key if base else None, model=model, mig=mig, profile_attribute=profile_attribute,
        memory=memory, vendor=base.vendor if base else None, product=product,
        extended_resource=extended if isinstance(extended, str) and extended else None,
        created=str(meta.get("creationTimestamp") or ""), source=source)


def classes_of(objects: Iterable[Mapping[str, Any]], rules: Rules, *, source: str) -> list[GpuDeviceClass]:
    """The GPU classes among ``objects`` (other objects and non-GPU classes are left out)."""
    found = []
    for obj in objects:
        if is_device_class(obj):
            device_class = read_device_class(obj, rules, source=source)
            if device_class is not None:
                found.append(device_class)
    return found
