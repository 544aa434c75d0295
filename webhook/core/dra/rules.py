"""The ``dra:`` block of the rules: which DeviceClasses hand out GPUs, and what their drivers publish.

With Dynamic Resource Allocation a pod asks for GPUs through ResourceClaims that name a DeviceClass; the GPU
model and memory are then chosen by CEL selectors over the attributes and capacities the driver publishes.
Which classes are GPUs and the names of those attributes are facts about the drivers installed, so they are
rules, checked by their own schema (``schema.json``) and compiled here once, like the rest of the rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from typing import Any, Callable, Collection, Mapping

import jsonschema

from webhook.core.quantity import parse_quantity

# A device class can stand in for an extended resource (KEP-5004): any class is requestable as this prefix plus
# its name, e.g. ``deviceclass.resource.kubernetes.io/gpu.nvidia.com: 1`` in a container's limits.
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True)
class GpuDeviceClass:
    """A DeviceClass whose devices are GPUs (or GPU slices), and where its driver publishes model and memory."""

    name: str
    domain: str                     # device.attributes[domain] / device.capacity[domain]: the driver's name
    product_attribute: str          # the attribute holding the product name (both drivers: productName)
    memory_capacity: str            # the capacity holding the device memory in bytes (both drivers: memory)
    product_example: str            # a product name as this driver publishes it, for messages
    product_name_has_spaces: bool   # the driver publishes names with spaces (NVIDIA: as nvidia-smi prints them)
    taint_key: str | None           # the taint GPU nodes of this class carry, tolerated by /mutate
    model: str | None               # the catalog model every device of this class is (a class pinning one)
    mig: bool                       # devices are MIG slices: they imply their memory, not a whole card
    profile_attribute: str | None   # MIG profile attribute ("1g.10gb": 10 GB), read like the MIG resource name
    memory: Decimal | None          # the memory every device of this class has (a class pinning one profile)
    vendor: str | None = None       # whose GPUs (the catalog's vendor): messages suggest that vendor's models
    product: str | None = None      # the product every device has, as the class's selector pins it
    extended_resource: str | None = None  # spec.extendedResourceName: the extended resource it serves (KEP-5004)
    created: str = ""               # metadata.creationTimestamp: of two classes serving one name, the newer wins
    source: str = "rules"           # "rules", or where it was read ("the cluster", "the input")

    @property
    def resource_names(self) -> tuple[str, ...]:
        """The extended resources a container asks for to get this class's devices: its implicit name, and its
        ``extendedResourceName`` when it has one."""
        implicit = DEVICE_CLASS_RESOURCE_PREFIX + self.name
        return (implicit, self.extended_resource) if self.extended_resource else (implicit,)

    def attribute(self, name: str) -> str:
        return f'device.attributes["{self.domain}"].{name}'

    def capacity(self, name: str) -> str:
        return f'device.capacity["{self.domain}"].{name}'

    def product_selector(self, product: str) -> str:
        """The CEL selector that pins ``product``, as messages tell users to write it."""
        return f'{self.attribute(self.product_attribute)} == "{product}"'

    def memory_selector(self, quantity: str) -> str:
        """The CEL selector that asks for at least ``quantity`` of device memory."""
        return f'{self.capacity(self.memory_capacity)}.compareTo(quantity("{quantity}")) >= 0'


@dataclass(frozen=True)
class DraRules:
    """The compiled ``dra:`` block; empty (no GPU device classes) when the rules have none."""

    device_classes: Mapping[str, GpuDeviceClass] = field(default_factory=dict)
    allow_allocation_mode_all: bool = False
    # deviceclass.resource.kubernetes.io/<class> of every GPU class, whole GPUs or MIG slices, and the
    # extendedResourceName of the cluster's: accelerators like nvidia.com/gpu
    extended_resources: frozenset[str] = frozenset()
    # extended resource -> the class whose devices serve it (each class its implicit name, the cluster's classes
    # their extendedResourceName too): what the class pins (model, memory, MIG profile) is what the name asks for
    serving: Mapping[str, GpuDeviceClass] = field(default_factory=dict)


Fail = Callable[[list[Any], str], Exception]

_VALIDATOR: Any = None


def _validator() -> Any:
    global _VALIDATOR
    if _VALIDATOR is None:
        schema = json.loads((resources.files("webhook.core.dra") / "schema.json").read_text(encoding="utf-8"))
        cls = jsonschema.validators.validator_for(schema)
        _VALIDATOR = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return _VALIDATOR


def compile_dra(document: Any, *, catalog: Collection[str], fail: Fail) -> DraRules:
    """Check the ``dra:`` block against its schema and the catalog and build `DraRules`.

    ``fail(path, problem)`` makes the error to raise, ``path`` inside the block (the rules name the file).
    """
    if document is None:
        return DraRules()
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        raise fail(list(error.absolute_path), error.message)
    classes: dict[str, GpuDeviceClass] = {}
    for name, spec in document["deviceClasses"].items():
        model = spec.get("model")
        if model is not None and model not in catalog:
            raise fail(["deviceClasses", name, "model"], f"{model!r} is not a catalog model")
        classes[name] = GpuDeviceClass(
            name=name, domain=spec["domain"], product_attribute=spec["productAttribute"],
            memory_capacity=spec["memoryCapacity"], product_example=spec["productExample"],
            product_name_has_spaces=bool(spec.get("productNameHasSpaces", False)),
            taint_key=spec.get("taintKey"), model=model, mig=bool(spec.get("mig", False)),
            profile_attribute=spec.get("profileAttribute"),
            memory=parse_quantity(spec["memory"]) if "memory" in spec else None,
            vendor=spec.get("vendor"),
        )
    return DraRules(
        device_classes=classes,
        allow_allocation_mode_all=bool(document.get("allowAllocationModeAll", False)),
        extended_resources=frozenset(DEVICE_CLASS_RESOURCE_PREFIX + c.name for c in classes.values()),
        serving={DEVICE_CLASS_RESOURCE_PREFIX + c.name: c for c in classes.values()},
    )


_MIG_PROFILE = re.compile(r"^[0-9]+g\.(?P<mem>[0-9]+)gb$")


def mig_profile_memory(profile: str) -> Decimal | None:
    """The memory of a MIG device its profile names (``1g.10gb``: 10 GB), or None for any other value."""
    match = _MIG_PROFILE.match(profile)
    return Decimal(match.group("mem")) * 10**9 if match else None
