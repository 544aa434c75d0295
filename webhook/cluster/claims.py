"""The cluster's DRA objects kept in memory: ResourceClaimTemplates and ResourceClaims, for pods that take GPUs
through them, and DeviceClasses, whose GPU classes (`webhook.core.dra.classes`) join the rules: their extended
resources (``deviceclass.resource.kubernetes.io/<class>``, ``extendedResourceName``) are accelerators.

A pod names its claims by template or claim name; what those ask for is in other objects, and the request path
makes no API call. So each worker keeps them in a `ClaimIndex`, filled by one `Informer` per kind. Only what the
analysis reads is kept (`slim`). Until the first list has arrived, or for a template created a moment before its
pod, a claim is simply not known: the pod is admitted as if it took none, and the template was judged at its own
admission.
"""

from __future__ import annotations

from typing import Any, Callable

from webhook.core.view.claims import CLAIM, CLAIM_TEMPLATE, ClaimIndex

from .informer import Api, Informer, InformerGroup, Observer, api_calls

PATHS = {CLAIM_TEMPLATE: "/apis/resource.k8s.io/v1/resourceclaimtemplates",
         CLAIM: "/apis/resource.k8s.io/v1/resourceclaims"}
WATCH_NAMES = {CLAIM_TEMPLATE: "resourceclaimtemplates", CLAIM: "resourceclaims"}


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The parts of a claim or template that ai-admission reads: names, annotations and spec (no status)."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "annotations", "resourceVersion") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept,
            "spec": obj.get("spec") or {}}


class ClaimStore:
    """One kind of the `ClaimIndex`, as an informer's store."""

    def __init__(self, index: ClaimIndex, kind: str) -> None:
        self.index = index
        self.kind = kind

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.index.replace(self.kind, [slim(obj) for obj in objects])

    def put(self, obj: dict[str, Any]) -> None:
        self.index.put(self.kind, slim(obj))

    def remove(self, obj: dict[str, Any]) -> None:
        self.index.remove(self.kind, obj)

    def __len__(self) -> int:
        return len(self.index.objects[self.kind])


DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def list_device_classes(api: Any) -> list[dict[str, Any]]:
    """One list of the DeviceClasses (``check --cluster``); [] where the cluster serves no resource.k8s.io/v1."""
    from . import client as kube

    try:
        items, _ = kube.list_items(api, DEVICE_CLASSES)
    except kube.KubeError as exc:
        if exc.status == 404:
            return []
        raise
    for item in items:
        item.setdefault("apiVersion", "resource.k8s.io/v1")
        item.setdefault("kind", "DeviceClass")
    return items


class DeviceClassStore:
    """The cluster's DeviceClasses by name (slim), as an informer's store; ``on_change`` hears of every change
    of what is kept (a status-only update of a class changes nothing)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.on_change: Callable[[list[dict[str, Any]]], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(list(self.objects.values()))

    @staticmethod
    def _kept(obj: dict[str, Any]) -> dict[str, Any]:
        kept = slim(obj)
        meta = obj.get("metadata") or {}
        if meta.get("creationTimestamp"):
            kept["metadata"]["creationTimestamp"] = meta["creationTimestamp"]
        kept["metadata"].pop("resourceVersion", None)
        return kept

    def replace(self, objects: list[dict[str, Any]]) -> None:
        kept = {str((o.get("metadata") or {}).get("name")): self._kept(o) for o in objects}
        if kept != self.objects:
            self.objects = kept
            self._changed()

    def put(self, obj: dict[str, Any]) -> None:
        kept = self._kept(obj)
        name = str(kept["metadata"].get("name"))
        if self.objects.get(name) != kept:
            self.objects[name] = kept
            self._changed()

    def remove(self, obj: dict[str, Any]) -> None:
        if self.objects.pop(str((obj.get("metadata") or {}).get("name")), None) is not None:
            self._changed()

    def __len__(self) -> int:
        return len(self.objects)


class ClaimWatch(InformerGroup):
    """List + watch of ResourceClaimTemplates and ResourceClaims into ``index``, and of the DeviceClasses into
    ``device_classes``: one informer per kind."""

    def __init__(self, index: ClaimIndex | None = None, *, resync: float = 300.0,
                 api: Callable[[], Api] = api_calls, observer: Observer | None = None) -> None:
        self.index = index or ClaimIndex()
        self.informers = {kind: Informer(WATCH_NAMES[kind], PATHS[kind], ClaimStore(self.index, kind), api,
                                         resync=resync, observer=observer) for kind in PATHS}
        self.device_classes = DeviceClassStore()
        self.informers["DeviceClass"] = Informer("deviceclasses", DEVICE_CLASSES, self.device_classes, api,
                                                 resync=resync, observer=observer)
