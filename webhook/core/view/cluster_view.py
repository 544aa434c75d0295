"""`ClusterView`: everything the webhook knows of the cluster, passed beside the rules; `in_force`: the rules a
request is judged by.

What the rules file says and what the cluster is are two inputs. The server's watches, ``check`` (its input files)
and ``check --cluster`` (one read of a cluster) each gather what they know into a `ClusterView`, a frozen value;
`in_force` is the one place the view meets the rules: the models the nodes publish join the catalog (with which
models are present and where, for placement), the cluster's GPU DeviceClasses join the rules' own, and the
backend's queues are indexed. Before this, each of the three callers merged by hand, in its own order.

The PriorityClasses' state, the claims, the Workload API's support and the Jobs are read per request rather than
merged: they change on their own watches, and mutation reads them directly (`webhook.core.admission.decide`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..backends.scheduling import with_queues
from ..dra.claims import ClaimIndex
from ..dra.classes import classes_of, with_device_classes
from ..podgroups.support import NOT_KNOWN, PodGroupSupport
from ..rules import Rules
from ..workloads.templates import Resolver
from .node_catalog import effective
from .node_facts import UNDISCOVERED, DiscoveredCatalog
from .priority_state import UNCHECKED, PriorityClassState

CLUSTER = "the cluster"  # where a watch's or a read's objects come from, in messages
INPUT = "the input"      # where check's files' objects come from


@dataclass(frozen=True)
class Objects:
    """Objects read from one place, named for messages ("the cluster", "the input")."""

    items: tuple[Mapping[str, Any], ...]
    source: str


@dataclass(frozen=True)
class ClusterView:
    """What is known of the cluster; each part is "not known" by default, and the policy then does not guess.

    ``nodes``: the GPU nodes (`UNDISCOVERED` offline or with no node watch). ``device_classes``: DeviceClasses, from
    one or more places, later ones winning by name. ``queues``: the scheduler backend's queue objects (None: not
    known, so no queue is said to be missing). ``priority_classes``: the PriorityClasses against the rules'.
    ``claims``: the DRA claims and claim templates, for pods that reference them. ``pod_groups``: the Workload
    API the cluster serves and whether ai-admission's group controller runs; ``jobs``: finds a Job the server's
    watch has seen (the Job controller's PodGroups are given what the Job's template says).
    """

    nodes: DiscoveredCatalog = UNDISCOVERED
    device_classes: tuple[Objects, ...] = ()
    queues: Objects | None = None
    priority_classes: PriorityClassState = UNCHECKED
    claims: ClaimIndex | None = None
    pod_groups: PodGroupSupport = NOT_KNOWN
    jobs: Resolver | None = None


NOTHING_KNOWN = ClusterView()


def in_force(rules: Rules, view: ClusterView) -> Rules:
    """The rules a request is judged by: the file's ``rules`` with what ``view`` adds to them (the nodes' models
    and placement, GPU DeviceClasses, the backend's queues); ``rules`` itself when the view adds nothing."""
    rules = effective(rules, view.nodes)
    for classes in view.device_classes:
        rules = with_device_classes(rules, classes_of(classes.items, rules, source=classes.source))
    if view.queues is not None:
        rules = with_queues(rules, view.queues.items, source=view.queues.source)
    return rules
