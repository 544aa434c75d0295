"""A scheduler backend's queues as the cluster has them: which exist, and the most GPUs a gang on each can get.

Where the cluster can be read (the server's watch, ``check --cluster``, queue objects among ``check``'s input), a
workload that names a queue that does not exist, or a gang larger than its queue can ever give, is told at its
admission instead of waiting forever (Kueue leaves it pending, KAI marks it ``QueueDoesNotExist``; Volcano refuses
it, with a message about queue states). What each backend's objects say (sources: docs/admins/schedulers.md):

- Kueue: a ``LocalQueue`` (namespaced) points to a ``ClusterQueue``, whose ``resourceGroups[].flavors[].resources``
  give each GPU resource's ``nominalQuota`` and ``borrowingLimit`` (no limit: borrowing from the cohort is
  unlimited). A gang can never get more than the sum over flavors, so only a gang above it is denied. A
  ``ResourceFlavor`` with a ``topologyName`` is one topology-aware scheduling places by: a ClusterQueue none of
  whose flavors has one can never admit a job that asks for a podset topology.
- KAI-Scheduler: a ``Queue``'s ``spec.resources.gpu.quota`` (what non-preemptible work may use; -1 unlimited) and
  ``limit`` (the cap for any work; -1 or unset: none).
- Volcano: a ``Queue``'s ``spec.capability`` (the cap) and ``status.state`` (only an ``Open`` queue takes jobs).
- scheduler-plugins coscheduling: the ``PodGroup`` a pod's ``scheduling.x-k8s.io/pod-group`` label names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

from .. import podview
from ..quantity import QuantityError, parse_quantity
from .rules import QueueKind


@dataclass(frozen=True)
class Queue:
    name: str
    namespace: str                      # "" for a cluster-scoped queue
    gpu_limit: Decimal | None = None    # the most GPUs any gang on it can get (None: no limit known)
    gpu_quota: Decimal | None = None    # KAI: what non-preemptible work may use (None: unlimited or unknown)
    open: bool = True
    detail: str = ""                    # how the limit was read, for messages
    # Kueue: whether a flavor of its ClusterQueue has a Topology (topology-aware scheduling can place a job by a
    # level there; on an ordinary flavor a podset topology request leaves the job never admitted); None: not known
    topology: bool | None = None


@dataclass(frozen=True)
class QueueIndex:
    """The queues of one backend, by (namespace, name); ``kind`` names them in messages."""

    kind: str
    namespaced: bool
    queues: Mapping[tuple[str, str], Queue] = field(default_factory=dict)
    source: str = "the cluster"
    # Kueue's WorkloadPriorityClasses (a workload naming one that does not exist never gets a Workload); None: not
    # known (check's files may hold some of the cluster's objects and not others)
    priority_classes: frozenset[str] | None = None

    def find(self, name: str, namespace: str) -> Queue | None:
        return self.queues.get((namespace if self.namespaced else "", name))

    def names(self, namespace: str) -> list[str]:
        scope = namespace if self.namespaced else ""
        return sorted(name for ns, name in self.queues if ns == scope)


def _amount(value: Any) -> Decimal | None:
    try:
        return parse_quantity(value) if value is not None else None
    except QuantityError:
        return None


def _kueue(objects: list[Mapping[str, Any]], is_gpu: Callable[[str], bool], whole: bool) -> QueueIndex:
    limits: dict[str, tuple[Decimal | None, str]] = {}
    flavors = {str(podview.metadata(f).get("name", "")): bool(podview.as_dict(f.get("spec")).get("topologyName"))
               for f in objects if f.get("kind") == "ResourceFlavor"}
    topology: dict[str, bool | None] = {}
    for cq in (o for o in objects if o.get("kind") == "ClusterQueue"):
        spec = podview.as_dict(cq.get("spec"))
        named = [str(podview.as_dict(f).get("name", "")) for g in podview.as_list(spec.get("resourceGroups"))
                 for f in podview.as_list(podview.as_dict(g).get("flavors"))]
        topology[str(podview.metadata(cq).get("name", ""))] = (
            any(flavors.get(n, False) for n in named) if flavors and all(n in flavors for n in named) else None)
        cohort = spec.get("cohortName") or spec.get("cohort")
        total = Decimal(0)
        unlimited = False
        parts = []
        for group in podview.as_list(spec.get("resourceGroups")):
            for flavor in podview.as_list(podview.as_dict(group).get("flavors")):
                for resource in podview.as_list(podview.as_dict(flavor).get("resources")):
                    resource = podview.as_dict(resource)
                    if not isinstance(resource.get("name"), str) or not is_gpu(resource["name"]):
                        continue
                    nominal = _amount(resource.get("nominalQuota")) or Decimal(0)
                    borrowing = _amount(resource.get("borrowingLimit"))
                    if cohort and borrowing is None:
                        unlimited = True
                    total += nominal + (borrowing if cohort and borrowing is not None else Decimal(0))
                    lent = f" + {borrowing.normalize():f} borrowed from cohort {cohort}" \
                        if cohort and borrowing is not None else ""
                    parts.append(f"{podview.as_dict(flavor).get('name', '?')} {resource['name']} "
                                 f"{nominal.normalize():f}{lent}")
        name = str(podview.metadata(cq).get("name", ""))
        limits[name] = (None if unlimited else total,
                        f'ClusterQueue "{name}": ' + (", ".join(parts) or "no GPU quota"))
    queues = {}
    for lq in (o for o in objects if o.get("kind") == "LocalQueue"):
        meta = podview.metadata(lq)
        cluster_queue = str(podview.as_dict(lq.get("spec")).get("clusterQueue") or "")
        limit, detail = limits.get(cluster_queue, (None, f'ClusterQueue "{cluster_queue}" (not seen)'))
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        queues[key] = Queue(name=key[1], namespace=key[0], gpu_limit=limit, detail=detail,
                            topology=topology.get(cluster_queue))
    priorities = frozenset(str(podview.metadata(o).get("name", "")) for o in objects
                           if o.get("kind") == "WorkloadPriorityClass")
    return QueueIndex(kind="LocalQueue", namespaced=True, queues=queues,
                      priority_classes=priorities if priorities or whole else None)


def _kai(objects: list[Mapping[str, Any]]) -> QueueIndex:
    queues = {}
    for queue in (o for o in objects if o.get("kind") == "Queue"):
        gpu = podview.as_dict(podview.as_dict(podview.as_dict(queue.get("spec")).get("resources")).get("gpu"))
        quota, limit = _amount(gpu.get("quota")), _amount(gpu.get("limit"))
        name = str(podview.metadata(queue).get("name", ""))
        queues[("", name)] = Queue(name=name, namespace="", gpu_limit=limit if limit is not None and limit >= 0 else None,
                                   gpu_quota=quota if quota is not None and quota >= 0 else None,
                                   detail=f'Queue "{name}": gpu quota {gpu.get("quota", "unset")}, limit '
                                          f'{gpu.get("limit", "unset")}')
    return QueueIndex(kind="Queue", namespaced=False, queues=queues)


def _volcano(objects: list[Mapping[str, Any]], is_gpu: Callable[[str], bool]) -> QueueIndex:
    queues = {}
    for queue in (o for o in objects if o.get("kind") == "Queue"):
        capability = podview.as_dict(podview.as_dict(queue.get("spec")).get("capability"))
        gpus = [_amount(v) for k, v in capability.items() if is_gpu(k)]
        limit = sum((g for g in gpus if g is not None), Decimal(0)) if gpus else None
        state = podview.as_dict(queue.get("status")).get("state")
        name = str(podview.metadata(queue).get("name", ""))
        queues[("", name)] = Queue(name=name, namespace="", gpu_limit=limit, open=state in (None, "", "Open"),
                                   detail=f'Queue "{name}": capability {dict(capability) or "unset"}, state '
                                          f'{state or "Open"}')
    return QueueIndex(kind="Queue", namespaced=False, queues=queues)


def _pod_groups(objects: list[Mapping[str, Any]]) -> QueueIndex:
    queues = {}
    for group in (o for o in objects if o.get("kind") == "PodGroup"):
        meta = podview.metadata(group)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        queues[key] = Queue(name=key[1], namespace=key[0], detail=f'PodGroup "{key[1]}"')
    return QueueIndex(kind="PodGroup", namespaced=True, queues=queues)


def read_queues(backend: str, kinds: Iterable[QueueKind], objects: Iterable[Mapping[str, Any]],
                is_gpu: Callable[[str], bool], *, source: str, whole: bool = False) -> QueueIndex | None:
    """The queues of ``backend`` among ``objects`` (those of its queue ``kinds``, the rules'
    ``scheduler.backends.<backend>.queueKinds``), or None when none are among them. ``whole``: every object of
    those kinds is among them (a watch or a list of the cluster), so a kind with none has none."""
    wanted = {(k.group, k.kind) for k in kinds}
    mine = [o for o in objects if (str(o.get("apiVersion", "")).rpartition("/")[0], o.get("kind")) in wanted]
    if not mine:
        return None
    if backend == "kueue":
        index = _kueue(mine, is_gpu, whole)
    elif backend == "kai":
        index = _kai(mine)
    elif backend == "volcano":
        index = _volcano(mine, is_gpu)
    else:
        index = _pod_groups(mine)
    return QueueIndex(kind=index.kind, namespaced=index.namespaced, queues=index.queues, source=source,
                      priority_classes=index.priority_classes)
