"""Scheduling intent the cluster acts on: the topology, taints and fabric the nodes publish become the pod's
affinity, tolerations and NCCL env, and what cannot be expressed is said in a warning, never guessed.

The pods are as their controllers create them; the clusters are tests/support/clusters.py (GKE-like, EKS-like,
GB200 NVL72-like), seen through the node store exactly as the server's node watch sees them. The same clusters go
through a real kube-scheduler in tests/e2e/test_placement.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.builders import rules_with
from tests.support.clusters import eks_cluster, gb200_cluster, gke_cluster, node, with_nodes
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.core.admission import mutate_verdict
from webhook.core.rules import Rules
from webhook.core.view.targets import ALL_MODELS


def training_worker(job: str, pods: int, *, gpus: int = 8, model: str = "h100-80g", memory: str = "60Gi",
                    annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A worker of a PyTorchJob of ``pods`` pods as the training operator creates it (WORLD_SIZE = pods)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": f"{job}-worker-", "namespace": "ml-team",
        "labels": {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": "worker",
                   "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        "annotations": {"ai-admission.io/gpu-memory": memory, **(annotations or {})},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": job, "uid": "u",
                             "controller": True}]},
        "spec": {"nodeSelector": {"gpu-type": model}, "restartPolicy": "OnFailure", "containers": [{
            "name": "pytorch", "image": "registry.example.com/llm/train:2.4",
            "env": [{"name": "WORLD_SIZE", "value": str(pods)}, {"name": "MASTER_ADDR", "value": f"{job}-master-0"}],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "512Gi", "cpu": "64"},
                          "requests": {"nvidia.com/gpu": str(gpus), "memory": "512Gi", "cpu": "64"}}}]}}


def inference_replica(model: str = "l4-24g", gpus: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "vllm-7b-", "namespace": "serving", "labels": {"app": "vllm-7b"},
        "annotations": {"ai-admission.io/gpu-memory": "16Gi"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-7b-5d8f", "uid": "u",
                             "controller": True}]},
        "spec": {"nodeSelector": {"gpu-type": model}, "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.8.4",
            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "32Gi", "cpu": "8"},
                          "requests": {"nvidia.com/gpu": str(gpus), "memory": "32Gi", "cpu": "8"}}}]}}


def mutated(pod: dict[str, Any], rules: Rules) -> tuple[dict[str, Any], list[str], list[dict[str, Any]]]:
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    return apply_verdict(pod, verdict), list(verdict.warnings), [dict(op) for op in verdict.patch]


def a3_mega(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as GKE's GPUDirect-TCPXO guide has an A3 Mega pod: its networks, the daemon's devices, the sidecar."""
    pod["metadata"]["annotations"].update({
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"},'
                                        '{"interfaceName":"eth1","network":"vpc1"}]',
        "devices.gke.io/container.tcpxo-daemon": "- path: /dev/nvidia0\n- path: /dev/nvidiactl\n"})
    pod["spec"]["containers"].append({
        "name": "tcpxo-daemon", "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.12",
        "command": ["/bin/sh", "-c"], "args": ["/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics=8"],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
        # limits, so that the pod keeps the memory limit its /dev/shm is sized from
        "resources": {"limits": {"memory": "2Gi", "cpu": "2"}, "requests": {"memory": "2Gi", "cpu": "2"}}})
    return pod


def packed_by(pod: dict[str, Any]) -> str | None:
    terms = (pod["spec"].get("affinity") or {}).get("podAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution") or []
    assert len(terms) <= 1
    return terms[0]["podAffinityTerm"]["topologyKey"] if terms else None


@pytest.fixture(scope="module")
def gke(rules: Rules) -> Rules:
    return with_nodes(gke_cluster(), rules)


@pytest.fixture(scope="module")
def eks(rules: Rules) -> Rules:
    return with_nodes(eks_cluster(), rules)


# -- topology: the narrowest domain that holds the whole job --------------------------------------------------------

def test_the_nodes_topology_is_learnt_per_model(gke: Rules) -> None:
    h100 = gke.target_of(gke.catalog["h100-80g"])
    assert h100 is not None and h100.key_set == "gke" and (h100.nodes, h100.gpus) == (8, 64)
    assert [(level.key.rsplit("-", 1)[-1], level.domains, level.largest) for level in h100.levels] == [
        ("block", 2, 32), ("subblock", 4, 16), ("host", 8, 8)]
    l4 = gke.target_of(gke.catalog["l4-24g"])
    assert l4 is not None and l4.levels == () and l4.distinct["topology.kubernetes.io/zone"] == 2
    every = gke.target_of(None)
    assert every is not None and every.nodes == 12 and every is gke.nodes.placement[ALL_MODELS]


