"""The default scheduler's gang, through the Workload API of a real control plane (kube-apiserver, kube-scheduler and
kube-controller-manager v1.36 with GenericWorkload, GangScheduling, TopologyAwareWorkloadScheduling, WorkloadWithJob
and WorkloadAwarePreemption on), on simulated GKE A3 Mega nodes (tests/support/clusters.py: two blocks of four
nodes of 8 H100).

Two servers watch the same nodes: one as shipped (the gang on: it makes the groups of the training kinds' jobs and
gives the Job controller's groups their topology), one with the gang off (ai-admission before it: packing affinity,
priorities, no group), each registered for namespaces of its own. What is measured, the same scenarios through
both, in the same run:

- two 3-pod PyTorchJobs (8 GPUs a pod) whose pods arrive interleaved where the nodes hold one of them: with the
  gang one job is wholly bound and the other wholly pending, in every run; how often each job was partly bound
  with the gang off is printed;
- an Indexed 3-pod training Job (annotated, or known by its launcher alone): the Job controller's PodGroup carries
  the narrowest block that holds it, the class's PriorityClass and disruption mode, and its pods are bound in one
  block;
- a 9-pod job on 8 nodes (72 GPUs, the cluster holds 64): told at admission, and with the gang no pod of it binds.

And on the session's control plane, whose gates are off: nothing of this is written; the pod is mutated exactly as
with the gang off. Skipped with one line where a binary is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import Server, e2e_unavailable, eventually, gpu_cluster_objects, start_server, stop_server
from tests.support.apiserver import warnings
from tests.support.clusters import gke_cluster
from tests.support.control_plane import CONTROLLER_MANAGER, SCHEDULER, ControlPlane, find_binaries, find_binary, namespace_name
from tests.support.crds import crds
from tests.support.e2e_install import install, route_labels, uninstall
from tests.support.simulated import E2E_TOLERATION, SimulatedCluster, create, create_node, domain
from webhook.core.podgroups import plan as groups
from webhook.core.rules import Rules

GATES = {"GenericWorkload": True, "GangScheduling": True, "TopologyAwareWorkloadScheduling": True,
         "WorkloadWithJob": True, "WorkloadAwarePreemption": True}
HOME = "ai-admission"  # the servers' namespace: the group controller's Lease
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
BLOCK = "cloud.google.com/gce-topology-block"
RUNS = 3
SETTLE_SECONDS = 6.0  # how long the pods of a job that must stay Pending are watched
PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2"
JOB_UID = "4c1f0a52-8d3e-4b6f-9a27-1e5d3c2b0f48"


def _server(tmp: Path, plane: ControlPlane, *, gang: bool) -> Server:
    return start_server(tmp, extra_env={
        "KUBECONFIG": str(plane.kubeconfig), "AI_ADMISSION_NODE_CATALOG": "true",
        "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "true", "AI_ADMISSION_NAMESPACE": HOME,
        "AI_ADMISSION_POD_GROUPS": "true" if gang else "false", "AI_ADMISSION_POD_GROUPS_CHECK_SECONDS": "0.5"})


def _sees_every_node(server: Server, nodes: int) -> bool:
    """Asked a couple of dozen times (every worker has a node watch of its own), every worker sees the nodes."""
    return all(server.get("/readyz").json()["nodeCatalog"]["gpuNodes"] == nodes for _ in range(24))


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory, rules: Rules) -> Iterator[dict[str, SimulatedCluster]]:
    """The gated control plane with its scheduler and Job controller, the nodes, and both servers registered."""
    reason = e2e_unavailable()
    if reason:
        pytest.skip(reason)
    for name in (SCHEDULER, CONTROLLER_MANAGER):
        if find_binary(name) is None:
            pytest.skip(f"no {name}: the gang tests need one")
    tmp = tmp_path_factory.mktemp("gang")
    with ControlPlane(find_binaries(), tmp / "plane", feature_gates=GATES) as plane:
        gpu_cluster_objects(plane)
        plane.create_namespace(HOME)
        done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(crds([pytorchjob("x", 2)])))
        assert done.returncode == 0, done.stderr
        scheduler = plane.start_scheduler(find_binary(SCHEDULER))  # type: ignore[arg-type]
        controllers = plane.start_controller_manager(find_binary(CONTROLLER_MANAGER))  # type: ignore[arg-type]
        nodes = gke_cluster()
        servers = {"gang": _server(tmp / "gang", plane, gang=True), "today": _server(tmp / "today", plane, gang=False)}
        made = {name: SimulatedCluster(f"gang-{name}", plane, server, nodes, route=f"gang-{name}")
                for name, server in servers.items()}
        try:
            for node in nodes:
                create_node(made["gang"], node)
            for cluster in made.values():
                eventually(lambda: _sees_every_node(cluster.server, len(nodes)))  # noqa: B023 - called at once
                install(plane, url=cluster.server.url, ca=Path(cluster.server.ca), rules=rules, route=cluster.route)
            eventually(lambda: all(servers["gang"].get("/readyz").json()["podGroups"]["controllerInService"]
                                   for _ in range(12)), seconds=60)
            yield made
        finally:
            for cluster in made.values():
                uninstall(plane, cluster.route)
                stop_server(cluster.server)
            controllers.stop()
            scheduler.stop()


# -- jobs as users write them and their operators make their pods ----------------------------------------------------

def _container(name: str) -> dict[str, Any]:
    resources = {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}
    return {"name": name, "image": "registry.example.com/llm/train:2.4",
            "resources": {"limits": resources, "requests": dict(resources)}}


def _template(selector: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi"}},
            "spec": {"nodeSelector": selector, "tolerations": [E2E_TOLERATION], "terminationGracePeriodSeconds": 0,
                     "containers": [_container("pytorch")]}}


def pytorchjob(name: str, pods: int, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A PyTorchJob of a Master and ``pods - 1`` Workers of 8 H100 (kubeflow/training-operator's examples)."""
    chosen = selector or H100
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _template(chosen)},
                "Worker": {"replicas": pods - 1, "restartPolicy": "OnFailure", "template": _template(chosen)}}}}


