"""Classification precedence: annotation, then the ordered signals, then shape."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.contexts import as_context
from webhook.core.profile import build_profile
from webhook.core.rules import Rules

GPU = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}


def pod(*, labels: dict[str, str] | None = None, owner: tuple[str, str] | None = None,
        annotations: dict[str, str] | None = None, env: dict[str, str] | None = None, gpu: bool = True) -> dict[str, Any]:
    container: dict[str, Any] = dict(GPU) if gpu else {"name": "c"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    meta: dict[str, Any] = {"generateName": "p-", "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "o", "uid": "u", "controller": True}]
    return {"metadata": meta, "spec": {"containers": [container]}}


@pytest.mark.parametrize("case, expected", [
    (pod(owner=("kubeflow.org/v1", "PyTorchJob")), "training"),
    (pod(owner=("kubeflow.org/v1", "TFJob")), "training"),
    (pod(owner=("kubeflow.org/v2beta1", "MPIJob")), "training"),
    (pod(owner=("batch/v1", "Job"), labels={"jobset.sigs.k8s.io/jobset-name": "js"}), "training"),
    (pod(owner=("batch.volcano.sh/v1alpha1", "Job"), env={"MASTER_ADDR": "m"}), "training"),
    (pod(owner=("batch.volcano.sh/v1alpha1", "Job")), "batch"),  # Volcano Job without a framework: default class
    (pod(owner=("batch/v1", "Job"), env={"WORLD_SIZE": "8"}), "training"),
    (pod(owner=("batch/v1", "Job"), labels={"katib.kubeflow.org/trial": "t"}), "hpo"),
    (pod(owner=("kubeflow.org/v1beta1", "Trial")), "hpo"),
    (pod(owner=("ray.io/v1", "RayCluster"), labels={"ray.io/cluster": "tune-search", "ray.io/node-type": "worker"}), "hpo"),
    (pod(owner=("ray.io/v1", "RayCluster"), labels={"ray.io/cluster": "c"}, env={"TUNE_MAX_PENDING_TRIALS_PG": "8"}), "hpo"),
    (pod(owner=("ray.io/v1", "RayCluster"), labels={"ray.io/cluster": "serve"}), "batch"),
    (pod(owner=("apps/v1", "ReplicaSet"), labels={"serving.kserve.io/inferenceservice": "m"}), "inference"),
    (pod(labels={"app.kubernetes.io/component": "predictor"}), "inference"),
    (pod(owner=("apps/v1", "ReplicaSet")), "inference"),
    (pod(owner=("apps/v1", "StatefulSet")), "inference"),
    (pod(owner=("batch/v1", "Job")), "batch"),
    (pod(labels={"spark-role": "executor"}), "batch"),
    (pod(labels={"workflows.argoproj.io/workflow": "wf"}), "batch"),
    (pod(), "batch"),
    (pod(gpu=False), "none"),
    (pod(gpu=False, owner=("apps/v1", "ReplicaSet")), "none"),
    (pod(gpu=False, owner=("batch/v1", "Job")), "none"),
    (pod(gpu=False, labels={"spark-role": "driver"}), "batch"),
    (pod(gpu=False, owner=("kubeflow.org/v1", "PyTorchJob")), "training"),
])
def test_signals(rules: Rules, case: dict[str, Any], expected: str) -> None:
    assert build_profile(case, as_context(rules)).workload == expected


def test_annotation_wins_over_every_signal(rules: Rules) -> None:
    case = pod(owner=("kubeflow.org/v1", "PyTorchJob"), annotations={"ai-admission.io/workload-type": "Inference"})
    classification = build_profile(case, as_context(rules)).classification
    assert classification.workload == "inference"
    assert classification.source == "annotation"


def test_reason_names_the_evidence(rules: Rules) -> None:
    case = pod(owner=("batch/v1", "Job"), labels={"katib.kubeflow.org/trial": "t-1"})
    assert build_profile(case, as_context(rules)).classification.reason == "label katib.kubeflow.org/trial=t-1"
    default = build_profile(pod(), as_context(rules)).classification
    assert default.source == "default" and "default class batch" in default.reason


def test_invalid_annotation_falls_back_to_signals(rules: Rules) -> None:
    case = pod(owner=("kubeflow.org/v1", "PyTorchJob"), annotations={"ai-admission.io/workload-type": "gaming"})
    profile = build_profile(case, as_context(rules))
    assert profile.workload == "training"
    assert [p.code for p in profile.problems] == ["invalid-annotation"]
