"""In front of the real peers: Kueue's, JobSet's and LeaderWorkerSet's controllers (tests/support/peers.py) on a
control plane with the Workload API's gates on, its kube-scheduler and controller manager (Job, StatefulSet,
ReplicaSet controllers), simulated GKE A3 Mega nodes (two blocks of four nodes of 8 H100), and two servers
watching them: one with the shipped rules, one with Kueue as the backend.

What a user sees is asserted, not only what was written:

- a LeaderWorkerSet whose model is named only by annotation binds (a selector on a label no node carries kept it
  Pending with no word);
- an LWS of 3 groups of 2 pods of 8 GPUs on room for 2 groups ends with every group wholly bound or wholly
  pending (each group is a PodGroup of its own);
- a training JobSet of three one-pod Jobs is grouped by ai-admission's PodGroup and bound in one block;
- Kueue 0.13, which serves ``v1beta1`` only: a Job naming a LocalQueue that does not exist and a Job over its
  queue's quota are denied at their CREATE; in a namespace whose only LocalQueue is ``default`` a training Job is
  admitted through Kueue's own defaulting (and, with no WorkloadPriorityClass in the cluster, no priority class
  named that would keep Kueue from making its Workload); with Kueue's topology-aware scheduling on, a multi-node
  Job on an ordinary flavor is admitted (no topology request it could never meet); two 16-GPU Jobs on a 16-GPU
  queue are admitted one at a time; a JobSet is one Workload (its Jobs carry no queue words of their own).

Skipped with one line where a binary or a peer is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.conftest import RULES_FILE, Server, e2e_unavailable, eventually, gpu_cluster_objects, start_server, stop_server
from tests.support.clusters import gke_cluster
from tests.support.control_plane import CONTROLLER_MANAGER, SCHEDULER, ControlPlane, find_binaries, find_binary
from tests.support.crds import crds
from tests.support.e2e_install import install, uninstall
from tests.support.owners import course_pytorchjob
from tests.support.peers import PEERS, Peer, find_peer, unavailable
from tests.support.reviews import admission_review
from tests.support.simulated import E2E_TOLERATION, SimulatedCluster, create_node, domain
from webhook.config.rules_file import load_rules

pytestmark = [pytest.mark.e2e]

GATES = {"GenericWorkload": True, "GangScheduling": True, "TopologyAwareWorkloadScheduling": True,
         "WorkloadWithJob": True, "WorkloadAwarePreemption": True}
HOME = "ai-admission"
H100 = "h100-80g"
BLOCK = "cloud.google.com/gce-topology-block"
SETTLE_SECONDS = 8.0
KUEUE = "/apis/kueue.x-k8s.io/v1beta1"


def _server(tmp: Path, plane: ControlPlane, rules: Path, *, gang: bool) -> Server:
    """A server as shipped; the one with Kueue as its backend makes no PodGroups (the Lease is the other's)."""
    return start_server(tmp, rules=rules, extra_env={
        "KUBECONFIG": str(plane.kubeconfig), "AI_ADMISSION_NODE_CATALOG": "true",
        "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "true", "AI_ADMISSION_NAMESPACE": HOME,
        "AI_ADMISSION_POD_GROUPS": "true" if gang else "false", "AI_ADMISSION_POD_GROUPS_CHECK_SECONDS": "0.5",
        "AI_ADMISSION_WATCH_QUEUES": "true", "AI_ADMISSION_QUEUES_RESYNC_SECONDS": "5"})


def _ready(server: Server, nodes: int, *, gang: bool) -> bool:
    answers = [server.get("/readyz").json() for _ in range(16)]
    return all(a["nodeCatalog"]["gpuNodes"] == nodes and (not gang or a["podGroups"]["controllerInService"])
               for a in answers)


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SimulatedCluster]]:
    """The gated control plane, the scheduler and controllers, the nodes, the three peers and both servers."""
    reason = e2e_unavailable() or unavailable(PEERS)
    if reason:
        pytest.skip(reason)
    for name in (SCHEDULER, CONTROLLER_MANAGER):
        if find_binary(name) is None:
            pytest.skip(f"no {name}: the peers' tests need one")
    tmp = tmp_path_factory.mktemp("peers")
    kueue_rules = tmp / "kueue-rules.yaml"
    document = yaml.safe_load(RULES_FILE.read_text())
    document["scheduler"]["backend"] = "kueue"
    kueue_rules.write_text(yaml.safe_dump(document))
    with ControlPlane(find_binaries(), tmp / "plane", feature_gates=GATES) as plane:
        gpu_cluster_objects(plane)
        plane.create_namespace(HOME)
        done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(crds([course_pytorchjob()])))
        assert done.returncode == 0, done.stderr
        scheduler = plane.start_scheduler(find_binary(SCHEDULER))  # type: ignore[arg-type]
        controllers = plane.start_controller_manager(find_binary(CONTROLLER_MANAGER), controllers=(  # type: ignore[arg-type]
            "job-controller", "replicaset-controller", "statefulset-controller", "garbage-collector-controller"))
        running: list[Peer] = []
        servers: dict[str, Server] = {}
        made: dict[str, SimulatedCluster] = {}
        try:
            for name in PEERS:
                install_ = find_peer(name)
                assert install_ is not None
                # Kueue with topology-aware scheduling on, as it is by default from Kueue 0.14
                gates = {"TopologyAwareScheduling": True} if name == "kueue" else None
                running.append(Peer(install_, plane, tmp / "peers" / name, feature_gates=gates).start())
            nodes = gke_cluster()
            servers = {"default": _server(tmp / "default", plane, RULES_FILE, gang=True),
                       "kueue": _server(tmp / "kueue", plane, kueue_rules, gang=False)}
            made = {name: SimulatedCluster(f"peers-{name}", plane, server, nodes, route=f"peers-{name}")
                    for name, server in servers.items()}
            for node in nodes:
                create_node(made["default"], node)
            for name, cluster in made.items():
                eventually(lambda: _ready(cluster.server, len(nodes), gang=name == "default"),  # noqa: B023
                           seconds=60)
                install(plane, url=cluster.server.url, ca=Path(cluster.server.ca),
                        rules=load_rules(kueue_rules if name == "kueue" else RULES_FILE), route=cluster.route)
            yield made
        finally:
            for cluster in made.values():
                uninstall(plane, cluster.route)
            for server in servers.values():
                stop_server(server)
            for peer in reversed(running):
                peer.stop()
            controllers.stop()
            scheduler.stop()


