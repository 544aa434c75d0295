"""Mutation: turn a classified pod into what its class needs, never overwriting what the user set.

Each step edits the pod through a `webhook.core.patch.Editor`, which records one JSON Patch operation per edit
(creating missing parents, escaping keys) on a working copy that shares everything untouched with the original.
Every step checks before it adds, so mutating an already-mutated pod records nothing and
``reinvocationPolicy: IfNeeded`` is safe; fields ai-admission does not know are never touched.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Mapping

import orjson

from . import names, placement, podview
from .backends import scheduling
from .bypasses import voids
from .context import Context
from .patch import Editor
from .podgroups.plan import groups_class, join_group
from .podgroups.support import POD_GROUP_LABEL, PodGroupSupport
from .profile import Profile
from .quantity import QuantityError, format_bytes, format_quantity, parse_quantity
from .rules import ClassMutation, ClassSettings, MutationSettings, Rules, ShmSpec
from .view.priority_state import PriorityClassState
from .view.targets import TargetNodes

SHM_PATH = "/dev/shm"
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass
class Mutation:
    pod: dict[str, Any]  # shares unchanged subtrees with the input: read it, do not modify it
    patch: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)


ContainerRef = tuple[tuple[str, str, int], dict[str, Any]]


class _Context:
    """What every step reads; ``edit`` holds the working copy and records the patch.

    ``spec`` and ``labels`` are the pod as it arrived: what the user set is what the steps must not clobber, and
    no step reads what an earlier one added (``edit.get`` reads the working copy where that matters).
    """

    __slots__ = ("edit", "profile", "context", "rules", "target", "class_settings", "warnings", "priority_classes",
                 "plan", "settings", "spec", "labels", "multi_node", "namespace", "pod_groups")

    def __init__(self, *, edit: Editor, profile: Profile, context: Context, class_settings: ClassSettings,
                 warnings: list[str], namespace: str = "") -> None:
        self.edit = edit
        self.profile = profile
        self.context = context
        self.rules: Rules = context.rules
        # the nodes of the pod's model, once per pod (None: not known here)
        self.target: TargetNodes | None = context.target_of(profile.model)
        self.class_settings = class_settings
        self.warnings = warnings
        # which of the rules' PriorityClasses the cluster lacks, or has with other values
        self.priority_classes: PriorityClassState = context.cluster.priority_classes
        self.plan: ClassMutation = class_settings.mutate
        self.settings: MutationSettings = context.rules.mutation
        self.spec: dict[str, Any] = podview.spec(edit.doc)
        self.labels: Mapping[str, str] = profile.facts.labels
        self.multi_node: bool = profile.multi_node
        self.namespace = namespace or str(podview.metadata(edit.doc).get("namespace") or "")
        self.pod_groups: PodGroupSupport = context.cluster.pod_groups

    @property
    def pod(self) -> dict[str, Any]:
        return self.edit.doc

    def app_containers(self) -> list[ContainerRef]:
        """(path, container) of the app containers, with their indexes in the pod."""
        return [(("spec", "containers", index), container)
                for index, container in enumerate(podview.as_list(self.spec.get("containers")))
                if isinstance(container, dict)]

    def gpu_containers(self) -> list[ContainerRef]:
        """The containers that request an accelerator (found once, by the profile), init containers first."""
        edit = self.edit
        return [(path, edit.get(path)) for path in (("spec", kind, index)
                                                     for kind, index in self.profile.accelerator_containers)]

    def job_label(self) -> tuple[str, str] | None:
        labels = self.labels
        return next(((k, labels[k]) for k in self.settings.job_labels if labels.get(k)), None)


def _pod_memory_limit(pod: Mapping[str, Any]) -> Decimal | None:
    """The pod's memory limit (pod-level resources, else the sum over app and sidecar containers), or None."""
    spec = podview.spec(pod)
    pod_level = podview.as_dict(podview.as_dict(spec.get("resources")).get("limits"))
    try:
        if "memory" in pod_level:
            return parse_quantity(pod_level["memory"])
        total = Decimal(0)
        for kind in ("containers", "initContainers"):
            for container in podview.as_list(spec.get(kind)):
                if not isinstance(container, dict) or (kind == "initContainers" and not podview.is_sidecar(container)):
                    continue
                limits = podview.as_dict(podview.as_dict(container.get("resources")).get("limits"))
                if "memory" not in limits:
                    return None
                total += parse_quantity(limits["memory"])
        return total
    except QuantityError:
        return None