def operator_pod(job: dict[str, Any], role: str, index: int, pods: int) -> dict[str, Any]:
    """A pod as the training operator makes it from ``job``'s template (pkg/controller.v1/pytorch: its labels, the
    env torchrun reads, the controller reference)."""
    template = job["spec"]["pytorchReplicaSpecs"][role.capitalize()]["template"]
    name = job["metadata"]["name"]
    rank = 0 if role == "master" else index + 1
    container = {**_container("pytorch"), "env": [
        {"name": "MASTER_ADDR", "value": f"{name}-master-0"}, {"name": "MASTER_PORT", "value": "23456"},
        {"name": "WORLD_SIZE", "value": str(pods)}, {"name": "RANK", "value": str(rank)},
        {"name": "PYTHONUNBUFFERED", "value": "1"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{name}-{role}-{index}", "annotations": dict(template["metadata"]["annotations"]),
        "labels": {"training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": role,
                   "training.kubeflow.org/replica-index": str(index),
                   "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name,
                             "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {**template["spec"], "restartPolicy": "OnFailure", "containers": [container]}}


def submit(cluster: SimulatedCluster, namespace: str, name: str, pods: int,
           selector: dict[str, str] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Create the PyTorchJob (its uid is the API server's) and return it with its pods, not yet created."""
    made = cluster.api("POST", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs",
                       pytorchjob(name, pods, selector))
    return made, [operator_pod(made, "master", 0, pods)] + [operator_pod(made, "worker", i, pods)
                                                             for i in range(pods - 1)]


def bound_per_job(cluster: SimulatedCluster, namespace: str, jobs: list[str]) -> dict[str, int]:
    pods = cluster.pods(namespace)
    return {job: sum(1 for p in pods if p["metadata"]["name"].startswith(f"{job}-") and p["spec"].get("nodeName"))
            for job in jobs}


def settled(cluster: SimulatedCluster, namespace: str, jobs: list[str], seconds: float = SETTLE_SECONDS,
            limit: float = 60) -> dict[str, int]:
    """The pods bound per job once nothing has changed for ``seconds``."""
    deadline = time.monotonic() + limit
    last, since = bound_per_job(cluster, namespace, jobs), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = bound_per_job(cluster, namespace, jobs)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return now
    return last


def clean(cluster: SimulatedCluster, namespace: str) -> None:
    for kind in ("pytorchjobs", "jobs"):
        group = "kubeflow.org/v1" if kind == "pytorchjobs" else "batch/v1"
        for item in cluster.api("GET", f"/apis/{group}/namespaces/{namespace}/{kind}")["items"]:
            cluster.api("DELETE", f"/apis/{group}/namespaces/{namespace}/{kind}/{item['metadata']['name']}"
                                  f"?propagationPolicy=Background")
    for pod in cluster.pods(namespace):
        cluster.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
    eventually(lambda: not cluster.pods(namespace), seconds=60)


# -- the measurements ------------------------------------------------------------------------------------------------

def race(cluster: SimulatedCluster, run: int) -> dict[str, int]:
    """Two 3-pod jobs, their pods interleaved, on the four nodes of one block (room for one of them)."""
    namespace = cluster.namespace(f"race-{run}")
    block = {**H100, BLOCK: "block-1"}
    jobs = [submit(cluster, namespace, name, 3, block) for name in ("pretrain", "sft")]
    try:
        for first, second in zip(jobs[0][1], jobs[1][1], strict=True):
            create(cluster, namespace, first)
            create(cluster, namespace, second)
        return settled(cluster, namespace, ["pretrain", "sft"])
    finally:
        clean(cluster, namespace)


@pytest.mark.e2e
def test_two_jobs_arriving_together_never_hold_part_of_the_nodes_each(clusters: dict[str, SimulatedCluster]) -> None:
    outcomes = {name: [race(cluster, run) for run in range(RUNS)] for name, cluster in clusters.items()}
    partial = {name: sum(1 for o in runs for bound in o.values() if 0 < bound < 3) for name, runs in outcomes.items()}
    print(f"two 3-pod jobs on room for one, {RUNS} runs: pods bound per job with the gang {outcomes['gang']}, "
          f"with the gang off {outcomes['today']}; jobs partly bound: {partial['gang']} with the gang, "
          f"{partial['today']} with it off")
    for outcome in outcomes["gang"]:
        assert sorted(outcome.values()) == [0, 3], outcomes["gang"]


@pytest.mark.e2e
def test_a_jobs_pods_name_the_group_the_controller_made_from_its_job(clusters: dict[str, SimulatedCluster]) -> None:
    cluster = clusters["gang"]
    namespace = cluster.namespace("named")
    try:
        job, pods = submit(cluster, namespace, "llama", 3)
        told = create(cluster, namespace, pods[0])
        assert not [w for w in told if "gang" in w], told
        made = next(p for p in cluster.pods(namespace) if p["metadata"]["name"] == "llama-master-0")
        name = groups.group_name(groups.JobRef("kubeflow.org/v1", "PyTorchJob", "llama", job["metadata"]["uid"]))
        assert made["spec"]["schedulingGroup"] == {"podGroupName": name}
        group = eventually(lambda: cluster.api("GET", f"{PODGROUPS}/namespaces/{namespace}/podgroups")["items"])
        assert [g["metadata"]["name"] for g in group] == [name]
        spec = group[0]["spec"]
        assert spec["schedulingPolicy"] == {"gang": {"minCount": 3}}
        assert spec["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}
        assert (spec["priorityClassName"], spec["disruptionMode"]) == ("ai-training", "PodGroup")
        assert spec["priority"] == next(c["value"] for c in cluster.api(
            "GET", "/apis/scheduling.k8s.io/v1/priorityclasses")["items"] if c["metadata"]["name"] == "ai-training")
        assert group[0]["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        time.sleep(2)  # one pod of three: it waits for the others
        assert not bound_per_job(cluster, namespace, ["llama"])["llama"]
        for pod in pods[1:]:
            create(cluster, namespace, pod)
        assert settled(cluster, namespace, ["llama"], seconds=2) == {"llama": 3}
        # the job deleted, its group goes with it: the garbage collector deletes it (it is gone once its pods are:
        # the API server's PodGroupProtection finalizer, and no kubelet confirms the pods' end here)
        cluster.api("DELETE", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/llama")
        eventually(lambda: all(g["metadata"].get("deletionTimestamp") for g in cluster.api(
            "GET", f"{PODGROUPS}/namespaces/{namespace}/podgroups")["items"]), seconds=60)
    finally:
        clean(cluster, namespace)


def indexed_job(name: str, pods: int, *, annotated: bool = True) -> dict[str, Any]:
    """An Indexed training Job of ``pods`` pods of 8 H100 (torchrun over the completions); without ``annotated``
    it is known for training by its launcher alone, as a recipe writes it."""
    template = _template(H100)
    if annotated:
        template["metadata"]["annotations"]["ai-admission.io/workload-type"] = "training"
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["containers"][0]["command"] = ["torchrun", "--nnodes", str(pods), "train.py"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": template}}


@pytest.mark.e2e
@pytest.mark.parametrize("annotated", [True, False], ids=["annotated", "by-its-launcher"])
def test_an_indexed_job_is_packed_by_its_groups_constraint(clusters: dict[str, SimulatedCluster],
                                                            annotated: bool) -> None:
    cluster = clusters["gang"]
    namespace = cluster.namespace("indexed" if annotated else "launched")
    try:
        job = indexed_job("ft", 3, annotated=annotated)
        done = cluster.plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
        assert done.returncode == 0, done.stderr
        (group,) = eventually(lambda: cluster.api("GET", f"{PODGROUPS}/namespaces/{namespace}/podgroups")["items"])
        spec = group["spec"]
        assert spec["schedulingPolicy"] == {"gang": {"minCount": 3}}  # the Job controller's
        assert spec["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}  # ai-admission's
        assert (spec["priorityClassName"], spec["disruptionMode"]) == ("ai-training", "PodGroup")
        pods = eventually(lambda: (found := cluster.pods(namespace)) and len(found) == 3
                          and all(p["spec"].get("nodeName") for p in found) and found, seconds=60)
        assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {group["metadata"]["name"]}
        records = [json.loads(p["metadata"]["annotations"]["ai-admission.io/profile"]) for p in pods]
        assert {(r["class"], r["multiNode"], r["jobPods"]) for r in records} == {("training", True, 3)}
        blocks = {domain(cluster, p["spec"]["nodeName"], BLOCK) for p in pods}
        assert len(blocks) == 1, blocks
    finally:
        clean(cluster, namespace)


@pytest.mark.e2e
def test_a_job_too_big_for_the_cluster_is_told_and_binds_no_pod(clusters: dict[str, SimulatedCluster]) -> None:
    outcome: dict[str, int] = {}
    for name, cluster in clusters.items():
        namespace = cluster.namespace("huge")
        try:
            _, pods = submit(cluster, namespace, "huge", 9)
            told = [w for pod in pods for w in create(cluster, namespace, pod)]
            assert any("72 GPUs (9 pods of 8), more than the cluster's 8 h100-80g nodes hold together (64)" in w
                       for w in told), told
            outcome[name] = settled(cluster, namespace, ["huge"])["huge"]
        finally:
            clean(cluster, namespace)
    print(f"a 9-pod job on 8 nodes: {outcome['gang']} pods bound with the gang, {outcome['today']} with it off")
    assert outcome["gang"] == 0


@pytest.mark.e2e
def test_where_the_gates_are_off_nothing_changes(control_plane: ControlPlane, tmp_path: Path, rules: Rules) -> None:
    """The session's control plane serves no PodGroups: a server with the gang on mutates a job's pod exactly as
    one with it off, and says nothing of groups."""
    mutated = {}
    for gang in (True, False):
        server = _server(tmp_path / str(gang), control_plane, gang=gang)
        route = f"gates-off-{str(gang).lower()}"
        try:
            if gang:
                eventually(lambda: server.get("/readyz").json().get("podGroups", {}).get("served", "?") is None)  # noqa: B023
            install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=route)
            namespace = control_plane.create_namespace(namespace_name(route), route_labels(route))
            job = {**pytorchjob("llama", 3), "metadata": {"name": "llama", "uid": JOB_UID}}
            done = control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                                         input=json.dumps(operator_pod(job, "worker", 0, 3)))
            assert done.returncode == 0, done.stderr
            assert not [w for w in warnings(done.stderr) if "gang" in w or "PodGroup" in w]
            pod = json.loads(done.stdout)
            for key in ("namespace", "creationTimestamp", "uid"):  # the API server's own, per request
                pod["metadata"].pop(key, None)
            mutated[gang] = pod
        finally:
            uninstall(control_plane, route)
            stop_server(server)
    assert "schedulingGroup" not in mutated[True]["spec"]
    assert mutated[True] == mutated[False]
