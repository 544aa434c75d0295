"""Owners as their users write them and their controllers create them, for the scheduler-backend tests: the
course's training job as a PyTorchJob, an inference Deployment, a batch Job, a Katib trial's Job, a TrainJob, a
Volcano Job, and the pods their controllers make of them.

Each follows its project's published example field for field (kubeflow/training-operator
examples/pytorch/simple.yaml for the PyTorchJob's shape, the course's resources; vllm-project's Kubernetes
deployment guide for the Deployment; kubernetes.io's Job examples; Katib's trial Job as the trial controller
creates it, owned by its Trial; kubeflow/trainer's TrainJob examples; volcano-sh/volcano example/job.yaml).
"""

from __future__ import annotations

import copy
from typing import Any

IMAGE_TRAIN = "registry.example.com/llm/train:2.4"
GPU_8 = {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi", "cpu": "64"},
         "requests": {"nvidia.com/gpu": "8", "memory": "512Gi", "cpu": "64"}}


def _trainer_template(model: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi"}},
            "spec": {"nodeSelector": {"gpu-type": model}, "containers": [{
                "name": "pytorch", "image": IMAGE_TRAIN, "imagePullPolicy": "IfNotPresent",
                "command": ["torchrun", "/workspace/train.py"], "resources": copy.deepcopy(GPU_8)}]}}


def course_pytorchjob(*, model: str = "a100-80g", workers: int = 3, name: str = "resnet-train",
                      namespace: str = "ml-team") -> dict[str, Any]:
    """The course example as its PyTorchJob: a Master and ``workers`` Workers of 8 GPUs each (WORLD_SIZE 4)."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _trainer_template(model)},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": _trainer_template(model)}}}}


def inference_deployment() -> dict[str, Any]:
    """vLLM serving Llama 3.1 70B over 4 H100s, two replicas, as the API server hands it to admission (defaulted)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "vllm-llama-70b", "namespace": "serving", "labels": {"app": "vllm-llama-70b"}},
            "spec": {"replicas": 2, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                     "selector": {"matchLabels": {"app": "vllm-llama-70b"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                     "template": {
                         "metadata": {"labels": {"app": "vllm-llama-70b"},
                                      "annotations": {"ai-admission.io/model-params": "70B",
                                                      "ai-admission.io/model-precision": "fp16"}},
                         "spec": {"nodeSelector": {"gpu-type": "h100-80g"}, "restartPolicy": "Always",
                                  "schedulerName": "default-scheduler", "dnsPolicy": "ClusterFirst",
                                  "terminationGracePeriodSeconds": 30,
                                  "containers": [{
                                      "name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
                                      "args": ["--model", "meta-llama/Llama-3.1-70B-Instruct",
                                               "--tensor-parallel-size", "4"],
                                      "ports": [{"containerPort": 8000, "protocol": "TCP"}],
                                      "imagePullPolicy": "IfNotPresent",
                                      "terminationMessagePath": "/dev/termination-log",
                                      "terminationMessagePolicy": "File",
                                      "resources": {"limits": {"nvidia.com/gpu": "4", "memory": "320Gi"},
                                                    "requests": {"nvidia.com/gpu": "4", "cpu": "16",
                                                                 "memory": "320Gi"}}}]}}}}


def _batch_template(gpu_memory: str = "12Gi") -> dict[str, Any]:
    return {"metadata": {"annotations": {"ai-admission.io/gpu-memory": gpu_memory}},
            "spec": {"restartPolicy": "Never", "schedulerName": "default-scheduler", "dnsPolicy": "ClusterFirst",
                     "terminationGracePeriodSeconds": 30, "nodeSelector": {"gpu-type": "t4-16g"},
                     "containers": [{"name": "embed", "image": "registry.example.com/batch/embed:1.3",
                                     "command": ["python", "embed.py", "--from-queue", "redis://work-queue:6379/shards"],
                                     "imagePullPolicy": "IfNotPresent",
                                     "terminationMessagePath": "/dev/termination-log",
                                     "terminationMessagePolicy": "File",
                                     "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"},
                                                   "requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}}]}}


def batch_job() -> dict[str, Any]:
    """A work-queue Job: 20 completions, 4 pods at a time taking shards from a queue, one T4 each; independent pods
    (an Indexed Job of parallelism above 1 would be read as one job of several pods), defaulted by the API server."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "embed-corpus", "namespace": "ml-team"},
            "spec": {"completions": 20, "parallelism": 4, "completionMode": "NonIndexed", "backoffLimit": 3,
                     "suspend": False, "manualSelector": False, "podReplacementPolicy": "TerminatingOrFailed",
                     "template": _batch_template()}}


def katib_trial_job() -> dict[str, Any]:
    """A Katib trial's Job as the trial controller creates it: owned by the Trial, labelled with it."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "random-exp-x7k2p9qd", "namespace": "kubeflow-user",
                         "labels": {"katib.kubeflow.org/experiment": "random-exp",
                                    "katib.kubeflow.org/trial": "random-exp-x7k2p9qd"},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
                                              "name": "random-exp-x7k2p9qd",
                                              "uid": "1f0c2a4e-0000-4000-8000-00000000000a",
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1, "suspend": False,
                     "completionMode": "NonIndexed", "template": {
                         "metadata": {"annotations": {"sidecar.istio.io/inject": "false",
                                                      "ai-admission.io/gpu-memory": "12Gi"}},
                         "spec": {**_batch_template()["spec"], "containers": [{
                             "name": "training-container", "image": "docker.io/kubeflowkatib/pytorch-mnist:v0.17.0",
                             "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1", "--lr=0.01",
                                         "--momentum=0.5"],
                             "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"},
                                           "requests": {"nvidia.com/gpu": "1", "cpu": "2", "memory": "8Gi"}}}]}}}}


