"""Placement through the real kube-scheduler: the scheduling intent ai-admission writes is acted on.

A simulated cluster (tests/support/clusters.py: GKE-like and EKS-like, labelled and tainted as those providers do)
is created as Node objects; a kube-scheduler binds pods to them and preempts as a cluster's scheduler does (no
kubelet runs: a bound pod stays Pending, and a small stand-in finalizes pods the scheduler deletes, as kubelets
would). A server of its own watches the nodes, as the shipped Deployment does, and is registered for the test's
namespaces. What is measured, on both clusters:

- a multi-node training job packs into one topology domain when one has room, and is told when none has;
- inference replicas spread over both zones;
- a model named only by annotation is pinned by a label its nodes carry, and binds;
- a training job arriving on a cluster full of batch preempts batch and is scheduled;
- an inference pod arriving on a cluster full of training never leaves a training job with some pods evicted;
- a multi-node training pod carries the NCCL settings of the fabric its nodes publish, or a warning that says
  what the fabric needs that the pod lacks.

Skipped with one line where no kube-scheduler binary is found ($KUBEBUILDER_ASSETS, envtest's default
directory, then PATH).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.conftest import eventually, start_server, stop_server
from tests.support.clusters import eks_cluster, gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.control_plane import SCHEDULER, Component, ControlPlane, namespace_name, running
from tests.support.e2e_install import install, uninstall
from tests.support.simulated import E2E_TOLERATION, Kubelets, SimulatedCluster, bound, create, create_node, domain
from webhook.cluster.cluster_facts import UNSERVED_RETRY_SECONDS
from webhook.core import names as names_
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import GROUP, PLURAL, VERSION, facts_data
from webhook.core.view.cluster_facts import NAME as FACTS
from webhook.core.view.priority_state import PriorityClassState
from webhook.generate import native, webhooks

CLUSTERS: dict[str, Callable[[], list[dict[str, Any]]]] = {"gke": gke_cluster, "eks": eks_cluster}
# how each provider's pods select its H100 nodes, and the key of the domain a 24-GPU job packs into
H100_SELECTOR = {"gke": {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"},
                 "eks": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}
PACKING_KEY = {"gke": "cloud.google.com/gce-topology-block", "eks": "topology.k8s.aws/network-node-layer-2"}
SETTLE_SECONDS = 8.0  # how long a pod that must stay Pending is watched


@pytest.fixture(scope="module")
def scheduler(control_plane: ControlPlane) -> Iterator[Component]:
    with running(control_plane, SCHEDULER) as component:
        yield component


@pytest.fixture(scope="module", params=sorted(CLUSTERS))
def cluster(request: pytest.FixtureRequest, control_plane: ControlPlane, scheduler: Component,
            tmp_path_factory: pytest.TempPathFactory, rules: Rules) -> Iterator[SimulatedCluster]:
    """The simulated cluster's nodes, and a server watching them registered for the test namespaces."""
    name = request.param
    nodes = CLUSTERS[name]()
    server = start_server(tmp_path_factory.mktemp(f"placement-{name}"), extra_env={
        "KUBECONFIG": str(control_plane.kubeconfig), "AI_ADMISSION_NODE_CATALOG": "true",
        "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "true",
        # the nodes' facts for the native policies, where their kind is served (only once a test installs it)
        "AI_ADMISSION_CLUSTER_FACTS": "true", "AI_ADMISSION_FACTS_CHECK_SECONDS": "0.5"})
    simulated = SimulatedCluster(name, control_plane, server, nodes, route=f"placement-{name}")
    kubelets = None
    try:
        for node in nodes:
            create_node(simulated, node)
        # every worker has a node watch of its own, and /readyz answers from whichever worker takes the call: asked
        # a couple of dozen times, every worker has answered that it sees all the nodes
        eventually(lambda: all(server.get("/readyz").json()["nodeCatalog"]["gpuNodes"] == len(nodes)
                               for _ in range(24)))
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=simulated.route)
        kubelets = Kubelets(simulated)
        yield simulated
    finally:
        if kubelets is not None:
            kubelets.stop()
        uninstall(control_plane, simulated.route)
        for namespace in simulated.namespaces:
            for pod in simulated.pods(namespace):
                simulated.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"
                                        f"?gracePeriodSeconds=0")
        for node in nodes:
            simulated.api("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        stop_server(server)


@pytest.fixture
def namespace(cluster: SimulatedCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the route; its pods are removed afterwards, so the next test finds the nodes empty."""
    name = cluster.namespace(request.node.originalname.removeprefix("test_")[:30])
    yield name
    for pod in cluster.pods(name):
        cluster.api("DELETE", f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
    eventually(lambda: not cluster.pods(name))


# -- pods as their controllers create them -------------------------------------------------------------------------

def _owner(kind: str, api_version: str, name: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": str(uuid.uuid4()), "controller": True}


def _gpu_container(name: str, gpus: int, env: list[dict[str, str]] | None = None,
                   extra: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi", **(extra or {})}
    return {"name": name, "image": "registry.example.com/ml/job:1", "env": env or [],
            "resources": {"limits": resources, "requests": dict(resources)}}


def training_worker(cluster: SimulatedCluster, job: str, index: int, pods: int, *,
                    extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Worker ``index`` of a PyTorchJob of ``pods`` pods of 8 H100 each, as the training operator creates it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{job}-worker-{index}", "annotations": {"ai-admission.io/gpu-memory": "60Gi"},
        "labels": {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": "worker",
                   "training.kubeflow.org/replica-index": str(index),
                   "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        "ownerReferences": [_owner("PyTorchJob", "kubeflow.org/v1", job)]},
        "spec": {"nodeSelector": dict(H100_SELECTOR[cluster.name]), "tolerations": [E2E_TOLERATION],
                 "terminationGracePeriodSeconds": 0, "restartPolicy": "OnFailure",
                 "containers": [_gpu_container("pytorch", 8, [{"name": "WORLD_SIZE", "value": str(pods)},
                                                               {"name": "RANK", "value": str(index)}], extra)]}}


def batch_pod(cluster: SimulatedCluster, index: int) -> dict[str, Any]:
    """A pod of an Indexed batch Job taking a whole H100 node (8 GPUs)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"embed-{index}", "annotations": {"ai-admission.io/gpu-memory": "20Gi"},
        "labels": {"batch.kubernetes.io/job-name": "embed", "job-name": "embed"},
        "ownerReferences": [_owner("Job", "batch/v1", "embed")]},
        "spec": {"nodeSelector": dict(H100_SELECTOR[cluster.name]), "tolerations": [E2E_TOLERATION],
                 "terminationGracePeriodSeconds": 0, "restartPolicy": "Never",
                 "containers": [_gpu_container("embed", 8)]}}


