"""What a job's PodGroup holds, who makes it, and what a pod is told where it cannot be grouped.

Two makers, never both for one pod:

- the **Job controller** makes a Workload and a gang PodGroup (``minCount``: the parallelism) for an Indexed Job
  whose completions equal its parallelism, and names the group on the pods itself; it copies nothing else.
  ai-admission gives that group, at its CREATE, what the profile of the Job's template knows
  (`job_group_patch`): the topology level, the class's PriorityClass, the disruption mode. Every field of a
  PodGroup's spec is immutable in v1alpha2, so that is the one chance.
- **ai-admission's group controller** (`webhook.cluster.pod_groups`) makes the group of a job of the other
  training kinds (`JOB_KINDS`: the owners whose operator creates the pods, and JobSets, whose pods are their
  Jobs' and name the JobSet by label) and of each group of a LeaderWorkerSet (multi-node serving), owned by the
  job, with ``minCount`` the pods that join it as the job's
  templates count them (`joining_pods`); /mutate names it on each multi-node GPU pod of such a job (`join_group`),
  by a name derived from the job alone (`group_name`), so the pod and the controller agree without asking each
  other.

A pod that names a group that does not exist waits, with no event, until it does. So /mutate names a group only
while the group controller is in service (its Lease renewed lately); otherwise the pod is scheduled as before and
told why (fail open). A group whose count cannot be known (the job is gone, or not one of ours) is made with the
basic policy (`BASIC`): its pods are scheduled one by one, as without a group, never left waiting. The version
the cluster serves decides the body's shape (`podgroup_body`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .. import placement, podview
from ..context import Context
from ..findings import Finding, deny, warn
from ..profile import Profile, build_profile
from ..workloads.kinds import group_of, templates_of
from ..workloads.templates import Resolver
from .support import MANAGED_BY, MANAGED_BY_LABEL, POD_GROUP_LABEL, PodGroupApi, PodGroupSupport

JOB = ("batch", "Job")  # the Job controller groups its own (Indexed, completions == parallelism)
DEFAULT_SCHEDULER = "default-scheduler"
NAME_LIMIT = 44  # of the job's name in the group's: the whole stays a label value (63)


@dataclass(frozen=True)
class JobRef:
    """The object a job's pods are grouped by: the owner reference of the group ai-admission makes."""

    api_version: str
    kind: str
    name: str
    uid: str       # "" where the pods do not carry it (a LeaderWorkerSet's): the controller reads it from the job
    part: str = ""  # one group of the job's pods, where a job has several (a LeaderWorkerSet's group index)

    @property
    def key(self) -> tuple[str, str]:
        return group_of(self.api_version), self.kind

    def reference(self) -> dict[str, Any]:
        """Owned, not controlled: the job's operator never adopts or fights the group; the garbage collector
        deletes it with the job."""
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


@dataclass(frozen=True)
class Labelled:
    """A kind whose pods belong to Jobs it creates (the Job is their controller) and name it by two labels."""

    api_version: str
    kind: str
    name_label: str
    uid_label: str