@pytest.mark.parametrize(("pods", "key"), [
    (2, "cloud.google.com/gce-topology-subblock"),   # 16 GPUs: one sub-block of 2 nodes holds them
    (3, "cloud.google.com/gce-topology-block"),      # 24 GPUs: more than a sub-block, within a block of 4 nodes
    (4, "cloud.google.com/gce-topology-block"),      # 32: exactly a block
])
def test_a_job_is_packed_into_the_narrowest_gke_domain_that_holds_it(gke: Rules, pods: int, key: str) -> None:
    pod, warnings, _ = mutated(a3_mega(training_worker("llama", pods)), gke)
    assert packed_by(pod) == key
    term = pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term == {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {
        "training.kubeflow.org/job-name": "llama"}}, "topologyKey": key}}
    assert warnings == []


def test_a_job_of_one_pod_is_not_packed_with_itself(gke: Rules) -> None:
    pod, warnings, _ = mutated(training_worker("fine-tune", 1), gke)  # WORLD_SIZE=1: the operator made one pod
    assert packed_by(pod) is None
    assert warnings == []


def test_a_job_no_domain_holds_is_not_packed_and_is_told(gke: Rules) -> None:
    pod, warnings, _ = mutated(a3_mega(training_worker("llama", 5)), gke)  # 40 GPUs: more than a block's 32
    assert packed_by(pod) is None
    assert warnings == ["pods not packed: no single gke domain holds the job's 40 GPUs (5 pods; the largest, by "
                        "cloud.google.com/gce-topology-block, holds 32)"]


@pytest.mark.parametrize(("pods", "key"), [(2, "topology.k8s.aws/network-node-layer-3"),
                                           (4, "topology.k8s.aws/network-node-layer-2"),
                                           (8, "topology.k8s.aws/network-node-layer-1")])
def test_a_job_is_packed_into_the_narrowest_eks_layer_that_holds_it(eks: Rules, pods: int, key: str) -> None:
    pod, warnings, _ = mutated(training_worker("llama", pods), eks)
    assert packed_by(pod) == key
    assert not any("not packed" in w for w in warnings)


def test_a_multi_node_nvlink_job_packs_into_its_clique_and_is_warned_beyond_it(rules: Rules) -> None:
    nvl = with_nodes(gb200_cluster(), rules)
    pod, warnings, _ = mutated(training_worker("gb", 16, gpus=4, model="gb200-186g"), nvl)  # 64 of 72 GPUs
    assert packed_by(pod) == "nvidia.com/gpu.clique"
    assert not any("NVLink" in w for w in warnings)
    pod, warnings, _ = mutated(training_worker("gb", 20, gpus=4, model="gb200-186g"), nvl)  # 80 > 72
    assert packed_by(pod) == "network.topology.nvidia.com/spine"
    assert "the job's 80 GPUs (20 pods) span more than an NVLink domain holds (72 GPUs, nvidia.com/gpu.clique): its " \
           "traffic crosses the network between domains" in warnings


def test_nodes_without_topology_labels_pack_nothing_and_say_so(rules: Rules) -> None:
    bare = with_nodes([node(f"n{i}", "NVIDIA-H100-80GB-HBM3", gpus=8, memory_mib=81559, labels={})
                       for i in range(4)], rules)
    pod, warnings, _ = mutated(training_worker("llama", 2), bare)
    assert packed_by(pod) is None
    assert "pods not packed: the GPU nodes carry none of the topology labels the rules know (topology.keySets)" \
        in warnings


def test_a_fixed_key_the_nodes_lack_is_not_added(rules: Rules) -> None:
    fixed = rules_with({"classes": {"training": {"mutate": {"podAffinity": {"topologyKey": "rack.example.com"}}}}})
    pod, warnings, _ = mutated(training_worker("llama", 2), with_nodes(gke_cluster(), fixed))
    assert packed_by(pod) is None
    assert "pods not packed: no GPU node carries the label rack.example.com (mutate.podAffinity.topologyKey)" in warnings


def test_the_shipped_rules_invent_no_label(rules: Rules) -> None:
    """Every key a patch can name is one a provider publishes (rules topology), never an ai-admission.io label."""
    assert all(not key.startswith("topology.ai-admission.io") for key in rules.topology.keys())
    assert all(c.mutate.pod_affinity is None or c.mutate.pod_affinity.topology_key is None
               for c in rules.classes.values())
    assert all(not t["key"].startswith("ai-admission.io") for c in rules.classes.values() for t in c.mutate.tolerations)