def inference_replica(selector: dict[str, str], index: int, *, gpus: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"vllm-{index}", "annotations": {"ai-admission.io/gpu-memory": "16Gi"}, "labels": {"app": "vllm"},
        "ownerReferences": [_owner("ReplicaSet", "apps/v1", "vllm-5d8f")]},
        "spec": {"nodeSelector": dict(selector), "tolerations": [E2E_TOLERATION], "terminationGracePeriodSeconds": 0,
                 "containers": [_gpu_container("vllm", gpus)]}}


def fill_one_node_per_domain(cluster: SimulatedCluster, namespace: str, key: str) -> None:
    """A batch pod pinned to the first node of each domain of ``key``: every domain keeps its other nodes free."""
    first: dict[str, str] = {}
    for node in cluster.nodes:
        labels = node["metadata"]["labels"]
        if key in labels:
            first.setdefault(labels[key], node["metadata"]["name"])
    for index, node_name in enumerate(sorted(first.values())):
        pod = batch_pod(cluster, index)
        pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node_name  # and the model, which names the GPU
        create(cluster, namespace, pod)
    bound(cluster, namespace, [f"embed-{i}" for i in range(len(first))])


# -- the measurements ------------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_a_training_job_packs_into_one_domain(cluster: SimulatedCluster, namespace: str) -> None:
    key = PACKING_KEY[cluster.name]
    fill_one_node_per_domain(cluster, namespace, key)  # each domain has 3 free nodes: room for the whole job
    names = [f"llama-worker-{i}" for i in range(3)]
    for index in range(3):
        assert not any("not packed" in w for w in create(cluster, namespace, training_worker(cluster, "llama", index, 3)))
    nodes = bound(cluster, namespace, names)
    assert len({domain(cluster, node, key) for node in nodes.values()}) == 1, nodes


@pytest.mark.e2e
def test_a_training_job_no_domain_holds_is_told(cluster: SimulatedCluster, namespace: str) -> None:
    pods = {"gke": 5, "eks": 9}[cluster.name]  # more GPUs than the broadest domain holds (32 on GKE, 64 on EKS)
    told = create(cluster, namespace, training_worker(cluster, "huge", 0, pods))
    assert any(w.startswith(f"pods not packed: no single {cluster.name} domain holds the job's {pods * 8} GPUs")
               for w in told), told


