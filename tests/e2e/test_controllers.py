"""Pods made by the real controllers: a kube-controller-manager (its Job, ReplicaSet and Deployment controllers)
creates the pods of a Job and of a Deployment through the API server, so through the webhook, exactly as in a
cluster: the pods carry the profile, PriorityClass and ``/dev/shm`` of their class, and a controller whose pods
are denied is told on its own status (the Job controller's FailedCreate), not silently stuck.

Skipped with one line where no kube-controller-manager binary is found ($KUBEBUILDER_ASSETS, envtest's default
directory, then PATH).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from tests.conftest import eventually
from tests.support.control_plane import CONTROLLER_MANAGER, Component, ControlPlane, running
from webhook.core.rules import Rules

pytestmark = [pytest.mark.e2e]

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


@pytest.fixture(scope="module")
def controllers(control_plane: ControlPlane) -> Iterator[Component]:
    with running(control_plane, CONTROLLER_MANAGER) as component:
        yield component


def gpu_template(labels: dict[str, str], annotations: dict[str, str], *, gpus: int = 1,
                 restart: str = "Always") -> dict[str, Any]:
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "4", "memory": "32Gi"}
    return {"metadata": {"labels": labels, "annotations": annotations},
            "spec": {"restartPolicy": restart, "nodeSelector": {"gpu-type": "a100-80g"},
                     "containers": [{"name": "main", "image": IMAGE,
                                     "resources": {"limits": resources, "requests": dict(resources)}}]}}


def apply(plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> None:
    done = plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    assert done.returncode == 0, done.stderr


def pods(plane: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    done = plane.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["items"])


def made(plane: ControlPlane, namespace: str, owner: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Create ``owner``; its ``count`` pods once its controller has made them all."""
    apply(plane, namespace, owner)
    selector = ",".join(f"{k}={v}" for k, v in owner["spec"]["template"]["metadata"]["labels"].items())
    found: list[dict[str, Any]] = eventually(
        lambda: (listed := pods(plane, namespace, selector)) and len(listed) == count and listed, seconds=60)
    return found


def test_a_jobs_pods_are_made_by_the_job_controller_and_profiled(control_plane: ControlPlane, controllers: Component,
                                                                  webhook_installed: ControlPlane, namespace: str,
                                                                  rules: Rules) -> None:
    """An Indexed Job of 2 pods, one A100 each, a fine-tune: the job controller's pods are the webhook's."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "finetune"},
           "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
                    "template": gpu_template({"app": "finetune"}, {"ai-admission.io/workload-type": "training",
                                                                   "ai-admission.io/gpu-memory": "40Gi"},
                                             restart="Never")}}
    training = rules.classes["training"].priority_class
    assert training is not None
    for pod in made(control_plane, namespace, job, 2):
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
        profile = json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])
        assert (profile["class"], profile["model"], profile["gpuMemoryPerGpu"]) == ("training", "a100-80g", "40Gi")
        assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == (training.name, training.value)
        assert any(v["name"] == "ai-admission-shm" for v in pod["spec"]["volumes"])


def test_a_deployments_replicas_are_made_through_its_replica_set_and_profiled(
        control_plane: ControlPlane, controllers: Component, webhook_installed: ControlPlane, namespace: str,
        rules: Rules) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm"},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "vllm"}},
                           "template": gpu_template({"app": "vllm"}, {"ai-admission.io/workload-type": "inference",
                                                                      "ai-admission.io/gpu-memory": "20Gi"})}}
    inference = rules.classes["inference"].priority_class
    assert inference is not None
    for pod in made(control_plane, namespace, deployment, 2):
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])["class"] == "inference"
        assert pod["spec"]["priorityClassName"] == inference.name


def test_a_controller_whose_pods_would_be_denied_is_refused_at_its_own_create(
        control_plane: ControlPlane, controllers: Component, webhook_installed: ControlPlane, namespace: str) -> None:
    """A Job whose template names no GPU model is denied when it is created, with the fix: no controller is left
    retrying pods that can never be admitted."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bare"},
           "spec": {"template": gpu_template({"app": "bare"}, {}, restart="Never")}}
    job["spec"]["template"]["spec"].pop("nodeSelector")
    done = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    assert done.returncode != 0
    assert "does not say which model" in done.stderr or "not which model" in done.stderr, done.stderr
    assert pods(control_plane, namespace, "app=bare") == []


