"""The cluster's GPU catalog as its nodes publish it, kept current by a background list + watch of Nodes.

NVIDIA's GPU feature discovery (GFD) and AMD's node labeller already write the truth on every GPU node: the
product, its memory as the device reports it, how many a node holds, the MIG profiles. A daemon thread per
worker lists the Nodes, then watches them (resync by a fresh list every ``resync`` seconds, reconnect with
backoff after an error) and keeps a `DiscoveredCatalog`, a frozen value that is swapped whole, so the request
path reads it without a lock and never calls the API. RBAC: ``list`` and ``watch`` on nodes, nothing else.

Label facts (sources in /work/notes/gpu-facts.md, sections 1-3):

- ``nvidia.com/gpu.product`` is NVML's name with characters outside ``[A-Za-z0-9-_. ]`` removed and words joined
  by ``-``; sharing (time-slicing, MPS) appends ``-SHARED``, MIG strategy ``single`` appends ``-MIG-<profile>``
  (``-MIG-INVALID`` for a bad layout), and old drivers omit the ``NVIDIA-`` prefix
  (NVIDIA/k8s-device-plugin: internal/lm/resource.go, getProductName/sanitise; docs/gpu-feature-discovery/README.md).
- ``nvidia.com/gpu.memory`` is NVML's total in MiB, integer-divided (internal/resource/nvml-device.go,
  GetTotalMemoryMB); it depends on the driver and ECC mode, so the smallest figure over a model's nodes is kept.
  Under MIG ``single`` it is the slice's memory, and ``nvidia.com/gpu.count`` counts slices.
- ``nvidia.com/gpu.count`` counts physical GPUs; capacity ``nvidia.com/gpu`` is count x replicas when shared.
- MIG ``mixed``: resources ``nvidia.com/mig-<profile>`` and labels ``nvidia.com/mig-<profile>.count``
  (internal/lm/mig-strategy.go).
- AMD (ROCm/k8s-device-plugin: cmd/k8s-node-labeller/main.go): ``amd.com/gpu.product-name`` (spaces to ``_``),
  ``amd.com/gpu.vram`` rounded to whole GiB (``192G``), ``amd.com/gpu.family``; the count is the ``amd.com/gpu``
  capacity.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from . import kube

log = logging.getLogger("ai_admission")

GFD_PRODUCT = "nvidia.com/gpu.product"
AMD_PRODUCT = "amd.com/gpu.product-name"
# Node labels whose values name a node's GPU model, besides the product labels (GKE's accelerator, the
# instance type, Karpenter's GPU name, the course's gpu-type). The rules' modelKeys are added to these.
NAMING_KEYS = (GFD_PRODUCT, AMD_PRODUCT, "cloud.google.com/gke-accelerator", "node.kubernetes.io/instance-type",
               "karpenter.k8s.aws/instance-gpu-name", "gpu-type")
_GFD_SUFFIX = re.compile(r"-(?:SHARED|MIG-.*)$")
_MIG_LABEL = re.compile(r"^nvidia\.com/mig-(?P<profile>[0-9]+g\.[0-9]+gb[.a-z0-9+]*)\.count$")
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>[0-9]+g\.[0-9]+gb[.a-z0-9+]*)$")
_AMD_VRAM = re.compile(r"^([0-9]+)G$")


@dataclass(frozen=True)
class NodeGpu:
    """The GPU facts of one node, read from its labels and resources."""

    product: str
    vendor: str
    count: int | None                 # physical GPUs (None under MIG single: the labels count slices)
    memory_mib: int | None            # per GPU as the device reports it (None: not published, or a MIG slice's)
    memory_rounded: bool              # AMD's vram label: whole GiB
    family: str | None
    names: tuple[tuple[str, str], ...]  # (label key, value) naming the model on this node
    mig_profiles: tuple[str, ...]


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def node_gpu(node: Mapping[str, Any], keys: Iterable[str] = ()) -> NodeGpu | None:
    """What ``node`` publishes about its GPUs, or None when it names no GPU product."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    status = node.get("status") or {}
    capacity: Mapping[str, Any] = status.get("capacity") or {}
    allocatable: Mapping[str, Any] = status.get("allocatable") or {}
    names = tuple(sorted((k, str(labels[k])) for k in {*NAMING_KEYS, *keys} if labels.get(k)))
    if labels.get(GFD_PRODUCT):
        raw = str(labels[GFD_PRODUCT])
        single_mig = "-MIG-" in raw
        profiles = {m["profile"] for k in labels if (m := _MIG_LABEL.match(k))}
        profiles |= {m["profile"] for k in {*capacity, *allocatable} if (m := _MIG_RESOURCE.match(k))}
        if single_mig and not raw.endswith("-MIG-INVALID"):
            profiles.add(raw.split("-MIG-", 1)[1])
        count = _int(labels.get("nvidia.com/gpu.count"))
        if count is None:
            replicas = max(_int(labels.get("nvidia.com/gpu.replicas")) or 1, 1)
            count = (_int(capacity.get("nvidia.com/gpu")) or 0) // replicas or None
        return NodeGpu(product=_GFD_SUFFIX.sub("", raw), vendor="nvidia", count=None if single_mig else count,
                       memory_mib=None if single_mig else _int(labels.get("nvidia.com/gpu.memory")),
                       memory_rounded=False, family=labels.get("nvidia.com/gpu.family"), names=names,
                       mig_profiles=tuple(sorted(profiles)))
    if labels.get(AMD_PRODUCT):
        vram = _AMD_VRAM.match(str(labels.get("amd.com/gpu.vram", "")))
        return NodeGpu(product=str(labels[AMD_PRODUCT]), vendor="amd", count=_int(capacity.get("amd.com/gpu")),
                       memory_mib=int(vram.group(1)) * 1024 if vram else None, memory_rounded=bool(vram),
                       family=labels.get("amd.com/gpu.family"), names=names, mig_profiles=())
    return None