@functools.lru_cache(maxsize=1024)
def _shm_size(shm: ShmSpec, gpus: int, limit: Decimal | None, fraction: Decimal) -> str:
    """The /dev/shm size limit: per GPU up to the class maximum, at most ``fraction`` of the pod's memory limit
    (the class default without one), whole MiB. Cached: a cluster's pods repeat a few shapes."""
    if limit is None:
        size = shm.without_memory_limit
    else:
        size = min(shm.for_gpus(gpus), limit * fraction)
    return format_quantity(Decimal(int(size) // (2**20) * 2**20) if size >= 2**20 else Decimal(int(size)))


def add_shm(ctx: _Context) -> None:
    """A memory-backed emptyDir at /dev/shm: DataLoader workers and NCCL need more than the runtime's 64 MB."""
    shm = ctx.plan.shm
    if shm is None:
        return
    name = ctx.settings.shm_volume_name
    volumes = podview.as_list(ctx.spec.get("volumes"))
    taken = next((v for v in volumes if isinstance(v, dict) and v.get("name") == name), None)
    if taken is not None:
        if podview.as_dict(taken.get("emptyDir")).get("medium") != "Memory":
            ctx.warnings.append(f'volume "{name}" already exists and is not ai-admission\'s; /dev/shm was not added')
        return
    targets = ctx.gpu_containers()
    if ctx.settings.shm_in_all_containers:
        chosen = {path for path, _ in targets}
        targets += [ref for ref in ctx.app_containers() if ref[0] not in chosen]
    targets = [(path, c) for path, c in targets if not any(
        isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == SHM_PATH
        for m in podview.as_list(c.get("volumeMounts")))]
    if not targets:
        return
    limit = _pod_memory_limit(ctx.pod)
    if limit is None:
        ctx.warnings.append(f"pod has no memory limit; /dev/shm got the class default "
                            f"{format_bytes(shm.without_memory_limit)} (memory-backed, it counts against the "
                            f"pod's memory)")
    size = _shm_size(shm, ctx.profile.gpu_count, limit, ctx.settings.max_shm_fraction_of_memory_limit)
    ctx.edit.append(("spec", "volumes"), {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}})
    for path, _ in targets:
        ctx.edit.append((*path, "volumeMounts"), {"name": name, "mountPath": SHM_PATH})


def pod_fabric(profile: Profile, context: Context, target: TargetNodes | None) -> tuple[str, str]:
    """The network fabric a pod will have, and where that was read: what its own device requests say, the
    instance type it selects, a node label it selects, what its nodes publish (the node watch), its GPU model's, or
    the rules' default (see rules `fabrics`)."""
    spec = profile.facts.spec
    rules = context.rules
    asked = placement.pod_fabric_signal(spec, rules)
    if asked is not None:
        return asked
    choice = profile.choice
    if choice is not None and choice.fabric is not None:
        return choice.fabric, f"instance type ({choice.source})"
    settings = rules.fabrics
    selector = podview.string_map(spec.get("nodeSelector"))
    for key, values, fabric in settings.by_node_label:
        value = selector.get(key)
        if value is not None and (values is None or value in values):
            return fabric, f"nodeSelector {key}={value} (fabrics.byNodeLabel)"
    if target is not None and target.fabric is not None:
        return target.fabric, target.fabric_evidence
    model = profile.model
    if model is not None and model.name in settings.by_model:
        return settings.by_model[model.name], f"model {model.name} (fabrics.byModel)"
    why = target.fabric_evidence if target is not None else "the cluster's nodes are not known here"
    return settings.default, why


INTERFACE = "{interface}"
UNKNOWN_FABRIC = "unknown"


def add_nccl_env(ctx: _Context) -> None:
    """NCCL settings of the pod's network fabric for the GPU containers of multi-node pods, naming only the
    interface the pod really has; a variable the user set is never replaced. A fabric the rules do not describe
    gets nothing (a wrong interface name stops NCCL), and the pod is told what would set it."""
    if not ctx.plan.nccl or not (ctx.multi_node or ctx.plan.nccl_single_node) or not ctx.profile.accelerator_containers:
        return  # NCCL runs in the GPU containers: a pod with none (a Ray head) gets nothing, and is told nothing
    rules = ctx.rules
    fabric, evidence = pod_fabric(ctx.profile, ctx.context, ctx.target)
    told = _warn_missing_devices(ctx, fabric)
    _warn_fabric_needs(ctx, fabric, told)
    env = rules.fabrics.env.get(fabric, ())
    if not env:
        if fabric == UNKNOWN_FABRIC:
            ctx.warnings.append(f"no NCCL setting added: the pod's network fabric is not known ({evidence}); "
                                f"fabrics.byNodeLabel or byModel in the rules, or a node label such as "
                                f"feature.node.kubernetes.io/rdma.available, would name it")
        return
    interface = None
    if any(INTERFACE in value for _, value in env):
        interface = placement.pod_interface(ctx.spec, ctx.profile.facts.annotations, fabric, rules)
    wanted = [(name, value.replace(INTERFACE, interface) if interface else value) for name, value in env
              if INTERFACE not in value or interface]
    missing = [name for name, value in env if INTERFACE in value and not interface]
    if missing:
        ctx.warnings.append(f"{', '.join(missing)} not set: no {fabric} interface of the pod is known (a secondary "
                            f"network, annotation {placement.NETWORKS_ANNOTATION}; for host network, the rules' "
                            f"fabrics.hostInterfaces)")
    if not wanted:
        return
    for path, container in ctx.gpu_containers():
        if podview.as_list(container.get("envFrom")):
            ctx.warnings.append(f'container "{container.get("name", "?")}" uses envFrom, which an added env would '
                                f"override; NCCL defaults were not added to it")
            continue
        present = podview.container_env(container)
        ctx.edit.extend((*path, "env"), [{"name": name, "value": value} for name, value in wanted
                                         if name not in present])


def _warn_missing_devices(ctx: _Context, fabric: str) -> frozenset[str]:
    """A multi-node pod on nodes that offer RDMA or EFA devices but asking for none talks TCP between nodes; the
    devices it was told of."""
    if ctx.plan.rdma is not None:
        return frozenset()
    target = ctx.target
    if target is None:
        return frozenset()
    offered = sorted(r for r in target.resources if any(s.names_resource(r) for s in ctx.rules.fabrics.from_pod))
    if offered and not placement.pod_resources(ctx.spec) & set(offered):
        ctx.warnings.append(f"the pod's nodes offer {offered[0]} but the pod asks for none, so NCCL talks TCP between "
                            f"nodes; add it to the GPU containers' resources (or the class's mutate.rdma)")
        return frozenset(offered)
    return frozenset()


def _warn_fabric_needs(ctx: _Context, fabric: str, told: frozenset[str]) -> None:
    """A multi-node pod whose fabric is set up by something the pod must carry (fabrics.needs) and that lacks
    some of it: told what, and nothing added (a sidecar or a network named wrong would break NCCL)."""
    needs = ctx.rules.fabrics.needs.get(fabric)
    world = ctx.profile.world
    if needs is None or (world.source is not None and world.pods <= 1):  # a job of one pod talks to no other node
        return
    missing: list[str] = []
    names = {c.get("name") for kind in ("containers", "initContainers")
             for c in podview.as_list(ctx.spec.get(kind)) if isinstance(c, dict)}
    if needs.sidecars and not names & set(needs.sidecars):
        missing.append(f"the {' or '.join(needs.sidecars)} sidecar")
    notes = ctx.profile.facts.annotations
    absent = [key for key in needs.annotations if key not in notes]
    if absent:
        missing.append(f"annotation{'s' if len(absent) > 1 else ''} {', '.join(absent)}")
    asked = placement.pod_resources(ctx.spec)
    if ctx.plan.rdma is None:
        missing += [f"resource {r}" for r in needs.resources if r not in asked and r not in told]
    if missing:  # short: the API server cuts a warning at 256 characters (the evidence is in the profile record)
        ctx.warnings.append(f"NCCL talks TCP between nodes: fabric {fabric} needs {'; '.join(missing)} on the pod "
                            f"(nothing added; fabrics.needs)")


def set_priority(ctx: _Context) -> None:
    """The PriorityClass of the pod's answer to "can it be preempted?" (its class's own, or the class's other one
    where the pod answers otherwise: `ClassSettings.priority_for`) when the pod names none, with the values the
    class resolves to.

    The Priority admission plugin has already resolved ``spec.priority`` and ``preemptionPolicy`` from no class
    (0, PreemptLowerPriority) before the webhooks run; it runs again after a webhook changed the pod and refuses
    a pod whose values disagree with its class. So both are set to the class's values in the same patch: the
    plugin then resolves the same values, the pod does not change after this webhook, and ``reinvocationPolicy:
    IfNeeded`` does not call /mutate again (removing them instead costs a third call per pod: the plugin sets
    them back, which is a change). The values come from the rules, which the cluster's classes are generated from;
    where the background check saw a class with other values (see `webhook.cluster.priority_classes`), the fields are removed and
    the API server fills them in.
    """
    priority = ctx.class_settings.priority_for(ctx.profile.preemptible)  # the first question's answer chooses it
    if priority is None or ctx.spec.get("priorityClassName"):
        return
    if priority.name in ctx.priority_classes.missing_priority_classes:
        ctx.warnings.append(f'PriorityClass "{priority.name}" does not exist in this cluster, so it was not set '
                            f"(the API server would refuse the pod); create it with kubectl apply -k manifests/")
        return
    ctx.edit.set(("spec", "priorityClassName"), priority.name)
    differs = ctx.priority_classes.differing_priority_classes.get(priority.name)
    if differs is not None:
        ctx.warnings.append(f'PriorityClass "{priority.name}" differs from ai-admission\'s rules ({differs}), so '
                            f"spec.priority and spec.preemptionPolicy were left to the API server; make them agree "
                            f"(recreate the class with kubectl apply -k manifests/, or fix the rules)")
        ctx.edit.remove(("spec", "priority"))
        ctx.edit.remove(("spec", "preemptionPolicy"))
        return
    if ctx.spec.get("priority") != priority.value:
        ctx.edit.set(("spec", "priority"), priority.value)
    if ctx.spec.get("preemptionPolicy") != priority.preemption_policy:
        ctx.edit.set(("spec", "preemptionPolicy"), priority.preemption_policy)


def add_tolerations(ctx: _Context) -> None:
    """The GPU taints of the pod's nodes and the class's pool taints, tolerated (a toleration already covered by
    one the pod has is not added)."""
    wanted: list[Mapping[str, Any]] = (placement.gpu_tolerations(ctx.profile, ctx.context, ctx.target)
                                       if ctx.settings.gpu_tolerations else [])
    wanted += ctx.plan.tolerations
    ctx.edit.extend(("spec", "tolerations"), placement.uncovered(ctx.spec.get("tolerations"), wanted))


def pin_model(ctx: _Context) -> None:
    """A model named only by annotation gets the nodeSelector that makes the scheduler honour it, on a label its
    nodes carry (`webhook.core.placement.model_pin`); where they carry none, nothing, and the pod is told."""
    model = ctx.profile.model
    if model is None or ctx.profile.is_mig or not ctx.profile.hints.gpu_model:
        return  # only ai-admission's own annotation names a model the scheduler would not otherwise honour
    if ctx.profile.pinned_model is not None:
        return  # a nodeSelector or required affinity already pins a model; never override it
    pin = placement.model_pin(ctx.context, model)
    if pin is None:
        ctx.warnings.append(f"the {model.name} named by annotation {names.GPU_MODEL} is not pinned: its nodes share "
                            f"no label of the rules' modelKeys that names it, so the scheduler may place the pod on "
                            f"another model; add a nodeSelector on a label its nodes carry")
        return
    ctx.edit.setdefault(("spec", "nodeSelector", pin[0]), pin[1])


def _packing_key(ctx: _Context, fixed: str | None) -> str | None:
    """The topology key to pack the pod's job by (`webhook.core.placement.packing_key`); its warnings go to the pod."""
    return placement.packing_key(ctx.target, ctx.profile, fixed, ctx.warnings)


def add_topology(ctx: _Context) -> None:
    """Pack a multi-node job (training, or a model served by several pods) into the narrowest topology domain that
    holds it; spread single-pod replicas over the nodes and zones they can be on."""
    affinity_plan = ctx.plan.pod_affinity
    alone = ctx.profile.world.source is not None and ctx.profile.world.pods == 1  # its operator says: one pod
    if affinity_plan is not None and ctx.multi_node and not alone:
        job = ctx.job_label()
        key = _packing_key(ctx, affinity_plan.topology_key) if job is not None else None
        if job is not None and key is not None:
            term = {"labelSelector": {"matchLabels": {job[0]: job[1]}}, "topologyKey": key}
            base = ("spec", "affinity", "podAffinity")
            if affinity_plan.required:
                path = (*base, "requiredDuringSchedulingIgnoredDuringExecution")
                if term not in podview.as_list(ctx.edit.get(path)):
                    ctx.edit.append(path, term)
            else:
                path = (*base, "preferredDuringSchedulingIgnoredDuringExecution")
                if not any(isinstance(p, dict) and p.get("podAffinityTerm") == term
                           for p in podview.as_list(ctx.edit.get(path))):
                    ctx.edit.append(path, {"weight": affinity_plan.weight, "podAffinityTerm": term})
    spread = ctx.plan.topology_spread
    if spread is not None and not ctx.multi_node:
        labels = ctx.labels
        key = next((k for k in ctx.settings.app_labels if labels.get(k)), None)
        if key is None:
            return
        present = {c["topologyKey"] for c in podview.as_list(ctx.spec.get("topologySpreadConstraints"))
                   if isinstance(c, dict) and isinstance(c.get("topologyKey"), str)}
        target = ctx.target
        unspread = []
        for topology_key in spread.topology_keys:
            if topology_key in present:
                continue
            if target is not None and target.distinct.get(topology_key, 0) < 2:
                unspread.append(topology_key)
                continue
            ctx.edit.append(("spec", "topologySpreadConstraints"), {
                "maxSkew": spread.max_skew, "topologyKey": topology_key,
                "whenUnsatisfiable": spread.when_unsatisfiable,
                "labelSelector": {"matchLabels": {key: labels[key]}},
            })
        if unspread:
            ctx.warnings.append(f"replicas are not spread over {', '.join(unspread)}: the pod's GPU nodes have fewer "
                                f"than two values of it")


def add_gang(ctx: _Context) -> None:
    """Gang-scheduler hints for multi-node training: the scheduler and the pod group (named after the job).

    ``default-scheduler`` counts as unset: the API server fills it in before admission.
    """
    gang = ctx.plan.gang
    if gang is None or not ctx.multi_node:
        return
    job = ctx.job_label()
    if job is None:
        ctx.warnings.append("multi-node pod carries no job-name label; no pod group was set")
        return
    if ctx.spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER):
        ctx.edit.set(("spec", "schedulerName"), gang.scheduler_name)
    if gang.pod_group_annotation:
        ctx.edit.setdefault(("metadata", "annotations", gang.pod_group_annotation), job[1])
    if gang.pod_group_label:
        ctx.edit.setdefault(("metadata", "labels", gang.pod_group_label), job[1])


