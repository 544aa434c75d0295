"""The server's side of the default scheduler's gang (`webhook.cluster.pod_groups`), against the API stand-in: the
Workload API found by discovery and a dry-run create (what the cluster's gates keep), the group controller's Lease
read by every worker, and the one controller making the groups the pods name, counted from their job as the API
server has it. The same through a real kube-apiserver, scheduler and Job controller: tests/e2e/test_gang.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.gang import UID, pytorchjob, serve_workload_api, worker
from tests.support.kubeapi import FakeKubeAPI
from webhook.cluster import client as kube
from webhook.cluster.informer import api_calls
from webhook.cluster.lease import Lease
from webhook.cluster.pod_groups import LEASE, PodGroupController, PodGroupWatch, discover
from webhook.core.podgroups import plan as groups
from webhook.core.podgroups.support import POD_GROUP_LABEL, PodGroupApi, PodGroupSupport
from webhook.core.rules import Rules

HOME = "ai-admission"
ALPHA = PodGroupApi("v1alpha2", topology=True, preemption=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def grouped_pod(index: int, job: dict[str, Any], pods: int) -> dict[str, Any]:
    """A worker of ``job`` as /mutate left it: labelled with its group and naming it."""
    pod = worker(job["metadata"]["name"], index, pods, uid=job["metadata"]["uid"])
    name = groups.group_name(groups.JobRef("kubeflow.org/v1", "PyTorchJob", job["metadata"]["name"],
                                           job["metadata"]["uid"]))
    pod["metadata"]["labels"][POD_GROUP_LABEL] = name
    pod["spec"]["schedulingGroup"] = {"podGroupName": name}
    return pod


@pytest.fixture
def in_force(rules: Rules) -> Rules:
    return with_nodes(gke_cluster(), rules)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        serve_workload_api(fake)
        yield fake


def controller(api: FakeKubeAPI, tmp_path: Path, rules: Rules, clock: Clock, *, identity: str = "a",
               support: PodGroupSupport | None = None, stall: float = 120.0) -> PodGroupController:
    folder = tmp_path / identity
    folder.mkdir(parents=True, exist_ok=True)
    config = str(api.kubeconfig(folder / "kubeconfig"))
    known = support or PodGroupSupport(api=ALPHA, controller=True, known=True)
    return PodGroupController(lambda: rules, lambda: known, namespace=HOME, lock_dir=str(folder), identity=identity,
                              clock=clock, client=lambda: kube.client(config), stall_seconds=stall,
                              api=lambda: api_calls(config, query={"labelSelector": POD_GROUP_LABEL}))


def made(api: FakeKubeAPI) -> dict[str, dict[str, Any]]:
    return {key[2]: obj for key, obj in api.objects.items() if key[0] == "podgroups"}


def settle(maker: PodGroupController, pods: int) -> None:
    """Poll until the controller's pod watch holds ``pods`` pods (it lists them on its first poll)."""
    import time

    deadline = time.monotonic() + 10
    maker.poll()
    while len(maker.pods.objects) < pods and time.monotonic() < deadline:
        time.sleep(0.02)
    maker.poll()


# -- what the cluster serves -------------------------------------------------------------------------------------

def test_discovery_finds_the_version_and_what_the_gates_keep(tmp_path: Path) -> None:
    with FakeKubeAPI() as api:
        client = kube.client(str(api.kubeconfig(tmp_path / "kubeconfig")))
        assert discover(client, HOME) is None  # no Workload API: nothing of the gang
        serve_workload_api(api)
        assert discover(client, HOME) == ALPHA
        api.dropped["podgroups"] = [("spec", "schedulingConstraints"), ("spec", "disruptionMode")]
        assert discover(client, HOME) == PodGroupApi("v1alpha2", topology=False, preemption=False)
        assert not made(api), "the probe is a dry run"
        serve_workload_api(api, "v1beta1")
        api.dropped.clear()
        assert discover(client, HOME) == PodGroupApi("v1beta1", topology=True, preemption=True)


