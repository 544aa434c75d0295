"""The cluster's GPU DeviceClasses as the policy reads them (`GpuClasses`): every GPU class known (the rules' own
with the cluster's, a class of the same name replacing the rules'), which extended resources they serve and by
which class, and the accelerators in force (the rules' with those resources). Worked out once per change of the
DeviceClass watch (or of ``check``'s input) from the classes `webhook.core.dra.classes` reads.

Of two classes serving one extended resource, the scheduler picks the one created last, then the name sorting
first (kubernetes/kubernetes dynamic-resource-allocation/deviceclass/extendedresourcecache): so does this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ..dra.rules import GpuDeviceClass
from ..rules import Accelerators, Rules


@dataclass(frozen=True)
class GpuClasses:
    """``device_classes``: by name; ``extended``: the extended resources they serve (implicit
    ``deviceclass.resource.kubernetes.io/<class>`` names and ``spec.extendedResourceName``); ``serving``: each
    such resource's class; ``accelerators``: the rules' accelerators with these resources among them."""

    device_classes: Mapping[str, GpuDeviceClass]
    extended: frozenset[str]
    serving: Mapping[str, GpuDeviceClass]
    accelerators: Accelerators


def accelerators_in_force(rules: Rules, classes: GpuClasses | None) -> Accelerators:
    """The accelerators in force: the rules' with the extended resources the cluster's GPU classes serve, where
    any are known."""
    return classes.accelerators if classes is not None else rules.accelerators


def gpu_classes(rules: Rules, found: Iterable[Iterable[GpuDeviceClass]],
                base: GpuClasses | None = None) -> GpuClasses | None:
    """The GPU classes of ``found`` (one group per place they were read from, later ones winning by name) merged
    with ``base`` (classes already known), else with the rules' own; None when there are none at all (the rules'
    ``dra:`` block stands alone)."""
    merged = dict(base.device_classes if base is not None else rules.dra.device_classes)
    extended = base.extended if base is not None else frozenset(rules.dra.extended_resources)
    serving: Mapping[str, GpuDeviceClass] = base.serving if base is not None else rules.dra.serving
    added = False
    for group in found:  # each place in turn, as the classes of each were merged in
        classes = list(group)
        if not classes:
            continue
        added = True
        merged.update((c.name, c) for c in classes)
        serving = _serving(merged.values())
        extended |= frozenset(serving)
    if not added:
        return base
    return GpuClasses(device_classes=merged, extended=extended, serving=serving,
                      accelerators=rules.accelerators.serving(extended))


def _serving(classes: Iterable[GpuDeviceClass]) -> dict[str, GpuDeviceClass]:
    """Each extended resource's class: the newest class first, then by name; the first to claim a name keeps it
    (the scheduler's choice)."""
    serving: dict[str, GpuDeviceClass] = {}
    for device_class in sorted(classes, key=lambda c: c.name):
        for resource in device_class.resource_names:
            held = serving.get(resource)
            if held is None or device_class.created > held.created:
                serving[resource] = device_class
    return serving