def join_pod_group(ctx: _Context) -> None:
    """On the default scheduler, where the cluster serves the Workload API: a multi-node pod of a training kind
    joins its job's PodGroup (`webhook.core.podgroups.plan.join_group`; ai-admission's controller makes the group),
    so the scheduler places the job all or nothing; where it cannot, the pod is told why and scheduled as before."""
    if not (ctx.multi_node and groups_class(ctx.profile, ctx.context)) or ctx.rules.scheduler.active:
        return
    name, why = join_group(ctx.pod, ctx.pod_groups)
    if why is not None:
        ctx.warnings.append(why)
    if name is None:
        return
    ctx.edit.set(("spec", "schedulingGroup"), {"podGroupName": name})
    ctx.edit.setdefault(("metadata", "labels", POD_GROUP_LABEL), name)


def add_rdma(ctx: _Context) -> None:
    """The RDMA device and IPC_LOCK (NCCL pins memory for InfiniBand) on multi-node training GPU containers."""
    rdma = ctx.plan.rdma
    if rdma is None or not ctx.multi_node:
        return
    for path, container in ctx.gpu_containers():
        requests, limits = podview.resources(container)
        if rdma.resource not in requests and rdma.resource not in limits:
            ctx.edit.set((*path, "resources", "limits", rdma.resource), str(rdma.amount))
            ctx.edit.set((*path, "resources", "requests", rdma.resource), str(rdma.amount))
        if rdma.ipc_lock:
            capabilities = (*path, "securityContext", "capabilities", "add")
            if "IPC_LOCK" not in podview.as_list(ctx.edit.get(capabilities)):
                ctx.edit.append(capabilities, "IPC_LOCK")


