"""The scheduler backend's queues, watched: Kueue's LocalQueues and ClusterQueues, KAI's and Volcano's Queues,
coscheduling's PodGroups (the rules' ``scheduler.backends.<backend>.queueKinds``), kept for the checks that a
workload's queue exists and can hold it (`webhook.core.backends.queues`). One `Informer` per kind; only the parts the checks
read are kept (names, spec, status state). RBAC: ``list`` and ``watch`` on those kinds
(manifests/base/rbac.yaml, ClusterRole ai-admission-read-queues)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from webhook.core.backends.rules import QueueKind

from . import client as kube
from .informer import Api, Informer, InformerGroup, ObjectStore, Observer, api_calls


def _slim(kind: QueueKind) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def slim(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        state = (obj.get("status") or {}).get("state")
        return {"apiVersion": f"{kind.group}/{kind.version}", "kind": kind.kind,
                "metadata": {k: meta[k] for k in ("name", "namespace") if k in meta},
                "spec": obj.get("spec") or {}, **({"status": {"state": state}} if state else {})}
    return slim


def path_of(kind: QueueKind, version: str | None = None) -> str:
    return kube.collection(kind.group, version or kind.version, kind.resource)


def paths_of(kind: QueueKind) -> tuple[str, ...]:
    """The kind's collection at each version it may be served at, the preferred first (Kueue 0.13, which OpenShift
    ships, serves only v1beta1; a watch of v1beta2 alone 404s at every resync and no queue check ever fires)."""
    return tuple(path_of(kind, version) for version in kind.versions)


def list_queues(api: Any, kinds: tuple[QueueKind, ...]) -> list[dict[str, Any]]:
    """One list of each queue kind (``check --cluster``), at the first version the cluster serves; a kind the
    cluster does not serve at all gives none."""
    found: list[dict[str, Any]] = []
    for kind in kinds:
        for path in paths_of(kind):
            try:
                items, _ = kube.list_items(api, path)
            except kube.KubeError as exc:
                if exc.status == 404:
                    continue
                raise
            found += [_slim(kind)(item) for item in items]
            break
    return found


class QueueWatch(InformerGroup):
    """List + watch of each queue kind; ``on_change`` hears the objects of every kind after each change, once every
    kind has been listed: Kueue's ClusterQueues without its LocalQueues (not yet listed, or a list refused) would
    make every workload's queue look missing."""

    def __init__(self, kinds: tuple[QueueKind, ...], *, resync: float = 300.0, api: Callable[[], Api] = api_calls,
                 observer: Observer | None = None) -> None:
        self.on_change: Callable[[list[dict[str, Any]]], None] | None = None
        self._listed: set[str] = set()
        self.stores = {kind.kind: ObjectStore(_slim(kind), on_change=partial(self._changed, kind.kind))
                       for kind in kinds}
        self.informers = {kind.kind: Informer(kind.resource, path_of(kind), self.stores[kind.kind], api,
                                              resync=resync, observer=observer, alternatives=paths_of(kind)[1:])
                          for kind in kinds}

    @property
    def listed(self) -> bool:
        """Every kind has been listed: what `objects` gives can be trusted to be whole."""
        return len(self._listed) == len(self.stores)

    def objects(self) -> list[dict[str, Any]]:
        return [obj for store in self.stores.values() for obj in store.objects.values()]

    def _changed(self, kind: str) -> None:
        self._listed.add(kind)  # a store changes first when its list is in
        if self.on_change is not None and self.listed:
            self.on_change(self.objects())
