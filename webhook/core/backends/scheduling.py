"""Speak the queueing scheduler's language, on the object it reads: owners and templates at their CREATE, plain pods.

Kueue, KAI-Scheduler, Volcano and scheduler-plugins' coscheduling read a workload's queue, priority,
preemptibility, gang and topology from their own labels, annotations and fields, mostly on the *owner* (a Job,
JobSet, PyTorchJob, LeaderWorkerSet, TrainJob) or its pod templates, when the owner is created: by the time its pods
exist, Kueue has built its Workload and KAI its PodGroup. So `owner_mutation` writes the backend's vocabulary
(`webhook.core.backends.rules`) on the owner and every pod template of the kinds table at the owner's CREATE, from
the class its templates' pods get and the placement the nodes allow (the narrowest topology domain that holds the
whole job, `webhook.core.placement.packing_key`), never replacing what the user wrote; `pod_writes` does the same
for plain pods, and for a pod's own fields a template could not carry. A pod whose owner was mutated has the
values already, and gets nothing twice. Nothing is created (no PodGroup, no Workload): a webhook has no side
effects.

`backend_findings` holds a workload to the backend where the cluster can be read: a queue that does not exist
(or is not open), a gang larger than its queue can ever give, pods of one job asking for different priorities.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Iterable, Mapping

from .. import placement, podview
from ..context import Context
from ..findings import Finding, deny, warn
from ..patch import Editor, Path
from ..profile import Profile, build_profile
from ..workloads.templates import BUILT, POD_SPEC, Template, dig
from .rules import Backend, Write

# Kueue's LocalQueueDefaulting (beta, on from Kueue 0.12) gives a job that names no queue the LocalQueue "default"
# of its namespace, where there is one (kubernetes-sigs/kueue pkg/controller/constants/constants.go
# DefaultLocalQueueName, pkg/controller/jobframework/defaults.go)
KUEUE_DEFAULT_QUEUE = "default"
RUNTIME_PATCH_MANAGER = "ai-admission.io/webhook"  # this webhook's entry of a TrainJob's runtimePatches
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass
class OwnerMutation:
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_path(dotted: str) -> Path:
    """``spec.replicatedJobs[0].template`` -> ``("spec", "replicatedJobs", 0, "template")``."""
    parts: list[str | int] = []
    for piece in dotted.split("."):
        name, _, rest = piece.partition("[")
        if name:
            parts.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            parts.append(int(index))
            rest = rest.lstrip("[")
    return tuple(parts)


@dataclass(frozen=True)
class _Job:
    """What the writes of one workload are worked out from: its class, its GPU pods' profile, its name."""

    workload: str
    profile: Profile
    name: str
    pods: int
    multi_node: bool
    queue: str | None = None  # the queue the workload names, once its queue write is done (Kueue's topology reads it)


def _job_of(profiles: list[Profile], name: str, pods: int) -> _Job | None:
    """The workload's class: its GPU pods' (a launcher or a head without GPUs follows them), else its first pod's."""
    asking = [p for p in profiles if p.gpu_count and p.workload != "none"]
    chosen = asking[0] if asking else next((p for p in profiles if p.workload != "none"), None)
    if chosen is None:
        return None
    return _Job(workload=chosen.workload, profile=chosen, name=name, pods=pods,
                multi_node=any(p.multi_node for p in profiles))


