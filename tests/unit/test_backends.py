"""The scheduler backends: with each backend chosen in the rules, the course's training job, an inference
Deployment, a batch Job and a Katib trial come out of /mutate (at their CREATE) with the labels, annotations and
fields that backend documents, on the objects it reads them from, valid against the backend's and the owners' CRDs
(tests/support/backend_crds.py) or the Kubernetes schema; a second pass changes nothing, what the user wrote stays,
and a pod of a mutated owner gets nothing twice. Then the checks against the backend's queues and topology.

The owners are tests/support/owners.py; the cluster is the GKE-like one of tests/support/clusters.py (two blocks
of two sub-blocks of two 8-GPU H100 nodes), so a 4-pod job of 8 GPUs each packs into a block.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest

from tests.support import backend_crds, owners
from tests.support.builders import rules_with
from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context, with_queues
from tests.support.reviews import K8S_VERSION, apply_verdict, assert_valid_pod
from webhook.core.admission import Verdict, judge_object, judge_pod, mutate_verdict, owner_verdict
from webhook.core.backends.scheduling import RUNTIME_PATCH_MANAGER, parse_path
from webhook.core.context import Context
from webhook.core.rules import Rules, RulesError

BACKENDS = ("kueue", "kai", "volcano", "coscheduling")
BLOCK = "cloud.google.com/gce-topology-block"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
_RULES: dict[tuple[str, bool], Rules] = {}


def backend_rules(backend: str, *, nodes: bool = True) -> Rules:
    """The default rules with ``backend`` chosen, as the server runs them while its node watch sees the GKE nodes."""
    key = (backend, nodes)
    if key not in _RULES:
        chosen = rules_with({"scheduler": {"backend": backend}})
        _RULES[key] = with_nodes(gke_cluster(), chosen) if nodes else chosen
    return _RULES[key]


def group_kind(obj: dict[str, Any]) -> tuple[str, str]:
    return str(obj["apiVersion"]).rpartition("/")[0], str(obj["kind"])


def owner_mutated(obj: dict[str, Any], rules: Rules) -> tuple[dict[str, Any], Verdict | None]:
    group, kind = group_kind(obj)
    verdict = owner_verdict(copy.deepcopy(obj), ctx=as_context(rules), mode="deny", group=group, kind=kind,
                            namespace=obj["metadata"]["namespace"])
    if verdict is None:
        return copy.deepcopy(obj), None
    return jsonpatch.apply_patch(copy.deepcopy(obj), list(verdict.patch)), verdict


def at(obj: Any, *path: str | int) -> Any:
    for part in path:
        if isinstance(obj, list):
            obj = obj[int(part)] if isinstance(part, int) and part < len(obj) else None
        else:
            obj = (obj or {}).get(part)
        if obj is None:
            return None
    return obj


def assert_valid(obj: dict[str, Any]) -> None:
    """``obj`` against its CRD here, or the Kubernetes OpenAPI schema for a built-in kind."""
    if group_kind(obj) in backend_crds.BY_KIND:
        backend_crds.validate(obj)
        return
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{obj['kind']} is not valid at {'/'.join(map(str, exc.path))}: {exc.message}")


# -- what each backend documents, on the object it reads it from -----------------------------------------------

LABELS, NOTES = ("metadata", "labels"), ("metadata", "annotations")
ROLES = (("spec", "pytorchReplicaSpecs", "Master", "template"), ("spec", "pytorchReplicaSpecs", "Worker", "template"))
DEPLOYMENT_TEMPLATE = (("spec", "template"),)
JOB_TEMPLATE = (("spec", "template"),)


def course_job() -> dict[str, Any]:
    return owners.course_pytorchjob(model="h100-80g")


WORKLOADS = {"training": (course_job, ROLES), "inference": (owners.inference_deployment, DEPLOYMENT_TEMPLATE),
             "batch": (owners.batch_job, JOB_TEMPLATE), "hpo": (owners.katib_trial_job, JOB_TEMPLATE)}

# (backend, workload) -> (on the owner, on every template); a value None: must be absent
Expect = tuple[dict[tuple[str | int, ...], Any], dict[tuple[str | int, ...], Any]]
PRIORITY = {"training": "ai-training", "inference": "ai-inference", "batch": "ai-batch", "hpo": "ai-hpo"}


def expected(backend: str, workload: str) -> Expect:
    queue, priority = workload, PRIORITY[workload]
    preemptible = workload in ("batch", "hpo")
    gang = workload == "training"
    if backend == "kueue":
        return ({(*LABELS, "kueue.x-k8s.io/queue-name"): queue, (*LABELS, "kueue.x-k8s.io/priority-class"): priority,
                 ("spec", "suspend"): True if workload in ("batch", "hpo") else None,
                 (*NOTES, "kueue.x-k8s.io/podset-preferred-topology"): None},
                {(*NOTES, "kueue.x-k8s.io/podset-preferred-topology"): BLOCK if gang else None,
                 (*LABELS, "kueue.x-k8s.io/queue-name"): queue if workload == "inference" else None,
                 ("spec", "schedulerName"): None if workload == "training" else "default-scheduler"})
    if backend == "kai":
        return ({(*LABELS, "kai.scheduler/queue"): queue, (*LABELS, "priorityClassName"): priority,
                 (*LABELS, "kai.scheduler/preemptibility"): "preemptible" if preemptible else "non-preemptible",
                 (*NOTES, "kai.scheduler/topology"): "gpu-cluster" if gang else None,
                 (*NOTES, "kai.scheduler/topology-preferred-placement"): BLOCK if gang else None,
                 (*NOTES, "kai.scheduler/batch-min-member"): None},
                {("spec", "schedulerName"): "kai-scheduler", (*LABELS, "kai.scheduler/queue"): None})
    if backend == "volcano":
        return ({(*NOTES, "scheduling.volcano.sh/group-min-member"): None, ("spec", "queue"): None},
                {("spec", "schedulerName"): "volcano", (*NOTES, "scheduling.volcano.sh/queue-name"): "default",
                 (*NOTES, "volcano.sh/preemptable"): "true" if preemptible else "false"})
    assert backend == "coscheduling"
    return ({(*LABELS, "scheduling.x-k8s.io/pod-group"): None},
            {("spec", "schedulerName"): "scheduler-plugins-scheduler" if gang else
             (None if workload == "training" else "default-scheduler"),
             (*LABELS, "scheduling.x-k8s.io/pod-group"): "resnet-train" if gang else None})


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_writes_its_own_words_where_it_reads_them(backend: str, workload: str) -> None:
    build, templates = WORKLOADS[workload]
    original = build()
    rules = backend_rules(backend)
    obj, verdict = owner_mutated(original, rules)
    on_owner, on_templates = expected(backend, workload)
    for path, value in on_owner.items():
        assert at(obj, *path) == value, f"{backend} {workload}: owner {'.'.join(map(str, path))}"
    for template in templates:
        for path, value in on_templates.items():
            assert at(obj, *template, *path) == value, \
                f"{backend} {workload}: {'.'.join(map(str, (*template, *path)))}"
    assert_valid(obj)
    # nothing of the user's is replaced or removed: every label and annotation the owner had is there as it was
    for path in (LABELS, NOTES):
        assert {**(at(obj, *path) or {}), **(at(original, *path) or {})} == (at(obj, *path) or {})
    # the priority the backend reads is the one the pods get, for every pod of the job
    pod_classes = {mutated_pod_priority(obj, t, rules) for t in templates}
    assert pod_classes == {PRIORITY[workload]}
    if backend == "coscheduling" and workload != "training":
        assert verdict is None  # a single pod is no gang: coscheduling's scheduler is not wanted


def mutated_pod_priority(owner: dict[str, Any], template: tuple[str | int, ...], rules: Rules) -> str | None:
    """The PriorityClass /mutate gives a pod made of ``template`` of ``owner``."""
    pod = owners.operator_pod(owner, at(owner, *template), name="p-0", labels={})
    pod["metadata"]["ownerReferences"][0].update(
        {"apiVersion": "apps/v1", "kind": "ReplicaSet"} if owner["kind"] == "Deployment" else {})
    if owner["kind"] == "PyTorchJob":
        pod["metadata"]["labels"]["training.kubeflow.org/job-name"] = owner["metadata"]["name"]
    if owner["metadata"].get("labels", {}).get("katib.kubeflow.org/trial"):
        pod["metadata"]["labels"]["katib.kubeflow.org/trial"] = owner["metadata"]["labels"]["katib.kubeflow.org/trial"]
    verdict = mutate_verdict(pod, ctx=as_context(rules), mode="deny")
    return apply_verdict(pod, verdict)["spec"].get("priorityClassName")


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_pass_changes_nothing(backend: str, workload: str) -> None:
    rules = backend_rules(backend)
    once, _ = owner_mutated(WORKLOADS[workload][0](), rules)
    twice, verdict = owner_mutated(once, rules)
    assert twice == once
    assert verdict is None or verdict.patch == ()


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_the_default_backend_writes_nothing_on_owners(workload: str, rules: Rules) -> None:
    obj = WORKLOADS[workload][0]()
    group, kind = group_kind(obj)
    assert owner_verdict(obj, ctx=as_context(rules), mode="deny", group=group, kind=kind, namespace="ml-team") is None
    assert not rules.scheduler.active and rules.scheduler.backend.name == "default"


def test_the_backend_needs_the_nodes_to_name_a_level_and_says_so() -> None:
    """Without the node watch there is no level to name: nothing is written, and the owner is told."""
    obj, verdict = owner_mutated(course_job(), backend_rules("kueue", nodes=False))
    assert verdict is not None
    assert at(obj, *ROLES[1], *NOTES, "kueue.x-k8s.io/podset-preferred-topology") is None
    assert any("pods not packed: the cluster's topology is not known here" in w for w in verdict.warnings)
    assert at(obj, *LABELS, "kueue.x-k8s.io/queue-name") == "training"


# -- never over the user's -------------------------------------------------------------------------------------

def test_kueue_keeps_the_users_queue_and_required_topology() -> None:
    job = course_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "research"}
    for role in ("Master", "Worker"):
        job["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["annotations"][
            "kueue.x-k8s.io/podset-required-topology"] = BLOCK
    obj, _ = owner_mutated(job, backend_rules("kueue"))
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "ai-training"
    for template in ROLES:
        notes = at(obj, *template, *NOTES)
        assert notes["kueue.x-k8s.io/podset-required-topology"] == BLOCK
        assert "kueue.x-k8s.io/podset-preferred-topology" not in notes  # the user chose the required form


def test_a_user_suspended_job_stays_suspended_and_a_running_one_is_suspended_only_when_queued() -> None:
    rules = backend_rules("kueue")
    job = owners.batch_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "nightly"}
    obj, _ = owner_mutated(job, rules)
    assert obj["spec"]["suspend"] is True and obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "nightly"
    no_queue = replace(rules, rules=replace(rules.rules, scheduler=replace(rules.rules.scheduler, backend=replace(
        rules.rules.scheduler.backend, queues={"training": "training"}))))
    obj, verdict = owner_mutated(owners.batch_job(), no_queue)
    assert obj["spec"]["suspend"] is False  # no queue for batch: Kueue would never unsuspend it
    assert verdict is not None
    assert any("no kueue queue for class batch" in w for w in verdict.warnings)


def test_kai_keeps_the_users_scheduler_and_queue() -> None:
    job = course_job()
    job["metadata"]["labels"] = {"kai.scheduler/queue": "team-a", "kai.scheduler/preemptibility": "preemptible"}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "kai-scheduler-shard-b"
    obj, _ = owner_mutated(job, backend_rules("kai"))
    assert obj["metadata"]["labels"] == {"kai.scheduler/queue": "team-a", "kai.scheduler/preemptibility": "preemptible",
                                         "priorityClassName": "ai-training"}
    assert at(obj, *ROLES[1], "spec", "schedulerName") == "kai-scheduler-shard-b"
    assert at(obj, *ROLES[0], "spec", "schedulerName") == "kai-scheduler"


def test_volcano_keeps_the_users_preemptibility() -> None:
    job = course_job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["volcano.sh/preemptable"] = "true"
    obj, _ = owner_mutated(job, backend_rules("volcano"))
    assert at(obj, *ROLES[1], *NOTES, "volcano.sh/preemptable") == "true"
    assert at(obj, *ROLES[0], *NOTES, "volcano.sh/preemptable") == "false"


# -- the other owners of the table: JobSet, LeaderWorkerSet, TrainJob, a Volcano Job -----------------------------

def jobset() -> dict[str, Any]:
    """A JobSet of 2 replicated Jobs of 2 pods of 8 H100s (jobset examples/pytorch)."""
    template = owners._trainer_template("h100-80g")
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "gpt-neox", "namespace": "ml-team"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}}}]}}


def leader_worker_set() -> dict[str, Any]:
    """vLLM over 2 nodes of 8 H100s per replica (lws docs/examples/vllm)."""
    template = {"metadata": {"annotations": {"ai-admission.io/model-params": "405B",
                                             "ai-admission.io/model-precision": "fp8"}},
                "spec": {"nodeSelector": {"gpu-type": "h100-80g"}, "containers": [{
                    "name": "vllm", "image": "vllm/vllm-openai:v0.8.4",
                    "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "1Ti"},
                                  "requests": {"nvidia.com/gpu": "8", "memory": "1Ti"}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm-405b", "namespace": "serving"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": copy.deepcopy(template),
                                                             "workerTemplate": copy.deepcopy(template)}}}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("build", [jobset, leader_worker_set, owners.trainjob], ids=["JobSet", "LWS", "TrainJob"])
def test_every_mutated_owner_is_valid_against_its_crd_and_stable(backend: str, build: Any) -> None:
    rules = backend_rules(backend)
    obj, verdict = owner_mutated(build(), rules)
    backend_crds.validate(obj)
    again, second = owner_mutated(obj, rules)
    assert again == obj and (second is None or second.patch == ())


def test_kai_writes_the_jobset_owner_and_every_pod_template() -> None:
    obj, _ = owner_mutated(jobset(), backend_rules("kai"))
    assert obj["metadata"]["labels"]["kai.scheduler/queue"] == "training"
    assert obj["metadata"]["annotations"]["kai.scheduler/topology-preferred-placement"] == BLOCK  # 32 GPUs
    assert at(obj, "spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "schedulerName") == "kai-scheduler"


def test_kueue_names_the_leader_worker_sets_queue_on_the_owner() -> None:
    obj, _ = owner_mutated(leader_worker_set(), backend_rules("kueue"))
    assert obj["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "inference",
                                         "kueue.x-k8s.io/priority-class": "ai-inference"}


def test_a_trainjobs_pod_intent_goes_in_this_webhooks_runtime_patch() -> None:
    """The TrainJob's pod template is its runtime's: labels and annotations go in the entry of runtimePatches whose
    manager is this webhook's (kubeflow/trainer RuntimePatch; Kueue writes its own entry the same way)."""
    job = owners.trainjob()
    job["spec"]["runtimePatches"] = [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {"kueue.x-k8s.io/managed": "true"}}}}}]
    obj, verdict = owner_mutated(job, backend_rules("kueue"))
    backend_crds.validate(obj)
    managers = [p["manager"] for p in obj["spec"]["runtimePatches"]]
    assert managers == ["kueue.x-k8s.io/manager", RUNTIME_PATCH_MANAGER]
    ours = obj["spec"]["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert ours == [{"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {
        "kueue.x-k8s.io/podset-preferred-topology": BLOCK}}}}}}]
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    # a pod field cannot be patched there: KAI's scheduler name belongs in the runtime, and the TrainJob is told
    _, verdict = owner_mutated(owners.trainjob(), backend_rules("kai"))
    assert verdict is not None
    assert any("take their spec.schedulerName from the runtime: set it there" in w for w in verdict.warnings)


