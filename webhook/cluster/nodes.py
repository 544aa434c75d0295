"""The Nodes, watched: the cluster's GPU catalog and placement facts (`webhook.core.view.node_facts`) kept current.

An `Informer` lists and watches the Nodes; each node is reduced at once to the facts the rules read (its GPU
facts, and the labels, taints and resources placement reads: `webhook.core.view.node_facts.NodeFacts`), and a new
`DiscoveredCatalog` is built and handed to ``on_change`` only when those facts change (a node heartbeat changes
nothing). RBAC: ``list`` and ``watch`` on nodes, nothing else.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from webhook.core.rules import Rules
from webhook.core.view.node_facts import (
    UNDISCOVERED,
    DiscoveredCatalog,
    NodeFacts,
    NodeGpu,
    build,
    has_gpu_resources,
    node_facts,
    node_gpu,
)

from . import client as kube
from .informer import Api, Informer, Observer, api_calls

log = logging.getLogger("ai_admission")
PATH = "/api/v1/nodes"


def discover(api: Any, rules: Rules) -> DiscoveredCatalog:
    """One list of the Nodes (``ai-admission catalog``, ``check --cluster``)."""
    items, _ = kube.list_items(api, PATH)
    store = NodeStore(lambda: rules)
    store.replace(items)
    return store.catalog(synced_at=time.time())


class NodeStore:
    """Each node's facts by name (the informer's store), and the catalog built from them."""

    def __init__(self, rules: Callable[[], Rules], *, on_change: Callable[[], None] | None = None) -> None:
        self._rules = rules
        self._on_change = on_change
        self.nodes: dict[str, NodeGpu | None] = {}
        self.facts: dict[str, NodeFacts] = {}  # GPU nodes only
        self.unlabelled: set[str] = set()

    def __len__(self) -> int:
        return len(self.nodes)

    def catalog(self, *, synced_at: float | None, error: str | None = None) -> DiscoveredCatalog:
        return build(self.nodes, unlabelled=self.unlabelled, synced_at=synced_at, error=error, facts=self.facts)

    def _record(self, node: dict[str, Any], deleted: bool = False) -> bool:
        """Record one node; True when what the rules read of it changed."""
        name = str((node.get("metadata") or {}).get("name") or "")
        rules = self._rules()
        gpu = None if deleted else node_gpu(node, rules.model_keys)
        gpu_node = not deleted and (gpu is not None or has_gpu_resources(node))
        facts = node_facts(node, rules.node_label_keys(), rules.accelerators.is_device, gpu) if gpu_node else None
        unlabelled = gpu_node and gpu is None
        changed = (deleted or name not in self.nodes or self.nodes.get(name) != gpu or self.facts.get(name) != facts
                   or unlabelled != (name in self.unlabelled))
        if deleted:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = gpu
        if facts is None:
            self.facts.pop(name, None)
        else:
            self.facts[name] = facts
        (self.unlabelled.add if unlabelled else self.unlabelled.discard)(name)
        return changed

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.nodes.clear()
        self.facts.clear()
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
    models or placement facts changed."""

    def __init__(self, rules: Callable[[], Rules], *, resync: float = 300.0, api: Callable[[], Api] = api_calls,
                 on_change: Callable[[DiscoveredCatalog], None] | None = None,
                 observer: Observer | None = None) -> None:
        self.on_change = on_change
        self.catalog = UNDISCOVERED
        self.store = NodeStore(rules, on_change=self._publish)
        self.informer = Informer("nodes", PATH, self.store, api, resync=resync, observer=observer)

    def start(self) -> NodeWatch:
        self.informer.start()
        return self

    def stop(self) -> None:
        self.informer.stop()

    def _publish(self) -> None:
        catalog = self.store.catalog(synced_at=time.time())
        previous, self.catalog = self.catalog, catalog
        if previous.models != catalog.models or previous.nodes != catalog.nodes or previous.known != catalog.known:
            if previous.models != catalog.models or previous.known != catalog.known:
                log.warning(json.dumps({"msg": "node GPU catalog changed", **catalog.summary(),
                                        "products": {p: m.describe() for p, m in catalog.models.items()}}))
            if self.on_change is not None:
                self.on_change(catalog)

    def summary(self) -> dict[str, Any]:
        """`/readyz`'s ``nodeCatalog``: the catalog's summary with the watch's last error."""
        return {**self.catalog.summary(), "error": self.informer.status.error}
