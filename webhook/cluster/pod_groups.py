"""The Workload API as the cluster serves it, the Jobs the Job controller groups, and ai-admission's own group
controller (`webhook.core.podgroups`).

- `discover`: the version of ``scheduling.k8s.io`` that serves ``podgroups`` (v1beta1 first, then v1alpha2), and
  which gated fields a PodGroup keeps, found by a dry-run create (a field of a gate that is off is dropped without
  a word). Nothing of the gang is written where no version serves them.
- `PodGroupWatch` (every worker): the discovery again every few minutes, the group controller's Lease read at each
  poll (in service: renewed within its duration), and a watch of the Jobs (only where PodGroups are served), so
  that a Job controller's PodGroup is given what its Job's template says at its CREATE with no API call.
- `PodGroupController` (one writer: the worker holding its lock file, the replica holding its Lease): makes the
  group each pod labelled `POD_GROUP_LABEL` names, where it does not exist, owned by the pod's job (so it is
  deleted with the job), its count the pods that join it as the job's templates say (the kinds table reads them).
  A pod that names a group waits for it with no event: /mutate names one only while this controller's Lease is
  renewed, and the controller makes the groups of pods named while it was away as soon as it is back. A group
  whose job cannot be read is made with the basic policy, and a gang whose pods stopped arriving short of its
  count is made again with the pods that came: no pod waits forever for what will not come.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
from typing import Any, Callable, Mapping

from webhook.core import podview
from webhook.core.context import Context
from webhook.core.podgroups.plan import BASIC, GroupPlan, JobRef, job_of, joining_pods, plan_of, podgroup_body
from webhook.core.podgroups.support import GROUP, NOT_KNOWN, POD_GROUP_LABEL, RESOURCE, VERSIONS, PodGroupApi, PodGroupSupport
from webhook.core.workloads.kinds import KINDS

from . import client as kube
from .background import Poller, ProblemLog
from .informer import Api, Informer, ObjectStore, Observer, api_calls
from .lease import Lease, renewed_lately
from .worker_lock import WorkerLock

log = logging.getLogger("ai_admission")
LEASE = "ai-admission-pod-groups"
LOCK_FILE = "ai-admission-pod-groups.lock"
PROBE = "ai-admission-probe"
JOBS = "/apis/batch/v1/jobs"
PODS = "/api/v1/pods"
JOB_WAIT_SECONDS = 1.0  # a PodGroup's CREATE waits this long for its Job to reach the watch


def _disruption_probe(version: str) -> Any:
    return "PodGroup" if version == "v1alpha2" else {"all": {}}


def discover(api: Any, namespace: str) -> PodGroupApi | None:
    """The Workload API this cluster serves, with what its gates keep; None where no version serves PodGroups."""
    group = kube.get(api, f"/apis/{GROUP}") or {}
    served = {str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, dict)}
    for version in VERSIONS:
        if version not in served:
            continue
        resources = kube.get(api, f"/apis/{GROUP}/{version}") or {}
        if any(r.get("name") == RESOURCE for r in resources.get("resources") or [] if isinstance(r, dict)):
            return _probe(api, version, namespace)
    return None


def _probe(api: Any, version: str, namespace: str) -> PodGroupApi:
    """A dry-run create of a PodGroup with the gated fields ai-admission writes: what comes back is what is kept."""
    wanted = _disruption_probe(version)
    body = {"apiVersion": f"{GROUP}/{version}", "kind": "PodGroup", "metadata": {"name": PROBE, "namespace": namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}},
                     "schedulingConstraints": {"topology": [{"key": "kubernetes.io/hostname"}]},
                     "disruptionMode": wanted}}
    try:
        made = kube.request(api, "POST", kube.collection(GROUP, version, RESOURCE, namespace),
                            query={"dryRun": "All"}, body=body)
    except kube.KubeError as exc:  # no right to create (RBAC), or the probe's name taken: assume nothing is kept
        log.warning(json.dumps({"msg": "the PodGroup probe failed; no gated field is written", "error": str(exc)}))
        return PodGroupApi(version=version)
    spec = podview.as_dict(podview.as_dict(made).get("spec"))
    kept = podview.as_dict(spec.get("schedulingConstraints")).get("topology")
    return PodGroupApi(version=version, topology=bool(kept), preemption=spec.get("disruptionMode") == wanted)


def slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """What a Job's PodGroup needs of it: its names and uid, labels and annotations, and the spec's counts and
    template (the template judged as the pods it makes)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {"apiVersion": obj.get("apiVersion", "batch/v1"), "kind": "Job",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "annotations") if k in meta},
            "spec": {k: spec[k] for k in ("parallelism", "completions", "completionMode", "template") if k in spec}}


