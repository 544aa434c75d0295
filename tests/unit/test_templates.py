"""Controller and CRD templates: the webhook and `ai-admission check` give identical verdicts on real manifests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.builders import MANIFESTS, objects, run_check
from tests.support.reviews import assert_valid_pod


def test_templates_are_classified_like_their_pods() -> None:
    done = run_check("-f", str(MANIFESTS), "-o", "json")
    classes = {(r["kind"], r["name"], r["template"]): r["class"] for r in json.loads(done.stdout)["results"]}
    assert classes[("Deployment", "vllm-llama-70b", "spec.template")] == "inference"
    assert classes[("PyTorchJob", "llama-pretrain", "spec.pytorchReplicaSpecs.Worker.template")] == "training"
    assert classes[("JobSet", "gpt-neox", "spec.replicatedJobs[0].template.spec.template")] == "training"
    assert classes[("CronJob", "nightly-embeddings", "spec.jobTemplate.spec.template")] == "batch"
    assert classes[("InferenceService", "llama3-8b", "spec.predictor")] == "inference"
    assert classes[("RayJob", "tune-search", "spec.rayClusterSpec.workerGroupSpecs[0].template")] == "hpo"
    assert classes[("Job", "tf-dist", "spec.tasks[1].template")] == "training"  # Volcano tensorflow plugin
    assert classes[("Deployment", "web", "spec.template")] == "none"


def test_yaml_output_is_the_mutated_pods() -> None:
    done = run_check("-f", str(MANIFESTS / "jobset.yaml"), "-o", "yaml")
    assert done.returncode == 0, done.stderr
    (pod,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert_valid_pod(pod)
    assert pod["kind"] == "Pod" and pod["metadata"]["generateName"] == "gpt-neox-"
    assert {"name": "ai-admission-shm", "mountPath": "/dev/shm"} in pod["spec"]["containers"][0]["volumeMounts"]
    assert pod["spec"]["priorityClassName"] == "ai-training"
    # WORLD_SIZE 8: multi-node, but offline neither the nodes' topology nor their fabric is known: not packed, no
    # NCCL env (what the cluster's nodes give: tests/unit/test_placement.py)
    assert "affinity" not in pod["spec"]
    assert not any(e["name"].startswith("NCCL_") for e in pod["spec"]["containers"][0]["env"])


def test_yaml_output_gives_the_verdict_of_what_is_denied() -> None:
    done = run_check("-f", str(MANIFESTS / "pytorchjob.yaml"), "-o", "yaml")
    assert done.returncode == 1
    verdicts = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert [(v["verdict"], v["kind"], v["name"], v["template"], v["class"], v["reasons"]) for v in verdicts] == [
        ("DENY", "PyTorchJob", "llama-pretrain", "spec.pytorchReplicaSpecs.Master.template", "training",
         ["gpu-model-missing"]),
        ("DENY", "PyTorchJob", "llama-pretrain", "spec.pytorchReplicaSpecs.Worker.template", "training",
         ["gpu-memory-missing"])]
    assert all(v["message"].startswith('PyTorchJob "ml-team/llama-pretrain" spec.pytorchReplicaSpecs.') for v in verdicts)


def test_text_output_and_stdin_and_lists() -> None:
    (pod,) = [d for d in objects(MANIFESTS / "mixed.yaml") if d["kind"] == "Pod"]
    listing = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [pod]})
    done = run_check("-f", "-", stdin=listing)
    assert done.returncode == 1
    first = done.stdout.splitlines()[0]
    assert first == ("DENY  Pod ml-team/debug-gpu  class=batch (requests an accelerator and carries no workload signal; "
                     "default class batch (set annotation ai-admission.io/workload-type to choose))  gpus=1  "
                     "reasons=gpu-model-missing,gpu-memory-missing,host-memory-request-missing")
    assert done.stdout.rstrip().endswith("1 checked: 0 allowed, 0 allowed with warnings, 1 denied")


@pytest.mark.parametrize("content, rules, fragment", [
    (None, None, "bad.yaml: no such file or directory"),
    ("kind: [\n", None, "bad.yaml: invalid YAML at line 2"),
    ("apiVersion: v1\nkind: Pod\n---\n- 1\n- 2\n", None, "bad.yaml (document 2): expected a Kubernetes object, got list"),
    ("metadata: {name: x}\n", None, "bad.yaml (document 1): not a Kubernetes object"),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n", "nope.yaml",
     "nope.yaml: cannot read"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, content: str | None, rules: str | None,
                                         fragment: str) -> None:
    bad = tmp_path / "bad.yaml"
    if content is not None:
        bad.write_text(content)
    done = run_check("-f", str(bad), *(["--rules", rules] if rules else []))
    assert done.returncode == 2
    assert fragment in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_plugin() -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["kubectl", "ai-admission", "check", "-f", str(MANIFESTS / "cronjob.yaml")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("DENY  CronJob data/nightly-embeddings spec.jobTemplate.spec.template")
