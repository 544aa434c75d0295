"""What the user set that the pod will not have: NCCL settings naming an interface or a device the pod will not get,
InfiniBand asked for where no node of the pod's model offers it, a ``/dev/shm`` that is disk-backed or smaller than
its class needs.

Each is kept as written (what the user set is never replaced) and told, with the fix: an interface name NCCL does
not find stops it at start ("no socket interface found"), and the course's own lesson is the 64 MB ``/dev/shm``
that ends a DataLoader. A pod on the host's network has the host's interfaces, which admission cannot see: its
interface settings are not judged.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Mapping

from . import placement, podview
from .context import Context
from .findings import Finding, warn
from .profile import Profile
from .quantity import QuantityError, format_bytes, parse_quantity

SHM = "/dev/shm"
GKE_INTERFACES = "networking.gke.io/interfaces"  # GKE multi-networking: [{"interfaceName": "eth1", ...}]
IB_FABRICS = frozenset({"infiniband", "roce", "rdma"})  # fabrics whose devices NCCL's IB transport (verbs) uses


def pod_interfaces(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> list[str] | None:
    """The network interfaces a pod will have: ``eth0`` and ``lo``, and those its secondary networks attach (Multus:
    ``name@ifname``, or objects with ``interface``, else ``net1``, ``net2``... in order; GKE multi-networking:
    ``interfaceName``); None for a pod on the host's network (the host's, not known here)."""
    if spec.get("hostNetwork") is True:
        return None
    found = ["eth0", "lo"]
    text = annotations.get(placement.NETWORKS_ANNOTATION, "").strip()
    if text:
        try:
            parsed = json.loads(text) if text.startswith("[") else None
        except ValueError:
            parsed = None
        entries: list[Any] = parsed if isinstance(parsed, list) else [p.strip() for p in text.split(",") if p.strip()]
        for index, entry in enumerate(entries, start=1):
            name = entry.get("interface") if isinstance(entry, dict) else (
                entry.rpartition("@")[2] if "@" in entry else None)
            found.append(str(name) if name else f"net{index}")
    gke = annotations.get(GKE_INTERFACES, "").strip()
    if gke:
        try:
            listed = json.loads(gke)
        except ValueError:
            listed = []
        found += [str(i["interfaceName"]) for i in listed if isinstance(i, dict) and i.get("interfaceName")]
    return list(dict.fromkeys(found))


def _names_none(value: str, interfaces: list[str]) -> list[str] | None:
    """The names of an ``NCCL_SOCKET_IFNAME`` value none of which the pod has (NCCL: a comma list of prefixes,
    ``=`` for exact names, ``^`` to exclude), or None when one matches or it only excludes."""
    text = value.strip()
    if not text or text.startswith("^"):
        return None
    exact = text.startswith("=")
    names = [n.strip() for n in text.lstrip("=").split(",") if n.strip()]
    for name in names:
        if any((i == name) if exact else i.startswith(name) for i in interfaces):
            return None
    return names


def _nccl_findings(profile: Profile, ctx: Context) -> list[Finding]:
    facts = profile.facts
    spec = facts.spec
    found: list[Finding] = []
    interfaces = pod_interfaces(spec, facts.annotations)
    rdma = {r for r in placement.pod_resources(spec) if any(s.names_resource(r) for s in ctx.rules.fabrics.from_pod)}
    target = ctx.nodes_of(profile.model) if profile.model is not None else None
    for container in podview.containers(facts.pod):
        env = podview.container_env(container)
        where = f'container "{container.get("name", "?")}"'
        interface = env.get("NCCL_SOCKET_IFNAME")
        missing = _names_none(interface, interfaces) if interface is not None and interfaces is not None else None
        if missing:
            found.append(warn("nccl-interface-missing",
                              f"{where}: NCCL_SOCKET_IFNAME={interface} names no interface the pod has "
                              f"({', '.join(interfaces or [])}), so NCCL stops at start; remove it, or attach the "
                              f"network that gives {missing[0]} (annotation {placement.NETWORKS_ANNOTATION})"))
        hca = env.get("NCCL_IB_HCA")
        if hca is not None and hca.strip() and not hca.strip().startswith("^") and not rdma \
                and spec.get("hostNetwork") is not True \
                and podview.as_dict(container.get("securityContext")).get("privileged") is not True:
            found.append(warn("nccl-interface-missing",
                              f"{where}: NCCL_IB_HCA={hca} names RDMA devices, but the pod asks for none and is not "
                              f"on the host's network, so it has none; ask for the nodes' RDMA resource (or drop it)"))
        disabled = env.get("NCCL_IB_DISABLE")
        if disabled is not None and disabled.strip() == "0" and target is not None and not rdma \
                and target.fabric not in IB_FABRICS \
                and not any(s.names_resource(r) for r in target.resources for s in ctx.rules.fabrics.from_pod):
            model = profile.model.name if profile.model is not None else "GPU"
            found.append(warn("nccl-ib-without-infiniband",
                              f"{where}: NCCL_IB_DISABLE=0, but no {model} node offers InfiniBand or RoCE "
                              f"({target.fabric_evidence}), so NCCL talks TCP sockets; drop it, or place the pod "
                              f"on nodes with an RDMA fabric"))
    return found


def _shm_need(profile: Profile, ctx: Context) -> Decimal | None:
    settings = ctx.rules.classes.get(profile.workload)
    shm = settings.mutate.shm if settings is not None else None
    return None if shm is None else shm.for_gpus(profile.gpu_count)


def _shm_findings(profile: Profile, ctx: Context) -> list[Finding]:
    """A volume the user mounts at /dev/shm in a GPU container: disk-backed (the node's disk, at disk speed, and
    counted as ephemeral storage) or smaller than the class's need (the size /mutate would give it)."""
    spec = profile.facts.spec
    volumes = {v.get("name"): v for v in podview.as_list(spec.get("volumes")) if isinstance(v, dict)}
    found: list[Finding] = []
    asking = set(profile.accelerator_containers)
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(podview.as_list(spec.get(kind))):
            if not isinstance(container, dict) or (kind, index) not in asking:
                continue
            for mount in podview.as_list(container.get("volumeMounts")):
                if not isinstance(mount, dict) or str(mount.get("mountPath", "")).rstrip("/") != SHM:
                    continue
                volume = volumes.get(mount.get("name"))
                if not isinstance(volume, dict) or "emptyDir" not in volume:
                    continue  # another kind of volume: what it holds is not known here
                finding = _shm_finding(container, podview.as_dict(volume["emptyDir"]), profile, ctx)
                if finding is not None:
                    found.append(finding)
    return found