def _value(write: Write, backend: Backend, job: _Job, ctx: Context, warnings: list[str]) -> tuple[Any, bool]:
    """(value, required) for ``write``; value None when there is nothing to write (the pod is told why)."""
    intent = write.intent
    if intent == "queue":
        queue = backend.queues.get(job.workload)
        if queue is None:
            warnings.append(f"no {backend.name} queue for class {job.workload} (scheduler.backends.{backend.name}"
                            f".queues): the workload names none, so {backend.name} does not admit it")
            return None, False
        return (queue if _queue_exists(queue, backend, job, ctx, warnings) else None), False
    if intent == "priorityClass":
        policy = ctx.rules.classes.get(job.workload)
        chosen = policy.priority_for(job.profile.preemptible) if policy else None  # the pods' own answer
        name: str | None
        if policy is not None and chosen is not None and chosen is not policy.priority_class:
            name = chosen.name  # the pods answered otherwise than their class: the class's mapping is not theirs
        else:
            name = backend.priority_classes.get(job.workload) or (chosen.name if chosen else None)
        return (name if name is None or _priority_class_exists(name, backend, ctx, warnings) else None), False
    if intent == "preemptibility":
        return write.values.get("preemptible" if job.profile.preemptible else "protected"), False
    if intent == "topology":
        policy = ctx.rules.classes.get(job.workload)
        plan = policy.mutate.pod_affinity if policy else None
        if plan is None or not job.multi_node or not _queue_places_by_topology(backend, job, ctx, warnings):
            return None, False
        return placement.packing_key(ctx.target_of(job.profile.model), job.profile, plan.topology_key, warnings), plan.required
    if intent == "topologyName":
        return (backend.topology_name if job.multi_node else None), False
    if intent == "podGroup":
        if not job.multi_node or not job.name:
            return None, False
        # with the cluster's PodGroups known, validation says whether this one exists (queue-not-found)
        if backend.names_pod_groups and ctx.cluster.queues is None:
            warnings.append(f'{backend.name}: the pods name PodGroup "{job.name}", which must exist with minMember '
                            f"{job.pods} (ai-admission creates none)")
        return job.name, False
    if intent == "minMember":
        return (str(job.pods) if job.multi_node and job.pods > 1 else None), False
    return write.value, False


def _namespace(job: _Job) -> str:
    return str(job.profile.facts.metadata.get("namespace") or "")


def _queue_exists(queue: str, backend: Backend, job: _Job, ctx: Context, warnings: list[str]) -> bool:
    """Whether the class's queue may be written: yes where the cluster's queues are not known; where they are, only
    if it exists. A queue name that does not exist leaves the workload never admitted, and with Kueue it also turns
    off Kueue's own defaulting (a LocalQueue named "default" takes a job that names none): nothing is written and
    the workload is told."""
    queues = ctx.cluster.queues
    namespace = _namespace(job)
    if queues is None or (queues.namespaced and not namespace) or queues.find(queue, namespace) is not None:
        return True
    where = f' in namespace "{namespace}"' if queues.namespaced else ""
    known = ", ".join(queues.names(namespace)) or "none"
    warnings.append(f'no queue name written: {backend.name} {queues.kind} "{queue}" (scheduler.backends.{backend.name}'
                    f".queues.{job.workload}) does not exist{where}, so {backend.name}'s own default decides; "
                    f"there: {known}")
    return False


def _priority_class_exists(name: str, backend: Backend, ctx: Context, warnings: list[str]) -> bool:
    """Whether the backend's priority class may be named: not where the cluster's are known and it is not among
    them (Kueue makes no Workload for a job naming a WorkloadPriorityClass that does not exist: it is never
    admitted, and nobody is told)."""
    queues = ctx.cluster.queues
    known = queues.priority_classes if queues is not None else None
    if known is None or name in known:
        return True
    warnings.append(f'no priority class written: {backend.name} has no WorkloadPriorityClass "{name}" (create it with '
                    f"the value of the PriorityClass of that name), so the workload gets {backend.name}'s default "
                    f"priority")
    return False


def _queue_places_by_topology(backend: Backend, job: _Job, ctx: Context, warnings: list[str]) -> bool:
    """Whether a topology request may be written for the workload's queue: not where the cluster's queues say that
    its ClusterQueue has no flavor with a Topology (Kueue would never admit it: "Flavor ... does not support
    TopologyAwareScheduling"); its pods are still packed by the class's pod affinity."""
    queues = ctx.cluster.queues
    if queues is None:
        return True  # nothing known: as the class asks
    # the queue it names, else the one Kueue's own defaulting gives a job that names none
    name = job.queue or (KUEUE_DEFAULT_QUEUE if backend.name == "kueue" else None)
    found = queues.find(name, _namespace(job)) if name else None
    if found is None:
        return False  # no queue will place it: a topology request is read by nobody (or makes it inadmissible)
    if found.topology is not False:
        return True
    warnings.append(f"no topology request written for {backend.name}: {found.detail.partition(':')[0]} has no "
                    f"flavor with a Topology (topology-aware scheduling), which would leave the job never admitted; "
                    f"its pods are packed by pod affinity instead")
    return False


