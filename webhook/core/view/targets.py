"""Where each GPU model's nodes are, worked out from the nodes once per change of the node watch: the *target
nodes* of a model (`TargetNodes`), with the topology levels they carry and what each domain holds, their GPU
taints, the fabric they publish, the extended resources they offer and how many distinct values each label has.

Part of the cluster's view (`webhook.core.view.node_catalog` keeps one per model of the catalog); placement reads
it (`webhook.core.placement`: packing, spreading, tolerations, NCCL).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ..rules import FabricSignal, Rules
from .node_facts import NodeFacts

ALL_MODELS = ""  # the target of a pod whose model is not known: every GPU node


@dataclass(frozen=True)
class Level:
    """One topology key as the target nodes carry it."""

    key: str
    domains: int   # distinct values among the target nodes
    largest: int   # accelerators of the largest domain
    nodes: int     # target nodes that carry the key


@dataclass(frozen=True)
class TargetNodes:
    """The GPU nodes of one model (or of all models): what placement knows of them."""

    nodes: int
    gpus: int
    key_set: str | None                         # the provider key set they carry
    levels: tuple[Level, ...]                   # of that key set, broadest first
    nvlink: Level | None                        # the NVLink domain, where the nodes are multi-node NVLink
    taints: tuple[tuple[str, str, str], ...]    # the GPU taints any of them carries: (key, value, effect)
    fabric: str | None                          # what every one of them publishes (None: unknown or mixed)
    fabric_evidence: str                        # where that was read, or why there is none
    resources: frozenset[str]                   # extended resources any of them offers
    distinct: Mapping[str, int] = field(default_factory=dict)  # label key -> distinct values among them
    # the model keys (rules modelKeys and mutation.modelNodeSelectorKey) every one of them carries with one value:
    # what a nodeSelector may pin the model by and still match them all
    shared: Mapping[str, str] = field(default_factory=dict)

    def level(self, key: str) -> Level | None:
        if self.nvlink is not None and self.nvlink.key == key:
            return self.nvlink
        return next((level for level in self.levels if level.key == key), None)


def _level(key: str, members: list[NodeFacts]) -> Level | None:
    sizes: dict[str, int] = defaultdict(int)
    carrying = 0
    for node in members:
        value = node.label(key)
        if value is not None:
            sizes[value] += node.accelerators
            carrying += 1
    if not sizes:
        return None
    return Level(key=key, domains=len(sizes), largest=max(sizes.values()), nodes=carrying)


def _node_fabric(node: NodeFacts, rules: Rules) -> tuple[str, str] | None:
    """The first signal the node shows (the rules' fabrics.fromNodes, then its instance type's known fabric):
    (fabric, evidence)."""
    found = _signal(node, rules.fabrics.from_nodes)
    if found is not None:
        return found
    for key in rules.instance_type_keys:
        value = node.label(key)
        instance = rules.instance_types.get(value) if value is not None else None
        if instance is not None and instance.fabric is not None:
            return instance.fabric, f"instance type {value}"
    return None


def _signal(node: NodeFacts, signals: tuple[FabricSignal, ...]) -> tuple[str, str] | None:
    for signal in signals:
        if signal.label is not None:
            value = node.label(signal.label)
            if value is not None and (signal.values is None or value in signal.values):
                return signal.fabric, f"node label {signal.label}={value}"
        else:
            found = next((r for r in node.resources if signal.names_resource(r)), None)
            if found is not None:
                return signal.fabric, f"node resource {found}"
    return None


def _fabric(members: list[NodeFacts], rules: Rules) -> tuple[str | None, str]:
    found = [_node_fabric(node, rules) for node in members]
    fabrics = {f[0] for f in found if f is not None}
    if len(fabrics) == 1 and all(f is not None for f in found):
        first = next(f for f in found if f is not None)
        return first[0], f"{first[1]} on {'every one' if len(members) > 1 else 'the one'} of its {len(members)} " \
                         f"GPU node{'s' if len(members) != 1 else ''}"
    if not fabrics:
        return None, "its GPU nodes publish no fabric (fabrics.fromNodes)"
    return None, f"its GPU nodes publish different fabrics ({', '.join(sorted(fabrics))}, or none)"


def _is_gpu_taint(key: str, value: str, rules: Rules) -> bool:
    return rules.accelerators.is_accelerator(key) or any(t.key == key and (t.value is None or t.value == value)
                                            for t in rules.gpu_taints)


def target_nodes(members: list[NodeFacts], rules: Rules) -> TargetNodes:
    """What placement knows of ``members`` (the GPU nodes of one model)."""
    topology = rules.topology
    best, carried = None, 0
    for key_set in topology.key_sets:
        count = sum(1 for node in members if any(node.label(key) is not None for key in key_set.keys))
        if count > carried:
            best, carried = key_set, count
    levels = tuple(level for level in (_level(key, members) for key in (best.keys if best else ())) if level)
    nvlink = _level(topology.nvlink_domain_key, members) if topology.nvlink_domain_key else None
    taints = {t for node in members for t in node.taints if _is_gpu_taint(t[0], t[1], rules)}
    fabric, evidence = _fabric(members, rules)
    distinct: dict[str, set[str]] = defaultdict(set)
    for node in members:
        for key, value in node.labels:
            distinct[key].add(value)
    model_keys = (rules.mutation.model_node_selector_key, *rules.model_keys)
    shared = {key: next(iter(distinct[key])) for key in model_keys
              if len(distinct.get(key, ())) == 1 and all(node.label(key) is not None for node in members)}
    return TargetNodes(nodes=len(members), gpus=sum(node.accelerators for node in members),
                       key_set=best.name if best and levels else None, levels=levels, nvlink=nvlink,
                       taints=tuple(sorted(taints)), fabric=fabric, fabric_evidence=evidence,
                       resources=frozenset(r for node in members for r in node.resources),
                       distinct={key: len(values) for key, values in distinct.items()}, shared=shared)


def placement(nodes: Iterable[NodeFacts], model_of: Callable[[NodeFacts], str | None],
              rules: Rules) -> dict[str, TargetNodes]:
    """The target nodes of every catalog model the nodes have, and of all GPU nodes (`ALL_MODELS`)."""
    members = list(nodes)
    by_model: dict[str, list[NodeFacts]] = defaultdict(list)
    for node in members:
        model = model_of(node)
        if model is not None:
            by_model[model].append(node)
    found = {model: target_nodes(group, rules) for model, group in sorted(by_model.items())}
    found[ALL_MODELS] = target_nodes(members, rules)
    return found