def add_metadata(ctx: _Context) -> None:
    """Per-class labels and annotations (a Kueue queue, say); a value the user set stays."""
    for key, source in (("labels", ctx.plan.labels), ("annotations", ctx.plan.annotations)):
        for name, value in source.items():
            ctx.edit.setdefault(("metadata", key, name), value)


def add_deadline(ctx: _Context) -> None:
    """A bound on run time for pods of classes that set one (hpo trials), when the pod has none."""
    if ctx.plan.active_deadline_seconds is not None:
        ctx.edit.setdefault(("spec", "activeDeadlineSeconds"), ctx.plan.active_deadline_seconds)


def _summary_key(profile: Profile) -> tuple[Any, ...]:
    return (profile.workload, profile.classification.reason, tuple(sorted(profile.gpus.items())),
            profile.model.name if profile.model else profile.model_name, profile.memory_per_gpu,
            profile.gpus_needed, profile.preemptible, profile.multi_node, profile.world.pods)


def readable_bytes(amount: Decimal) -> str:
    """A byte count for people: exact (32Gi, 1536Mi) when it is a whole number of MiB, else GiB to one decimal."""
    whole = amount.to_integral_value()
    if whole == amount and int(whole) % 2**20 == 0:
        return format_quantity(amount)
    return format_bytes(amount)


