"""The DRA claims and claim templates of the whole cluster as last seen (`ClaimIndex`): part of the cluster's
view, filled off the request path (by `webhook.cluster.claims`, or by ``check`` from its files); a request only
reads it, through a `ClaimSource` for its namespace (`webhook.core.dra.claims` judges what a pod takes).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from .. import podview

CLAIM_TEMPLATE = "ResourceClaimTemplate"
CLAIM = "ResourceClaim"
CLAIM_KINDS = (CLAIM_TEMPLATE, CLAIM)

# (kind, name) -> the object, in the namespace of the pod being judged
ClaimSource = Callable[[str, str], Optional[Mapping[str, Any]]]


class ClaimIndex:
    """The claims and templates of the whole cluster as last seen, by kind and (namespace, name).

    Filled off the request path (by `webhook.cluster.claims`, or by ``check`` from its files); a request only reads it.
    A kind's whole map is swapped in one assignment after a fresh list, single objects are set or deleted as
    watch events arrive.
    """

    def __init__(self) -> None:
        self.objects: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {kind: {} for kind in CLAIM_KINDS}

    def source(self, namespace: str) -> ClaimSource:
        """Lookups in ``namespace``, for a pod of that namespace."""
        objects = self.objects
        return lambda kind, name: objects.get(kind, {}).get((namespace, name))

    def key(self, obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = podview.metadata(obj)
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        self.objects[kind] = {self.key(obj): obj for obj in objects}

    def put(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.objects[kind][self.key(obj)] = obj

    def remove(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.objects[kind].pop(self.key(obj), None)