# -- taints: only those the pod's nodes carry ------------------------------------------------------------------------

def test_the_gpu_taint_of_the_nodes_is_tolerated(gke: Rules) -> None:
    pod, _, _ = mutated(training_worker("llama", 2), gke)
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_untainted_nodes_get_no_toleration(eks: Rules) -> None:
    pod, _, patch = mutated(training_worker("llama", 2), eks)
    assert "tolerations" not in pod["spec"]
    assert not any(op["path"].startswith("/spec/tolerations") for op in patch)


def test_a_taint_of_another_models_nodes_is_not_tolerated(rules: Rules) -> None:
    nodes = [*eks_cluster(), node("l4-a", "NVIDIA-L4", gpus=4, memory_mib=23034, labels={},
                                  taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}])]
    h100_pod, _, _ = mutated(training_worker("llama", 2), with_nodes(nodes, rules))
    assert "tolerations" not in h100_pod["spec"]
    l4_pod, _, _ = mutated(inference_replica("l4-24g"), with_nodes(nodes, rules))
    assert l4_pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_an_aks_pool_taint_is_tolerated_exactly(rules: Rules) -> None:
    aks = [node(f"nd-{i}", "NVIDIA-H100-80GB-HBM3", gpus=8, memory_mib=81559, labels={},
                taints=[{"key": "sku", "value": "gpu", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]) for i in range(2)]
    pod, _, _ = mutated(training_worker("llama", 2), with_nodes(aks, rules))
    assert pod["spec"]["tolerations"] == [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]


def test_offline_the_accelerators_own_taint_is_tolerated(rules: Rules) -> None:
    """No node watch: the toleration Kubernetes' ExtendedResourceToleration plugin would add."""
    pod, _, _ = mutated(training_worker("llama", 2), rules)
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


# -- fabric: from the pod and its nodes; the interface the pod really has --------------------------------------------

def rdma_cluster(rules: Rules, **extra: str) -> Rules:
    return with_nodes([node(f"ib-{i}", "NVIDIA-H100-80GB-HBM3", gpus=8, memory_mib=81559, labels={
        "feature.node.kubernetes.io/rdma.available": "true", "feature.node.kubernetes.io/rdma.capable": "true",
        **extra}) for i in range(4)], rules)


def nccl(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", []) if e["name"].startswith("NCCL_")}


def test_an_rdma_pool_names_the_interface_of_the_pods_network_attachment(rules: Rules) -> None:
    ib = rdma_cluster(rules)
    attached = training_worker("llama", 2, annotations={"k8s.v1.cni.cncf.io/networks": "ib-sriov"})
    assert nccl(mutated(attached, ib)[0]) == {"NCCL_SOCKET_IFNAME": "net1"}
    named = training_worker("llama", 2, annotations={
        "k8s.v1.cni.cncf.io/networks": '[{"name": "ib-sriov", "interface": "ib0"}, {"name": "other"}]'})
    assert nccl(mutated(named, ib)[0]) == {"NCCL_SOCKET_IFNAME": "ib0"}
    at = training_worker("llama", 2, annotations={"k8s.v1.cni.cncf.io/networks": "ml/ib-sriov@ibp1s0, other"})
    assert nccl(mutated(at, ib)[0]) == {"NCCL_SOCKET_IFNAME": "ibp1s0"}


def test_without_an_interface_nothing_is_named_and_the_pod_is_told(rules: Rules) -> None:
    pod, warnings, _ = mutated(training_worker("llama", 2), rdma_cluster(rules))
    assert nccl(pod) == {}
    assert "NCCL_SOCKET_IFNAME not set: no rdma interface of the pod is known (a secondary network, annotation " \
           "k8s.v1.cni.cncf.io/networks; for host network, the rules' fabrics.hostInterfaces)" in warnings


def test_a_host_network_pod_gets_the_interface_the_rules_name() -> None:
    rules = rules_with({"fabrics": {"hostInterfaces": {"rdma": "ib0"}}})
    pod = training_worker("llama", 2)
    pod["spec"]["hostNetwork"] = True
    assert nccl(mutated(pod, rdma_cluster(rules))[0]) == {"NCCL_SOCKET_IFNAME": "ib0"}


def test_nodes_that_disagree_name_no_fabric(rules: Rules) -> None:
    mixed = [node("ib", "NVIDIA-H100-80GB-HBM3", gpus=8, memory_mib=81559,
                  labels={"feature.node.kubernetes.io/rdma.available": "true"}),
             node("eth", "NVIDIA-H100-80GB-HBM3", gpus=8, memory_mib=81559, labels={})]
    pod, warnings, _ = mutated(training_worker("llama", 2, annotations={"k8s.v1.cni.cncf.io/networks": "net"}),
                               with_nodes(mixed, rules))
    assert nccl(pod) == {}
    assert any(w.startswith("no NCCL setting added: the pod's network fabric is not known (its GPU nodes publish "
                            "different fabrics (rdma, or none))") for w in warnings)


def test_efa_nodes_and_a_pod_that_asks_for_no_efa_device(eks: Rules) -> None:
    pod, warnings, _ = mutated(training_worker("llama", 2), eks)
    assert nccl(pod) == {}
    assert "the pod's nodes offer vpc.amazonaws.com/efa but the pod asks for none, so NCCL talks TCP between nodes; " \
           "add it to the GPU containers' resources (or the class's mutate.rdma)" in warnings
    asking = training_worker("llama", 2)
    for part in ("limits", "requests"):
        asking["spec"]["containers"][0]["resources"][part]["vpc.amazonaws.com/efa"] = "32"
    pod, warnings, _ = mutated(asking, eks)
    assert nccl(pod) == {} and warnings == []  # EFA: the image's aws-ofi-nccl plugin needs nothing set


def test_offline_with_the_shipped_rules_no_nccl_and_the_pod_is_told(rules: Rules) -> None:
    pod, warnings, _ = mutated(training_worker("llama", 2), rules)
    assert nccl(pod) == {}
    assert "no NCCL setting added: the pod's network fabric is not known (the cluster's nodes are not known here); " \
           "fabrics.byNodeLabel or byModel in the rules, or a node label such as " \
           "feature.node.kubernetes.io/rdma.available, would name it" in warnings


# -- spreading inference replicas: only over what the nodes have ------------------------------------------------------

def spread_keys(pod: dict[str, Any]) -> list[str]:
    return [c["topologyKey"] for c in pod["spec"].get("topologySpreadConstraints", [])]


def test_replicas_spread_over_the_zones_the_nodes_are_in(gke: Rules) -> None:
    pod, warnings, _ = mutated(inference_replica("l4-24g"), gke)
    assert spread_keys(pod) == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert warnings == []


def test_one_zone_is_not_spread_over_and_the_pod_is_told(gke: Rules) -> None:
    pod, warnings, _ = mutated(inference_replica("h100-80g"), gke)  # every A3 node is in one zone
    assert spread_keys(pod) == ["kubernetes.io/hostname"]
    assert warnings == ["replicas are not spread over topology.kubernetes.io/zone: the pod's GPU nodes have fewer "
                        "than two values of it"]


# -- the whole patch: only what the scheduler or the runtime acts on ---------------------------------------------------

def test_the_course_job_on_the_gke_cluster_carries_only_what_acts(gke: Rules) -> None:
    _, warnings, patch = mutated(training_worker("resnet-train", 3), gke)
    assert [op["path"] for op in patch] == [
        "/spec/volumes", "/spec/containers/0/volumeMounts", "/spec/priorityClassName", "/spec/priority",
        "/spec/preemptionPolicy", "/spec/tolerations", "/spec/affinity",
        "/metadata/labels/ai-admission.io~1workload-type", "/metadata/annotations/ai-admission.io~1profile"]
    # on A3 Mega nodes without GPUDirect-TCPXO's pieces the job talks TCP: told, and nothing added for it
    assert warnings == [TCPXO_MISSING]


TCPXO_MISSING = ("NCCL talks TCP between nodes: fabric gpudirect-tcpxo needs the tcpxo-daemon sidecar; annotations "
                 "networking.gke.io/interfaces, devices.gke.io/container.tcpxo-daemon on the pod (nothing added; "
                 "fabrics.needs)")


# -- fabrics set up by something the pod carries: a word for each ------------------------------------------------------

def test_every_fabric_has_env_needs_or_is_the_unknown_one(rules: Rules) -> None:
    """The principle, on the shipped rules: no fabric the rules know is left silent."""
    fabrics = rules.fabrics
    silent = [f for f, env in fabrics.env.items() if not env and f not in fabrics.needs and f != "unknown"]
    assert silent == []
    assert set(fabrics.needs) == {"gpudirect-tcpx", "gpudirect-tcpxo", "gpudirect-rdma", "efa"}


def test_a3_mega_pods_without_tcpxo_are_told_what_they_lack_and_get_nothing_for_it(gke: Rules) -> None:
    bare, warnings, _ = mutated(training_worker("llama", 3), gke)
    assert warnings == [TCPXO_MISSING]
    assert nccl(bare) == {} and len(bare["spec"]["containers"]) == 1
    partly = training_worker("llama", 3)
    partly["metadata"]["annotations"]["networking.gke.io/interfaces"] = '[{"interfaceName":"eth0","network":"default"}]'
    _, warnings, _ = mutated(partly, gke)
    assert len(warnings) == 1 and "needs the tcpxo-daemon sidecar; annotation devices.gke.io/container.tcpxo-daemon " \
        "on the pod" in warnings[0]
    assert all(len(w) <= 256 for w in warnings)  # what the API server passes on whole
    whole, warnings, _ = mutated(a3_mega(training_worker("llama", 3)), gke)
    assert warnings == [] and nccl(whole) == {}


@pytest.mark.parametrize(("instance", "fabric", "lacks"), [
    ("a3-highgpu-8g", "gpudirect-tcpx", "needs the tcpx-daemon sidecar; annotations networking.gke.io/interfaces, "
                                        "devices.gke.io/container.tcpx-daemon on the pod"),
    ("a3-ultragpu-8g", "gpudirect-rdma", "needs annotation networking.gke.io/interfaces on the pod"),
])
def test_each_gke_fabric_names_what_it_needs(rules: Rules, instance: str, fabric: str, lacks: str) -> None:
    pod = training_worker("llama", 2, model="h200-141g" if "ultra" in instance else "h100-80g")
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": instance}
    _, warnings, _ = mutated(pod, rules)
    told = [w for w in warnings if w.startswith("NCCL talks TCP")]
    assert len(told) == 1 and f"fabric {fabric} {lacks}" in told[0], warnings


def test_efa_nodes_that_advertise_no_efa_device_still_tell_the_pod(rules: Rules) -> None:
    """p5 nodes whose EFA device plugin is not running: the pod is told it needs the devices (it was silent)."""
    bare_p5 = []
    for node_ in eks_cluster():
        for part in ("capacity", "allocatable"):
            node_["status"][part].pop("vpc.amazonaws.com/efa", None)  # one dict for both, as node() builds it
        bare_p5.append(node_)
    _, warnings, _ = mutated(training_worker("llama", 2), with_nodes(bare_p5, rules))
    told = [w for w in warnings if w.startswith("NCCL talks TCP")]
    assert told == ["NCCL talks TCP between nodes: fabric efa needs resource vpc.amazonaws.com/efa on the pod "
                    "(nothing added; fabrics.needs)"]


def test_a_job_of_one_pod_is_not_told_of_the_fabric(gke: Rules) -> None:
    _, warnings, _ = mutated(training_worker("fine-tune", 1), gke)
    assert warnings == []


# -- the node watch: a changed taint or topology label reaches the rules, a heartbeat does not ----------------------

def test_the_node_watch_follows_taints_and_topology(rules: Rules, tmp_path: Any) -> None:
    import time

    from tests.support.clusters import gke_a3
    from tests.support.contexts import with_discovered
    from tests.support.kubeapi import FakeKubeAPI
    from webhook.cluster.informer import api_calls
    from webhook.cluster.nodes import NodeWatch

    seen: list[Any] = []
    with FakeKubeAPI() as api:
        for index in range(4):
            api.add("nodes", gke_a3(f"a3-{index}", "block-1", f"subblock-{index // 2}"))
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        watch = NodeWatch(lambda: rules, api=lambda: api_calls(kubeconfig), on_change=seen.append).start()
        try:
            deadline = time.monotonic() + 15
            while not seen and time.monotonic() < deadline:
                time.sleep(0.05)
            first = with_discovered(rules, seen[-1]).target_of(rules.catalog["h100-80g"])
            assert first is not None and first.taints == (("nvidia.com/gpu", "present", "NoSchedule"),)
            heartbeat = gke_a3("a3-0", "block-1", "subblock-0")
            heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-01T20:00:00Z"
            api.add("nodes", heartbeat)
            untainted = gke_a3("a3-1", "block-2", "subblock-9")
            untainted["spec"]["taints"] = []
            api.add("nodes", untainted)
            while len(seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(seen) == 2  # the heartbeat changed nothing the rules read: no new catalog for it
            second = with_discovered(rules, seen[-1]).target_of(rules.catalog["h100-80g"])
            assert second is not None and second.levels[0].domains == 2  # a3-1 moved to block-2
            assert second.taints == first.taints  # the other three still carry it
        finally:
            watch.stop()
