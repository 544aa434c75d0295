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
from typing import TYPE_CHECKING, Any, Mapping

from . import podview
from .rules import Accelerators, GpuModel, Rules
from .view.targets import Level, TargetNodes

if TYPE_CHECKING:
    from .context import Context
    from .profile import Profile

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"  # Multus: the pod's secondary network attachments


def target_tolerations(target: TargetNodes, accelerators: Accelerators, rules: Rules) -> list[Mapping[str, Any]]:
    """The tolerations of the GPU taints ``target``'s nodes carry: ``Exists`` for a taint named after an
    accelerator or one the rules name with no value, else ``Equal`` to its value."""
    wanted: list[Mapping[str, Any]] = []
    for key, value, effect in target.taints:
        if accelerators.is_accelerator(key) or any(t.key == key and t.value is None for t in rules.gpu_taints):
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


def packing_key(target: TargetNodes | None, profile: Profile, fixed: str | None, warnings: list[str]) -> str | None:
    """The topology key to pack a multi-node job's pods by: ``fixed`` (the rules'), else the narrowest level of
    ``target``'s topology (the nodes of the job's model, `webhook.core.context.Context.target_of`) whose domains
    hold every GPU of the job; None, with the pod told why, when there is none."""
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


def model_pin(context: Context, model: GpuModel) -> tuple[str, str] | None:
    """The nodeSelector label that pins ``model``: where the node watch knows the model's nodes, a model key (the
    rules' modelNodeSelectorKey first, then modelKeys) that every one of them carries with one value naming the
    model (a key no node carries would leave the pod Pending for ever, with no word); offline, or where no node
    of the model is known yet (an autoscaled pool), the rules' key and the catalog's value for it. None: the
    model's nodes carry no such label."""
    key = context.rules.mutation.model_node_selector_key
    nodes = context.nodes_of(model)
    if nodes is None:
        return key, model.label_value(key)
    for key, value in nodes.shared.items():
        found = context.find_model(value)
        if found is not None and found.name == model.name:
            return key, value
    return None


def covers(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether toleration ``existing`` already tolerates every taint ``wanted`` does."""
    effect = existing.get("effect") or ""
    if effect and effect != (wanted.get("effect") or ""):
        return False
    if (existing.get("operator") or "Equal") == "Exists":
        return not existing.get("key") or existing.get("key") == wanted.get("key")
    return (existing.get("key") == wanted.get("key") and (existing.get("value") or "") == (wanted.get("value") or "")
            and (wanted.get("operator") or "Equal") == "Equal")


def uncovered(present: Any, wanted: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Of ``wanted``, the tolerations none of ``present`` (a pod spec's ``tolerations``) nor an earlier one
    covers, in order."""
    have: list[Mapping[str, Any]] = [t for t in podview.as_list(present) if isinstance(t, dict)]
    added: list[dict[str, Any]] = []
    for toleration in wanted:
        if not any(covers(e, toleration) for e in have):
            added.append(dict(toleration))
            have.append(toleration)
    return added


def gpu_tolerations(profile: Profile, context: Context, target: TargetNodes | None) -> list[Mapping[str, Any]]:
    """The GPU taints of the pod's nodes, tolerated: where the node watch knows them, exactly those its target nodes
    carry; else the taints named after the accelerator resources it asks for (what Kubernetes'
    ExtendedResourceToleration plugin adds; a DRA claim's GPUs: its device class's taint)."""
    if target is None:
        claimed = profile.claimed
        keys = claimed.toleration_keys(profile.gpus) if claimed is not None else sorted(profile.gpus)
        return [{"key": r, "operator": "Exists", "effect": "NoSchedule"} for r in keys]
    return target_tolerations(target, context.accelerators, context.rules)