def test_a_volcano_job_is_volcanos_whatever_the_backend() -> None:
    obj, verdict = owner_mutated(owners.volcano_job(), backend_rules("volcano"))
    backend_crds.validate(obj)
    assert obj["spec"]["queue"] == "default" and obj["spec"]["priorityClassName"] == "ai-training"
    for backend in ("kueue", "kai", "coscheduling"):
        obj, verdict = owner_mutated(owners.volcano_job(), backend_rules(backend))
        assert obj == owners.volcano_job()
        assert verdict is not None and verdict.patch == ()
        assert any(f"always scheduled by volcano, not {backend}" in w for w in verdict.warnings)


def test_a_katib_trial_is_hpo_even_in_a_job_that_looks_like_batch() -> None:
    """The trial's Job carries no class of its own: its owner (a Trial) makes it hpo, with hpo's queue."""
    obj, _ = owner_mutated(owners.katib_trial_job(), backend_rules("kueue"))
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hpo"
    plain, _ = owner_mutated({**owners.katib_trial_job(), "metadata": {"name": "j", "namespace": "ml-team"}},
                             backend_rules("kueue"))
    assert plain["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "batch"


# -- pods: plain pods take the backend's pod words; a mutated owner's pods get nothing twice -----------------------

def mutated(pod: dict[str, Any], rules: Rules) -> tuple[dict[str, Any], Verdict]:
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    result = apply_verdict(pod, verdict)
    assert_valid_pod(result)
    return result, verdict


PLAIN: dict[str, dict[tuple[str | int, ...], Any]] = {
    "kueue": {(*LABELS, "kueue.x-k8s.io/queue-name"): "training", (*LABELS, "kueue.x-k8s.io/priority-class"): "ai-training",
              (*LABELS, "kueue.x-k8s.io/pod-group-name"): "ddp-smoke",
              (*NOTES, "kueue.x-k8s.io/pod-group-total-count"): "2",
              (*NOTES, "kueue.x-k8s.io/podset-preferred-topology"): SUBBLOCK},
    "kai": {("spec", "schedulerName"): "kai-scheduler", (*LABELS, "kai.scheduler/queue"): "training",
            (*LABELS, "priorityClassName"): "ai-training", (*LABELS, "kai.scheduler/preemptibility"): "non-preemptible"},
    "volcano": {("spec", "schedulerName"): "volcano", (*NOTES, "scheduling.volcano.sh/queue-name"): "default",
                (*NOTES, "volcano.sh/preemptable"): "false"},
    "coscheduling": {("spec", "schedulerName"): "scheduler-plugins-scheduler",
                     (*LABELS, "scheduling.x-k8s.io/pod-group"): "ddp-smoke"},
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_pod_of_a_two_pod_job_takes_the_backends_pod_words(backend: str) -> None:
    pod = owners.plain_pod(world=2, job="ddp-smoke")
    pod["spec"]["nodeSelector"] = {"gpu-type": "h100-80g"}
    result, _ = mutated(pod, backend_rules(backend))
    for path, value in PLAIN[backend].items():
        assert at(result, *path) == value, f"{backend}: {'.'.join(map(str, path))}"


def test_a_single_plain_pod_is_no_group() -> None:
    result, _ = mutated(owners.plain_pod(), backend_rules("kueue"))
    assert result["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert "kueue.x-k8s.io/pod-group-name" not in result["metadata"]["labels"]
    result, verdict = mutated(owners.plain_pod(), backend_rules("coscheduling"))
    assert "schedulerName" not in result["spec"] and "scheduling.x-k8s.io/pod-group" not in result["metadata"]["labels"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pod_of_a_mutated_owner_gets_nothing_twice(backend: str) -> None:
    rules = backend_rules(backend)
    job, _ = owner_mutated(course_job(), rules)
    pod = owners.pytorchjob_worker(job)
    _, verdict = mutated(pod, rules)
    words = ("kueue.x-k8s.io", "kai.scheduler", "volcano.sh", "scheduling.x-k8s.io", "labels/priorityClassName", "/spec/schedulerName")
    touched = [op["path"] for op in verdict.patch if any(w in op["path"] for w in words)]
    assert touched == []


def test_a_pod_whose_owner_predates_the_backend_gets_what_the_scheduler_reads_from_pods() -> None:
    """KAI and Volcano read the scheduler name (and Volcano its annotations) from each pod; Kueue reads a
    template's topology once, from the owner, so a pod gets none of it."""
    pod = owners.pytorchjob_worker(course_job())
    kai, _ = mutated(pod, backend_rules("kai"))
    assert kai["spec"]["schedulerName"] == "kai-scheduler"
    assert "kai.scheduler/queue" not in kai["metadata"]["labels"]  # read from the top owner, not the pod
    volcano, _ = mutated(pod, backend_rules("volcano"))
    assert volcano["spec"]["schedulerName"] == "volcano"
    assert volcano["metadata"]["annotations"]["volcano.sh/preemptable"] == "false"
    kueue, _ = mutated(pod, backend_rules("kueue"))
    assert not [k for k in {**kueue["metadata"]["labels"], **kueue["metadata"]["annotations"]} if k.startswith("kueue.")]


def test_the_default_backend_adds_nothing_to_pods(rules: Rules) -> None:
    result, _ = mutated(owners.plain_pod(world=2, job="ddp-smoke"), rules)
    found = {**result["metadata"]["labels"], **result["metadata"]["annotations"]}
    assert not [k for k in found if k.startswith(("kueue.", "kai.", "scheduling.", "volcano."))]
    assert "schedulerName" not in result["spec"]


# -- validation against the backend's queues and topology ------------------------------------------------------

def local_queue(name: str, cluster_queue: str, namespace: str = "ml-team") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}


def cluster_queue(name: str, gpus: int, *, borrowing: int | None = None, cohort: str | None = None) -> dict[str, Any]:
    """A ClusterQueue as Kueue's site/static/examples/admin/single-clusterqueue-setup.yaml has it, with GPUs."""
    gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": "h100", "resources": [{"name": "cpu", "nominalQuota": 512},
                                                   {"name": "memory", "nominalQuota": "4Ti"}, gpu]}]}]}
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def resource_flavor(name: str, topology: str | None = None) -> dict[str, Any]:
    """A ResourceFlavor as Kueue's site/static/examples/tas/sample-queues.yaml has it (topologyName: TAS)."""
    spec: dict[str, Any] = {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}}
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def kueue_queues(gpus: int = 64, **kwargs: Any) -> list[dict[str, Any]]:
    return [local_queue("training", "gpu-cq"), local_queue("batch", "gpu-cq"), cluster_queue("gpu-cq", gpus, **kwargs)]