def trainjob(*, nodes: int = 4) -> dict[str, Any]:
    """A TrainJob on a ClusterTrainingRuntime, 8 H100s per node (kubeflow/trainer examples); the model by annotation
    (the node selector would be the runtime's)."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llama3-sft", "namespace": "kubeflow-user",
                         "annotations": {"ai-admission.io/gpu-model": "h100-80g",
                                         "ai-admission.io/gpu-memory": "60Gi"}},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                    "name": "torch-distributed"},
                     "trainer": {"numNodes": nodes, "image": IMAGE_TRAIN,
                                 "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8, "memory": "512Gi"},
                                                      "requests": {"nvidia.com/gpu": 8, "memory": "512Gi"}}}}}


def volcano_job(*, queue: str | None = None) -> dict[str, Any]:
    """A Volcano Job of 2 PyTorch workers of 8 A100s each, with the pytorch and svc plugins."""
    task = {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "60Gi"}},
            "spec": {"restartPolicy": "OnFailure", "nodeSelector": {"gpu-type": "a100-80g"},
                     "containers": [{"name": "pytorch", "image": IMAGE_TRAIN, "resources": copy.deepcopy(GPU_8)}]}}
    spec: dict[str, Any] = {"minAvailable": 2, "schedulerName": "volcano", "plugins": {"pytorch": ["--master=master",
                                                                                                 "--worker=worker"],
                                                                                     "svc": []},
                            "tasks": [{"name": "master", "replicas": 1, "template": copy.deepcopy(task)},
                                      {"name": "worker", "replicas": 1, "template": copy.deepcopy(task)}]}
    if queue:
        spec["queue"] = queue
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "pytorch-ddp", "namespace": "ml-team"}, "spec": spec}


def operator_pod(owner: dict[str, Any], template: dict[str, Any], *, name: str, labels: dict[str, str],
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """The pod a controller makes of ``template``: its metadata and spec, the controller's labels, an owner
    reference to ``owner``, and the env the operator injects."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**copy.deepcopy(template.get("metadata") or {}), "name": name,
                        "namespace": owner["metadata"]["namespace"]},
           "spec": copy.deepcopy(template["spec"])}
    pod["metadata"]["labels"] = {**pod["metadata"].get("labels", {}), **labels}
    pod["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": owner["metadata"]["name"],
                                           "uid": "5f0b6f1e-7a56-4a0c-9a37-0c1c2b1d9e11",
                                           "controller": True, "blockOwnerDeletion": True}]
    for container in pod["spec"]["containers"]:
        container["env"] = [*container.get("env", []), *({"name": k, "value": v} for k, v in (env or {}).items())]
    return pod


def pytorchjob_worker(job: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """Worker ``index`` of ``job`` as the training operator creates it (its labels and rendezvous env)."""
    spec = job["spec"]["pytorchReplicaSpecs"]
    world = sum(int(r.get("replicas", 1)) for r in spec.values())
    name = job["metadata"]["name"]
    return operator_pod(job, spec["Worker"]["template"], name=f"{name}-worker-{index}", labels={
        "training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-index": str(index), "training.kubeflow.org/replica-type": "worker"},
        env={"MASTER_PORT": "23456", "MASTER_ADDR": f"{name}-master-0", "WORLD_SIZE": str(world),
             "RANK": str(index + 1)})


def plain_pod(*, world: int = 1, job: str | None = None) -> dict[str, Any]:
    """A GPU pod created by hand (no owner), one of a ``world``-pod job labelled ``job-name`` when ``job``."""
    env = [{"name": "WORLD_SIZE", "value": str(world)}] if world > 1 else []
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ddp-smoke-0", "namespace": "ml-team",
                         "labels": {"job-name": job} if job else {},
                         "annotations": {"ai-admission.io/gpu-memory": "60Gi",
                                         "ai-admission.io/workload-type": "training"}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"gpu-type": "a100-80g"},
                     "containers": [{"name": "torch", "image": IMAGE_TRAIN, "env": env,
                                     "resources": copy.deepcopy(GPU_8)}]}}