def has_gpu_resources(node: Mapping[str, Any]) -> bool:
    capacity = (node.get("status") or {}).get("capacity") or {}
    return any(key in ("nvidia.com/gpu", "amd.com/gpu") or key.startswith("nvidia.com/mig-") for key in capacity)


@dataclass(frozen=True)
class DiscoveredModel:
    """One GPU product as the nodes name it, over every node that has it."""

    product: str
    vendor: str
    memory_mib: int | None      # the smallest any node reports (drivers and ECC modes differ)
    memory_rounded: bool
    gpus_per_node: tuple[tuple[int, int], ...]  # (GPUs on a node, how many nodes have that many)
    nodes: tuple[str, ...]
    names: tuple[tuple[str, str], ...]          # (label key, value) naming it, over all its nodes
    mig_profiles: tuple[str, ...]
    family: str | None

    @property
    def largest_node(self) -> int | None:
        return max((count for count, _ in self.gpus_per_node), default=None)

    @property
    def gpus(self) -> int:
        return sum(count * nodes for count, nodes in self.gpus_per_node)

    def describe(self) -> str:
        """"3 nodes x 8 GPUs" (or "2 nodes x 4-8 GPUs"), for messages."""
        counts = sorted(count for count, _ in self.gpus_per_node)
        nodes = f"{len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}"
        if not counts:
            return nodes
        span = str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
        return f"{nodes} x {span} GPU{'s' if counts[-1] != 1 else ''}"


@dataclass(frozen=True)
class DiscoveredCatalog:
    """The cluster's GPU models; ``synced_at`` None means nothing is known yet (the static catalog applies)."""

    models: Mapping[str, DiscoveredModel] = field(default_factory=dict)
    gpu_nodes: int = 0
    unlabelled_nodes: tuple[str, ...] = ()  # GPU resources but no product label (no GFD / labeller there)
    synced_at: float | None = None
    error: str | None = None

    @property
    def known(self) -> bool:
        return self.synced_at is not None

    def summary(self) -> dict[str, Any]:
        return {"synced": self.known, "gpuNodes": self.gpu_nodes, "models": len(self.models),
                "unlabelledGpuNodes": list(self.unlabelled_nodes), "syncedAt": self.synced_at, "error": self.error}


UNKNOWN = DiscoveredCatalog()


def build(nodes: Mapping[str, NodeGpu | None], *, unlabelled: Iterable[str] = (), synced_at: float | None = None,
          error: str | None = None) -> DiscoveredCatalog:
    by_product: dict[str, list[tuple[str, NodeGpu]]] = defaultdict(list)
    for name, gpu in nodes.items():
        if gpu is not None:
            by_product[gpu.product].append((name, gpu))
    models = {}
    for product, members in sorted(by_product.items()):
        gpus = [gpu for _, gpu in members]
        memories = [g.memory_mib for g in gpus if g.memory_mib]
        counts: dict[int, int] = defaultdict(int)
        for gpu in gpus:
            if gpu.count:
                counts[gpu.count] += 1
        families = sorted({g.family for g in gpus if g.family})
        models[product] = DiscoveredModel(
            product=product, vendor=gpus[0].vendor, memory_mib=min(memories) if memories else None,
            memory_rounded=any(g.memory_rounded for g in gpus), gpus_per_node=tuple(sorted(counts.items())),
            nodes=tuple(sorted(name for name, _ in members)), names=tuple(sorted({n for g in gpus for n in g.names})),
            mig_profiles=tuple(sorted({p for g in gpus for p in g.mig_profiles})),
            family=families[0] if families else None)
    return DiscoveredCatalog(models=models, gpu_nodes=sum(len(m) for m in by_product.values()),
                             unlabelled_nodes=tuple(sorted(unlabelled)), synced_at=synced_at, error=error)


def discover(api: Any, keys: Iterable[str] = ()) -> DiscoveredCatalog:
    """One list of the Nodes (``ai-admission catalog``, ``check --cluster``)."""
    items, _ = kube.list_items(api, "/api/v1/nodes")
    keys = tuple(keys)
    gpus = {str(n["metadata"]["name"]): node_gpu(n, keys) for n in items}
    unlabelled = [str(n["metadata"]["name"]) for n in items if gpus[str(n["metadata"]["name"])] is None
                  and has_gpu_resources(n)]
    return build(gpus, unlabelled=unlabelled, synced_at=time.time())