# The owners whose operator creates the pods itself (the pod's controller is the job): Kubeflow's training
# operator (kubeflow/training-operator pkg/controller.v1), Volcano's Job controller when the default scheduler
# runs its pods, KubeRay's RayCluster (a RayJob's pods are its cluster's).
OWNED_KINDS: frozenset[tuple[str, str]] = frozenset({
    *(("kubeflow.org", kind) for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")),
    ("batch.volcano.sh", "Job"), ("ray.io", "RayCluster"),
})
# JobSet's pods are its child Jobs' (kubernetes-sigs/jobset: the controller labels the Jobs and their pods with the
# JobSet's name and uid); a Kubeflow TrainJob runs as a JobSet of its runtime, so its pods are grouped here too.
LABELLED_KINDS: tuple[Labelled, ...] = (
    Labelled("jobset.x-k8s.io/v1alpha2", "JobSet", "jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/jobset-uid"),
)
# A LeaderWorkerSet's pods are its groups' (kubernetes-sigs/lws pkg/controllers: the leader StatefulSet makes each
# group's leader, a StatefulSet per leader its workers; every pod is labelled with the set's name and its group's
# index): each group, leader and workers, is served by all of them at once, so each is a gang of its own.
LWS = ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
JOB_KINDS: frozenset[tuple[str, str]] = OWNED_KINDS | {(group_of(k.api_version), k.kind) for k in LABELLED_KINDS} | {LWS}


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference with ``controller: true``."""
    return next((o for o in podview.owners(obj) if o.get("controller") is True), None)


def job_of(pod: Mapping[str, Any]) -> JobRef | None:
    """The job a pod of a training kind belongs to: its controller where that is the job, else the object its
    labels name (a JobSet's child Job's pod); None for any other pod."""
    owner = controller_of(pod)
    if owner is None:
        return None
    api_version, kind = str(owner.get("apiVersion") or ""), str(owner.get("kind") or "")
    if (group_of(api_version), kind) in OWNED_KINDS:
        return JobRef(api_version, kind, str(owner.get("name") or ""), str(owner.get("uid") or ""))
    labels = podview.labels(pod)
    if (group_of(api_version), kind) == JOB:
        for labelled in LABELLED_KINDS:
            name, uid = labels.get(labelled.name_label), labels.get(labelled.uid_label)
            if name and uid:
                return JobRef(labelled.api_version, labelled.kind, name, uid)
    if (group_of(api_version), kind) == ("apps", "StatefulSet") and labels.get(LWS_NAME) and labels.get(LWS_GROUP):
        return JobRef(LWS_API_VERSION, LWS[1], labels[LWS_NAME], "", part=labels[LWS_GROUP])
    return None


def group_name(job: JobRef) -> str:
    """The group of a job's pods: its name (cut) and a digest of its uid, a DNS subdomain and a label value
    (the pods carry it as `POD_GROUP_LABEL`). From the job alone, so /mutate and the controller derive the same."""
    name = job.name.lower()[:NAME_LIMIT].rstrip("-.") or "job"
    if job.part:  # one of the job's groups: named for it too
        name = f"{name[:NAME_LIMIT - len(job.part) - 1]}-{job.part}".lower()
        digest = hashlib.sha256(f"{job.kind}/{job.name}/{job.part}".encode()).hexdigest()[:10]
    else:
        digest = hashlib.sha256(f"{job.kind}/{job.uid or job.name}".encode()).hexdigest()[:10]
    return f"{name}-gang-{digest}"


@dataclass(frozen=True)
class GroupPlan:
    """What a job's group holds; ``min_count`` None: the basic policy (no gang); ``notes``: what could not be
    written, for the user."""

    min_count: int | None
    topology_key: str | None = None
    priority_class: str | None = None
    disruption_mode: str | None = None
    notes: tuple[str, ...] = ()


BASIC = GroupPlan(min_count=None)  # a group whose count is not known: its pods are scheduled as without one


def groups_class(profile: Profile, ctx: Context) -> bool:
    """A pod (or template) with GPUs of a class that is scheduled as a gang on the default scheduler, that does
    not opt out (annotation ``ai-admission.io/gang: "false"``)."""
    settings = ctx.rules.classes.get(profile.workload)
    return bool(profile.gpu_count and settings is not None and settings.mutate.pod_group is not None
                and profile.hints.gang is not False)


def plan_of(profile: Profile, ctx: Context, api: PodGroupApi, *, pods: int) -> GroupPlan | None:
    """The group of a job of ``pods`` pods like ``profile``'s (one of them, or its template's); None when its
    class has no group (`PodGroupSpec`) or a queueing backend places it."""
    settings = ctx.rules.classes.get(profile.workload)
    spec = settings.mutate.pod_group if settings is not None else None
    if spec is None or settings is None or ctx.rules.scheduler.active:
        return None
    notes: list[str] = []
    key = None
    if spec.topology:
        affinity = settings.mutate.pod_affinity
        wanted = placement.packing_key(ctx.target_of(profile.model), profile, affinity.topology_key if affinity else None, notes)
        if wanted is not None and not api.topology:
            notes.append(f"the group is not held to one {wanted} domain: the cluster keeps no topology constraint "
                         f"on a PodGroup (feature gate TopologyAwareWorkloadScheduling)")
        key = wanted if api.topology else None
    chosen = settings.priority_for(profile.preemptible)  # as the pods get it (`webhook.core.mutate.set_priority`)
    priority = chosen.name if chosen else None
    if priority is not None and priority in ctx.cluster.priority_classes.missing_priority_classes:
        priority = None  # the API server refuses a group naming a class that is not there (the pods are told)
    disruption: str | None = spec.disruption_mode
    if not api.preemption and (priority is not None or disruption != "Pod"):
        notes.append("the group carries no PriorityClass or disruption mode: the cluster keeps neither on a PodGroup "
                     "(feature gate WorkloadAwarePreemption); its pods still carry the class's PriorityClass")
        priority, disruption = None, None
    return GroupPlan(min_count=max(pods, 1), topology_key=key, priority_class=priority, disruption_mode=disruption,
                     notes=tuple(notes))


def _job_controller_groups(job_spec: Mapping[str, Any]) -> bool:
    """Whether the Job controller makes this Job's group itself (v1.36 pkg/controller/job/job_scheduling_manager.go
    `shouldManageWorkloadForJob`): then its pods arrive naming that group, and join no other."""
    parallelism, completions = job_spec.get("parallelism"), job_spec.get("completions")
    template = podview.as_dict(podview.as_dict(job_spec.get("template")).get("spec"))
    return (job_spec.get("completionMode") == "Indexed" and isinstance(parallelism, int) and parallelism > 1
            and completions == parallelism and "schedulingGroup" not in template)


def _counted(job: Mapping[str, Any]) -> Iterable[tuple[str, int]]:
    """Each template path of a job with the pods it makes that ai-admission may group: a JobSet's replicated Jobs
    that the Job controller groups itself are left out (their pods name that group)."""
    if job.get("kind") == "JobSet":
        for index, replicated in enumerate(podview.as_list(podview.as_dict(job.get("spec")).get("replicatedJobs"))):
            replicated = podview.as_dict(replicated)
            job_spec = podview.as_dict(podview.as_dict(replicated.get("template")).get("spec"))
            if _job_controller_groups(job_spec):
                continue
            replicas = replicated.get("replicas", 1)
            parallelism = job_spec.get("parallelism", 1)
            if isinstance(replicas, int) and isinstance(parallelism, int):
                yield f"spec.replicatedJobs[{index}]", replicas * parallelism
        return
    yield "", -1  # every template, with its own count


def joining_pods(job: Mapping[str, Any], ctx: Context) -> tuple[int, Profile] | None:
    """How many of a job's pods join its group, and the profile of the first of them: the pods of each template
    with GPUs of a class that has a group and that is multi-node, as /mutate judges the pods (`join_group`); None
    when none would."""
    counted = dict(_counted(job))
    total, world, first = 0, 0, None
    for template in templates_of(job, ctx=ctx) or []:
        prefix = next((p for p in counted if p and template.path.startswith(p + ".")), "" if "" in counted else None)
        if prefix is None:
            continue
        profile = build_profile(template.pod, ctx, world=template.world)
        if not (groups_class(profile, ctx) and profile.multi_node):
            continue
        total += template.replicas if counted[prefix] < 0 else counted[prefix]
        if counted[prefix] < 0:  # no world: the template's pods are a job of one
            world = max(world, template.world.pods if template.world is not None else 1)
        first = first or profile
    if world:  # a template's replicas count 1 where it says 0; the job's world is what its operator makes
        total = min(total, world)
    return (total, first) if first is not None and total > 1 else None


def group_spec(api: PodGroupApi, plan: GroupPlan) -> dict[str, Any]:
    if plan.min_count is None:
        return {"schedulingPolicy": {"basic": {}}}
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": plan.min_count}}}
    if plan.topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": plan.topology_key}]}
    if plan.priority_class is not None:
        spec["priorityClassName"] = plan.priority_class
    if plan.disruption_mode is not None:
        spec["disruptionMode"] = _disruption(api, plan.disruption_mode)
    return spec


def _disruption(api: PodGroupApi, mode: str) -> Any:
    """``disruptionMode`` as the version writes it: a string in v1alpha2 (``Pod``, ``PodGroup``); a one-member union
    in v1beta1 (``single``, ``all``: kubernetes staging/src/k8s.io/api/scheduling/v1beta1/types.go)."""
    if api.version == "v1alpha2":
        return mode
    return {"all": {}} if mode == "PodGroup" else {"single": {}}


def podgroup_body(api: PodGroupApi, *, name: str, namespace: str, job: JobRef, plan: GroupPlan) -> dict[str, Any]:
    """The PodGroup the controller creates: owned by the job, labelled as ai-admission's."""
    return {"apiVersion": api.api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {MANAGED_BY_LABEL: MANAGED_BY, POD_GROUP_LABEL: name},
                         # no owner where its uid could not be read (the job is gone): nothing to be deleted with
                         **({"ownerReferences": [job.reference()]} if job.uid else {})},
            "spec": group_spec(api, plan)}