# -- what users write ------------------------------------------------------------------------------------------------

def _container(name: str, gpus: int = 8) -> dict[str, Any]:
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "32", "memory": "256Gi"}
    return {"name": name, "image": "vllm/vllm-openai:v0.8.5",
            "resources": {"limits": resources, "requests": dict(resources)}}


def _pod_template(name: str, *, selector: dict[str, str] | None = None, gpus: int = 8) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": [E2E_TOLERATION], "terminationGracePeriodSeconds": 0,
                            "containers": [_container(name, gpus)]}
    if selector:
        spec["nodeSelector"] = dict(selector)
    return {"metadata": {"annotations": {"ai-admission.io/gpu-model": H100, "ai-admission.io/gpu-memory": "60Gi"}},
            "spec": spec}


def leaderworkerset(name: str, replicas: int, size: int, selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A LeaderWorkerSet as the project's vLLM example writes it (docs/examples/vllm/GPU/lws.yaml), the model named
    by annotation only."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                "size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod_template("vllm-leader", selector=selector),
                "workerTemplate": _pod_template("vllm-worker", selector=selector)}}}


def apply(cluster: SimulatedCluster, namespace: str, obj: dict[str, Any]) -> str:
    """Create ``obj``; what kubectl printed (the admission warnings among it)."""
    done = cluster.plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    assert done.returncode == 0, done.stderr
    return done.stderr


def refused(cluster: SimulatedCluster, namespace: str, obj: dict[str, Any]) -> str:
    done = cluster.plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    assert done.returncode != 0, done.stdout
    return done.stderr


def settled(check: Callable[[], Any], seconds: float = SETTLE_SECONDS) -> Any:
    """``check``'s answer once it has not changed for ``seconds`` (at most four times that)."""
    last, since, deadline = check(), time.monotonic(), time.monotonic() + 4 * seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = check()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            break
    return last