def _apply(editor: Editor, base: Path, write: Write, value: Any, required: bool, *, spec_base: Path | None) -> bool:
    """Write ``value`` at ``base`` (metadata under it, or a field under ``spec_base``), never over what is there."""
    if write.label:
        return editor.setdefault((*base, "metadata", "labels", write.label), str(value))
    if write.annotation:
        key = write.required_annotation if required and write.required_annotation else write.annotation
        others = {write.annotation, write.required_annotation} - {key, None}
        notes = podview.as_dict(editor.get((*base, "metadata", "annotations")))
        if any(other in notes for other in others):  # the user chose the other (required, preferred) form
            return False
        return editor.setdefault((*base, "metadata", "annotations", key), str(value))
    assert write.field_path is not None
    path = parse_path(write.field_path)
    if spec_base is not None:
        if path[:1] != ("spec",):
            return False
        path = (*spec_base, *path[1:])
    else:
        path = (*base, *path)
    current = editor.get(path)
    # what the API server filled in before admission is no choice of the user's: a pod template's schedulerName
    # defaults to default-scheduler, a Job's suspend to false (Kueue's own webhook replaces it too)
    if current is None or (write.intent == "schedulerName" and current == DEFAULT_SCHEDULER) or \
            (write.intent == "suspend" and current is False):
        editor.set(path, value)
        return True
    return False


def _tolerate_in_template(editor: Editor, base: Path, profile: Profile, ctx: Context) -> None:
    """The GPU taints of the job's nodes tolerated, and a model named only by annotation pinned, in a template that
    asks for a topology: a topology-aware queue (Kueue's TAS) places the job from its templates, before any pod
    exists, and leaves it unplaced where the template does not tolerate the nodes' taints or does not say which
    nodes its model is on (the pods would get both only at their CREATE)."""
    wanted = placement.gpu_tolerations(profile, ctx, ctx.target_of(profile.model)) if ctx.rules.mutation.gpu_tolerations \
        else []
    added = placement.uncovered(editor.get((*base, "spec", "tolerations")), wanted)
    if added:
        editor.extend((*base, "spec", "tolerations"), added)
    model = profile.model
    if model is not None and profile.hints.gpu_model and profile.pinned_model is None and not profile.is_mig:
        pin = placement.model_pin(ctx, model)
        if pin is not None:
            editor.setdefault((*base, "spec", "nodeSelector", pin[0]), pin[1])


def _queued_by_owner(obj: Mapping[str, Any], backend: Backend) -> bool:
    """Whether the controller of ``obj`` is a kind the backend queues by name (a JobSet's Jobs: Kueue queues the
    JobSet and makes no Workload of its Jobs, so words on them are noise)."""
    for owner in podview.owners(obj):
        if not owner.get("controller"):
            continue
        group, kind = str(owner.get("apiVersion", "")).rpartition("/")[0], str(owner.get("kind", ""))
        # only a kind the backend names: one whose words reach every kind (KAI reads the top owner) says nothing
        if any(w.intent == "queue" and w.kinds for w in backend.writes_on("owner", group, kind)):
            return True
    return False


def _trial_owned(obj: Mapping[str, Any]) -> bool:
    """A Katib trial's own object (its Job or PyTorchJob), created by the trial controller: class hpo."""
    return any(o.get("kind") == "Trial" for o in podview.owners(obj))


