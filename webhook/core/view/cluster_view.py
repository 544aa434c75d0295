"""`ClusterView`: everything the webhook knows of the cluster, in one typed value beside the rules.

What the rules file says (`webhook.core.rules.Rules`) and what the cluster is are two inputs, and a request's core
functions take the two side by side (`webhook.core.context.Context`). The server's watches, ``check`` (its input
files) and ``check --cluster`` (one read of a cluster) each keep what they know as the parts of a `ClusterView`,
each part typed and indexed once per change of what it is read from (`webhook.core.view.observe` builds them):

- ``nodes``: the GPU nodes as the policy reads them (`NodeCatalog`: the catalog in force, which models are present
  and where, MIG slices); None offline or with no node watch;
- ``gpu_classes``: the cluster's GPU DeviceClasses (`GpuClasses`: the classes, the extended resources they serve,
  the accelerators in force); None where there are none;
- ``queues``: the scheduler backend's queues (`QueueIndex`); None where not known, so no queue is said to be missing;
- ``priority_classes``: the PriorityClasses against the rules'; ``claims``: the DRA claims and templates;
- ``pod_groups``: the Workload API the cluster serves and whether ai-admission's group controller runs; ``jobs``:
  finds a Job the server's watch has seen (the Job controller's PodGroups are given what its template says).

Only the types of the view live below the rules' readers; building the parts from objects is `observe`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ..backends.queues import QueueIndex
from ..podgroups.support import NOT_KNOWN, PodGroupSupport
from .claims import ClaimIndex
from .gpu_classes import GpuClasses
from .node_catalog import NodeCatalog
from .priority_state import UNCHECKED, PriorityClassState

CLUSTER = "the cluster"  # where a watch's or a read's objects come from, in messages
INPUT = "the input"      # where check's files' objects come from

# (kind, name, namespace) -> the object as known here, or None (a kind's reader looks up what a template refers to)
Resolver = Callable[[str, str, str], Optional[Mapping[str, Any]]]


@dataclass(frozen=True)
class Objects:
    """Objects read from one place, named for messages ("the cluster", "the input")."""

    items: tuple[Mapping[str, Any], ...]
    source: str


@dataclass(frozen=True)
class ClusterView:
    """What is known of the cluster; each part is "not known" by default, and the policy then does not guess."""

    nodes: NodeCatalog | None = None
    gpu_classes: GpuClasses | None = None
    queues: QueueIndex | None = None
    priority_classes: PriorityClassState = UNCHECKED
    claims: ClaimIndex | None = None
    pod_groups: PodGroupSupport = NOT_KNOWN
    jobs: Resolver | None = None


NOTHING_KNOWN = ClusterView()