def clean(cluster: SimulatedCluster, namespace: str) -> None:
    """The test's owners deleted (their controllers stop making pods) and their pods with them, at once: no kubelet
    confirms a pod's end here."""
    for path in ("/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
                 "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", "/apis/batch/v1/namespaces/{ns}/jobs"):
        collection = path.format(ns=namespace)
        for item in cluster.api("GET", collection)["items"]:
            cluster.api("DELETE", f"{collection}/{item['metadata']['name']}?propagationPolicy=Background")
    eventually(lambda: not [cluster.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}"
                                                  f"?gracePeriodSeconds=0") for p in cluster.pods(namespace)]
               and not cluster.pods(namespace), seconds=60)


def groups_bound(cluster: SimulatedCluster, namespace: str) -> dict[str, tuple[int, int]]:
    """LWS group index -> (pods bound, pods made)."""
    found: dict[str, tuple[int, int]] = {}
    for pod in cluster.pods(namespace):
        index = pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-index", "?")
        on, made = found.get(index, (0, 0))
        found[index] = (on + (1 if pod["spec"].get("nodeName") else 0), made + 1)
    return found


@pytest.fixture
def cleaned(peers: dict[str, SimulatedCluster]) -> Iterator[list[tuple[SimulatedCluster, str]]]:
    """The namespaces a test used, cleaned after it (the nodes are the module's: the next test needs them free)."""
    used: list[tuple[SimulatedCluster, str]] = []
    yield used
    for cluster, namespace in used:
        clean(cluster, namespace)


def namespace_of(cluster: SimulatedCluster, hint: str, cleaned: list[tuple[SimulatedCluster, str]]) -> str:
    namespace = cluster.namespace(hint)
    cleaned.append((cluster, namespace))
    return namespace


# -- LeaderWorkerSet -------------------------------------------------------------------------------------------------

def test_a_leaderworkerset_named_by_annotation_binds(peers: dict[str, SimulatedCluster],
                                                     cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    cluster = peers["default"]
    namespace = namespace_of(cluster, "lws-pin", cleaned)
    apply(cluster, namespace, leaderworkerset("vllm", 1, 2))
    placed = eventually(lambda: (found := groups_bound(cluster, namespace)) == {"0": (2, 2)} and found, seconds=60)
    assert placed == {"0": (2, 2)}
    for pod in cluster.pods(namespace):
        assert "gpu-type" not in (pod["spec"].get("nodeSelector") or {})


def test_a_leaderworkerset_s_groups_bind_whole_or_not_at_all(peers: dict[str, SimulatedCluster],
                                                             cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    """3 groups of 2 pods of 8 GPUs on one block of 4 nodes: room for 2 groups."""
    cluster = peers["default"]
    namespace = namespace_of(cluster, "lws-gang", cleaned)
    block = domain(cluster, cluster.nodes[0]["metadata"]["name"], BLOCK)
    apply(cluster, namespace, leaderworkerset("llama", 3, 2, selector={BLOCK: block}))
    eventually(lambda: sum(made for _, made in groups_bound(cluster, namespace).values()) == 6, seconds=60)
    outcome = settled(lambda: groups_bound(cluster, namespace))
    print(f"an LWS of 3 groups of 2 on room for 2: {outcome}")
    assert all(on in (0, made) for on, made in outcome.values()), outcome
    assert sorted(on for on, _ in outcome.values()) == [0, 2, 2], outcome
    podgroups = cluster.api("GET", f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups")["items"]
    assert sorted(g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in podgroups) == [2, 2, 2]


# -- JobSet ----------------------------------------------------------------------------------------------------------

def training_jobset(name: str, pods: int) -> dict[str, Any]:
    """A JobSet of ``pods`` one-pod Jobs of 8 H100, training by its JobSet's label, across ``pods`` nodes by its
    launcher (JobSet's PyTorch example: a replicated Job per node running torchrun)."""
    template = _pod_template("trainer")
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["containers"][0]["command"] = ["torchrun", f"--nnodes={pods}", "--nproc_per_node=8", "train.py"]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": pods, "template": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}}}]}}


def test_a_training_jobset_is_grouped_and_bound_in_one_block(peers: dict[str, SimulatedCluster],
                                                             cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    cluster = peers["default"]
    namespace = namespace_of(cluster, "jobset", cleaned)
    apply(cluster, namespace, training_jobset("pretrain", 3))
    pods = eventually(lambda: (found := cluster.pods(namespace)) and len(found) == 3
                      and all(p["spec"].get("nodeName") for p in found) and found, seconds=90)
    assert len({p["spec"]["schedulingGroup"]["podGroupName"] for p in pods}) == 1
    assert len({domain(cluster, p["spec"]["nodeName"], BLOCK) for p in pods}) == 1


# -- Kueue ------------------------------------------------------------------------------------------------------------

def kueue_objects(namespace: str, queue: str, gpus: int) -> list[dict[str, Any]]:
    """A flavor, a ClusterQueue of ``gpus`` GPUs (Kueue's site/static/examples/admin/single-clusterqueue-setup.yaml)
    and a LocalQueue ``queue`` in ``namespace``."""
    flavor = f"{namespace}-flavor"
    spec: dict[str, Any] = {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}}
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": spec},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": f"{namespace}-cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
             "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": 1024},
                                                        {"name": "memory", "nominalQuota": "8Ti"},
                                                        {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": queue,
                                                                                   "namespace": namespace},
         "spec": {"clusterQueue": f"{namespace}-cq"}},
    ]