def owner_mutation(obj: Mapping[str, Any], *, group: str, kind: str, templates: list[Template],
                   ctx: Context) -> OwnerMutation:
    """The backend's writes on an owner of the kinds table and on each of its pod templates, at its CREATE."""
    result = OwnerMutation()
    backend = ctx.rules.scheduler.backend
    if not ctx.rules.scheduler.active or not templates:
        return result
    elsewhere = ctx.rules.scheduler.scheduled_elsewhere(group, kind)
    if elsewhere is not None:
        result.warnings.append(f"{kind} ({group}) is always scheduled by {elsewhere}, not {backend.name}: no "
                               f"{backend.name} queue, priority or gang is written on it (scheduler.ownScheduler)")
        return result
    if _queued_by_owner(obj, backend):
        return result  # the owner is the workload the backend reads (a JobSet's Jobs): its words are there
    pods = [dict(t.pod) for t in templates]
    if _trial_owned(obj):
        for pod in pods:
            pod["metadata"] = {**pod["metadata"], "annotations": {
                "ai-admission.io/workload-type": "hpo", **podview.string_map(pod["metadata"].get("annotations"))}}
    profiles = [build_profile(pod, ctx, world=t.world) for pod, t in zip(pods, templates, strict=True)]
    name = str(podview.metadata(obj).get("name") or podview.metadata(obj).get("generateName") or "")
    total = sum(t.replicas for t, p in zip(templates, profiles, strict=True) if p.gpu_count) or 1
    job = _job_of(profiles, name, total)
    if job is None:
        return result
    editor = Editor(dict(obj))
    warnings: list[str] = []
    queued = False
    for write in backend.writes_on("owner", group, kind):
        if write.multi_node_only and not job.multi_node:
            continue
        if write.intent == "suspend" and not queued:
            continue  # Kueue suspends what it queues: only a workload with a queue
        value, required = _value(write, backend, job, ctx, warnings)
        if value is not None:
            _apply(editor, (), write, value, required, spec_base=None)
        if write.intent == "queue" and _written(editor.doc, write):
            queued = True
    template_writes = backend.writes_on("template", group, kind)
    runtime_patch: dict[str, Any] = {}
    queue = _queue_of(editor.doc, [], backend, group, kind)
    for template, profile in zip(templates, profiles, strict=True):
        pod_job = _Job(workload=job.workload, profile=profile if profile.gpu_count else job.profile, name=job.name,
                       pods=job.pods, multi_node=job.multi_node,
                       queue=queue or _queue_of({}, [template.pod], backend, group, kind))
        for write in template_writes:
            if write.multi_node_only and not job.multi_node:
                continue
            value, required = _value(write, backend, pod_job, ctx, warnings)
            if value is None:
                continue
            if kind == "TrainJob" and group == "trainer.kubeflow.org":
                _runtime_patch(runtime_patch, write, value, required, warnings)
            elif template.form == BUILT or template.generic:
                warnings.append(f"{template.path}: {kind} builds its pods from fields of its own, so the {write.where} "
                                f"({backend.name} {write.intent}) is set on its pods when they are created")
            elif template.form == POD_SPEC:
                if write.field_path is None:
                    warnings.append(f"{template.path} is a bare pod spec: the {write.where} ({backend.name} "
                                    f"{write.intent}) is set on its pods when they are created")
                    continue
                _apply(editor, (), write, value, required, spec_base=parse_path(template.path))
            else:
                base = parse_path(template.path)
                if _apply(editor, base, write, value, required, spec_base=(*base, "spec")) and \
                        write.intent == "topology" and profile.gpu_count:
                    _tolerate_in_template(editor, base, profile, ctx)
    if runtime_patch:
        _add_runtime_patch(editor, runtime_patch)
    result.patch = editor.ops
    result.warnings = list(dict.fromkeys(warnings))
    return result


def _runtime_patch(patch: dict[str, Any], write: Write, value: Any, required: bool, warnings: list[str]) -> None:
    """A TrainJob's pod template is its runtime's: labels and annotations go in this webhook's runtimePatches
    entry (kubeflow/trainer RuntimePatch, listMapKey manager); a pod field (schedulerName) cannot be patched there
    and belongs in the runtime."""
    if write.field_path is not None:
        warnings.append(f"a TrainJob's pods take their {write.field_path} from the runtime: set it there "
                        f"({write.intent} {value})")
        return
    meta = patch.setdefault("labels" if write.label else "annotations", {})
    key = write.label or (write.required_annotation if required and write.required_annotation else write.annotation)
    assert key is not None
    meta.setdefault(key, str(value))


