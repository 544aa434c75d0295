"""The parts of the cluster's view worked out from what was read (`webhook.core.view.cluster_view`), each from its
own input and against the rules, once per change of either: the nodes into a `NodeCatalog`, DeviceClass objects
into `GpuClasses`, the backend's queue objects into a `QueueIndex`. The server calls one of these when one of its
watches changes (or the rules file is reloaded); `observe` makes a whole view at once (``check --cluster``, of what
it read), and ``check`` adds its input's DeviceClasses and queues to a view with `classes_seen` and `queues_seen`.
"""

from __future__ import annotations

from typing import Iterable

from ..backends.queues import QueueIndex, read_queues
from ..dra.classes import classes_of
from ..podgroups.support import NOT_KNOWN, PodGroupSupport
from ..rules import Rules
from .claims import ClaimIndex
from .cluster_view import INPUT, ClusterView, Objects, Resolver
from .gpu_classes import GpuClasses, accelerators_in_force, gpu_classes
from .node_catalog import node_catalog
from .node_facts import UNDISCOVERED, DiscoveredCatalog
from .priority_state import UNCHECKED, PriorityClassState


def classes_seen(rules: Rules, places: Iterable[Objects], base: GpuClasses | None = None) -> GpuClasses | None:
    """The GPU classes among the DeviceClasses read from each place (later places winning by name), on top of
    ``base`` (those already known)."""
    return gpu_classes(rules, (classes_of(place.items, rules, source=place.source) for place in places), base)


def queues_seen(rules: Rules, objects: Objects | None, classes: GpuClasses | None) -> QueueIndex | None:
    """The scheduler backend's queues among ``objects`` (None: the backend reads none, or none were read; a queue's
    GPUs are counted by the accelerators in force with the GPU ``classes`` known)."""
    if objects is None or not rules.scheduler.active:
        return None
    backend = rules.scheduler.backend
    return read_queues(backend.name, backend.queue_kinds, objects.items,
                       accelerators_in_force(rules, classes).is_accelerator, source=objects.source,
                       whole=objects.source != INPUT)


def observe(rules: Rules, *, nodes: DiscoveredCatalog = UNDISCOVERED, device_classes: Iterable[Objects] = (),
            queues: Objects | None = None, priority_classes: PriorityClassState = UNCHECKED,
            claims: ClaimIndex | None = None, pod_groups: PodGroupSupport = NOT_KNOWN,
            jobs: Resolver | None = None) -> ClusterView:
    """A whole view from what was read, every part worked out now."""
    classes = classes_seen(rules, device_classes)
    return ClusterView(nodes=node_catalog(rules, nodes), gpu_classes=classes,
                       queues=queues_seen(rules, queues, classes),
                       priority_classes=priority_classes, claims=claims, pod_groups=pod_groups, jobs=jobs)