@functools.lru_cache(maxsize=1024)
def _summary_text(workload: str, reason: str, gpus: tuple[tuple[str, int], ...], model: str | None,
                  per_gpu: Decimal | None, needed: int | None, preemptible: bool, multi_node: bool, pods: int) -> str:
    """What the profile annotation records, so `kubectl get pod -o yaml` explains the decision: with the GPUs the
    memory need takes (``gpusNeeded``, null where the need or the card is not known) and the memory each of them
    holds (``gpuMemoryPerGpu``).

    Cached, as the pods of one job or ReplicaSet all get the same text."""
    summary: dict[str, Any] = {
        "class": workload,
        "reason": reason,
        "gpus": dict(gpus),
        "gpusNeeded": needed,
        "model": model,
        "gpuMemoryPerGpu": readable_bytes(per_gpu) if per_gpu is not None else None,
        "preemptible": preemptible,
        "multiNode": multi_node,
    }
    if pods > 1:
        summary["jobPods"] = pods
    return orjson.dumps(summary, option=orjson.OPT_SORT_KEYS).decode()


def record_profile(ctx: _Context) -> None:
    if not ctx.settings.record_profile:
        return
    ctx.edit.setdefault(("metadata", "labels", names.WORKLOAD_TYPE), ctx.profile.workload)
    summary = _summary_text(*_summary_key(ctx.profile))
    if ctx.profile.facts.annotations.get(names.PROFILE) != summary:
        ctx.edit.set(("metadata", "annotations", names.PROFILE), summary)


