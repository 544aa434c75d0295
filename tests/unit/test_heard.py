"""Every word reaches the person: an owner's /validate carries the warnings its templates' pods will get at
/mutate (which go to the controller that makes the pods, and are read by nobody), said once for the templates that
share them; ``check`` shows a pod's and a template's mutation warnings; what the user set that the pod will not have
is told: the course's own ``NCCL_SOCKET_IFNAME=ib0`` and ``NCCL_IB_DISABLE=0`` on a pod with no such network, an
``NCCL_IB_HCA`` with no RDMA device, a disk-backed 64Mi ``/dev/shm`` (the course's "64MB is not enough").
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.builders import run_check
from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.fixtures import FIXTURES, load_pod_case
from tests.support.owners import course_pytorchjob
from webhook.core.admission import judge
from webhook.core.documents import Document, check
from webhook.core.rules import Rules
from webhook.core.user_settings import pod_interfaces

COURSE = load_pod_case(FIXTURES / "pods" / "pytorchjob-worker-course.yaml").pod


def findings(rules: Rules, pod: dict[str, Any], *, nodes: bool = False) -> dict[str, list[str]]:
    ctx = with_nodes(gke_cluster(), rules) if nodes else as_context(rules)
    judged = judge(pod, ctx=ctx, mode="deny", group="", kind="Pod", namespace="ml-team")
    assert judged is not None
    found: dict[str, list[str]] = {}
    for f in judged[0].findings:
        found.setdefault(f.code, []).append(f.message)
    return found


def gpu_pod(env: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "8", "memory": "256Gi", "cpu": "32"}
    container: dict[str, Any] = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                                 "resources": {"limits": limits, "requests": dict(limits)}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ft", "namespace": "ml-team",
                         "annotations": {"ai-admission.io/workload-type": "training", "ai-admission.io/gpu-memory": "40Gi",
                                         "ai-admission.io/gpu-model": "h100-80g"}},
            "spec": {"containers": [container], **spec}}


def test_the_course_s_nccl_interface_is_told_and_kept(rules: Rules) -> None:
    told = findings(rules, COURSE)["nccl-interface-missing"]
    assert told == ['container "pytorch": NCCL_SOCKET_IFNAME=ib0 names no interface the pod has (eth0, lo), so NCCL '
                    'stops at start; remove it, or attach the network that gives ib0 (annotation '
                    'k8s.v1.cni.cncf.io/networks)']


@pytest.mark.parametrize("value, annotations, host, told", [
    ("eth", {}, False, False),                      # a prefix of eth0
    ("=eth0", {}, False, False),
    ("^docker,lo", {}, False, False),               # an exclusion names nothing the pod must have
    ("ib0", {"k8s.v1.cni.cncf.io/networks": "ib-net@ib0"}, False, False),
    ("net1", {"k8s.v1.cni.cncf.io/networks": "rdma/ib-sriov"}, False, False),
    ("eth1", {"networking.gke.io/interfaces": '[{"interfaceName":"eth0","network":"default"},'
                                              '{"interfaceName":"eth1","network":"gpu-nic-0"}]'}, False, False),
    ("ib0", {}, True, False),                       # the host's interfaces: not known here
    ("ib0", {}, False, True),
    ("=eth", {}, False, True),
])
def test_an_interface_is_told_only_where_the_pod_will_not_have_it(rules: Rules, value: str, annotations: dict[str, str],
                                                                   host: bool, told: bool) -> None:
    pod = gpu_pod({"NCCL_SOCKET_IFNAME": value}, **({"hostNetwork": True} if host else {}))
    pod["metadata"]["annotations"].update(annotations)
    assert ("nccl-interface-missing" in findings(rules, pod)) is told


def test_the_pod_s_interfaces_are_read_from_its_networks() -> None:
    assert pod_interfaces({}, {"k8s.v1.cni.cncf.io/networks": "a, b@ib1"}) == ["eth0", "lo", "net1", "ib1"]
    assert pod_interfaces({}, {"k8s.v1.cni.cncf.io/networks": '[{"name":"a","interface":"ib0"},{"name":"b"}]'}) == \
        ["eth0", "lo", "ib0", "net2"]
    assert pod_interfaces({"hostNetwork": True}, {}) is None


def test_rdma_devices_named_with_none_asked_for_are_told(rules: Rules) -> None:
    assert "nccl-interface-missing" in findings(rules, gpu_pod({"NCCL_IB_HCA": "mlx5_0,mlx5_1"}))
    asking = gpu_pod({"NCCL_IB_HCA": "mlx5_0"})
    asking["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] = "1"
    asking["spec"]["containers"][0]["resources"]["requests"]["rdma/ib"] = "1"
    assert "nccl-interface-missing" not in findings(rules, asking)


def test_infiniband_asked_for_where_the_model_s_nodes_offer_none_is_told_with_the_nodes(rules: Rules) -> None:
    pod = gpu_pod({"NCCL_IB_DISABLE": "0"})
    assert "nccl-ib-without-infiniband" not in findings(rules, pod)  # offline: the nodes are not known
    told = findings(rules, pod, nodes=True)["nccl-ib-without-infiniband"]
    assert told[0].startswith('container "trainer": NCCL_IB_DISABLE=0, but no h100-80g node offers InfiniBand or '
                              'RoCE')


def test_the_course_s_64mi_disk_backed_shm_is_told(rules: Rules) -> None:
    pod = gpu_pod()
    pod["spec"]["volumes"] = [{"name": "shm", "emptyDir": {"sizeLimit": "64Mi"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    told = findings(rules, pod)["shm-too-small"]
    assert told == ['container "trainer": /dev/shm is a disk-backed emptyDir, at the node\'s disk speed (and counted '
                    'as its ephemeral storage); give it medium: Memory and sizeLimit 32Gi (or drop the volume: '
                    'ai-admission adds one)']
    small = copy.deepcopy(pod)
    small["spec"]["volumes"][0]["emptyDir"]["medium"] = "Memory"
    assert findings(rules, small)["shm-too-small"][0].startswith('container "trainer": /dev/shm of 64Mi is less than '
                                                                 'a training pod of 8 GPUs needs (32Gi')
    enough = copy.deepcopy(small)
    enough["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "32Gi"
    assert "shm-too-small" not in findings(rules, enough)


def test_an_owner_s_apply_carries_what_its_pods_will_be_told_once(rules: Rules) -> None:
    """A multi-node PyTorchJob on GKE A3 nodes: the fabric's needs its pods would be told at /mutate, at the
    PyTorchJob's own /validate; the Master's and Workers' shared words said once, for both."""
    job = course_pytorchjob(model="h100-80g")
    for role in ("Master", "Worker"):
        job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["nodeSelector"] = {
            "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    judged = judge(job, ctx=with_nodes(gke_cluster(), rules), mode="deny", group="kubeflow.org", kind="PyTorchJob",
                   namespace="ml-team")
    assert judged is not None
    warnings = judged[0].warnings
    fabric = [w for w in warnings if w.startswith("NCCL talks TCP between nodes: fabric gpudirect-tcpxo needs")]
    assert len(fabric) == 1, warnings  # said once, with no template's path: both templates' pods get it