class PodGroupWatch(Poller):
    """What every worker knows of the Workload API (`support`) and of the Jobs (`job`)."""

    def __init__(self, *, namespace: str, interval: float = 5.0, rediscover: float = 300.0,
                 client: Callable[[], Any] = kube.client, api: Callable[[], Api] = api_calls,
                 clock: Callable[[], float] = time.time, observer: Observer | None = None,
                 on_change: Callable[[PodGroupSupport], None] | None = None) -> None:
        super().__init__(name="pod-groups", interval=interval, immediately=True)
        self._namespace = namespace
        self._client = client
        self._calls = api
        self._clock = clock
        self._rediscover = rediscover
        self._observer = observer
        self._api: Any = None
        self._found: PodGroupApi | None = None
        self._discovered_at = float("-inf")
        self._problem = ProblemLog("the Workload API's discovery")
        self.on_change = on_change
        self.support: PodGroupSupport = NOT_KNOWN
        self.jobs = ObjectStore(slim_job)
        self.job_watch: Informer | None = None
        self._lease_path = f"{kube.collection('coordination.k8s.io', 'v1', 'leases', namespace)}/{LEASE}"

    def poll(self) -> PodGroupSupport:
        try:
            if self._api is None:
                self._api = self._client()
            if self._clock() - self._discovered_at >= self._rediscover or not self.support.known:
                self._found = discover(self._api, self._namespace)
                self._discovered_at = self._clock()
            controller = self._found is not None and self._controller_in_service()
            self._problem(None)
        except kube.KubeError as exc:
            self._problem(str(exc))
            if not self.support.known:
                return self.support  # nothing known yet: nothing written, nothing said
            controller = False  # the Lease cannot be read: no group is named
        support = PodGroupSupport(api=self._found, controller=controller, known=True)
        if support != self.support:
            self.support = support
            log.info(json.dumps({"msg": "the Workload API", "version": self._found.version if self._found else None,
                                 "topology": bool(self._found and self._found.topology),
                                 "preemption": bool(self._found and self._found.preemption),
                                 "controllerInService": controller}))
            if self.on_change is not None:
                self.on_change(support)
        if self._found is not None and self.job_watch is None:
            self.job_watch = Informer("jobs", JOBS, self.jobs, self._calls, resync=300.0,
                                      observer=self._observer).start()
        return support

    def _controller_in_service(self) -> bool:
        return renewed_lately(kube.get(self._api, self._lease_path), self._clock())

    def job(self, kind: str, name: str, namespace: str) -> Mapping[str, Any] | None:
        """The Job as the watch last saw it; a moment's wait for one created just now (the Job controller creates
        its PodGroup at once)."""
        if kind != "Job" or self.job_watch is None:
            return None
        deadline = time.monotonic() + JOB_WAIT_SECONDS
        while True:
            found = self.jobs.objects.get((namespace, name))
            if found is not None or time.monotonic() >= deadline or self.job_watch.stopped:
                return found
            time.sleep(0.02)

    def summary(self) -> dict[str, Any]:
        """What `/readyz` shows."""
        api = self.support.api
        return {"served": api.api_version if api else None, "topology": bool(api and api.topology),
                "preemption": bool(api and api.preemption), "controllerInService": self.support.controller,
                **({"jobs": self.job_watch.status.as_dict()} if self.job_watch else {})}

    def stop(self) -> None:
        super().stop()
        if self.job_watch is not None:
            self.job_watch.stop()


def slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What the controller needs of a grouped pod: the group and job it names, and whether it is bound or going."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "labels", "ownerReferences", "deletionTimestamp")
                         if k in meta},
            "spec": {k: spec[k] for k in ("schedulingGroup", "nodeName") if k in spec}}


STALL_SECONDS = 120.0  # a gang short of its count this long, with no pod bound and none arriving, is recounted


def _with_uid(job: JobRef, found: Mapping[str, Any] | None) -> JobRef:
    """``job`` with the uid of the object read (the group's owner reference needs one; a LeaderWorkerSet's pods
    do not carry it)."""
    if job.uid or found is None:
        return job
    return dataclasses.replace(job, uid=str(podview.metadata(found).get("uid") or ""))