def job_group_patch(podgroup: Mapping[str, Any], api: PodGroupApi, plan: GroupPlan) -> list[dict[str, Any]]:
    """What the Job controller's PodGroup gets at its CREATE, where its spec lacks it. The Priority admission plugin
    ran before the webhook and set ``spec.priority`` from no class; with a class named, it must go: the API server
    runs the plugin again after a webhook's change, and it refuses a priority that is not its class's."""
    spec = podview.as_dict(podgroup.get("spec"))
    ops: list[dict[str, Any]] = []
    if plan.topology_key is not None and not spec.get("schedulingConstraints"):
        ops.append({"op": "add", "path": "/spec/schedulingConstraints",
                    "value": {"topology": [{"key": plan.topology_key}]}})
    if plan.priority_class is not None and not spec.get("priorityClassName"):
        ops.append({"op": "add", "path": "/spec/priorityClassName", "value": plan.priority_class})
        if "priority" in spec:
            ops.append({"op": "remove", "path": "/spec/priority"})
    if plan.disruption_mode is not None and spec.get("disruptionMode") != _disruption(api, plan.disruption_mode):
        ops.append({"op": "add", "path": "/spec/disruptionMode", "value": _disruption(api, plan.disruption_mode)})
    return ops


def for_job_controllers_group(podgroup: Mapping[str, Any], jobs: Resolver, ctx: Context, api: PodGroupApi,
                              ) -> tuple[Profile, list[dict[str, Any]], tuple[str, ...]] | None:
    """What a PodGroup the Job controller creates is given at its CREATE, from its Job's template (``jobs`` finds
    the Job): the profile, the patch (`job_group_patch`) and what the user is told; None for a group of anyone else
    (ai-admission's own are made whole; a user's are the user's), a Job not known or not the group's owner (its
    uid), or one whose pods are not a multi-node training job's."""
    owner = controller_of(podgroup)
    if is_ours(podgroup) or owner is None or (group_of(str(owner.get("apiVersion") or "")), owner.get("kind")) != JOB:
        return None
    job = jobs("Job", str(owner.get("name") or ""), str(podview.metadata(podgroup).get("namespace") or ""))
    if job is None or podview.metadata(job).get("uid") != owner.get("uid"):
        return None
    template = next(iter(templates_of(job, ctx=ctx, group="batch", kind="Job") or []), None)
    if template is None:
        return None
    profile = build_profile(template.pod, ctx, world=template.world)
    if not (groups_class(profile, ctx) and profile.multi_node):
        return None
    count = podview.as_dict(podview.as_dict(podview.as_dict(podgroup.get("spec")).get("schedulingPolicy"))
                            .get("gang")).get("minCount")
    plan = plan_of(profile, ctx, api, pods=count if isinstance(count, int) else profile.world.pods)
    if plan is None:
        return None
    ops = job_group_patch(podgroup, api, plan)
    return (profile, ops, plan.notes) if ops or plan.notes else None