def test_every_worker_knows_whether_the_controller_is_in_service(tmp_path: Path, api: FakeKubeAPI) -> None:
    clock = Clock()
    config = str(api.kubeconfig(tmp_path / "kubeconfig"))
    seen: list[PodGroupSupport] = []
    watch = PodGroupWatch(namespace=HOME, clock=clock, client=lambda: kube.client(config),
                          api=lambda: api_calls(config), on_change=seen.append)
    try:
        assert watch.poll() == PodGroupSupport(api=ALPHA, controller=False, known=True)
        assert Lease(HOME, LEASE, "replica-a", duration=15, clock=clock).held(kube.client(config))  # the maker's
        assert watch.poll().controller and seen[-1].controller
        clock.now += 60  # the holder stopped renewing: no pod is named into a group any more
        assert not watch.poll().controller
        assert watch.summary()["served"] == "scheduling.k8s.io/v1alpha2"
    finally:
        watch.stop()


# -- the groups the pods name --------------------------------------------------------------------------------------

def test_the_group_a_pod_names_is_made_from_its_job(tmp_path: Path, api: FakeKubeAPI, in_force: Rules) -> None:
    job = pytorchjob()
    api.add("pytorchjobs", job, "ml-team")
    maker = controller(api, tmp_path, in_force, Clock())
    try:
        api.add("pods", grouped_pod(1, job, 3), "ml-team")
        settle(maker, 1)
        (name, group), = made(api).items()
        assert name == grouped_pod(1, job, 3)["spec"]["schedulingGroup"]["podGroupName"]
        assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}},
                                 "schedulingConstraints": {"topology": [{"key": "cloud.google.com/gce-topology-block"}]},
                                 "priorityClassName": "ai-training", "disruptionMode": "PodGroup"}
        assert group["metadata"]["ownerReferences"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                         "name": "llama-ft", "uid": UID}]
        posted = [r for r in api.requests if r[0] == "POST" and r[1].endswith("/podgroups")]
        api.add("pods", grouped_pod(2, job, 3), "ml-team")
        settle(maker, 2)
        assert [r for r in api.requests if r[0] == "POST" and r[1].endswith("/podgroups")] == posted  # once a group
        assert maker.made == 1
    finally:
        maker.stop()


def test_a_group_counts_the_pods_that_join_it(in_force: Rules) -> None:
    """The Master with GPUs and the Workers join; a Master without GPUs does not (/mutate leaves it alone)."""
    assert groups.joining_pods(pytorchjob(workers=2), as_context(in_force))[0] == 3  # type: ignore[index]
    assert groups.joining_pods(pytorchjob(workers=2, master_gpus=0), as_context(in_force))[0] == 2  # type: ignore[index]
    assert groups.joining_pods(pytorchjob(workers=0, master_gpus=8), as_context(in_force)) is None  # one pod: no gang


def test_a_jobsets_group_leaves_out_the_jobs_the_job_controller_groups(in_force: Rules) -> None:
    """A JobSet of 4 one-pod Jobs, one Indexed Job of 2 (the Job controller's own gang) and a CPU-only Job."""
    def replicated(name: str, replicas: int, parallelism: int, gpus: int) -> dict[str, Any]:
        resources = {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi",
                                                      "ai-admission.io/workload-type": "training"} if gpus else {}},
                         "spec": {"restartPolicy": "Never",
                                  "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"},
                                  "containers": [{"name": "trainer", "image": "registry.example.com/llm/train:2.4",
                                                  "resources": {"limits": resources}}]}}}}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "pretrain", "namespace": "ml-team", "uid": "js-1"},
              "spec": {"replicatedJobs": [replicated("workers", 4, 1, 8), replicated("pairs", 1, 2, 8),
                                          replicated("loader", 1, 1, 0)]}}
    joining = groups.joining_pods(jobset, as_context(in_force))
    assert joining is not None and joining[0] == 4, joining