def judged(obj: dict[str, Any], rules: Rules | Context) -> Verdict:
    group, kind = group_kind(obj)
    result = judge_object(obj, ctx=as_context(rules), mode="deny", group=group, kind=kind, namespace=obj["metadata"]["namespace"])
    assert result is not None
    return result[0]


def codes(verdict: Verdict) -> list[str]:
    return [f.code for f in verdict.findings if f.severity == "deny"]


def test_a_queue_that_exists_with_room_is_allowed() -> None:
    # 64 of its own; 16 and 16 more it may borrow; 8 and no borrowing limit in its cohort (unlimited)
    for objects in (kueue_queues(), kueue_queues(16, borrowing=16, cohort="research"),
                    kueue_queues(8, cohort="research")):
        obj, _ = owner_mutated(course_job(), backend_rules("kueue"))
        verdict = judged(obj, with_queues(backend_rules("kueue"), objects, source="the cluster"))
        assert verdict.allowed, verdict.message


def test_a_queue_that_does_not_exist_is_denied_with_the_queues_there_are() -> None:
    rules = with_queues(backend_rules("kueue"), kueue_queues(), source="the cluster")
    job = course_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "trianing"}
    verdict = judged(job, rules)
    assert not verdict.allowed and codes(verdict) == ["queue-not-found"]
    assert 'kueue LocalQueue "trianing" does not exist in namespace "ml-team"' in (verdict.message or "")
    assert "name one of: batch, training" in (verdict.message or "")


