"""Multi-node inference all or nothing: each group of a LeaderWorkerSet (a leader and its workers, one model served
by all of them) is one PodGroup of its size on the default scheduler, preempted whole. Without it an LWS of 3
groups of 2 on room for 2 groups ended bound 2/2, 1/2, 1/2: two half groups holding 16 GPUs that serve nothing.

The pods as the LWS controller makes them (kubernetes-sigs/lws pkg/controllers/pod_controller.go and
pkg/utils/pod: the leader StatefulSet's pod of each group, the group's worker StatefulSet's pods, every one labelled
with the set's name, its group's index and key, its worker index, and given LWS_GROUP_SIZE). The same through the
real LWS controller: tests/e2e/test_peers.py.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.gang import serve_workload_api
from tests.support.kubeapi import FakeKubeAPI
from tests.support.reviews import apply_verdict, assert_valid_pod
from webhook.cluster import client as kube
from webhook.cluster.informer import api_calls
from webhook.cluster.pod_groups import PodGroupController
from webhook.core.admission import mutate_verdict
from webhook.core.podgroups import plan as groups
from webhook.core.podgroups.support import POD_GROUP_LABEL, PodGroupApi, PodGroupSupport
from webhook.core.rules import Rules

ALPHA = PodGroupApi("v1alpha2", topology=True, preemption=True)
IN_SERVICE = PodGroupSupport(api=ALPHA, controller=True, known=True)
LWS_UID = "5e1f2a3b-4c5d-4e6f-8a7b-9c0d1e2f3a4b"
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}


def _template(role: str) -> dict[str, Any]:
    resources = {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}
    return {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi"}},
            "spec": {"nodeSelector": dict(H100), "containers": [{
                "name": f"vllm-{role}", "image": "vllm/vllm-openai:v0.8.5",
                "command": ["sh", "-c", "ray start --head && vllm serve meta-llama/Llama-3.1-405B-Instruct-FP8 "
                            "--tensor-parallel-size 8 --pipeline_parallel_size 2"],
                "resources": {"limits": resources, "requests": dict(resources)}}]}}


def lws(name: str = "vllm", replicas: int = 3, size: int = 2) -> dict[str, Any]:
    """A LeaderWorkerSet as the project's vLLM example writes it (docs/examples/vllm/GPU/lws.yaml)."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "ml-team", "uid": LWS_UID},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {
                "size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _template("leader"), "workerTemplate": _template("worker")}}}


def lws_pod(group: int, worker: int, *, name: str = "vllm", size: int = 2) -> dict[str, Any]:
    """A pod of group ``group`` as the LWS controller makes it (worker 0: the leader)."""
    template = _template("leader" if worker == 0 else "worker")
    owner = name if worker == 0 else f"{name}-{group}"
    pod_name = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    labels = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(group),
              "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
              "leaderworkerset.sigs.k8s.io/group-key": f"{group:040x}", "apps.kubernetes.io/pod-index": str(worker)}
    template["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] = str(size)
    for container in template["spec"]["containers"]:
        container["env"] = [{"name": "LWS_LEADER_ADDRESS", "value": f"{name}-{group}.{name}.ml-team"},
                            {"name": "LWS_GROUP_SIZE", "value": str(size)},
                            {"name": "LWS_WORKER_INDEX", "value": str(worker)}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": "ml-team", "labels": labels,
                         "annotations": template["metadata"]["annotations"],
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner,
                                              "uid": f"sts-{owner}", "controller": True, "blockOwnerDeletion": True}]},
            "spec": template["spec"]}


def mutated(rules: Rules, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules, pod_groups=IN_SERVICE), mode="deny")
    return apply_verdict(pod, verdict), list(verdict.warnings)


def test_each_group_s_pods_join_one_group_of_their_own(rules: Rules) -> None:
    gke = with_nodes(gke_cluster(), rules)
    leader, told = mutated(gke, lws_pod(1, 0))
    worker, _ = mutated(gke, lws_pod(1, 1))
    other, _ = mutated(gke, lws_pod(2, 0))
    assert_valid_pod(leader)
    name = leader["spec"]["schedulingGroup"]["podGroupName"]
    assert name.startswith("vllm-1-gang-") and leader["metadata"]["labels"][POD_GROUP_LABEL] == name
    assert worker["spec"]["schedulingGroup"] == {"podGroupName": name}
    assert other["spec"]["schedulingGroup"]["podGroupName"] != name
    assert not [w for w in told if "gang" in w], told
    assert groups.job_of(lws_pod(1, 1)) == groups.JobRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", "",
                                                         part="1")


def test_a_group_is_counted_from_the_set_s_size(rules: Rules) -> None:
    gke = with_nodes(gke_cluster(), rules)
    joining = groups.joining_pods(lws(size=2), gke)
    assert joining is not None and joining[0] == 2
    plan = groups.plan_of(joining[1], gke, ALPHA, pods=joining[0])
    assert plan is not None
    assert (plan.min_count, plan.priority_class, plan.disruption_mode) == (2, "ai-inference", "PodGroup")
    assert plan.topology_key == "cloud.google.com/gce-topology-subblock"  # 16 GPUs: the narrowest that holds them


def test_the_controller_makes_a_group_owned_by_the_set(tmp_path: Path, rules: Rules) -> None:
    gke = with_nodes(gke_cluster(), rules)
    with FakeKubeAPI() as api:
        serve_workload_api(api)
        api.add("leaderworkersets", lws(), "ml-team")
        config = str(api.kubeconfig(tmp_path / "kubeconfig"))
        maker = PodGroupController(lambda: gke, lambda: IN_SERVICE, namespace="ai-admission", lock_dir=str(tmp_path),
                                   identity="a", client=lambda: kube.client(config),
                                   api=lambda: api_calls(config, query={"labelSelector": POD_GROUP_LABEL}))
        try:
            pod, _ = mutated(gke, lws_pod(0, 0))
            api.add("pods", pod, "ml-team")
            deadline = time.monotonic() + 10
            maker.poll()
            while not [k for k in api.objects if k[0] == "podgroups"] and time.monotonic() < deadline:
                time.sleep(0.05)
                maker.poll()
            (group,) = [o for k, o in api.objects.items() if k[0] == "podgroups"]
            assert group["metadata"]["name"] == pod["spec"]["schedulingGroup"]["podGroupName"]
            assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
            assert group["spec"]["disruptionMode"] == "PodGroup"
            assert group["metadata"]["ownerReferences"] == [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                                             "kind": "LeaderWorkerSet", "name": "vllm", "uid": LWS_UID}]
        finally:
            maker.stop()