def _add_runtime_patch(editor: Editor, metadata: Mapping[str, Any]) -> None:
    existing = podview.as_list(editor.get(("spec", "runtimePatches")))
    if any(isinstance(p, dict) and p.get("manager") == RUNTIME_PATCH_MANAGER for p in existing):
        return  # this webhook's entry is there already (an entry's manager is immutable)
    entry = {"manager": RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": dict(metadata)}}}}]}}}}
    editor.append(("spec", "runtimePatches"), entry)


def pod_writes(pod: Mapping[str, Any], profile: Profile, ctx: Context, editor: Editor, warnings: list[str],
               job_label: tuple[str, str] | None) -> None:
    """The backend's writes on a pod at its CREATE: a plain pod (no owner) takes the ``pod`` writes; a pod with an
    owner takes the ``template`` writes the scheduler reads from pods (``readFromPods``) that its owner's template
    did not carry (a kind that builds its pods from its own fields, an owner created before the backend was chosen),
    so that a pod whose owner was mutated gets nothing twice."""
    backend = ctx.rules.scheduler.backend
    if not ctx.rules.scheduler.active or profile.workload == "none":
        return
    owner = next((o for o in podview.owners(pod) if o.get("controller")), None) or next(iter(podview.owners(pod)), None)
    if owner is None:
        writes = backend.writes_on("pod", "", "Pod")
    else:  # only what the scheduler reads from each pod: a template's topology annotation is read once, by Kueue
        owner_group = str(owner.get("apiVersion", "")).rpartition("/")[0]
        if ctx.rules.scheduler.scheduled_elsewhere(owner_group, str(owner.get("kind", ""))):
            return  # said at the owner's CREATE
        writes = [w for w in backend.writes_on("template", owner_group, str(owner.get("kind", ""))) if w.read_from_pods]
    job = _Job(workload=profile.workload, profile=profile, name=job_label[1] if job_label else "",
               pods=profile.world.pods, multi_node=profile.multi_node)
    for write in writes:
        if write.multi_node_only and not job.multi_node:
            continue
        if write.intent == "podGroup" and not job.name:
            continue
        if write.intent == "topology":
            job = replace(job, queue=_queue_of(editor.doc, [editor.doc], backend, "", "Pod"))
        value, required = _value(write, backend, job, ctx, warnings)
        if value is not None:
            _apply(editor, (), write, value, required, spec_base=("spec",))


# -- validation against the backend -----------------------------------------------------------------------------

def _written(obj: Mapping[str, Any], write: Write) -> str | None:
    """The value a backend reads at ``write``'s place in ``obj`` (a label, an annotation, a field from the root:
    an owner's ``spec.queue``, a pod's ``spec.schedulerName``)."""
    if write.label:
        return podview.labels(obj).get(write.label)
    if write.annotation:
        return podview.annotation_map(obj).get(write.annotation)
    assert write.field_path is not None
    value = dig(obj, write.field_path)
    return value if isinstance(value, str) else None


def _queue_of(obj: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], backend: Backend, group: str,
              kind: str) -> str | None:
    """The queue the backend reads for this workload: on the owner, else on its pods (a template's, a plain pod)."""
    pods = list(pods)
    for write in backend.writes:
        if write.intent != "queue":
            continue
        if write.on == "owner":
            found = _written(obj, write) if write.applies_to(group, kind) else None
        else:
            found = next((q for pod in pods if (q := _written(pod, write))), None)
        if found:
            return found
    return None