def test_a_gang_larger_than_its_queue_can_ever_give_is_denied() -> None:
    obj, _ = owner_mutated(course_job(), backend_rules("kueue"))
    rules = with_queues(backend_rules("kueue"), kueue_queues(16, borrowing=8, cohort="research"), source="the cluster")
    verdict = judged(obj, rules)
    assert codes(verdict) == ["gang-exceeds-quota"]
    assert ('the job asks for 32 GPUs in all, more than kueue LocalQueue "training" can ever give (24: ClusterQueue '
            '"gpu-cq": h100 nvidia.com/gpu 16 + 8 borrowed from cohort research)') in (verdict.message or "")
    # a borrowing limit outside a cohort lends nothing
    lone = with_queues(backend_rules("kueue"), kueue_queues(16, borrowing=64), source="the cluster")
    assert "can ever give (16: " in (judged(obj, lone).message or "")


def test_kai_holds_a_non_preemptible_gang_to_the_queues_quota_and_a_preemptible_one_to_its_limit() -> None:
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "training"},
             "spec": {"parentQueue": "research", "resources": {"gpu": {"quota": 16, "limit": 64, "overQuotaWeight": 1},
                                                              "cpu": {"quota": -1, "limit": -1},
                                                              "memory": {"quota": -1, "limit": -1}}}}
    backend_crds.validate(queue)
    rules = with_queues(backend_rules("kai"), [queue], source="the cluster")
    obj, _ = owner_mutated(course_job(), backend_rules("kai"))
    verdict = judged(obj, rules)
    assert codes(verdict) == ["gang-exceeds-quota"] and "(16: " in (verdict.message or "")
    obj["metadata"]["labels"]["kai.scheduler/preemptibility"] = "preemptible"
    for role in ("Master", "Worker"):
        obj["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["annotations"][
            "ai-admission.io/workload-type"] = "batch"
    obj["metadata"]["labels"]["priorityClassName"] = "ai-batch"
    assert judged(obj, rules).allowed