def _shm_finding(container: Mapping[str, Any], empty: Mapping[str, Any], profile: Profile,
                 ctx: Context) -> Finding | None:
    where = f'container "{container.get("name", "?")}"'
    need = _shm_need(profile, ctx)
    wanted = f"medium: Memory and sizeLimit {format_bytes(need)}" if need is not None else "medium: Memory"
    if empty.get("medium") != "Memory":
        return warn("shm-too-small", f"{where}: /dev/shm is a disk-backed emptyDir, at the node's disk speed (and "
                                     f"counted as its ephemeral storage); give it {wanted} (or drop the volume: "
                                     f"ai-admission adds one)")
    try:
        size = parse_quantity(empty["sizeLimit"]) if "sizeLimit" in empty else None
    except QuantityError:
        return None
    if size is not None and need is not None and size < need:
        return warn("shm-too-small", f"{where}: /dev/shm of {format_bytes(size)} is less than a {profile.workload} pod "
                                     f"of {profile.gpu_count} GPUs needs ({format_bytes(need)}: DataLoader workers "
                                     f"and NCCL fail with a bus error when it fills); give it sizeLimit "
                                     f"{format_bytes(need)} (or drop the volume: ai-admission adds one)")
    return None


def user_setting_findings(profile: Profile, ctx: Context) -> list[Finding]:
    """What the user set that will not work, for a pod that asks for GPUs (see the module docstring)."""
    if not profile.gpu_count or profile.workload == "none":
        return []
    return _nccl_findings(profile, ctx) + _shm_findings(profile, ctx)
