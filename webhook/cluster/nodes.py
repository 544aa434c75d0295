"""The Nodes, watched: the cluster's GPU catalog (`webhook.core.nodes`) kept current for the server.

An `Informer` lists and watches the Nodes; each node is reduced at once to its GPU facts, and a new
`DiscoveredCatalog` is built and handed to ``on_change`` only when those facts change (a node heartbeat changes
nothing). RBAC: ``list`` and ``watch`` on nodes, nothing else.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Iterable

from webhook.core.nodes import UNDISCOVERED, DiscoveredCatalog, NodeGpu, build, has_gpu_resources, node_gpu

from . import client as kube
from .informer import Api, Informer, Observer, api_calls

log = logging.getLogger("ai_admission")
PATH = "/api/v1/nodes"


def discover(api: Any, keys: Iterable[str] = ()) -> DiscoveredCatalog:
    """One list of the Nodes (``ai-admission catalog``, ``check --cluster``)."""
    items, _ = kube.list_items(api, PATH)
    store = NodeStore(keys=lambda: tuple(keys))
    store.replace(items)
    return store.catalog(synced_at=time.time())


class NodeStore:
    """Each node's GPU facts by name (the informer's store), and the catalog built from them."""

    def __init__(self, *, keys: Callable[[], Iterable[str]] = tuple,
                 on_change: Callable[[], None] | None = None) -> None:
        self._keys = keys
        self._on_change = on_change
        self.nodes: dict[str, NodeGpu | None] = {}
        self.unlabelled: set[str] = set()

    def __len__(self) -> int:
        return len(self.nodes)

    def catalog(self, *, synced_at: float | None, error: str | None = None) -> DiscoveredCatalog:
        return build(self.nodes, unlabelled=self.unlabelled, synced_at=synced_at, error=error)

    def _record(self, node: dict[str, Any], deleted: bool = False) -> bool:
        """Record one node; True when its GPU facts changed."""
        name = str((node.get("metadata") or {}).get("name") or "")
        gpu = None if deleted else node_gpu(node, tuple(self._keys()))
        unlabelled = not deleted and gpu is None and has_gpu_resources(node)
        changed = (deleted or name not in self.nodes or self.nodes.get(name) != gpu
                   or unlabelled != (name in self.unlabelled))
        if deleted:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = gpu
        (self.unlabelled.add if unlabelled else self.unlabelled.discard)(name)
        return changed

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.nodes.clear()
        self.unlabelled.clear()
        for node in objects:
            self._record(node)
        if self._on_change is not None:
            self._on_change()

    def put(self, obj: dict[str, Any]) -> None:
        if self._record(obj) and self._on_change is not None:
            self._on_change()

    def remove(self, obj: dict[str, Any]) -> None:
        if self._record(obj, deleted=True) and self._on_change is not None:
            self._on_change()


class NodeWatch:
    """The Nodes' GPU catalog, current: ``catalog`` is swapped whole, ``on_change`` hears of every new one whose
    models changed."""

    def __init__(self, *, keys: Callable[[], Iterable[str]] = tuple, resync: float = 300.0,
                 api: Callable[[], Api] = api_calls, on_change: Callable[[DiscoveredCatalog], None] | None = None,
                 observer: Observer | None = None) -> None:
        self.on_change = on_change
        self.catalog = UNDISCOVERED
        self.store = NodeStore(keys=keys, on_change=self._publish)
        self.informer = Informer("nodes", PATH, self.store, api, resync=resync, observer=observer)

    def start(self) -> NodeWatch:
        self.informer.start()
        return self

    def stop(self) -> None:
        self.informer.stop()

    def _publish(self) -> None:
        catalog = self.store.catalog(synced_at=time.time())
        previous, self.catalog = self.catalog, catalog
        if previous.models != catalog.models or previous.known != catalog.known:
            log.warning(json.dumps({"msg": "node GPU catalog changed", **catalog.summary(),
                                    "products": {p: m.describe() for p, m in catalog.models.items()}}))
            if self.on_change is not None:
                self.on_change(catalog)

    def summary(self) -> dict[str, Any]:
        """`/readyz`'s ``nodeCatalog``: the catalog's summary with the watch's last error."""
        return {**self.catalog.summary(), "error": self.informer.status.error}