def test_check_shows_a_pod_s_mutation_warnings(rules: Rules) -> None:
    report = check([Document("course.yaml", 0, COURSE)], context=as_context(rules))
    (result,) = report.results
    assert any(w.startswith("pods not packed: the cluster's topology is not known here") for w in result.verdict.warnings)
    assert any(w.startswith("no NCCL setting added") for w in result.verdict.warnings)


def test_check_with_the_nodes_says_what_the_cluster_would(tmp_path: Path) -> None:
    """``check --nodes`` (kubectl get nodes -o yaml) reads the nodes as the server's watch does: the fabric words the
    PyTorchJob's pods would get on GKE A3 Mega nodes are printed before anything is applied."""
    job = course_pytorchjob(model="h100-80g")
    for role in ("Master", "Worker"):
        job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["nodeSelector"] = {
            "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": gke_cluster()}))
    done = run_check("-f", str(tmp_path / "job.yaml"), "--nodes", str(tmp_path / "nodes.yaml"))
    assert done.returncode == 0, done.stderr
    assert "warning: NCCL talks TCP between nodes: fabric gpudirect-tcpxo needs the tcpxo-daemon sidecar" in done.stdout
    offline = run_check("-f", str(tmp_path / "job.yaml"))
    assert "gpudirect-tcpxo" not in offline.stdout and "pods not packed" in offline.stdout
    empty = run_check("-f", str(tmp_path / "job.yaml"), "--nodes", str(tmp_path / "job.yaml"))
    assert empty.returncode == 2 and "no Node objects" in empty.stderr
