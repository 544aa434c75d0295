"""The cluster's GPU catalog as its nodes publish it, read from Node objects.

NVIDIA's GPU feature discovery (GFD) and AMD's node labeller already write the truth on every GPU node: the
product, its memory as the device reports it, how many a node holds, the MIG profiles. This module reads those
facts from Node objects into a `DiscoveredCatalog`, a frozen value; `webhook.cluster.nodes` keeps one current from
a watch of the Nodes and the server swaps it in whole, so the request path reads it without a lock and never
calls the API.

Label facts (sources named beside each):

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
- Intel (intel/intel-device-plugins-for-kubernetes: cmd/gpu_plugin/labels.md, the node-feature rules):
  ``gpu.intel.com/product`` (``Max_1550``, ``Flex_170``; Arc has only ``gpu.intel.com/family``),
  ``gpu.intel.com/millicores`` (GPUs x 1000) and ``gpu.intel.com/memory.max`` (bytes of all the node's GPUs, which
  are identical): the memory per GPU is their quotient.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

GFD_PRODUCT = "nvidia.com/gpu.product"
AMD_PRODUCT = "amd.com/gpu.product-name"
INTEL_PRODUCT = "gpu.intel.com/product"
INTEL_RESOURCES = ("gpu.intel.com/i915", "gpu.intel.com/xe")
_DEVICE_RESOURCES = frozenset({"nvidia.com/gpu", "amd.com/gpu", *INTEL_RESOURCES})
# Node labels whose values name a node's GPU model, besides the product labels (GKE's accelerator, the
# instance type, Karpenter's GPU name, the course's gpu-type). The rules' modelKeys are added to these.
NAMING_KEYS = (GFD_PRODUCT, AMD_PRODUCT, INTEL_PRODUCT, "cloud.google.com/gke-accelerator", "node.kubernetes.io/instance-type",
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
    if labels.get(INTEL_PRODUCT):
        # millicores is GPUs x 1000 and memory.max the bytes of all of them (the GPU plugin's labels; the
        # device resource counts GPUs times -shared-dev-num, so it is the fallback)
        millicores = _int(labels.get("gpu.intel.com/millicores"))
        count = millicores // 1000 if millicores else next(
            (c for name in INTEL_RESOURCES if (c := _int(capacity.get(name)))), None)
        total = _int(labels.get("gpu.intel.com/memory.max"))
        return NodeGpu(product=str(labels[INTEL_PRODUCT]), vendor="intel", count=count,
                       memory_mib=total // count // 2**20 if total and count else None, memory_rounded=False,
                       family=labels.get("gpu.intel.com/family"), names=names, mig_profiles=())
    return None


def has_gpu_resources(node: Mapping[str, Any]) -> bool:
    capacity = (node.get("status") or {}).get("capacity") or {}
    return any(key in _DEVICE_RESOURCES or key.startswith("nvidia.com/mig-") for key in capacity)


# What a node offers that is not an extended resource (a device, an RDMA NIC, EFA).
_BASIC_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage", "storage"})
_SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class NodeFacts:
    """What placement reads of one GPU node: its GPU facts, the labels of the rules' placement keys (topology,
    zone, fabric signals, instance type), the taints that keep pods off it, the extended resources it offers, and
    how many accelerator devices it has (what a topology domain's capacity adds up)."""

    name: str
    gpu: NodeGpu | None
    accelerators: int
    labels: tuple[tuple[str, str], ...]
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect); NoSchedule and NoExecute only
    resources: tuple[str, ...]

    def label(self, key: str) -> str | None:
        return next((value for k, value in self.labels if k == key), None)


def node_facts(node: Mapping[str, Any], keys: Iterable[str], is_accelerator: Callable[[str], bool],
               gpu: NodeGpu | None) -> NodeFacts:
    """The facts of ``node`` that placement reads (``keys``: the label keys worth keeping)."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, Any] = meta.get("labels") or {}
    spec = node.get("spec") or {}
    allocatable: Mapping[str, Any] = (node.get("status") or {}).get("allocatable") or \
        (node.get("status") or {}).get("capacity") or {}
    devices = sum(_int(allocatable[name]) or 0 for name in allocatable if is_accelerator(name))
    accelerators = gpu.count if gpu is not None and gpu.count else devices
    taints = tuple(sorted((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                          for t in spec.get("taints") or () if isinstance(t, dict)
                          and t.get("effect") in _SCHEDULING_EFFECTS))
    return NodeFacts(name=str(meta.get("name") or ""), gpu=gpu, accelerators=accelerators,
                     labels=tuple(sorted((k, str(labels[k])) for k in set(keys) if labels.get(k) is not None)),
                     taints=taints,
                     resources=tuple(sorted(r for r in allocatable if r not in _BASIC_RESOURCES and "/" in r)))


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
    nodes: Mapping[str, NodeFacts] = field(default_factory=dict)  # every GPU node, by name (for placement)

    @property
    def known(self) -> bool:
        return self.synced_at is not None

    def summary(self) -> dict[str, Any]:
        return {"synced": self.known, "gpuNodes": self.gpu_nodes, "models": len(self.models),
                "unlabelledGpuNodes": list(self.unlabelled_nodes), "syncedAt": self.synced_at, "error": self.error}


UNDISCOVERED = DiscoveredCatalog()  # no node watch, or nothing listed yet


def build(nodes: Mapping[str, NodeGpu | None], *, unlabelled: Iterable[str] = (), synced_at: float | None = None,
          error: str | None = None, facts: Mapping[str, NodeFacts] | None = None) -> DiscoveredCatalog:
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
                             unlabelled_nodes=tuple(sorted(unlabelled)), synced_at=synced_at, error=error,
                             nodes=dict(sorted((facts or {}).items())))