def is_ours(podgroup: Mapping[str, Any]) -> bool:
    return podview.labels(podgroup).get(MANAGED_BY_LABEL) == MANAGED_BY


def join_group(pod: Mapping[str, Any], support: PodGroupSupport) -> tuple[str | None, str | None]:
    """For a multi-node GPU pod of a class with a group, on the default scheduler: (the group it joins, or None;
    what the user is told instead, or None). Nothing where the cluster serves no PodGroups or the pod names a group
    already (its own, or the Job controller's, which sets it at the pod's creation)."""
    spec = podview.spec(pod)
    if not support.served or "schedulingGroup" in spec:
        return None, None
    if spec.get("schedulerName") not in (None, "", DEFAULT_SCHEDULER):
        return None, None  # another scheduler places it (Volcano's Jobs): its groups are its own
    owner = controller_of(pod)
    if owner is None:
        return None, ("not scheduled as a gang: a multi-node pod with no owner has no job to be grouped with "
                      "(create its pods from a Job, a PyTorchJob, an MPIJob or another training kind)")
    job = job_of(pod)
    if job is None:
        if (group_of(str(owner.get("apiVersion") or "")), owner.get("kind")) == JOB:
            return None, None  # the Job controller's, or the Job was told at its creation why it is not grouped
        return None, (f"not scheduled as a gang: ai-admission groups the pods of "
                      f"{', '.join(sorted({k for _, k in JOB_KINDS}))} on the default scheduler; "
                      f"a {owner.get('kind')}'s are not")
    if not support.controller:
        return None, ("not scheduled as a gang: ai-admission's PodGroup controller is not running (its Lease "
                      "has not been renewed), so the pod is scheduled alone rather than wait for a group nobody "
                      "makes")
    return group_name(job), None