def add_backend(ctx: _Context) -> None:
    """The scheduler backend's vocabulary on the pod (`webhook.core.backends.scheduling.pod_writes`): a plain pod's queue,
    priority and scheduler; for a pod with an owner, what its template could not carry."""
    if ctx.rules.scheduler.active:
        scheduling.pod_writes(ctx.pod, ctx.profile, ctx.context, ctx.edit, ctx.warnings, ctx.job_label())


def void_visible_devices(ctx: _Context) -> None:
    """``NVIDIA_VISIBLE_DEVICES=void`` on each container of the pod that asks for no GPU, where the class's rules
    say so (the bypasses' write: `webhook.core.bypasses.voids.void_unasked`)."""
    voids.void_unasked(ctx.edit, ctx.spec, ctx.rules.bypasses, workload=ctx.profile.workload, namespace=ctx.namespace,
                       asking=set(ctx.profile.accelerator_containers))


def void_env_from(pod: Mapping[str, Any], profile: Profile, rules: Rules, namespace: str) -> Mutation:
    """A pod that asks for no GPU: its containers that take env from ConfigMaps or Secrets voided, or the user told
    (`webhook.core.bypasses.voids.void_env_from`)."""
    edit = Editor(dict(pod))
    warnings = voids.void_env_from(edit, podview.spec(pod), rules.bypasses, workload=profile.workload,
                                   namespace=namespace)
    return Mutation(pod=edit.doc, patch=edit.ops, warnings=warnings)


