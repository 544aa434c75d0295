"""The compiled rules: frozen dataclasses the request path reads, with regular expressions compiled and the GPU
catalog indexed by every name a model goes by (`webhook.core.rules.compiler` builds them).

`Rules` is what the rules file says, and only that: the catalog, the accelerators and the DRA classes are the
file's own. What the cluster adds (the models its nodes publish, its DeviceClasses, its queues) is the cluster's
view (`webhook.core.view.cluster_view`); a request reads the two side by side through its context
(`webhook.core.context.Context`: the catalog and accelerators in force).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

from ..backends.rules import SchedulerRules
from ..bypasses.rules import BypassRules
from ..dra.rules import DraRules
from ..rightsizing.rules import RightsizingRules

WORKLOAD_CLASSES = ("training", "inference", "batch", "hpo")
MODES = ("deny", "warn", "audit")


def _remembered(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``test`` with its answers remembered, for a bounded number of recent arguments (they come from requests)."""
    return functools.lru_cache(maxsize=1024)(test)


class RulesError(Exception):
    """The rules file cannot be used. ``str()`` is one line: ``file: path: problem``."""


@dataclass(frozen=True)
class ShareResource:
    """A resource that asks for a share of one GPU by its memory alone (Alibaba's gpushare ``aliyun.com/gpu-mem``):
    the pod gets one shared GPU, and the amount, in ``unit``, is its memory need."""

    name: str
    vendor: str
    unit: Decimal
    source: str = ""


@dataclass(frozen=True)
class ShareAnnotations:
    """A sharing scheduler that hands out GPU shares by pod annotation, with no GPU resource in the pod (NVIDIA's
    KAI-Scheduler and Run:ai: ``gpu-fraction``, ``gpu-memory``). The pod still takes ``resource`` devices: what
    tolerations and the vendor check follow."""

    name: str
    resource: str
    fraction: str | None = None          # share of one card's memory, 0 < f <= 1
    memory: str | None = None            # memory per device, in memory_unit
    memory_unit: Decimal = Decimal(1)
    devices: str | None = None           # how many devices each get the share (default 1)
    container: str | None = None         # the container that gets them (default the first)
    source: str = ""

    def keys(self) -> tuple[str, ...]:
        """The annotations that make a pod take shares (either is enough)."""
        return tuple(k for k in (self.fraction, self.memory) if k)


@dataclass(frozen=True)
class DeviceResource:
    """Resources whose name is the device (NVIDIA's KubeVirt device plugin: nvidia.com/GA102GL_A10 for a passthrough
    A10, nvidia.com/GRID_T4-16Q for a vGPU type): only nodes with that device offer them, so the name pins the model
    (group ``model``) and, where the pattern has a group ``mem``, the memory of each device in GB."""

    pattern: re.Pattern[str]  # matched without case
    vendor: str
    device: str = "device"    # what one is, for messages ("passthrough GPU", "vGPU")
    exclude: re.Pattern[str] | None = None  # names the pattern matches that are not GPUs (a card's audio function)

    @property
    def sized(self) -> bool:
        return "mem" in self.pattern.groupindex


