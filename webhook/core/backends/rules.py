"""The ``scheduler:`` block of the rules: which scheduler backend the cluster runs, and its vocabulary as data.

Queueing schedulers read their intent from their own labels, annotations and fields, mostly on the *owner* (the
Job, JobSet, PyTorchJob, LeaderWorkerSet, TrainJob) at its creation, before any pod exists: Kueue builds its
Workload from the owner's ``kueue.x-k8s.io/queue-name`` label and the pod templates' topology annotations; KAI's
pod-grouper reads ``kai.scheduler/queue`` and the topology annotations from the top owner and ``schedulerName`` from
every template; Volcano reads the queue and preemptibility from the pod template's annotations. Each backend is a
list of *writes*: what intent (queue, priority class, preemptibility, topology level, scheduler name, pod group,
suspend), on which object (``place``: ``owner``, ``template``, or a plain ``pod``), as a label, an annotation or a field, for
which kinds. `webhook.core.backends.scheduling` applies them; the sources are beside each backend in rules/default.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

INTENTS = ("queue", "priorityClass", "preemptibility", "topology", "topologyName", "schedulerName", "podGroup",
           "suspend", "minMember")
PLACES = ("owner", "template", "pod")


@dataclass(frozen=True)
class Write:
    """One thing a backend reads: ``intent`` written on ``on`` as a label, an annotation or a field (dotted, from
    the object, the template's pod spec or the pod's spec), limited to ``kinds`` (``Kind`` or ``group/Kind``)."""

    intent: str
    on: str
    label: str | None = None
    annotation: str | None = None
    field_path: str | None = None
    required_annotation: str | None = None   # the topology annotation when the class requires the level
    value: Any = None                        # a fixed value (schedulerName, suspend)
    values: Mapping[str, str] = field(default_factory=dict)  # preemptibility: preemptible / protected -> value
    kinds: frozenset[str] = frozenset()      # empty: every kind
    multi_node_only: bool = False            # only for jobs of several pods (gang intents)
    read_from_pods: bool = False             # a template write the scheduler also reads from each pod

    def applies_to(self, group: str, kind: str) -> bool:
        return not self.kinds or kind in self.kinds or f"{group}/{kind}" in self.kinds

    @property
    def where(self) -> str:
        """How messages name the place written: ``label kueue.x-k8s.io/queue-name``, ``field spec.suspend``."""
        if self.label:
            return f"label {self.label}"
        if self.annotation:
            return f"annotation {self.annotation}"
        return f"field {self.field_path}"


@dataclass(frozen=True)
class QueueKind:
    """Where a backend's queues are (for the watch, ``check --cluster`` and the queue checks)."""

    group: str
    version: str
    kind: str
    resource: str
    namespaced: bool
    older_versions: tuple[str, ...] = ()  # read where the cluster does not serve ``version`` (newest first)

    @property
    def versions(self) -> tuple[str, ...]:
        """Every version the kind may be read at, the preferred first."""
        return (self.version, *self.older_versions)


@dataclass(frozen=True)
class Backend:
    name: str
    writes: tuple[Write, ...] = ()
    queues: Mapping[str, str] = field(default_factory=dict)            # class -> queue name
    priority_classes: Mapping[str, str] = field(default_factory=dict)  # class -> the backend's priority class
    topology_name: str | None = None    # KAI: the Topology object the levels are of
    queue_kinds: tuple[QueueKind, ...] = ()
    source: str = ""

    def writes_on(self, place: str, group: str, kind: str) -> list[Write]:
        return [w for w in self.writes if w.on == place and w.applies_to(group, kind)]

    @property
    def names_pod_groups(self) -> bool:
        """The pod-group label names an object the user or an operator must create (scheduler-plugins' PodGroup),
        not a group the scheduler forms by itself (Kueue's plain-pod groups)."""
        return any(q.kind == "PodGroup" for q in self.queue_kinds)


DEFAULT = Backend(name="default")


@dataclass(frozen=True)
class SchedulerRules:
    backend: Backend = DEFAULT
    known: tuple[str, ...] = ("default",)
    own_scheduler: Mapping[str, str] = field(default_factory=dict)  # group/Kind -> the scheduler its pods always get

    def scheduled_elsewhere(self, group: str, kind: str) -> str | None:
        """The scheduler that always places this kind's pods when it is not the backend's (a Volcano Job's)."""
        own = self.own_scheduler.get(f"{group}/{kind}")
        return own if own is not None and own != self.backend.name else None

    @property
    def active(self) -> bool:
        return self.backend.name != "default" and bool(self.backend.writes)


def _write(spec: Mapping[str, Any]) -> Write:
    return Write(intent=spec["intent"], on=spec["place"], label=spec.get("label"), annotation=spec.get("annotation"),
                 field_path=spec.get("field"), required_annotation=spec.get("requiredAnnotation"), value=spec.get("value"),
                 values=dict(spec.get("values") or {}), kinds=frozenset(spec.get("kinds") or ()),
                 multi_node_only=bool(spec.get("multiNodeOnly", False)),
                 read_from_pods=bool(spec.get("readFromPods", False)))


def compile_scheduler(spec: Mapping[str, Any] | None) -> SchedulerRules:
    """``spec`` is the schema-checked block (None: the default scheduler, nothing written)."""
    if not spec:
        return SchedulerRules()
    backends = dict(spec.get("backends") or {})
    name = spec.get("backend", "default")
    chosen = backends.get(name) or {}
    backend = DEFAULT if name == "default" else Backend(
        name=name, writes=tuple(_write(w) for w in chosen.get("writes") or ()),
        queues=dict(chosen.get("queues") or {}), priority_classes=dict(chosen.get("priorityClasses") or {}),
        topology_name=chosen.get("topologyName"),
        queue_kinds=tuple(QueueKind(group=q["group"], version=q["version"], kind=q["kind"], resource=q["resource"],
                                    namespaced=bool(q.get("namespaced", False)),
                                    older_versions=tuple(q.get("olderVersions") or ()))
                          for q in chosen.get("queueKinds") or ()),
        source=chosen.get("source", ""))
    return SchedulerRules(backend=backend, known=("default", *sorted(backends)),
                          own_scheduler=dict(spec.get("ownScheduler") or {}))