def void_ephemeral(pod: Mapping[str, Any], added: frozenset[int], rules: Rules, namespace: str) -> Mutation:
    """The ephemeral containers just added to a running pod (their indices: ``added``) voided
    (`webhook.core.bypasses.voids.void_ephemeral`)."""
    edit = Editor(dict(pod))
    voids.void_ephemeral(edit, podview.spec(pod), rules.bypasses, added=added, namespace=namespace)
    return Mutation(pod=edit.doc, patch=edit.ops)


STEPS: tuple[Callable[[_Context], None], ...] = (
    add_shm, add_nccl_env, void_visible_devices, set_priority, add_tolerations, pin_model, add_topology, add_gang,
    join_pod_group, add_rdma, add_backend, add_metadata, add_deadline, record_profile,
)




def mutate_pod(pod: Mapping[str, Any], profile: Profile, context: Context, *, namespace: str = "") -> Mutation:
    """The mutated copy of ``pod``, the JSON Patch from ``pod`` to it, and warnings for the user, in ``context``
    (of the cluster it reads the nodes of the pod's model, the PriorityClasses' state and the Workload API's
    support)."""
    rules = context.rules
    class_settings = rules.classes.get(profile.workload)
    if class_settings is None:  # class "none": not ai-admission's business, but for what its envFrom may hand it
        return void_env_from(pod, profile, rules, namespace)
    ctx = _Context(edit=Editor(dict(pod)), profile=profile, context=context, class_settings=class_settings, warnings=[],
                   namespace=namespace)
    for step in STEPS:
        step(ctx)
    return Mutation(pod=ctx.edit.doc, patch=ctx.edit.ops, warnings=ctx.warnings)