def backend_findings(obj: Mapping[str, Any], *, group: str, kind: str, pods: list[Mapping[str, Any]],
                     profiles: list[Profile], replicas: list[int], ctx: Context, namespace: str) -> list[Finding]:
    """A workload (an owner with its templates' pods, or one plain pod) held to the backend and its queues."""
    found: list[Finding] = []
    priorities = {str(p) for pod in pods if (p := podview.spec(pod).get("priorityClassName"))}
    if len(priorities) > 1:
        found.append(deny("job-priorities-differ",
                          f"the pods of one job name different PriorityClasses ({', '.join(sorted(priorities))}): a "
                          f"scheduler that preempts by priority can take some of them and leave the rest waiting for "
                          f"peers; give every template the same priorityClassName (or none: the class's is set)"))
    backend = ctx.rules.scheduler.backend
    if not ctx.rules.scheduler.active:
        return found
    gpus = sum(p.gpu_count * r for p, r in zip(profiles, replicas, strict=True))
    found += _topology_findings(obj, pods, profiles, gpus, ctx, group, kind)
    queues = ctx.cluster.queues
    if queues is None:
        return found
    queue_name = _queue_of(obj, pods, backend, group, kind)
    if backend.name == "coscheduling":
        group_name = next((g for pod in pods if (g := podview.labels(pod).get("scheduling.x-k8s.io/pod-group"))), None)
        if group_name and queues.find(group_name, namespace) is None:
            found.append(warn("queue-not-found", f'PodGroup "{group_name}" does not exist in namespace "{namespace}": '
                                                 f"the pods wait until it does (ai-admission creates none); create it "
                                                 f"with minMember {sum(replicas)}"))
        return found
    if not queue_name:
        return found
    queue = queues.find(queue_name, namespace)
    where = f' in namespace "{namespace}"' if queues.namespaced else ""
    if queue is None:
        known = queues.names(namespace)
        found.append(deny("queue-not-found",
                          f'{backend.name} {queues.kind} "{queue_name}" does not exist{where}, so the workload would '
                          f"never be admitted; name one of: {', '.join(known) or 'none exist'} (or create it)"))
        return found
    if not queue.open:
        found.append(deny("queue-not-found", f'{backend.name} {queues.kind} "{queue_name}" is not open ({queue.detail}): '
                                             f"it takes no workloads; name an open one"))
    protected = any(not p.preemptible for p in profiles if p.gpu_count)
    limit = queue.gpu_quota if backend.name == "kai" and protected and queue.gpu_quota is not None else queue.gpu_limit
    if gpus and limit is not None and Decimal(gpus) > limit:
        found.append(deny("gang-exceeds-quota",
                          f"the job asks for {gpus} GPUs in all, more than {backend.name} {queues.kind} "
                          f'"{queue_name}" can ever give ({limit.normalize():f}: {queue.detail}); ask for fewer GPUs or '
                          f"name a queue with more quota"))
    return found


def _required_level(obj: Mapping[str, Any], pods: list[Mapping[str, Any]], backend: Backend, group: str,
                    kind: str) -> tuple[str, str] | None:
    """(annotation, level key) of a required topology the workload names in the backend's vocabulary."""
    for write in backend.writes:
        if write.intent != "topology" or not write.required_annotation:
            continue
        if write.on == "owner":
            sources = [obj] if write.applies_to(group, kind) else []
        else:
            sources = pods
        for source in sources:
            level = podview.annotation_map(source).get(write.required_annotation)
            if level:
                return write.required_annotation, level
    return None


def _topology_findings(obj: Mapping[str, Any], pods: list[Mapping[str, Any]], profiles: list[Profile], gpus: int,
                       ctx: Context, group: str, kind: str) -> list[Finding]:
    """A required topology level no domain of which can hold the job: the scheduler would keep it pending forever.
    Judged only where the GPU nodes are known (the server's node watch, ``check --cluster``)."""
    required = _required_level(obj, pods, ctx.rules.scheduler.backend, group, kind)
    asking = next((p for p in profiles if p.gpu_count and p.model is not None), None)
    if required is None or asking is None or not gpus:
        return []
    target = ctx.target_of(asking.model)
    if target is None:
        return []
    annotation, key = required
    level = target.level(key)
    if level is None:
        return [deny("gang-exceeds-topology",
                     f"{annotation}: {key} is required, but no {asking.model.name if asking.model else 'GPU'} node "
                     f"carries the label {key}, so the job would never be placed; require a level the nodes carry "
                     f"({', '.join(lv.key for lv in target.levels) or 'none'}) or ask for it as preferred")]
    if gpus > level.largest:
        return [deny("gang-exceeds-topology",
                     f"{annotation}: {key} is required, but the job's {gpus} GPUs do not fit in any one {key} domain "
                     f"(the largest holds {level.largest}), so it would never be placed; require a broader level or "
                     f"ask for it as preferred")]
    return []