class NodeWatch:
    """List, then watch, the Nodes; relist every ``resync`` seconds and after any error (with backoff).

    ``on_change`` is called with the new catalog when the models change (not on every node heartbeat: only a
    change in a node's GPU facts rebuilds the catalog).
    """

    def __init__(self, *, keys: Callable[[], Iterable[str]] = tuple, resync: float = 300.0,
                 client: Callable[[], Any] = kube.client,
                 on_change: Callable[[DiscoveredCatalog], None] | None = None) -> None:
        self._keys = keys
        self._resync = resync
        self._client = client
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._nodes: dict[str, NodeGpu | None] = {}
        self._unlabelled: set[str] = set()
        self.catalog = UNKNOWN

    def start(self) -> NodeWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _update(self, node: Mapping[str, Any], *, deleted: bool = False) -> bool:
        """Record one node; True when its GPU facts changed."""
        name = str(node["metadata"]["name"])
        gpu = None if deleted else node_gpu(node, tuple(self._keys()))
        unlabelled = not deleted and gpu is None and has_gpu_resources(node)
        changed = (self._nodes.get(name) != gpu or name not in self._nodes or deleted
                   or unlabelled != (name in self._unlabelled))
        if deleted:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = gpu
        (self._unlabelled.add if unlabelled else self._unlabelled.discard)(name)
        return changed

    def _publish(self, error: str | None = None) -> None:
        from . import metrics

        catalog = build(self._nodes, unlabelled=self._unlabelled, synced_at=time.time(), error=error)
        previous, self.catalog = self.catalog, catalog
        metrics.CATALOG_NODES.set(catalog.gpu_nodes)
        metrics.CATALOG_MODELS.set(len(catalog.models))
        metrics.CATALOG_SYNCED_AT.set(catalog.synced_at or 0)
        for product in set(previous.models) | set(catalog.models):
            model = catalog.models.get(product)
            metrics.CATALOG_MODEL_NODES.labels(product).set(len(model.nodes) if model else 0)
        if previous.models != catalog.models or previous.known != catalog.known:
            log.warning(json.dumps({"msg": "node GPU catalog changed", **catalog.summary(),
                                    "products": {p: m.describe() for p, m in catalog.models.items()}}))
            if self.on_change is not None:
                self.on_change(catalog)

    def _failed(self, exc: BaseException) -> None:
        from . import metrics

        metrics.CATALOG_WATCH_ERRORS.inc()
        text = f"{type(exc).__name__}: {exc}"
        if text != self.catalog.error:
            log.warning(json.dumps({"msg": "node watch failed, the last catalog stays", "error": text}))
        self.catalog = DiscoveredCatalog(self.catalog.models, self.catalog.gpu_nodes, self.catalog.unlabelled_nodes,
                                         self.catalog.synced_at, text)

    def sync_once(self, api: Any) -> str:
        """List all nodes and publish; the list's resourceVersion to watch from."""
        items, version = kube.list_items(api, "/api/v1/nodes")
        self._nodes.clear()
        self._unlabelled.clear()
        for item in items:
            self._update(item)
        self._publish()
        return version

    def _watch(self, api: Any, version: str) -> None:
        """Apply watch events until the resync is due, the server ends the watch, or an error."""
        deadline = time.monotonic() + self._resync
        while not self._stop.is_set() and time.monotonic() < deadline:
            seconds = max(1, int(min(deadline - time.monotonic(), 300)))
            for event in kube.watch(api, "/api/v1/nodes", resource_version=version, timeout_seconds=seconds):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # e.g. 410 Gone: the version is too old; list again
                    raise kube.KubeError(f"watch: {obj.get('message', obj)}", int(obj.get("code") or 0))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                if self._update(obj, deleted=kind == "DELETED"):
                    self._publish()
                if self._stop.is_set():
                    return

    def _run(self) -> None:
        backoff = 1.0
        api = None
        while not self._stop.is_set():
            try:
                api = api or self._client()
                version = self.sync_once(api)
                backoff = 1.0
                self._watch(api, version)
            except Exception as exc:  # noqa: BLE001 - the API or the network: keep the last catalog, retry
                self._failed(exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)


CHECK_ENV = "AI_ADMISSION_NODE_CATALOG"  # "true", "false" or "auto" (inside a cluster: on)
RESYNC_ENV = "AI_ADMISSION_NODE_RESYNC_SECONDS"


def watch_from_environment(keys: Callable[[], Iterable[str]],
                           on_change: Callable[[DiscoveredCatalog], None]) -> NodeWatch | None:
    import os

    setting = os.environ.get(CHECK_ENV, "auto").lower()
    enabled = setting == "true" or (setting == "auto" and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))
    if not enabled:
        return None
    return NodeWatch(keys=keys, resync=float(os.environ.get(RESYNC_ENV, "300")), on_change=on_change).start()