def test_a_closed_volcano_queue_takes_no_jobs() -> None:
    closed: dict[str, Any] = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
              "spec": {"weight": 1, "reclaimable": True, "capability": {"nvidia.com/gpu": 64}},
              "status": {"state": "Closed"}}
    backend_crds.validate(closed)
    rules = with_queues(backend_rules("volcano"), [closed], source="the cluster")
    obj, _ = owner_mutated(owners.volcano_job(), backend_rules("volcano"))
    verdict = judged(obj, rules)
    assert codes(verdict) == ["queue-not-found"] and "is not open" in (verdict.message or "")
    closed["status"]["state"] = "Open"
    assert judged(obj, with_queues(backend_rules("volcano"), [closed], source="the cluster")).allowed


def test_a_missing_pod_group_is_a_warning_with_the_size_to_create() -> None:
    rules = with_queues(backend_rules("coscheduling"), [{
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "other", "namespace": "ml-team"}, "spec": {"minMember": 2}}], source="the cluster")
    obj, _ = owner_mutated(course_job(), backend_rules("coscheduling"))
    verdict = judged(obj, rules)
    assert verdict.allowed
    assert any('PodGroup "resnet-train" does not exist in namespace "ml-team"' in w and "minMember 4" in w
               for w in verdict.warnings)


def test_a_required_level_no_domain_of_which_holds_the_job_is_denied() -> None:
    rules = backend_rules("kueue")
    job = course_job()
    for role in ("Master", "Worker"):
        job["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["annotations"][
            "kueue.x-k8s.io/podset-required-topology"] = SUBBLOCK
    verdict = judged(job, rules)
    assert codes(verdict) == ["gang-exceeds-topology"]
    assert "do not fit in any one cloud.google.com/gce-topology-subblock domain (the largest holds 16)" in (
        verdict.message or "")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1  # 16 GPUs: one sub-block holds them
    assert judged(job, rules).allowed
    job["metadata"]["annotations"] = {"kai.scheduler/topology-required-placement": "topology.example.com/rack"}
    kai = judged(job, backend_rules("kai"))
    assert codes(kai) == ["gang-exceeds-topology"] and "no h100-80g node carries the label topology.example.com/rack" \
        in (kai.message or "")