# -- the three questions decide, however the job is submitted (docs/users/writing-pods.md#the-three-questions) ----

def torchrun_job(name: str, command: list[str], annotations: dict[str, str], *, pods: int = 1,
                 gpus: int = 8) -> dict[str, Any]:
    """A fine-tune as a plain batch/v1 Job with no workload-type annotation (an Indexed one across ``pods`` pods),
    its command the launcher's."""
    template = gpu_template({"app": name}, annotations, gpus=gpus, restart="Never")
    template["spec"]["containers"][0]["command"] = command
    spec: dict[str, Any] = {"backoffLimit": 0, "template": template}
    if pods > 1:
        spec.update(completionMode="Indexed", completions=pods, parallelism=pods)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def created_with_warnings(plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> str:
    """Create ``obj`` with kubectl; what kubectl printed of the admission warnings (stderr)."""
    done = plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_torchrun_fine_tune_in_a_plain_job_is_training_told_nothing_idle(
        control_plane: ControlPlane, controllers: Component, webhook_installed: ControlPlane, namespace: str,
        rules: Rules) -> None:
    job = torchrun_job("sft", ["torchrun", "--standalone", "--nproc_per_node=8", "sft.py"],
                       {"ai-admission.io/model-params": "8B", "ai-admission.io/model-precision": "bf16"})
    told = created_with_warnings(control_plane, namespace, job)
    assert "would sit idle" not in told, told
    training = rules.classes["training"].priority_class
    assert training is not None
    (pod,) = eventually(lambda: (found := pods(control_plane, namespace, "app=sft")) and found, seconds=60)
    record = json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])
    assert (record["class"], record["reason"], record["multiNode"], record["gpusNeeded"]) == (
        "training", 'command "torchrun" in container "main"', False, 8)
    assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == (training.name, training.value)


def test_an_indexed_torchrun_job_is_multi_node_training(
        control_plane: ControlPlane, controllers: Component, webhook_installed: ControlPlane, namespace: str) -> None:
    job = torchrun_job("ft2", ["torchrun", "--nnodes=2", "--nproc_per_node=8", "train.py"],
                       {"ai-admission.io/gpu-memory": "40Gi"}, pods=2)
    for pod in made(control_plane, namespace, job, 2):
        record = json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])
        assert (record["class"], record["multiNode"], record["jobPods"]) == ("training", True, 2)
        assert pod["spec"]["priorityClassName"] == "ai-training"


def test_can_it_be_preempted_chooses_the_priority_class(
        control_plane: ControlPlane, controllers: Component, webhook_installed: ControlPlane, namespace: str,
        rules: Rules) -> None:
    """A training job that may be preempted runs below the non-preemptible classes; a batch job that may not is not
    left where others preempt it (the PriorityClasses of both answers are installed with the rules')."""
    spot = torchrun_job("spot", ["torchrun", "--standalone", "train.py"],
                        {"ai-admission.io/preemptible": "true", "ai-admission.io/gpu-memory": "40Gi"}, gpus=1)
    keep = torchrun_job("keep", ["python", "embed.py"],
                        {"ai-admission.io/preemptible": "false", "ai-admission.io/gpu-memory": "40Gi"}, gpus=1)
    (spot_pod,) = made(control_plane, namespace, spot, 1)
    (keep_pod,) = made(control_plane, namespace, keep, 1)
    levels = [s.priority_class.value for s in rules.classes.values() if s.priority_class is not None]
    assert (spot_pod["spec"]["priorityClassName"], spot_pod["spec"]["preemptionPolicy"]) == (
        "ai-training-preemptible", "PreemptLowerPriority")
    assert spot_pod["spec"]["priority"] < rules.classes["training"].priority_class.value  # type: ignore[union-attr]
    assert (keep_pod["spec"]["priorityClassName"], keep_pod["spec"]["priority"], keep_pod["spec"]["preemptionPolicy"]) \
        == ("ai-batch-protected", max(levels), "Never")
    for pod, preemptible in ((spot_pod, True), (keep_pod, False)):
        assert json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])["preemptible"] is preemptible
