"""Decisions remembered for pods that differ only in name: a Job with ``parallelism: 500`` or a ReplicaSet
scale-up sends the same pod hundreds of times, each with its own name, uid and managedFields timestamp.

The key is what the decision reads, as the request's route says it (`webhook.core.admission.route_of`, worked
out once for the cache and the decision): what is done (mutated or judged), the mode in force (the path's or the
rules'), the request's namespace, and the pod without ``metadata.name``, ``generateName``, ``uid`` and
``managedFields`` (none of which classification, profile, policy or mutation read). Messages do name the pod, so
a remembered verdict that carries a message is used only for a pod with the same subject. Only pods at their
CREATE that take no DRA claims are remembered (a claim's verdict reads the claims the watch has seen, which change
under it). The cache is bounded (least recently used out), and it is emptied when the rules, the PriorityClass
state or the Workload API's support it was built with are replaced (a rules reload, a PriorityClass check that saw
something new, the group controller going out of service). The response is always built for the request at hand
(its uid), never remembered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import orjson

from webhook.core.admission import Route, Verdict
from webhook.core.context import Context
from webhook.core.review import AdmissionRequest

SIZE = 512  # entries per worker (the settings' AI_ADMISSION_DECISION_CACHE); 0 turns it off
_IGNORED_METADATA = ("name", "generateName", "uid", "managedFields")


def decision_key(request: AdmissionRequest, route: Route) -> bytes | None:
    """What the decision for ``request`` depends on, as bytes; None for what is never remembered (its ``route`` says
    which, `webhook.core.admission.route_of`)."""
    pod = request.object
    if not route.cacheable or not isinstance(pod, dict):
        return None
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        pod = {**pod, "metadata": {k: v for k, v in metadata.items() if k not in _IGNORED_METADATA}}
    try:
        body = orjson.dumps(pod, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON after all: decide it afresh
        return None
    return orjson.dumps([route.action, route.mode, route.namespace]) + body


def _basis(ctx: Context) -> tuple[object, ...]:
    """What a remembered verdict was decided on, besides the pod: the rules and each part of the cluster's view a
    pod's verdict reads (the claims are never read: a pod that takes claims is not remembered). Held, not compared
    by id: an id can be reused once an object is gone."""
    cluster = ctx.cluster
    return (ctx.rules, cluster.nodes, cluster.gpu_classes, cluster.queues, cluster.priority_classes,
            cluster.pod_groups)


def _same(held: tuple[object, ...], basis: tuple[object, ...]) -> bool:
    return len(held) == len(basis) and all(a is b for a, b in zip(held, basis, strict=True))


class DecisionCache:
    """A bounded LRU of verdicts, valid for one basis (`_basis`): the rules and the parts of the cluster's view."""

    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[bytes, tuple[Verdict | None, str]] = OrderedDict()
        self._lock = threading.Lock()
        self._basis: tuple[object, ...] = ()
        self.hits = 0

    def decide(self, request: AdmissionRequest, route: Route, *, ctx: Context, endpoint: str,
               decide: Callable[..., Verdict | None]) -> Verdict | None:
        """``decide(request, ...)``'s verdict, remembered when the same pod comes again."""
        key = decision_key(request, route)
        if key is None:
            return decide(request, ctx=ctx, endpoint=endpoint, route=route)
        subject = route.subject
        basis = _basis(ctx)
        with self._lock:
            if not _same(self._basis, basis):
                self._entries.clear()
                self._basis = basis
            found = self._entries.get(key)
            if found is not None and (found[0] is None or found[0].message is None or found[1] == subject):
                self._entries.move_to_end(key)
                self.hits += 1
                return found[0]
        verdict = decide(request, ctx=ctx, endpoint=endpoint, route=route)
        with self._lock:
            if _same(self._basis, basis):
                self._entries[key] = (verdict, subject)
                if len(self._entries) > self._size:
                    self._entries.popitem(last=False)
        return verdict

    def __len__(self) -> int:
        return len(self._entries)