def job_grouping_finding(obj: Mapping[str, Any], *, multi_node: bool, support: PodGroupSupport) -> Finding | None:
    """A multi-node training Job the Job controller will not group, on a cluster that serves PodGroups: what to
    change so it is scheduled all or nothing."""
    if not support.served or not multi_node:
        return None
    spec = podview.as_dict(obj.get("spec"))
    template_spec = podview.as_dict(podview.as_dict(spec.get("template")).get("spec"))
    if "schedulingGroup" in template_spec:
        return None  # its groups are the user's
    parallelism, completions = spec.get("parallelism"), spec.get("completions")
    wanted = []
    if spec.get("completionMode") != "Indexed":
        wanted.append("completionMode: Indexed")
    if not isinstance(parallelism, int) or parallelism <= 1:
        wanted.append("parallelism above 1")
    if completions != parallelism:
        wanted.append("completions equal to parallelism")
    if not wanted:
        return None
    return warn("job-not-grouped", f"the Job's pods are not scheduled as a gang (all or nothing): the Job controller "
                                   f"groups a Job only with {', '.join(wanted)}")


def never_whole(profile: Profile, ctx: Context) -> Finding | None:
    """A multi-node job of a model the nodes have that asks for more GPUs than all of them hold, or (the class's
    podAffinity required) than the largest domain of any topology level: it can never be placed whole."""
    model = profile.model
    if ctx.nodes is None or model is None or not profile.gpu_count or not profile.multi_node \
            or profile.world.pods <= 1:
        return None
    target = ctx.nodes.placement.get(model.name)
    if target is None:
        return None  # no node has the model: gpu-model-not-in-cluster says so
    job, pods = profile.job_gpus, profile.world.pods
    asked = f"the job asks for {job} GPUs ({pods} pods of {profile.gpu_count})"
    message = None
    if job > target.gpus:
        message = (f"{asked}, more than the cluster's {target.nodes} {model.name} nodes hold together "
                   f"({target.gpus}): it can never run whole; ask for fewer pods or GPUs, or add nodes")
    else:
        settings = ctx.rules.classes.get(profile.workload)
        affinity = settings.mutate.pod_affinity if settings is not None else None
        if affinity is not None and affinity.required and affinity.topology_key is None \
                and (target.levels or target.nvlink) and placement.pack_level(target, job) is None:
            broadest = target.levels[0] if target.levels else target.nvlink
            assert broadest is not None
            message = (f"{asked}, more than the largest {broadest.key} domain of its nodes holds ({broadest.largest}), "
                       f"and its class packs a job into one (podAffinity required): it can never be placed")
    if message is None:
        return None
    if ctx.rules.node_catalog.job_beyond_nodes == "deny":
        return deny("job-never-fits", message)
    return warn("job-never-fits", message)