def test_the_pods_of_one_job_must_ask_for_one_priority(rules: Rules) -> None:
    job = course_job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "ai-batch"
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["priorityClassName"] = "ai-training"
    verdict = judged(job, rules)
    assert "job-priorities-differ" in codes(verdict)
    assert "different PriorityClasses (ai-batch, ai-training)" in (verdict.message or "")


def test_a_plain_pods_queue_is_checked_too() -> None:
    rules = with_queues(backend_rules("kueue"), kueue_queues(), source="the cluster")
    pod = owners.plain_pod()
    pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "inference"
    verdict = judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod ml-team/ddp-smoke-0")
    assert codes(verdict) == ["queue-not-found"]


def test_a_pod_templates_queue_is_checked_once_for_the_object() -> None:
    """A PodTemplate's pod has no owner, as a plain pod has none: its queue is the object's, said once."""
    rules = with_queues(backend_rules("kueue"), kueue_queues(), source="the cluster")
    pod = owners.plain_pod()
    pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "inference"
    template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "smoke", "namespace": "ml-team"},
                "template": {"metadata": pod["metadata"], "spec": pod["spec"]}}
    verdict = judged(template, rules)
    assert codes(verdict) == ["queue-not-found"]
    assert (verdict.message or "").count('LocalQueue "inference" does not exist') == 1


def test_queues_read_from_no_objects_check_nothing() -> None:
    """No queue object among what is known (the backend's CRDs not served, or the watch not listed yet): no check
    can say a queue is missing."""
    rules = with_queues(backend_rules("kueue"), [], source="the cluster")
    assert rules.cluster.queues is None
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",  # of the group, not a queue kind
                "metadata": {"name": "job-resnet-train-1a2b3", "namespace": "ml-team"}, "spec": {}}
    assert with_queues(backend_rules("kueue"), [workload], source="check's files").cluster.queues is None
    job = course_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "anything"}
    assert judged(job, rules).allowed


# -- the rules ---------------------------------------------------------------------------------------------------

def test_an_unknown_backend_and_a_pod_level_gang_beside_a_backend_are_refused() -> None:
    with pytest.raises(RulesError, match=r"scheduler\.backend: 'slurm' is not default or one of scheduler.backends"):
        rules_with({"scheduler": {"backend": "slurm"}})
    with pytest.raises(RulesError, match=r"classes\.training\.mutate\.gang: scheduler.backend kai writes the gang"):
        rules_with({"scheduler": {"backend": "kai"}, "classes": {"training": {"mutate": {"gang": {
            "schedulerName": "volcano", "podGroupAnnotation": "scheduling.k8s.io/group-name"}}}}})


def test_field_paths_parse_with_indexes() -> None:
    assert parse_path("spec.replicatedJobs[0].template") == ("spec", "replicatedJobs", 0, "template")
    assert parse_path("spec.suspend") == ("spec", "suspend")


def test_every_backend_names_its_source_and_its_queue_kinds_are_crds_here(rules: Rules) -> None:
    for backend in BACKENDS:
        chosen = backend_rules(backend, nodes=False).scheduler.backend
        assert chosen.source, backend
        for kind in chosen.queue_kinds:
            definition = backend_crds.BY_KIND[(kind.group, kind.kind)]
            assert definition["spec"]["names"]["plural"] == kind.resource
            assert definition["spec"]["versions"][0]["name"] == kind.version
            assert (definition["spec"]["scope"] == "Namespaced") == kind.namespaced


# -- where the queues come from: the server's watch, check's input ---------------------------------------------

def test_the_queue_watch_hands_the_queues_over_only_when_every_kind_is_listed() -> None:
    """ClusterQueues without LocalQueues (not yet listed, or refused) would make every queue look missing."""
    from webhook.cluster.queues import QueueWatch

    kinds = backend_rules("kueue", nodes=False).scheduler.backend.queue_kinds
    watch = QueueWatch(kinds)
    heard: list[list[dict[str, Any]]] = []
    watch.on_change = heard.append
    watch.stores["ClusterQueue"].replace([cluster_queue("gpu-cq", 64)])
    assert heard == []
    watch.stores["LocalQueue"].replace([local_queue("training", "gpu-cq")])
    assert heard == []
    watch.stores["ResourceFlavor"].replace([resource_flavor("h100")])
    assert heard == []
    watch.stores["WorkloadPriorityClass"].replace([])
    assert [sorted(o["kind"] for o in objects) for objects in heard] == [["ClusterQueue", "LocalQueue", "ResourceFlavor"]]


def queues_once_listed(services: Any) -> Any:
    """The server's queues once its watch has listed every kind (at most 15 s)."""
    import time

    deadline = time.monotonic() + 15
    while services.context.cluster.queues is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return services.context.cluster.queues