def indexed_job(name: str, pods: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An Indexed training Job of ``pods`` pods of 8 H100, known for training by its launcher."""
    template = _pod_template("trainer")
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["containers"][0]["command"] = ["torchrun", f"--nnodes={pods}", "--nproc_per_node=8", "train.py"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"completionMode": "Indexed", "parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": template}}


def kueue_namespace(cluster: SimulatedCluster, hint: str, queue: str, gpus: int,
                    cleaned: list[tuple[SimulatedCluster, str]]) -> str:
    namespace = namespace_of(cluster, hint, cleaned)
    objects = kueue_objects(namespace, queue, gpus)
    done = cluster.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    assert done.returncode == 0, done.stderr
    # every worker's queue watch (v1beta1 here) has the queue and its quota before a Job is judged: a Job one pod
    # over the quota is denied for it
    probe = indexed_job("probe", gpus // 8 + 1, labels={"kueue.x-k8s.io/queue-name": queue})
    probe["metadata"]["namespace"] = namespace
    def known() -> bool:
        return all("can ever give" in (cluster.server.review("/validate", admission_review(
            probe, group="batch", kind="Job", resource="jobs")).get("status") or {}).get("message", "")
                   for _ in range(8))

    eventually(known, seconds=30)
    return namespace


def admitted(cluster: SimulatedCluster, namespace: str, name: str) -> bool:
    job = cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    workloads = cluster.api("GET", f"{KUEUE}/namespaces/{namespace}/workloads")["items"]
    conditions = [c for w in workloads for c in (w.get("status") or {}).get("conditions") or []]
    return job["spec"].get("suspend") is False and any(c["type"] == "Admitted" and c["status"] == "True"
                                                       for c in conditions)



def test_kueue_0_13_a_missing_queue_and_a_job_over_its_quota_are_denied(
        peers: dict[str, SimulatedCluster], cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    cluster = peers["kueue"]
    namespace = kueue_namespace(cluster, "kueue-checks", "training", 16, cleaned)
    missing = refused(cluster, namespace, indexed_job("typo", 2, labels={"kueue.x-k8s.io/queue-name": "trianing"}))
    assert 'LocalQueue "trianing" does not exist' in missing and "name one of: training" in missing, missing
    over = refused(cluster, namespace, indexed_job("huge", 3))
    assert "the job asks for 24 GPUs in all, more than kueue LocalQueue \"training\" can ever give (16" in over, over


def test_kueue_s_default_queue_admits_a_job_in_a_namespace_without_the_class_s(
        peers: dict[str, SimulatedCluster], cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    cluster = peers["kueue"]
    namespace = kueue_namespace(cluster, "kueue-default", "default", 16, cleaned)
    told = apply(cluster, namespace, indexed_job("ft", 2))
    assert 'no queue name written: kueue LocalQueue "training"' in told, told
    # the cluster has no WorkloadPriorityClass: naming ai-training would leave the job with no Workload at all
    assert 'no priority class written: kueue has no WorkloadPriorityClass "ai-training"' in told, told
    job = cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/ft")
    assert job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == "default"  # Kueue's own defaulting
    eventually(lambda: admitted(cluster, namespace, "ft"), seconds=60)
    eventually(lambda: (found := cluster.pods(namespace)) and len(found) == 2
               and all(p["spec"].get("nodeName") for p in found), seconds=60)


def test_with_kueue_s_topology_aware_scheduling_a_job_on_an_ordinary_flavor_is_admitted(
        peers: dict[str, SimulatedCluster], cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    cluster = peers["kueue"]
    namespace = kueue_namespace(cluster, "kueue-tas", "training", 32, cleaned)
    told = apply(cluster, namespace, indexed_job("ft", 2))
    assert "no topology request written for kueue" in told, told
    job = cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/ft")
    notes = job["spec"]["template"]["metadata"].get("annotations") or {}
    assert not any(k.startswith("kueue.x-k8s.io/podset-") for k in notes), notes
    eventually(lambda: admitted(cluster, namespace, "ft"), seconds=60)


def test_kueue_admits_two_jobs_on_room_for_one_one_at_a_time(
        peers: dict[str, SimulatedCluster], cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    """Two 16-GPU Indexed Jobs on a 16-GPU queue: one admitted and bound, the other suspended, its pods not made."""
    cluster = peers["kueue"]
    namespace = kueue_namespace(cluster, "kueue-two", "training", 16, cleaned)
    for name in ("first", "second"):
        apply(cluster, namespace, indexed_job(name, 2))
    eventually(lambda: admitted(cluster, namespace, "first") or admitted(cluster, namespace, "second"), seconds=60)
    outcome = settled(lambda: sorted((p["metadata"]["labels"].get("batch.kubernetes.io/job-name"),
                                      bool(p["spec"].get("nodeName"))) for p in cluster.pods(namespace)))
    jobs = {job for job, _ in outcome}
    assert len(jobs) == 1 and all(on for _, on in outcome) and len(outcome) == 2, outcome


def test_a_jobset_under_kueue_is_one_workload(peers: dict[str, SimulatedCluster],
                                              cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    """Kueue queues the JobSet; its Jobs carry no queue words of their own, and make no Workload of their own."""
    cluster = peers["kueue"]
    namespace = kueue_namespace(cluster, "kueue-jobset", "training", 32, cleaned)
    apply(cluster, namespace, training_jobset("pretrain", 2))
    stored = cluster.api("GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/pretrain")
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    eventually(lambda: (found := cluster.pods(namespace)) and len(found) == 2
               and all(p["spec"].get("nodeName") for p in found), seconds=90)
    workloads = cluster.api("GET", f"{KUEUE}/namespaces/{namespace}/workloads")["items"]
    assert [w["metadata"]["ownerReferences"][0]["kind"] for w in workloads] == ["JobSet"], workloads
    for job in cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]:
        assert "kueue.x-k8s.io/priority-class" not in (job["metadata"].get("labels") or {})


# -- heard at apply ------------------------------------------------------------------------------------------------

def test_applying_a_multi_node_pytorchjob_prints_what_its_pods_will_be_told(
        peers: dict[str, SimulatedCluster], cleaned: list[tuple[SimulatedCluster, str]]) -> None:
    """The fabric's needs its pods would be told at /mutate (read by the training operator, which reads none) are
    printed by kubectl at the PyTorchJob's own apply."""
    cluster = peers["default"]
    namespace = namespace_of(cluster, "heard", cleaned)
    job = course_pytorchjob(model=H100)
    job["metadata"].pop("namespace", None)
    for role in ("Master", "Worker"):
        job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["nodeSelector"] = {
            "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    told = apply(cluster, namespace, job)
    assert "NCCL talks TCP between nodes: fabric gpudirect-tcpxo needs the tcpxo-daemon sidecar" in told, told
    assert told.count("fabric gpudirect-tcpxo") == 1, told  # said once for the Master and Workers