def test_a_jobsets_pod_joins_the_jobsets_group_unless_its_job_has_one(in_force: Rules) -> None:
    from tests.support.reviews import apply_verdict
    from webhook.core.admission import mutate_verdict

    pod = worker("pretrain-workers-0", 0, 4, kind="Job", api_version="batch/v1", uid="job-uid")
    pod["metadata"]["labels"].update({"jobset.sigs.k8s.io/jobset-name": "pretrain",
                                      "jobset.sigs.k8s.io/jobset-uid": "js-1",
                                      "jobset.sigs.k8s.io/replicatedjob-name": "workers"})
    support = PodGroupSupport(api=ALPHA, controller=True, known=True)
    patched = apply_verdict(pod, mutate_verdict(copy.deepcopy(pod), ctx=as_context(in_force, pod_groups=support), mode="deny"))
    expected = groups.group_name(groups.JobRef("jobset.x-k8s.io/v1alpha2", "JobSet", "pretrain", "js-1"))
    assert patched["spec"]["schedulingGroup"] == {"podGroupName": expected}
    pod["spec"]["schedulingGroup"] = {"podGroupName": "pretrain-pairs-0-abc"}  # the Job controller named its own
    kept = apply_verdict(pod, mutate_verdict(copy.deepcopy(pod), ctx=as_context(in_force, pod_groups=support), mode="deny"))
    assert kept["spec"]["schedulingGroup"] == {"podGroupName": "pretrain-pairs-0-abc"}
    assert POD_GROUP_LABEL not in kept["metadata"]["labels"]


def test_a_group_whose_job_is_gone_is_made_basic(tmp_path: Path, api: FakeKubeAPI, in_force: Rules) -> None:
    """Its pods were named while the job existed: they are scheduled one by one rather than wait forever."""
    maker = controller(api, tmp_path, in_force, Clock())
    try:
        api.add("pods", grouped_pod(0, pytorchjob(), 3), "ml-team")
        settle(maker, 1)
        (group,) = made(api).values()
        assert group["spec"] == {"schedulingPolicy": {"basic": {}}}
    finally:
        maker.stop()


def test_a_gang_whose_pods_stopped_short_of_its_count_is_made_again(tmp_path: Path, api: FakeKubeAPI,
                                                                    in_force: Rules) -> None:
    """Two of the three pods the job's templates promise come (the third was made without GPUs, say): after the
    stall the group is made again with the two, so they do not wait forever."""
    clock = Clock()
    job = pytorchjob()
    api.add("pytorchjobs", job, "ml-team")
    maker = controller(api, tmp_path, in_force, clock, stall=60)
    try:
        for index in (0, 1):
            api.add("pods", grouped_pod(index, job, 3), "ml-team")
        settle(maker, 2)
        assert next(iter(made(api).values()))["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
        clock.now += 30
        maker.poll()
        assert next(iter(made(api).values()))["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
        clock.now += 31
        assert maker.poll() == "recounted" and maker.recounted == 1
        (group,) = made(api).values()
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": "cloud.google.com/gce-topology-block"}]}
    finally:
        maker.stop()


def test_one_replica_makes_them(tmp_path: Path, api: FakeKubeAPI, in_force: Rules) -> None:
    clock = Clock()
    first, second = controller(api, tmp_path, in_force, clock, identity="a"), \
        controller(api, tmp_path, in_force, clock, identity="b")
    try:
        assert first.poll() == "up to date"
        assert second.poll() == "another replica makes them"
        assert api.objects[("leases", HOME, LEASE)]["spec"]["holderIdentity"] == "a"
    finally:
        first.stop()
        second.stop()


def test_nothing_is_made_where_no_version_serves_them(tmp_path: Path, in_force: Rules) -> None:
    with FakeKubeAPI() as api:
        maker = controller(api, tmp_path, in_force, Clock(), support=PodGroupSupport(known=True))
        try:
            assert maker.poll() == "not served"
            assert not api.requests
        finally:
            maker.stop()