def test_the_servers_queue_watch_reads_the_cluster_through_the_api(tmp_path: Any) -> None:
    import time

    from tests.support.kubeapi import FakeKubeAPI
    from webhook.cluster.informer import api_calls
    from webhook.cluster.queues import QueueWatch
    from webhook.server.services import Services

    rules = backend_rules("kueue", nodes=False)
    with FakeKubeAPI() as api:
        for obj in kueue_queues(16):
            api.add("clusterqueues" if obj["kind"] == "ClusterQueue" else "localqueues", obj)
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        watch = QueueWatch(rules.scheduler.backend.queue_kinds, api=lambda: api_calls(kubeconfig), resync=60)
        services = Services.fixed(rules, queue_watch=watch)
        watch.start()
        try:
            queues = queues_once_listed(services)
            assert queues is not None and queues.source == "the cluster"
            assert queues.names("ml-team") == ["batch", "training"]
            assert ("GET", "/apis/kueue.x-k8s.io/v1beta2/localqueues") in api.requests
            obj, _ = owner_mutated(course_job(), rules)
            assert codes(judged(obj, services.context)) == ["gang-exceeds-quota"]
            api.add("clusterqueues", cluster_queue("gpu-cq", 64))  # the quota raised: allowed from the next event on
            deadline = time.monotonic() + 15
            while not judged(obj, services.context).allowed and time.monotonic() < deadline:
                time.sleep(0.05)
            assert judged(obj, services.context).allowed
            services.set_rules(rules)  # a rules reload keeps the queues
            assert services.context.cluster.queues is not None
        finally:
            services.stop()


def test_the_queue_watch_reads_kueue_at_the_version_the_cluster_serves(tmp_path: Any) -> None:
    """Kueue 0.13 serves v1beta1 only: the watch reads there (v1beta2 first, and again at each resync), so a
    missing queue and a job over its queue's quota are still told; check --cluster reads the same way."""

    from tests.support.kubeapi import FakeKubeAPI
    from webhook.cluster import client as kube
    from webhook.cluster.informer import api_calls
    from webhook.cluster.queues import QueueWatch, list_queues
    from webhook.server.services import Services

    rules = backend_rules("kueue", nodes=False)
    kinds = rules.scheduler.backend.queue_kinds
    assert {k.versions for k in kinds} == {("v1beta2", "v1beta1")}
    with FakeKubeAPI() as api:
        api.unserved_versions.add("kueue.x-k8s.io/v1beta2")
        for obj in kueue_queues(16):
            api.add("clusterqueues" if obj["kind"] == "ClusterQueue" else "localqueues", obj)
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        assert sorted(o["kind"] for o in list_queues(kube.client(kubeconfig), kinds)) == [
            "ClusterQueue", "LocalQueue", "LocalQueue"]
        watch = QueueWatch(kinds, api=lambda: api_calls(kubeconfig), resync=60)
        services = Services.fixed(rules, queue_watch=watch)
        watch.start()
        try:
            queues = queues_once_listed(services)
            assert queues is not None and queues.names("ml-team") == ["batch", "training"]
            assert ("GET", "/apis/kueue.x-k8s.io/v1beta1/localqueues") in api.requests
            assert all(w.status.error is None for w in watch.informers.values())
            obj, _ = owner_mutated(course_job(), rules)
            assert codes(judged(obj, services.context)) == ["gang-exceeds-quota"]
        finally:
            services.stop()


def test_check_reads_the_queues_among_its_input(tmp_path: Any) -> None:
    import json

    import yaml

    from tests.conftest import RULES_FILE
    from tests.support.builders import run_check

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES_FILE.read_text().replace("\nscheduler:\n  backend: default\n",
                                                         "\nscheduler:\n  backend: kueue\n", 1))
    job = course_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "trianing"}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump_all([*kueue_queues(), job]))
    done = run_check("-f", str(manifest), "--rules", str(rules_file), "-o", "json")
    assert done.returncode != 0, done.stdout + done.stderr
    results = [r for r in json.loads(done.stdout)["results"] if r.get("kind") == "PyTorchJob"]
    assert [r["template"] for r in results] == ["spec.pytorchReplicaSpecs.Master.template",
                                               "spec.pytorchReplicaSpecs.Worker.template", None]
    assert 'kueue LocalQueue "trianing" does not exist in namespace "ml-team"' in results[2]["message"]
    assert results[2]["reasons"] == ["queue-not-found"]
    manifest.write_text(yaml.safe_dump_all([job]))  # no queues known: nothing said of them
    assert run_check("-f", str(manifest), "--rules", str(rules_file)).returncode == 0


# -- the webhook configuration: owners reach /mutate at their CREATE, before Kueue's and Volcano's webhooks ----

def test_with_a_backend_owners_reach_the_mutating_webhook_at_their_create(rules: Rules) -> None:
    from webhook.core.workloads.kinds import KINDS
    from webhook.generate.webhooks import MUTATING_WEBHOOK, POD_GROUP_WEBHOOK, webhook_configurations

    for chosen, owners_sent in ((backend_rules("kueue", nodes=False), True), (rules, False)):
        mutating = webhook_configurations(chosen)[0]
        (entry,) = [w for w in mutating["webhooks"] if w["name"] == MUTATING_WEBHOOK]
        assert [w["name"] for w in mutating["webhooks"]] == [MUTATING_WEBHOOK] + ([] if owners_sent else [
            POD_GROUP_WEBHOOK])  # with a backend, no PodGroup of the default scheduler's is given anything
        create_only = {(g, r) for rule in entry["rules"] if rule["operations"] == ["CREATE"]
                       for g in rule["apiGroups"] for r in rule["resources"]}
        assert ({(k.group, k.resource) for k in KINDS.values()} <= create_only) is owners_sent
        assert not [rule for rule in entry["rules"] if rule["apiGroups"] != [""] and "UPDATE" in rule["operations"]]
        expression = entry["matchConditions"][0]["expression"]
        assert expression.startswith("request.resource.resource != 'pods'\n|| ") is owners_sent