class PodGroupController(Poller):
    """Makes the groups the pods name (see the module docstring); ``made`` counts the groups it created and
    ``recounted`` the gangs it made again with the pods that came (a job whose count was not what its pods were)."""

    def __init__(self, context: Callable[[], Context], support: Callable[[], PodGroupSupport], *, namespace: str,
                 interval: float = 5.0, lock_dir: str | None = None, client: Callable[[], Any] = kube.client,
                 api: Callable[[], Api] | None = None, identity: str | None = None,
                 clock: Callable[[], float] = time.time,
                 observer: Observer | None = None, on_made: Callable[[str], None] | None = None,
                 on_recount: Callable[[str], None] | None = None, stall_seconds: float = STALL_SECONDS) -> None:
        super().__init__(name="pod-group-controller", interval=interval, immediately=True)
        self._context = context
        self._support = support
        self._namespace = namespace
        self._client = client
        self._calls = api or (lambda: api_calls(query={"labelSelector": POD_GROUP_LABEL}))
        self._observer = observer
        self._on_made = on_made
        self._on_recount = on_recount
        self._stall = stall_seconds
        self._lock = WorkerLock(LOCK_FILE, "the PodGroups", lock_dir)
        identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self._lease = Lease(namespace, LEASE, identity, duration=max(3 * interval, 15.0), clock=clock)
        self._clock = clock
        self._renewed_at = float("-inf")  # a poll woken by every pod event renews the Lease at most twice an interval
        self._problem = ProblemLog("the PodGroups")
        self._api: Any = None
        # groups seen or made: their gang's count (None: basic, or made by someone else) and when the number of
        # their pods last changed, with that number
        self._known: dict[tuple[str, str], tuple[int | None, float, int]] = {}
        self._guard = threading.Lock()
        self.pods = ObjectStore(slim_pod, on_change=self.wake)
        self.pod_watch: Informer | None = None
        self.made = 0
        self.recounted = 0
        self.last_outcome = "not run"

    def poll(self) -> str:
        with self._guard:
            try:
                self.last_outcome = self._poll()
            except Exception as exc:  # noqa: BLE001 - never let the thread die: the next poll tries again
                self._problem(f"{type(exc).__name__}: {exc}")
                self.last_outcome = "failed"
        return self.last_outcome

    def _poll(self) -> str:
        if not self._lock.held():
            return "another worker makes them"
        api_info = self._support().api
        if api_info is None:
            return "not served"
        if self._api is None:
            self._api = self._client()
        if self._clock() - self._renewed_at >= self._interval / 2:
            try:
                if not self._lease.held(self._api):
                    self._renewed_at = float("-inf")
                    return "another replica makes them"
            except kube.KubeError as exc:
                self._problem(str(exc))
                return "failed"
            self._renewed_at = self._clock()
        if self.pod_watch is None:
            self.pod_watch = Informer("grouped-pods", PODS, self.pods, self._calls, resync=300.0,
                                      observer=self._observer).start()
        wanted = self._wanted()
        for key in set(self._known) - set(wanted):
            del self._known[key]  # a group none of whose pods is left is forgotten (the job is gone)
        outcome = "up to date"
        for (namespace, name), (job, waiting, bound) in sorted(wanted.items(), key=lambda item: item[0]):
            try:
                if (namespace, name) not in self._known:
                    made = self._ensure(api_info, namespace, name, job)
                    outcome = "made" if made is not None else outcome
                    self._known[(namespace, name)] = (made.min_count if made else None, self._clock(), waiting)
                elif self._stalled(namespace, name, waiting, bound):
                    self._recount(api_info, namespace, name, job, waiting)
                    outcome = "recounted"
            except kube.KubeError as exc:
                self._problem(f"{namespace}/{name}: {exc}")
                outcome = "failed"
        if outcome != "failed":
            self._problem(None)
        return outcome

    def _wanted(self) -> dict[tuple[str, str], tuple[JobRef, int, bool]]:
        """Each group the pods name: its job, how many of its pods wait (not bound, not going), whether any is
        bound."""
        wanted: dict[tuple[str, str], tuple[JobRef, int, bool]] = {}
        for pod in list(self.pods.objects.values()):
            name = podview.labels(pod).get(POD_GROUP_LABEL)
            namespace = str(podview.metadata(pod).get("namespace") or "")
            job = job_of(pod)
            if not name or not namespace or job is None or podview.metadata(pod).get("deletionTimestamp"):
                continue
            _, waiting, bound = wanted.get((namespace, name), (job, 0, False))
            on_node = bool(podview.spec(pod).get("nodeName"))
            wanted[(namespace, name)] = (job, waiting + (0 if on_node else 1), bound or on_node)
        return wanted

    def _stalled(self, namespace: str, name: str, waiting: int, bound: bool) -> bool:
        """A gang of ours short of its count, none of its pods bound, and no pod arriving for `STALL_SECONDS`:
        the job's pods are fewer than its templates said (a pod that did not join), and would wait forever."""
        count, since, seen = self._known[(namespace, name)]
        if waiting != seen:
            self._known[(namespace, name)] = (count, self._clock(), waiting)
            return False
        return count is not None and not bound and 0 < waiting < count and self._clock() - since >= self._stall

    def _recount(self, api_info: PodGroupApi, namespace: str, name: str, job: JobRef, waiting: int) -> None:
        """The group made again with the count of the pods that came (every field of a v1alpha2 PodGroup is
        immutable, and a pod's group is found by name, so the new one takes the waiting pods)."""
        collection = kube.collection(GROUP, api_info.version, RESOURCE, namespace)
        found = kube.get(self._api, f"{collection}/{name}")
        current = self._job(namespace, job)
        counted = self._plan(current, api_info) if current is not None else None
        job = _with_uid(job, current)
        plan = dataclasses.replace(counted or GroupPlan(min_count=None), min_count=waiting)
        if found is not None:
            kube.request(self._api, "DELETE", f"{collection}/{name}")
        kube.request(self._api, "POST", collection,
                     body=podgroup_body(api_info, name=name, namespace=namespace, job=job, plan=plan))
        self.recounted += 1
        if self._on_recount is not None:
            self._on_recount(name)
        self._known[(namespace, name)] = (waiting, self._clock(), waiting)
        log.warning(json.dumps({"msg": "a gang short of its count was made again with the pods that came",
                                "podGroup": f"{namespace}/{name}", "minCount": waiting,
                                "job": f"{job.kind}/{job.name}"}))

    def _ensure(self, api_info: PodGroupApi, namespace: str, name: str, job: JobRef) -> GroupPlan | None:
        """The group, where it is not there: what it was made with, or None where it was there already (made by
        another replica before, or by the user)."""
        collection = kube.collection(GROUP, api_info.version, RESOURCE, namespace)
        if kube.get(self._api, f"{collection}/{name}") is not None:
            return None
        found = self._job(namespace, job)
        plan = self._plan(found, api_info) if found is not None else None
        job = _with_uid(job, found)
        if plan is None or not job.uid:  # the job is gone, or has no pod we group: scheduled as without a group
            plan = BASIC
            log.warning(json.dumps({"msg": "a PodGroup made with the basic policy: its job's count is not known",
                                    "podGroup": f"{namespace}/{name}", "job": f"{job.kind}/{job.name}"}))
        try:
            kube.request(self._api, "POST", collection,
                         body=podgroup_body(api_info, name=name, namespace=namespace, job=job, plan=plan))
        except kube.KubeError as exc:
            if exc.status == 409:
                return None
            raise
        self.made += 1
        log.info(json.dumps({"msg": "PodGroup made", "podGroup": f"{namespace}/{name}", "minCount": plan.min_count,
                             "topologyKey": plan.topology_key, "priorityClassName": plan.priority_class}))
        if self._on_made is not None:
            self._on_made(name)
        return plan

    def _job(self, namespace: str, job: JobRef) -> Mapping[str, Any] | None:
        """The job as the API server has it now (the one object the group is counted from), where its uid is the
        one the pods name."""
        entry = KINDS.get(job.key)
        if entry is None:
            return None
        found = kube.get(self._api, f"/apis/{job.api_version}/namespaces/{namespace}/{entry.resource}/{job.name}")
        if found is None or (job.uid and podview.metadata(found).get("uid") != job.uid):
            return None  # where the pods name no uid (a LeaderWorkerSet's), the set of that name is theirs
        return dict(found)

    def _plan(self, job: Mapping[str, Any], api_info: PodGroupApi) -> GroupPlan | None:
        """The job's group: its count the pods that join it (`joining_pods`), the rest from the first of them."""
        context = self._context()
        joining = joining_pods(job, context)
        if joining is None:
            return None
        pods, profile = joining
        return plan_of(profile, context, api_info, pods=pods)

    def stop(self) -> None:
        super().stop()
        if self.pod_watch is not None:
            self.pod_watch.stop()
