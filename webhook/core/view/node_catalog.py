"""The cluster's GPU nodes as the policy reads them (`NodeCatalog`), worked out from what the nodes publish
(`webhook.core.view.node_facts`) once per change of the node watch.

The rules' static catalog stays the fallback and the offline default (no node watch: no `NodeCatalog`). When the
nodes are known, the catalog in force is the rules' with what they say merged in: a catalog model that nodes have
takes the memory they report (GFD's MiB; AMD's rounded GiB only for a model the rules do not list) and, as GPUs
per node, its largest node; the label values that name it on the nodes become names for it too; a model only the
nodes know is added (interconnect unknown). Beside the catalog: which models the cluster has (for the policy's
messages and its warning about a model no node has), where each model's nodes are (`webhook.core.view.targets`:
topology, taints, fabric; for placement), and the MIG slices the nodes offer (for rightsizing,
`webhook.core.rightsizing.smaller`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Mapping

from ..rules import GpuModel, Rules, normalize_model_name
from .node_facts import DiscoveredCatalog, DiscoveredModel
from .targets import TargetNodes, placement

MIB = Decimal(2**20)
# A MIG profile as GPU feature discovery names it ("1g.10gb", "1g.10gb+me"): the GB of memory each slice brings,
# read as the rules' migPattern reads a MIG resource (GB of 10^9 bytes)
_MIG_PROFILE = re.compile(r"^[0-9]+g\.(?P<mem>[0-9]+)gb")
_GB = Decimal(10**9)


@dataclass(frozen=True)
class NodeCatalog:
    """The GPU nodes as the policy reads them: the catalog in force (the rules' with the nodes' models merged in)
    and its index of names, which models the cluster has (``present``: "3 nodes x 8 GPUs"), where each model's
    nodes are (``placement``, by catalog model name; `ALL_MODELS` for every GPU node) and the MIG slices the nodes
    offer (profile "1g.10gb" -> the memory of one slice, the catalog model it is cut from)."""

    catalog: Mapping[str, GpuModel]
    index: Mapping[str, GpuModel]
    present: Mapping[str, str]
    placement: Mapping[str, TargetNodes] = field(default_factory=dict)
    mig_slices: Mapping[str, tuple[Decimal, str]] = field(default_factory=dict)


def mig_slices(groups: dict[str, list[DiscoveredModel]]) -> dict[str, tuple[Decimal, str]]:
    """Each MIG profile the nodes offer, with the memory of one slice and the catalog model it is cut from (the
    first by name where several are)."""
    slices: dict[str, tuple[Decimal, str]] = {}
    for name, found in sorted(groups.items()):
        for model in found:
            for profile in model.mig_profiles:
                match = _MIG_PROFILE.match(profile)
                if match is not None:
                    slices.setdefault(profile, (Decimal(match.group("mem")) * _GB, name))
    return dict(sorted(slices.items()))


def rules_model(rules: Rules, discovered: DiscoveredModel) -> GpuModel | None:
    """The catalog model a discovered product is: by its product name (with the ``NVIDIA-`` prefix old drivers
    left out), else by any label value that names it on the nodes."""
    for candidate in (discovered.product, f"NVIDIA-{discovered.product}", *(value for _, value in discovered.names)):
        found = rules.find_model(candidate)
        if found is not None:
            return found
    return None


def model_name(product: str) -> str:
    """A catalog name (lower-case DNS label) for a product the rules do not list: NVIDIA-H100-NVL -> nvidia-h100-nvl."""
    return re.sub(r"[^a-z0-9.-]+", "-", product.lower()).strip("-.") or "gpu"


def describe(models: Iterable[DiscoveredModel]) -> str:
    """What the cluster has of one catalog model, over the products that are it: "3 nodes x 8 GPUs"."""
    counts: dict[int, int] = defaultdict(int)
    nodes = 0
    for model in models:
        nodes += len(model.nodes)
        for count, how_many in model.gpus_per_node:
            counts[count] += how_many
    text = f"{nodes} node{'s' if nodes != 1 else ''}"
    if counts:
        low, high = min(counts), max(counts)
        text += f" x {low if low == high else f'{low}-{high}'} GPU{'s' if high != 1 else ''}"
    return text


def _merged(name: str, base: GpuModel | None, found: list[DiscoveredModel]) -> GpuModel | None:
    reported = [m.memory_mib for m in found if m.memory_mib and not (m.memory_rounded and base is not None)]
    memory = Decimal(min(reported)) * MIB if reported else (base.memory if base else None)
    if memory is None:
        return None  # a product with no memory published and no catalog entry cannot be judged
    largest = max((m.largest_node or 0 for m in found), default=0)
    labels = dict(base.labels) if base else {}
    for model in found:
        for key, value in model.names:
            labels.setdefault(key, value)
    vendor = base.vendor if base else found[0].vendor
    return GpuModel(name=name, memory=memory, interconnect=base.interconnect if base else "unknown",
                    gpus_per_node=largest or (base.gpus_per_node if base else 1), labels=labels, vendor=vendor,
                    source=base.source if base and memory == base.memory else "the cluster's nodes",
                    aliases=base.aliases if base else ())


def node_catalog(rules: Rules, discovered: DiscoveredCatalog) -> NodeCatalog | None:
    """What ``discovered`` says of the catalog and where its models are; None while nothing is known."""
    if not discovered.known:
        return None
    groups: dict[str, list[DiscoveredModel]] = defaultdict(list)
    for model in discovered.models.values():
        known = rules_model(rules, model)
        groups[known.name if known else model_name(model.product)].append(model)
    catalog = dict(rules.catalog)
    index = dict(rules.model_index)
    present = {}
    for name, found in sorted(groups.items()):
        base = rules.catalog.get(name)
        merged = _merged(name, base, found)
        if merged is None:
            continue
        catalog[name] = merged
        present[name] = describe(found)
        for key, value in list(index.items()):
            if value is base and base is not None:
                index[key] = merged
        for alias in [name, *(value for model in found for _, value in model.names), *(m.product for m in found)]:
            key = normalize_model_name(alias)
            if index.get(key) in (None, base, merged):
                index[key] = merged
    model_of = {product: name for name, found in groups.items() if name in catalog for product in
                (m.product for m in found)}
    where = placement(discovered.nodes.values(),
                      lambda node: model_of.get(node.gpu.product) if node.gpu is not None else None, rules)
    slices = mig_slices({name: found for name, found in groups.items() if name in catalog})
    return NodeCatalog(catalog=catalog, index=index, present=present, placement=where, mig_slices=slices)


def catalog_block(discovered: DiscoveredCatalog, rules: Rules) -> dict[str, Any]:
    """The cluster's models as a ``catalog:`` block for the rules (names of known models kept)."""
    merged = node_catalog(rules, discovered)
    block: dict[str, Any] = {}
    for name in merged.present if merged is not None else {}:
        assert merged is not None
        model = merged.catalog[name]
        mib = model.memory / MIB
        block[name] = {"memory": f"{mib:f}Mi" if mib == mib.to_integral_value() else str(model.memory),
                       "vendor": model.vendor, "interconnect": model.interconnect,
                       "gpusPerNode": model.gpus_per_node, "labels": dict(sorted(model.labels.items())),
                       "source": model.source or "the cluster's nodes"}
    return {"catalog": block}