@pytest.mark.e2e
def test_a_model_named_only_by_annotation_is_pinned_by_a_label_its_nodes_carry_and_binds(
        cluster: SimulatedCluster, namespace: str) -> None:
    """The nodes carry the provider's and GPU feature discovery's labels, not the course's gpu-type: the pod is
    pinned by one they carry, and the scheduler binds it (a gpu-type selector would leave it Pending for ever)."""
    pods = []
    for index in range(2):
        pod = inference_replica({}, index)
        pod["metadata"]["annotations"]["ai-admission.io/gpu-model"] = "h100-80g"
        del pod["spec"]["nodeSelector"]
        told = create(cluster, namespace, pod)
        assert not any("not pinned" in w for w in told), told
        pods.append(pod["metadata"]["name"])
    nodes = bound(cluster, namespace, pods)
    stored = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pods[0]}")
    assert "gpu-type" not in stored["spec"]["nodeSelector"], stored["spec"]["nodeSelector"]
    for node in nodes.values():
        labels = next(n for n in cluster.nodes if n["metadata"]["name"] == node)["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in stored["spec"]["nodeSelector"].items()), (node, labels)


@pytest.mark.e2e
def test_inference_replicas_spread_over_both_zones(cluster: SimulatedCluster, namespace: str) -> None:
    if cluster.name != "gke":
        pytest.skip("the EKS-like cluster's GPU nodes are in one zone")
    selector = {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    for index in range(4):
        create(cluster, namespace, inference_replica(selector, index))
    nodes = bound(cluster, namespace, [f"vllm-{i}" for i in range(4)])
    zones = [domain(cluster, node, "topology.kubernetes.io/zone") for node in nodes.values()]
    assert sorted(zones) == ["us-central1-a", "us-central1-a", "us-central1-b", "us-central1-b"], nodes


@pytest.mark.e2e
def test_a_training_job_preempts_batch(cluster: SimulatedCluster, namespace: str) -> None:
    h100 = [n for n in cluster.nodes if n["metadata"]["labels"]["nvidia.com/gpu.product"].startswith("NVIDIA-H100")]
    for index in range(len(h100)):
        create(cluster, namespace, batch_pod(cluster, index))
    bound(cluster, namespace, [f"embed-{i}" for i in range(len(h100))])
    started = time.monotonic()
    for index in range(2):
        create(cluster, namespace, training_worker(cluster, "ft", index, 2))
    bound(cluster, namespace, ["ft-worker-0", "ft-worker-1"], seconds=90)
    print(f"{cluster.name}: a 2-pod training job preempted batch and was bound in {time.monotonic() - started:.1f} s")
    left = {p["metadata"]["name"] for p in cluster.pods(namespace) if p["metadata"]["name"].startswith("embed-")}
    assert len(left) == len(h100) - 2


@pytest.mark.e2e
def test_inference_never_breaks_a_running_training_job(cluster: SimulatedCluster, namespace: str) -> None:
    h100 = [n for n in cluster.nodes if n["metadata"]["labels"]["nvidia.com/gpu.product"].startswith("NVIDIA-H100")]
    per_job = len(h100) // 2
    jobs = {job: [f"{job}-worker-{i}" for i in range(per_job)] for job in ("pretrain", "sft")}
    for job in jobs:
        for index in range(per_job):
            create(cluster, namespace, training_worker(cluster, job, index, per_job))
    before = bound(cluster, namespace, [name for names in jobs.values() for name in names])
    create(cluster, namespace, inference_replica(H100_SELECTOR[cluster.name], 0))
    time.sleep(SETTLE_SECONDS)
    pods = {p["metadata"]["name"]: p for p in cluster.pods(namespace)}
    for names in jobs.values():
        kept = [name for name in names if name in pods and not pods[name]["metadata"].get("deletionTimestamp")]
        assert kept == names, f"a training job lost {sorted(set(names) - set(kept))}"
    assert {name: pods[name]["spec"]["nodeName"] for name in before} == before
    assert not pods["vllm-0"]["spec"].get("nodeName")  # it waits: neither class preempts the other


@pytest.mark.e2e
def test_a_multi_node_pod_gets_its_fabrics_nccl_settings_or_a_warning(cluster: SimulatedCluster,
                                                                      namespace: str) -> None:
    told = create(cluster, namespace, training_worker(cluster, "nccl", 0, 2))
    pod = next(p for p in cluster.pods(namespace) if p["metadata"]["name"] == "nccl-worker-0")
    env = {e["name"] for e in pod["spec"]["containers"][0].get("env", [])}
    if cluster.name == "gke":
        # A3 Mega (the nodes' instance type): GPUDirect-TCPXO, set up by GKE's plugin from what the pod carries (its
        # networks, the tcpxo-daemon sidecar); this pod carries none of it: told, and nothing added
        assert not env & {"NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE"}
        assert any(w.startswith("NCCL talks TCP between nodes: fabric gpudirect-tcpxo needs the tcpxo-daemon sidecar")
                   and w.endswith("(nothing added; fabrics.needs)") for w in told), told
    else:
        # p5 with EFA: NCCL needs nothing set, but a pod that asks for no EFA device talks TCP: it is told
        assert not env & {"NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE"}
        assert any("offer vpc.amazonaws.com/efa but the pod asks for none" in w for w in told), told
        asking = create(cluster, namespace, training_worker(cluster, "efa", 0, 2, extra={"vpc.amazonaws.com/efa": "32"}))
        assert not any("efa" in w.lower() or "NCCL" in w for w in asking), asking


NATIVE = "test.ai-admission.io/native-placement"


@pytest.mark.e2e
def test_with_no_webhook_the_native_policies_pack_a_job_by_the_facts_the_server_writes(
        cluster: SimulatedCluster, rules: Rules) -> None:
    """The server's node watch writes what it learns to the native policies' parameter, and in a namespace no
    webhook is registered for, the training class's policy packs a job by it: the real scheduler binds the job's
    pods in one domain, as with the webhook."""
    plane, key = cluster.plane, PACKING_KEY[cluster.name]
    objects = native.native_set(rules, [{"key": NATIVE, "operator": "Exists"}])
    home = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": webhooks.NAME}}
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([home, *webhooks.priority_classes(rules),
                                                                       *objects]))
    assert done.returncode == 0, done.stderr
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{webhooks.NAME}/{PLURAL}/{FACTS}"
    namespace = plane.create_namespace(namespace_name(f"{cluster.name}-native"), {NATIVE: "true"})
    try:
        # with the PriorityClasses' state the server's watch finds: every class as the rules say (applied above)
        expected = facts_data(as_context(with_nodes(cluster.nodes, rules), priority_classes=PriorityClassState(checked=True)))
        assert expected["pack"] and expected["priorityClasses"]
        # the server creates the parameter once its kind is served, and fills it from its node watch (a server that
        # found the kind not served asks again a minute later: cluster_facts.UNSERVED_RETRY_SECONDS)
        eventually(lambda: plane.kubectl("get", "-n", webhooks.NAME, f"{PLURAL}/{FACTS}").returncode == 0,
                   seconds=UNSERVED_RETRY_SECONDS + 30)
        eventually(lambda: cluster.api("GET", path).get("data") == expected)

        def worker(index: int) -> dict[str, Any]:
            pod = training_worker(cluster, "llama", index, 3)
            pod["metadata"]["annotations"].update({names_.WORKLOAD_TYPE: "training", names_.GPU_MODEL: "h100-80g"})
            return pod

        def packed_by() -> str | None:  # a dry run: the policies in force and reading the facts just written
            done = plane.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                                 input=json.dumps(worker(0)))
            affinity = json.loads(done.stdout)["spec"].get("affinity") if done.returncode == 0 else None
            terms = ((affinity or {}).get("podAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution")
            return terms[0]["podAffinityTerm"]["topologyKey"] if terms else None

        eventually(lambda: packed_by() == key)
        fill_one_node_per_domain(cluster, namespace, key)
        names = [f"llama-worker-{i}" for i in range(3)]
        for index in range(3):
            create(cluster, namespace, worker(index))
        made = {p["metadata"]["name"]: p for p in cluster.pods(namespace)}
        for name in names:
            terms = made[name]["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == [key], name
        nodes = bound(cluster, namespace, names)
        assert len({domain(cluster, node, key) for node in nodes.values()}) == 1, nodes
    finally:
        for pod in cluster.pods(namespace):
            cluster.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
        eventually(lambda: not cluster.pods(namespace))
        plane.kubectl("delete", "--ignore-not-found", *[f"{o['kind'].lower()}/{o['metadata']['name']}"
                                                         for o in objects if "AdmissionPolicy" in o["kind"]])
        plane.kubectl("delete", "--ignore-not-found", "-n", webhooks.NAME, f"{PLURAL}/{FACTS}")