def test_the_mutating_configuration_sorts_before_the_queueing_schedulers_webhooks() -> None:
    """The API server calls mutating webhooks in the order of their configurations' names (then of the entries):
    Kueue's and Volcano's webhooks, which act on the queue label and annotations when they see the owner, must run
    after this one; Kueue's are not reinvoked (reinvocationPolicy Never), so reinvocation would not help them."""
    from webhook.generate.webhooks import webhook_configurations

    ours = webhook_configurations(backend_rules("kueue", nodes=False))[0]["metadata"]["name"]
    theirs = ["kueue-mutating-webhook-configuration", "volcano-admission-service-jobs-mutate",
              "volcano-admission-service-pods-mutate", "volcano-admission-service-podgroups-mutate",
              "kai-admission", "scheduler-plugins-webhook"]
    assert sorted([ours, *theirs])[0] == ours


# -- Kueue as it is installed: the queues there are, the flavors' topology, the owner Kueue reads ----------------

NOTES_OF = ("metadata", "annotations")


def test_a_class_queue_the_namespace_lacks_is_not_written_and_kueue_s_default_decides() -> None:
    """A namespace whose only LocalQueue is "default": writing "training" would leave the job "Inadmissible:
    LocalQueue training doesn't exist" and turn off Kueue's own defaulting; nothing is written and it is said."""
    objects = [local_queue("default", "gpu-cq"), cluster_queue("gpu-cq", 64)]
    obj, verdict = owner_mutated(course_job(), with_queues(backend_rules("kueue"), objects, source="the cluster"))
    assert "kueue.x-k8s.io/queue-name" not in obj["metadata"].get("labels", {})
    assert "suspend" not in obj["spec"]  # Kueue suspends what it queues, itself
    assert verdict is not None and any(w.startswith(
        'no queue name written: kueue LocalQueue "training" (scheduler.backends.kueue.queues.training) does not exist '
        'in namespace "ml-team"') and w.endswith("there: default") for w in verdict.warnings), verdict.warnings
    # where the queue exists it is written, and where the queues are not known, as before
    present, _ = owner_mutated(course_job(), with_queues(backend_rules("kueue"), kueue_queues(), source="the cluster"))
    assert present["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    unknown, _ = owner_mutated(course_job(), backend_rules("kueue"))
    assert unknown["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"


@pytest.mark.parametrize("topology", [None, "gke-default"], ids=["ordinary-flavor", "tas-flavor"])
def test_the_topology_request_is_written_only_for_a_queue_whose_flavors_have_a_topology(topology: str | None) -> None:
    """On an ordinary flavor Kueue's TAS never admits a job that asks for a podset topology ("Flavor default does
    not support TopologyAwareScheduling"); on a flavor with a Topology it places the job from its templates, which
    then tolerate the GPU nodes' taints."""
    objects = [*kueue_queues(), resource_flavor("h100", topology)]
    obj, verdict = owner_mutated(course_job(), with_queues(backend_rules("kueue"), objects, source="the cluster"))
    assert verdict is not None
    worker = at(obj, *ROLES[1])
    notes = at(worker, *NOTES_OF) or {}
    if topology is None:
        assert "kueue.x-k8s.io/podset-preferred-topology" not in notes
        assert any(w.startswith('no topology request written for kueue: ClusterQueue "gpu-cq" has no flavor with a '
                                'Topology') for w in verdict.warnings), verdict.warnings
    else:
        assert notes["kueue.x-k8s.io/podset-preferred-topology"] == BLOCK
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in worker["spec"]["tolerations"]
        named = owners.course_pytorchjob(model="h100-80g")  # the model named by annotation only: pinned there too
        for role in ROLES:
            spec = at(named, *role, "spec")
            spec.pop("nodeSelector", None)
            at(named, *role, "metadata")["annotations"]["ai-admission.io/gpu-model"] = "h100-80g"
        pinned, _ = owner_mutated(named, with_queues(backend_rules("kueue"), objects, source="the cluster"))
        assert at(pinned, *ROLES[1], "spec", "nodeSelector") == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_the_jobs_of_a_jobset_get_no_kueue_words() -> None:
    """Kueue queues the JobSet and makes no Workload of its Jobs: words on them are noise."""
    job = owners.batch_job()
    job["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
                                           "uid": "u-js", "controller": True, "blockOwnerDeletion": True}]
    obj, verdict = owner_mutated(job, backend_rules("kueue"))
    assert verdict is None and obj == job
    alone, _ = owner_mutated(owners.batch_job(), backend_rules("kueue"))
    assert alone["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "batch"


def test_a_workload_priority_class_the_cluster_lacks_is_not_named() -> None:
    """Kueue makes no Workload for a job naming a WorkloadPriorityClass that does not exist: it would never be
    admitted, and nobody told. Named where it exists; where check's files hold none, as before."""
    wpc = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass", "metadata": {"name": "ai-training"},
           "value": 100000}
    lacking, verdict = owner_mutated(course_job(), with_queues(backend_rules("kueue"), kueue_queues(),
                                                               source="the cluster"))
    assert "kueue.x-k8s.io/priority-class" not in lacking["metadata"]["labels"]
    assert lacking["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert verdict is not None and any(w.startswith('no priority class written: kueue has no WorkloadPriorityClass '
                                                    '"ai-training"') for w in verdict.warnings), verdict.warnings
    having, _ = owner_mutated(course_job(), with_queues(backend_rules("kueue"), [*kueue_queues(), wpc],
                                                        source="the cluster"))
    assert having["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "ai-training"
    files, _ = owner_mutated(course_job(), with_queues(backend_rules("kueue"), kueue_queues(), source="the input"))
    assert files["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "ai-training"
