"""Where a pod's GPU nodes are, as the cluster's nodes say: topology domains and what each holds, the taints that
keep pods off them, the network fabric they publish, the zones they are in.

The scheduler acts only on labels and taints the nodes really carry: a pod affinity on a topology key no node has
is ignored without a word, a toleration for a taint no node has changes nothing, and an NCCL interface the pod
does not have stops NCCL at start. So every placement intent is derived here from the nodes (their facts,
`webhook.core.view.node_facts.NodeFacts`, merged into the rules by `webhook.core.view.node_catalog`), per GPU
model: the nodes of the model a pod will run on are its *target nodes*. Offline (``check``) and without a node
watch nothing is known, and the mutation says so instead of guessing.

Topology: each provider publishes its own keys (`rules.topology.keySets`, broad to narrow). Of the key sets, the
one the most target nodes carry is theirs; for each of its keys the target nodes carry, a `Level` counts the
domains (distinct values) and the GPUs of the largest. A multi-node job is packed into the narrowest level whose
largest domain holds every GPU of the job (`pack_level`); the NVLink domain of multi-node NVLink racks
(``nvidia.com/gpu.clique``) is narrower than any network level.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from . import podview
from .rules import FabricSignal, GpuModel, Rules
from .view.node_facts import NodeFacts

if TYPE_CHECKING:
    from .profile import Profile

ALL_MODELS = ""  # the target of a pod whose model is not known: every GPU node
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"  # Multus: the pod's secondary network attachments


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
    return rules.is_accelerator(key) or any(t.key == key and (t.value is None or t.value == value)
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
    return TargetNodes(nodes=len(members), gpus=sum(node.accelerators for node in members),
                       key_set=best.name if best and levels else None, levels=levels, nvlink=nvlink,
                       taints=tuple(sorted(taints)), fabric=fabric, fabric_evidence=evidence,
                       resources=frozenset(r for node in members for r in node.resources),
                       distinct={key: len(values) for key, values in distinct.items()})


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


def target_of(rules: Rules, model: GpuModel | None) -> TargetNodes | None:
    """The target nodes of a pod whose model is ``model`` (all GPU nodes when its model has none, or is not
    known); None when the cluster's nodes are not known (offline, no node watch)."""
    if rules.nodes is None:
        return None
    found: Mapping[str, Any] = rules.nodes.placement
    target = found.get(model.name) if model is not None else None
    return target if target is not None else found.get(ALL_MODELS)


def target_tolerations(target: TargetNodes, rules: Rules) -> list[Mapping[str, Any]]:
    """The tolerations of the GPU taints ``target``'s nodes carry: ``Exists`` for a taint named after an
    accelerator or one the rules name with no value, else ``Equal`` to its value."""
    wanted: list[Mapping[str, Any]] = []
    for key, value, effect in target.taints:
        if rules.is_accelerator(key) or any(t.key == key and t.value is None for t in rules.gpu_taints):
            wanted.append({"key": key, "operator": "Exists", "effect": effect})
        else:
            wanted.append({"key": key, "operator": "Equal", "value": value, "effect": effect})
    return wanted


def pack_candidates(target: TargetNodes) -> list[Level]:
    """The levels a job may be packed by, narrowest first (the NVLink domain, then the key set's, narrowest up)."""
    return ([target.nvlink] if target.nvlink is not None else []) + list(reversed(target.levels))


def pack_level(target: TargetNodes, job_gpus: int) -> Level | None:
    """The narrowest level (the NVLink domain first) whose largest domain holds ``job_gpus``; None when none does."""
    return next((level for level in pack_candidates(target) if level.largest >= job_gpus), None)


def pod_interface(pod_spec: Mapping[str, Any], annotations: Mapping[str, str], fabric: str,
                  rules: Rules) -> str | None:
    """The interface of ``fabric`` the pod really has: its first secondary network attachment (Multus: the
    ``interface`` it names, else ``net1``), or, for a host-network pod, the interface the rules name for the
    fabric (`fabrics.hostInterfaces`)."""
    networks = annotations.get(NETWORKS_ANNOTATION, "").strip()
    if networks:
        return _first_attachment(networks)
    if pod_spec.get("hostNetwork") is True:
        return rules.fabrics.host_interfaces.get(fabric)
    return None


def _first_attachment(networks: str) -> str | None:
    """Multus's annotation as JSON (``[{"name": ..., "interface": ...}]``) or as text (``name@iface, ns/name``);
    attachments without a name of their own are net1, net2, ... (k8snetworkplumbingwg/multus-cni
    docs/how-to-use.md)."""
    if networks.startswith("["):
        try:
            entries = json.loads(networks)
        except ValueError:
            return None
        first = podview.as_dict(entries[0]) if isinstance(entries, list) and entries else {}
        if not first:
            return None
        interface = first.get("interface")
        return interface if isinstance(interface, str) and interface else "net1"
    first_text = networks.split(",")[0].strip()
    if not first_text:
        return None
    _, at, interface = first_text.partition("@")
    return interface.strip() if at and interface.strip() else "net1"


def pod_resources(spec: Mapping[str, Any]) -> set[str]:
    """The extended resources any container of the pod asks for."""
    found: set[str] = set()
    for container in podview.all_containers({"spec": spec}):
        requests, limits = podview.resources(container)
        found.update(name for name in (*requests, *limits) if isinstance(name, str) and "/" in name)
    return found


def pod_fabric_signal(spec: Mapping[str, Any], rules: Rules) -> tuple[str, str] | None:
    """The fabric the pod's own device requests say (an EFA or RDMA device): (fabric, evidence)."""
    asked = pod_resources(spec)
    for signal in rules.fabrics.from_pod:
        found = next((r for r in sorted(asked) if signal.names_resource(r)), None)
        if found is not None:
            return signal.fabric, f"the pod asks for {found}"
    return None


def packing_key(rules: Rules, profile: Profile, fixed: str | None, warnings: list[str]) -> str | None:
    """The topology key to pack a multi-node job's pods by: ``fixed`` (the rules'), else the narrowest level of the
    nodes' topology whose domains hold every GPU of the job; None, with the pod told why, when there is none."""
    target = target_of(rules, profile.model)
    if target is None:
        if fixed is not None:
            return fixed
        warnings.append("pods not packed: the cluster's topology is not known here (no node watch); "
                       "mutate.podAffinity.topologyKey in the rules packs them by a fixed key")
        return None
    if fixed is not None:
        if target.level(fixed) is None:
            warnings.append(f"pods not packed: no GPU node carries the label {fixed} "
                                f"(mutate.podAffinity.topologyKey)")
            return None
        return fixed
    if not target.levels and target.nvlink is None:
        warnings.append("pods not packed: the GPU nodes carry none of the topology labels the rules know "
                       "(topology.keySets)")
        return None
    pods = max(profile.world.pods, 2)
    job = max(profile.gpu_count, 1) * pods
    level = pack_level(target, job)
    nvlink = target.nvlink
    if nvlink is not None and job > nvlink.largest:
        warnings.append(f"the job's {job} GPUs ({pods} pods) span more than an NVLink domain holds ({nvlink.largest} "
                       f"GPUs, {nvlink.key}): its traffic crosses the network between domains")
    if level is None:
        broadest = target.levels[0] if target.levels else nvlink
        assert broadest is not None
        warnings.append(f"pods not packed: no single {target.key_set or 'NVLink'} domain holds the job's {job} GPUs "
                       f"({pods} pods; the largest, by {broadest.key}, holds {broadest.largest})")
        return None
    return level.key
