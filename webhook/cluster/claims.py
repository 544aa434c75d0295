"""The cluster's ResourceClaimTemplates and ResourceClaims kept in memory, for pods that take GPUs through them.

A pod names its claims by template or claim name; what those ask for is in other objects, and the request path
makes no API call. So each worker keeps them in a `ClaimIndex`, filled by one `Informer` per kind. Only what the
analysis reads is kept (`slim`). Until the first list has arrived, or for a template created a moment before its
pod, a claim is simply not known: the pod is admitted as if it took none, and the template was judged at its own
admission.
"""

from __future__ import annotations

from typing import Any, Callable

from webhook.core.dra.claims import CLAIM, CLAIM_TEMPLATE, ClaimIndex

from .informer import Api, Informer, Observer, api_calls

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


class ClaimWatch:
    """List + watch of ResourceClaimTemplates and ResourceClaims into ``index``, one informer per kind."""

    def __init__(self, index: ClaimIndex | None = None, *, resync: float = 300.0,
                 api: Callable[[], Api] = api_calls, observer: Observer | None = None) -> None:
        self.index = index or ClaimIndex()
        self.informers = {kind: Informer(WATCH_NAMES[kind], PATHS[kind], ClaimStore(self.index, kind), api,
                                         resync=resync, observer=observer) for kind in PATHS}

    def start(self) -> ClaimWatch:
        for informer in self.informers.values():
            informer.start()
        return self

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def status(self) -> dict[str, Any]:
        return {kind: informer.status.as_dict() for kind, informer in self.informers.items()}