@dataclass(frozen=True)
class Accelerators:
    """The ``accelerators:`` block: which resources are GPUs and of which vendor, how MIG slices, device-named
    resources, memory and share resources are read, and which annotations name a model. ``extended``: the
    extended resources GPU DeviceClasses serve (the rules' own ``dra:`` classes; the cluster's join them in the
    cluster's view, `webhook.core.view.gpu_classes`)."""

    gpu_resources: frozenset[str] = frozenset()
    vendors: Mapping[str, str] = field(default_factory=dict)  # accelerator resource -> vendor
    mig_pattern: re.Pattern[str] | None = None
    mig_vendor: str = "nvidia"
    mig_needs_model: bool = False
    device_resources: tuple[DeviceResource, ...] = ()  # resources whose name is the device (passthrough, vGPU)
    memory_resources: Mapping[str, Decimal] = field(default_factory=dict)  # resource -> bytes per unit, per GPU
    memory_percent_resources: frozenset[str] = frozenset()
    model_annotations: tuple[str, ...] = ()
    node_selector_annotations: Mapping[str, str] = field(default_factory=dict)  # annotation -> the label it selects
    share_resources: Mapping[str, ShareResource] = field(default_factory=dict)
    share_annotations: tuple[ShareAnnotations, ...] = ()
    unknown_accelerator_pattern: re.Pattern[str] | None = None  # extended resources that look like GPUs
    not_devices_pattern: re.Pattern[str] | None = None          # ... except sharing parameters (memory, cores)
    not_accelerators: frozenset[str] = frozenset()              # names the pattern matches that are not GPUs
    extended: frozenset[str] = frozenset()                      # served by GPU DeviceClasses
    # is this resource name an accelerator (remembered: every container names cpu and memory)
    is_accelerator: Callable[[Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_accelerator", _remembered(self._names_accelerator))

    def serving(self, extended: frozenset[str]) -> "Accelerators":
        """These accelerators with more extended resources served by DeviceClasses (the cluster's)."""
        added = extended - self.extended
        return dataclasses.replace(self, extended=self.extended | added) if added else self

    def vendor_of(self, resource: str) -> str | None:
        """The GPU vendor an accelerator resource stands for (a MIG resource: the MIG vendor)."""
        vendor = self.vendors.get(resource)
        if vendor is None and self.mig_pattern is not None and self.mig_pattern.match(resource):
            return self.mig_vendor
        if vendor is None and self.device_resources:
            found = self.device_resource(resource)
            return found[0].vendor if found is not None else None
        return vendor

    def device_resource(self, resource: str) -> tuple[DeviceResource, re.Match[str]] | None:
        """The device-named resource ``resource`` is (its rule and the match), or None."""
        for device in self.device_resources:
            match = device.pattern.match(resource)
            if match is not None and not (device.exclude is not None and device.exclude.search(resource)):
                return device, match
        return None

    def _names_accelerator(self, resource: Any) -> bool:
        return isinstance(resource, str) and (
            resource in self.gpu_resources or bool(self.mig_pattern and self.mig_pattern.match(resource))
            or resource in self.extended or self.is_unknown_accelerator(resource)
            or (bool(self.device_resources) and self.device_resource(resource) is not None))

    def is_device(self, resource: str) -> bool:
        """An accelerator counted in devices (a node's allocatable ``nvidia.com/gpu: 8``); a share resource counts
        memory (``aliyun.com/gpu-mem: 64`` on a node of four 16 GiB cards)."""
        return self.is_accelerator(resource) and resource not in self.share_resources

    def is_unknown_accelerator(self, resource: str) -> bool:
        """A resource no rule names but that looks like a GPU (``example.com/gpu``, ``vendor.io/vgpu``): judged as
        one, with a warning, rather than left alone. Sharing parameters (``.../gpumem``, ``.../gpucores``) and the
        rules' ``notAccelerators`` are not devices."""
        pattern = self.unknown_accelerator_pattern
        if pattern is None or resource in self.gpu_resources or resource in self.not_accelerators \
                or resource in self.extended:
            return False
        if resource in self.memory_resources or resource in self.memory_percent_resources:
            return False
        if self.mig_pattern is not None and self.mig_pattern.match(resource):
            return False
        if self.device_resources and self.device_resource(resource) is not None:
            return False
        name = resource.rpartition("/")[2]
        return bool(pattern.search(resource)) and not (self.not_devices_pattern and self.not_devices_pattern.search(name))


@dataclass(frozen=True)
class GenericKind:
    """A custom resource with no kinds-table entry that the webhook is registered for and reads by shape."""

    group: str
    kind: str
    resource: str
    scope: str = "Namespaced"


@dataclass(frozen=True)
class GpuModel:
    """One catalog entry: what a card of this model holds (as the device reports it) and how many share a node."""

    name: str
    memory: Decimal
    interconnect: str
    gpus_per_node: int
    labels: Mapping[str, str]
    vendor: str = "nvidia"
    source: str = ""
    aliases: tuple[str, ...] = ()

    def label_value(self, key: str) -> str:
        """The node-label value naming this model under ``key`` (the catalog name when the key is not listed)."""
        return self.labels.get(key, self.name)

    def names(self) -> tuple[str, ...]:
        """Every name the model goes by: catalog name, node-label values, aliases."""
        return (self.name, *self.labels.values(), *self.aliases)


@dataclass(frozen=True)
class InstanceType:
    """A cloud instance type: which GPU model it carries, how many, and its network fabric (None: not known)."""

    name: str
    model: GpuModel
    gpus: int
    fabric: str | None
    source: str


@dataclass(frozen=True)
class GpuNameEntry:
    """A provisioner's short GPU name (Karpenter: "a100") with the memory the cloud API states for it."""

    name: str
    memory_mib: int | None
    model: GpuModel


@dataclass(frozen=True)
class GpuNameLabels:
    name_key: str
    memory_key: str | None
    entries: tuple[GpuNameEntry, ...]


@dataclass(frozen=True)
class FabricSignal:
    """What says a node's (or a pod's) network fabric: a label with one of ``values`` (any value when None), an
    extended resource, or an extended resource matching a pattern."""

    fabric: str
    label: str | None = None
    values: frozenset[str] | None = None
    resource: str | None = None
    resource_pattern: re.Pattern[str] | None = None

    def names_resource(self, name: str) -> bool:
        return name == self.resource or bool(self.resource_pattern is not None and self.resource_pattern.search(name))


@dataclass(frozen=True)
class FabricNeeds:
    """What a pod must carry for NCCL to use a fabric that something else sets up (GKE's GPUDirect plugins, the
    EFA device plugin): pod annotations, a sidecar container (by name), device resources. Without them NCCL
    falls back to TCP between nodes; ai-admission adds none of it (a wrong network or sidecar breaks NCCL), it
    says what is missing."""

    annotations: tuple[str, ...] = ()
    sidecars: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class FabricSettings:
    """Which network fabric a pod's nodes have, and the NCCL env for each fabric (see rules `fabrics`)."""

    default: str = "unknown"
    by_model: Mapping[str, str] = field(default_factory=dict)
    by_node_label: tuple[tuple[str, frozenset[str] | None, str], ...] = ()  # (key, values or any, fabric)
    env: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    from_nodes: tuple[FabricSignal, ...] = ()   # what the nodes publish (the node watch)
    from_pod: tuple[FabricSignal, ...] = ()     # what the pod asks for (an RDMA or EFA device)
    host_interfaces: Mapping[str, str] = field(default_factory=dict)  # fabric -> interface host-network pods see
    needs: Mapping[str, FabricNeeds] = field(default_factory=dict)  # fabric -> what the pod must carry for it


@dataclass(frozen=True)
class TopologyKeySet:
    """One provider's network topology labels, broadest first (a domain of a later key lies inside one of an
    earlier key)."""

    name: str
    keys: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class TopologySettings:
    key_sets: tuple[TopologyKeySet, ...] = ()
    nvlink_domain_key: str | None = None
    zone_key: str = "topology.kubernetes.io/zone"
    hostname_key: str = "kubernetes.io/hostname"

    def keys(self) -> frozenset[str]:
        """Every label key the node watch keeps for placement."""
        found = {key for key_set in self.key_sets for key in key_set.keys}
        found.update(k for k in (self.nvlink_domain_key, self.zone_key, self.hostname_key) if k)
        return frozenset(found)


@dataclass(frozen=True)
class GpuTaint:
    """A taint GPU node pools carry: ``key`` with any value when ``value`` is None."""

    key: str
    value: str | None
    source: str


@dataclass(frozen=True)
class WorldSettings:
    """Where the number of pods of a distributed job is read from (see rules `worldSize`)."""

    nodes_env: tuple[str, ...] = ()
    processes_env: str | None = None
    processes_per_node_env: str | None = None
    nodes_env_sum_pattern: re.Pattern[str] | None = None
    nodes_args: tuple[re.Pattern[str], ...] = ()       # a launcher's own count of nodes: group 1
    single_node_args: tuple[re.Pattern[str], ...] = ()  # a launcher's word for a job of one node


@dataclass(frozen=True)
class DegreeSettings:
    """Where a pod states a degree of parallelism: env variables, and patterns of its containers' command line
    (group 1 is the degree)."""

    env: tuple[str, ...] = ()
    args: tuple[re.Pattern[str], ...] = ()


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    description: str = ""


@dataclass(frozen=True)
class ShmSpec:
    per_gpu: Decimal
    max: Decimal
    without_memory_limit: Decimal

    def for_gpus(self, gpus: int) -> Decimal:
        """What a pod of ``gpus`` GPUs needs: per GPU, up to the class maximum (before any memory limit's cap)."""
        return min(self.per_gpu * max(gpus, 1), self.max)


@dataclass(frozen=True)
class PodAffinitySpec:
    topology_key: str | None  # None: the narrowest domain of the nodes' topology that holds the job
    required: bool
    weight: int


@dataclass(frozen=True)
class TopologySpreadSpec:
    topology_keys: tuple[str, ...]
    max_skew: int
    when_unsatisfiable: str


@dataclass(frozen=True)
class GangSpec:
    scheduler_name: str
    pod_group_annotation: str | None
    pod_group_label: str | None


@dataclass(frozen=True)
class PodGroupSpec:
    """A class's group on the default scheduler (the Workload API's PodGroup): ``disruption_mode`` is
    ``PodGroup`` where losing one pod stalls the others (training), so the scheduler preempts the group whole or
    not at all; ``topology`` writes the narrowest topology level that holds the job as the group's constraint."""

    disruption_mode: str = "PodGroup"
    topology: bool = True


@dataclass(frozen=True)
class RdmaSpec:
    resource: str
    amount: int
    ipc_lock: bool


@dataclass(frozen=True)
class ClassMutation:
    """What /mutate adds to pods of one class; None or empty means that part is not added."""

    shm: ShmSpec | None = None
    nccl: bool = False  # the fabric's NCCL env for multi-node pods (see FabricSettings)
    nccl_single_node: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    pod_affinity: PodAffinitySpec | None = None
    topology_spread: TopologySpreadSpec | None = None
    gang: GangSpec | None = None
    pod_group: PodGroupSpec | None = None  # the default scheduler's gang, through the Workload API
    rdma: RdmaSpec | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    active_deadline_seconds: int | None = None


@dataclass(frozen=True)
class MutationSettings:
    shm_volume_name: str = "ai-admission-shm"
    shm_in_all_containers: bool = False
    max_shm_fraction_of_memory_limit: Decimal = Decimal("0.5")
    gpu_tolerations: bool = True
    model_node_selector_key: str = "gpu-type"
    job_labels: tuple[str, ...] = ()
    app_labels: tuple[str, ...] = ()
    record_profile: bool = True


@dataclass(frozen=True)
class ClassSettings:
    name: str
    preemptible: bool
    memory_factor: Decimal
    priority_class: PriorityClassSpec | None
    allowed_priority_classes: frozenset[str]
    warn_guaranteed_qos: bool
    mutate: ClassMutation = field(default_factory=ClassMutation)
    # the PriorityClass of a pod of the class that answers "can it be preempted?" otherwise than the class's
    # `preemptible` (annotation ai-admission.io/preemptible; rules key priorityClassIfPreemptible or
    # priorityClassIfNotPreemptible); None: the class keeps such a pod at its own and says so
    priority_class_otherwise: PriorityClassSpec | None = None

    def honours(self, preemptible: bool) -> bool:
        """Whether a pod of the class answering ``preemptible`` can be given a PriorityClass of that answer."""
        return preemptible == self.preemptible or self.priority_class_otherwise is not None

    def priority_for(self, preemptible: bool) -> PriorityClassSpec | None:
        """The PriorityClass the answer to "can it be preempted?" chooses: the class's own for its own answer, the
        other one for the other answer (the class's own where the rules name none: see `honours`)."""
        if preemptible == self.preemptible or self.priority_class_otherwise is None:
            return self.priority_class
        return self.priority_class_otherwise

    @property
    def otherwise_key(self) -> str:
        """The rules key of the class's PriorityClass for the other answer (for messages)."""
        return "priorityClassIfNotPreemptible" if self.preemptible else "priorityClassIfPreemptible"

    @property
    def priority_classes(self) -> tuple[PriorityClassSpec, ...]:
        """Every PriorityClass the class's pods may be given (the generated manifests, the cluster's check)."""
        return tuple(p for p in (self.priority_class, self.priority_class_otherwise) if p is not None)


@dataclass(frozen=True)
class LabelMatch:
    key: str | None
    key_pattern: re.Pattern[str] | None
    values: frozenset[str] | None
    value_pattern: re.Pattern[str] | None
    # does key_pattern match this label key (remembered: a cluster uses a small vocabulary of label keys)
    _key_matches: Callable[[str], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = self.key_pattern
        object.__setattr__(self, "_key_matches", _remembered(lambda key: bool(pattern and pattern.search(key))))

    def matches(self, labels: Mapping[str, str]) -> str | None:
        """Return the matching ``key=value`` text, or None."""
        if self.key is not None:
            candidates = [(self.key, labels[self.key])] if self.key in labels else []
        else:
            candidates = [(k, v) for k, v in labels.items() if self._key_matches(k)]
        for key, value in candidates:
            value = value if isinstance(value, str) else str(value)
            if self.values is not None and value not in self.values:
                continue
            if self.value_pattern is not None and not self.value_pattern.search(value):
                continue
            return f"{key}={value}" if value else key
        return None


@dataclass(frozen=True)
class EnvMatch:
    name: str | None
    name_pattern: re.Pattern[str] | None
    values: frozenset[str] | None
    value_pattern: re.Pattern[str] | None
    greater_than: float | None

    def matches(self, env: Mapping[str, str | None]) -> str | None:
        """``env`` maps names to literal values (None when set through valueFrom). Returns ``NAME=value``."""
        if self.name is not None:
            candidates = [(self.name, env[self.name])] if self.name in env else []
        else:
            assert self.name_pattern is not None
            candidates = [(k, v) for k, v in env.items() if self.name_pattern.search(k)]
        for name, value in candidates:
            if self.values is not None and value not in self.values:
                continue
            if self.value_pattern is not None and (value is None or not self.value_pattern.search(value)):
                continue
            if self.greater_than is not None:
                try:
                    if value is None or not float(value) > self.greater_than:
                        continue
                except ValueError:
                    continue
            return f"{name}={value}" if value is not None else name
        return None


@dataclass(frozen=True)
class CommandMatch:
    """A pattern of an app container's command line (command and args joined by spaces): how a distributed launcher
    (torchrun, accelerate launch, deepspeed) says a pod is one process group of a training job."""

    pattern: re.Pattern[str]

    def matches(self, commands: list[tuple[str, str]]) -> str | None:
        """``commands``: (container name, command line) of each app container. Returns what matched and where."""
        for name, line in commands:
            found = self.pattern.search(line) if line else None
            if found is not None:
                return f'command "{found.group(0).strip()}" in container "{name}"'
        return None


@dataclass(frozen=True)
class OwnerMatch:
    kind: str
    api_group: str | None

    def matches(self, owner: Mapping[str, Any]) -> bool:
        if owner.get("kind") != self.kind:
            return False
        if self.api_group is None:
            return True
        api_version = str(owner.get("apiVersion", ""))
        group = api_version.rpartition("/")[0]
        return group == self.api_group


@dataclass(frozen=True)
class Signal:
    workload: str
    owners: tuple[OwnerMatch, ...]
    labels: tuple[LabelMatch, ...]
    env: tuple[EnvMatch, ...]
    requires_accelerator: bool
    index: int
    commands: tuple[CommandMatch, ...] = ()
    # Cheap pre-checks, derived at load: the exact label keys and owner kinds the signal cannot match without.
    label_keys: frozenset[str] = frozenset()
    owner_kinds: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SignalIndex:
    """Which signals a pod can possibly match, found from its label keys and owner kinds instead of trying all.

    A signal that names an exact label key is filed under one of them, else one that names owner kinds under
    those; the rest (only patterns or env) are always tried. A pod's candidates come back in rule order, so
    the first match still wins; the full check of each candidate is `classify`'s.
    """

    always: tuple[int, ...]
    by_label: Mapping[str, tuple[int, ...]]
    by_owner_kind: Mapping[str, tuple[int, ...]]

    @classmethod
    def build(cls, signals: tuple[Signal, ...]) -> SignalIndex:
        always: list[int] = []
        by_label: dict[str, list[int]] = {}
        by_owner_kind: dict[str, list[int]] = {}
        for signal in signals:
            if signal.label_keys:
                by_label.setdefault(min(signal.label_keys), []).append(signal.index)
            elif signal.owner_kinds:
                for kind in signal.owner_kinds:
                    by_owner_kind.setdefault(kind, []).append(signal.index)
            else:
                always.append(signal.index)
        return cls(always=tuple(always), by_label={k: tuple(v) for k, v in by_label.items()},
                   by_owner_kind={k: tuple(v) for k, v in by_owner_kind.items()})

    def candidates(self, label_keys: Iterable[str], owner_kinds: Iterable[str]) -> list[int]:
        found = list(self.always)
        by_label = self.by_label
        for key in label_keys:
            hits = by_label.get(key)
            if hits:
                found.extend(hits)
        for kind in owner_kinds:
            hits = self.by_owner_kind.get(kind)
            if hits:
                found.extend(hits)
        return sorted(set(found))


@dataclass(frozen=True)
class NodeCatalogRules:
    """The ``nodeCatalog:`` block: what the node watch's findings get (the cluster's nodes themselves are the
    cluster's view, `webhook.core.view.node_catalog`)."""

    model_without_nodes: str = "warn"  # a model no node has: "warn" or "deny"
    job_beyond_nodes: str = "warn"     # a multi-node job more than the nodes of its model hold: "warn" or "deny"


@dataclass(frozen=True)
class Rules:
    """Everything the policy core reads; built by `compile_rules`, never mutated."""

    source: str
    default_class: str
    default_mode: str
    namespace_modes: Mapping[str, str]
    accelerators: Accelerators
    model_keys: tuple[str, ...]
    precisions: Mapping[str, Decimal]
    catalog: Mapping[str, GpuModel]
    model_index: Mapping[str, GpuModel]
    classes: Mapping[str, ClassSettings]
    signals: tuple[Signal, ...]
    signal_index: SignalIndex
    multi_node_replica_types: frozenset[str]
    warn_missing_host_memory: bool
    warn_tensor_parallel_over_pcie: bool
    mutation: MutationSettings = field(default_factory=MutationSettings)
    model_label_suffix: re.Pattern[str] | None = None
    memory_keys: tuple[str, ...] = ()
    instance_type_keys: tuple[str, ...] = ()
    instance_types: Mapping[str, InstanceType] = field(default_factory=dict)
    gpu_name_labels: GpuNameLabels | None = None
    fabrics: FabricSettings = field(default_factory=FabricSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)
    gpu_taints: tuple[GpuTaint, ...] = ()
    world: WorldSettings = field(default_factory=WorldSettings)
    tensor_parallel: DegreeSettings = field(default_factory=DegreeSettings)
    parallelism: DegreeSettings = field(default_factory=DegreeSettings)  # pipeline and data parallelism
    rightsizing: RightsizingRules = field(default_factory=RightsizingRules)  # GPUs asked beyond the need
    ray_train_pattern: re.Pattern[str] | None = None  # a RayJob whose entrypoint or label values match trains
    dra: DraRules = field(default_factory=DraRules)  # GPUs claimed through Dynamic Resource Allocation
    generic_kinds: tuple[GenericKind, ...] = ()      # custom resources the webhook reads by shape
    bypasses: BypassRules = field(default_factory=BypassRules)  # ways to a GPU without asking for one
    scheduler: SchedulerRules = field(default_factory=SchedulerRules)  # the scheduler backend and its vocabulary
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    node_catalog: NodeCatalogRules = field(default_factory=NodeCatalogRules)

    def find_model(self, name: str) -> GpuModel | None:
        """The model of the rules' own catalog ``name`` stands for (`lookup_model`); the catalog in force, with
        what the nodes publish, is the context's (`webhook.core.context.Context.find_model`)."""
        return lookup_model(self.model_index, self.model_label_suffix, name)

    def node_label_keys(self) -> frozenset[str]:
        """The node labels the node watch keeps: those naming models, instance types, topology and fabrics."""
        keys = {*self.model_keys, *self.instance_type_keys, *self.memory_keys, *self.topology.keys()}
        keys.update(s.label for s in self.fabrics.from_nodes if s.label)
        keys.update(key for key, _, _ in self.fabrics.by_node_label)
        if self.gpu_name_labels is not None:
            keys.add(self.gpu_name_labels.name_key)
        return frozenset(keys)


def lookup_model(index: Mapping[str, GpuModel], suffix: re.Pattern[str] | None, name: str) -> GpuModel | None:
    """The catalog model ``name`` stands for in ``index``: a catalog name, alias or node-label value, compared
    without case, also with GPU feature discovery's renaming undone (``suffix``: ``-SHARED`` under time-slicing,
    ``-MIG-1g.10gb`` in MIG mode) and with or without the ``NVIDIA-`` prefix old drivers left out."""
    key = normalize_model_name(name)
    found = index.get(key)
    if found is None and suffix is not None:
        stripped = suffix.sub("", str(name).strip())
        if stripped != str(name).strip():
            return lookup_model(index, suffix, stripped)
    if found is None:
        found = index.get(key[len("nvidia-"):] if key.startswith("nvidia-") else "nvidia-" + key)
    return found


def normalize_model_name(name: str) -> str:
    """Model names compare case-insensitively with `_` and `-` alike (GFD uses `-`, some clusters `_`)."""
    return str(name).strip().lower().replace("_", "-")
