"""Jobs and their pods as the training operator, the Job controller and a v1.36 API server with the Workload API
make them, for the tests of the default scheduler's gang (tests/unit/test_pod_groups.py,
tests/unit/test_pod_group_controller.py, tests/server/test_gang.py). Field for field as their projects publish them:
kubeflow/training-operator's PyTorchJob examples and pod env, kubernetes pkg/controller/job/job_scheduling_manager.go.
"""

from __future__ import annotations

from typing import Any

from tests.support.kubeapi import FakeKubeAPI

H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
UID = "0b7c2f4e-1d8a-4c3e-9f21-6a5d4e3c2b10"


def worker(job: str, index: int, pods: int, *, gpus: int = 8, uid: str = UID,
           kind: str = "PyTorchJob", api_version: str = "kubeflow.org/v1") -> dict[str, Any]:
    """Worker ``index`` of a PyTorchJob of ``pods`` pods of ``gpus`` H100 each, as the training operator creates it
    (WORLD_SIZE: pods x processes; PET_NNODES: the pods)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{job}-worker-{index}", "namespace": "ml-team",
        "labels": {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": "worker",
                   "training.kubeflow.org/replica-index": str(index),
                   "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        "annotations": {"ai-admission.io/gpu-memory": "60Gi"},
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": job, "uid": uid,
                             "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeSelector": H100, "restartPolicy": "OnFailure", "containers": [{
            "name": "pytorch", "image": "registry.example.com/llm/train:2.4",
            "env": [{"name": "PET_NNODES", "value": str(pods)}, {"name": "PET_NPROC_PER_NODE", "value": str(gpus)},
                    {"name": "WORLD_SIZE", "value": str(pods * gpus)}, {"name": "RANK", "value": str(index)}],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "512Gi", "cpu": "64"},
                          "requests": {"nvidia.com/gpu": str(gpus), "memory": "512Gi", "cpu": "64"}}}]}}


def indexed_job(name: str, parallelism: int, *, completions: int | None = None, mode: str = "Indexed",
                uid: str = "5f1e2d3c-4b5a-4968-8776-65544332a1b0") -> dict[str, Any]:
    """A training Job of ``parallelism`` pods of 8 H100 each (torchrun over the completions)."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": "ml-team", "uid": uid,
        "annotations": {"ai-admission.io/workload-type": "training"}},
        "spec": {"completionMode": mode, "parallelism": parallelism,
                 "completions": parallelism if completions is None else completions, "backoffLimit": 0,
                 "template": {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi",
                                                           "ai-admission.io/workload-type": "training"}},
                              "spec": {"restartPolicy": "Never", "nodeSelector": H100, "containers": [{
                                  "name": "trainer", "image": "registry.example.com/llm/train:2.4",
                                  "command": ["torchrun", "--nnodes", str(parallelism), "train.py"],
                                  "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi", "cpu": "64"},
                                                "requests": {"nvidia.com/gpu": "8", "memory": "512Gi",
                                                             "cpu": "64"}}}]}}}}


def job_controller_group(job: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup the v1.36 Job controller creates for ``job`` (pkg/controller/job/job_scheduling_manager.go),
    as the webhook sees it: the Priority admission plugin has set ``priority``, defaulting ``disruptionMode``."""
    name = job["metadata"]["name"]
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {
        "name": f"{name}-6985657848-{name}-pgt-0-54bdfb869c", "namespace": job["metadata"]["namespace"],
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True},
            {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "name": f"{name}-6985657848",
             "uid": "9d8c7b6a-5f4e-4d3c-8b2a-190817263544"}]},
        "spec": {"podGroupTemplateRef": {"workload": {"workloadName": f"{name}-6985657848",
                                                      "podGroupTemplateName": f"{name}-pgt-0"}},
                 "schedulingPolicy": {"gang": {"minCount": job["spec"]["parallelism"]}},
                 "schedulingConstraints": None, "disruptionMode": "Pod", "priority": 0}}


def serve_workload_api(api: FakeKubeAPI, version: str = "v1alpha2") -> None:
    """Discovery as a v1.36 API server with GenericWorkload on answers it."""
    api.discovery["/apis/scheduling.k8s.io"] = {
        "kind": "APIGroup", "apiVersion": "v1", "name": "scheduling.k8s.io",
        "versions": [{"groupVersion": f"scheduling.k8s.io/{v}", "version": v} for v in ("v1", version)]}
    api.discovery[f"/apis/scheduling.k8s.io/{version}"] = {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"scheduling.k8s.io/{version}",
        "resources": [{"name": "podgroups", "namespaced": True, "kind": "PodGroup"},
                      {"name": "workloads", "namespaced": True, "kind": "Workload"}]}


def pytorchjob(name: str = "llama-ft", workers: int = 2, *, master_gpus: int = 8) -> dict[str, Any]:
    """A PyTorchJob as users write it (kubeflow/training-operator examples): a Master and Workers of 8 H100."""
    def replica(count: int, gpus: int) -> dict[str, Any]:
        resources = {"cpu": "64", "memory": "512Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {
            "metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi"} if gpus else {}},
            "spec": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"},
                     "containers": [{"name": "pytorch", "image": "registry.example.com/llm/train:2.4",
                                     "resources": {"limits": resources, "requests": dict(resources)}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml-team", "uid": UID},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1, master_gpus), "Worker": replica(workers, 8)}}}


