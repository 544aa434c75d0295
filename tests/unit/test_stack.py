"""The AI stack as deployed: every GPU pod spec of the projects' published examples is judged, and judged right.

tests/manifests/stack holds manifests that follow the published examples of Kubeflow (training operator, Trainer,
Katib, notebooks), JobSet, LeaderWorkerSet, KServe, KubeRay, Volcano, the vLLM production stack, NVIDIA Dynamo,
Spark, Argo, HAMi and the GKE/EKS samples, field for field (each names the example it follows). What `check` says
of each pod spec in them (class, GPUs, the model judged against, the pods of the job, the deny reasons) is stated
in tests/fixtures/stack-expected.yaml; the webhook must say the same.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.builders import CLI
from tests.support.contexts import as_context
from tests.support.fixtures import EXPECTED, STACK
from webhook.cli.check import read_documents
from webhook.core.documents import check
from webhook.core.rules import Rules
from webhook.core.workloads.generic import generic_templates


def rows(paths: list[str], rules: Rules) -> list[list[Any]]:
    report = check(list(read_documents(paths)), context=as_context(rules))
    found = []
    for r in report.results:
        profile = r.verdict.profile
        assert profile is not None
        found.append([r.kind, r.name, r.path, r.status, r.workload, profile.gpu_count,
                      profile.model.name if profile.model else None, profile.world.pods,
                      [f.code for f in r.verdict.findings if f.severity == "deny"]])
    for document in report.skipped:
        found.append([document.obj.get("kind"), document.obj["metadata"].get("name"), None, "SKIP", None, 0, None, 1, []])
    return found


def test_every_example_is_listed() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in STACK.glob("*.yaml"))


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_each_pod_spec_is_judged_with_its_class_gpus_model_and_world(filename: str, rules: Rules) -> None:
    assert rows([str(STACK / filename)], rules) == EXPECTED[filename]


def test_check_on_the_directory_judges_every_gpu_pod_spec(rules: Rules) -> None:
    """No object with a pod spec asking for an accelerator is skipped, and no kind yields fewer judged GPU pod
    specs than a search by shape finds in it (a GPU pod spec that is not judged is a bug)."""
    done = subprocess.run([CLI, "check", "-f", str(STACK), "-o", "json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr  # the published examples name no GPU model: denied
    report = json.loads(done.stdout)
    judged: dict[tuple[str, str], int] = {}
    for result in report["results"]:
        key = (result["kind"], result["name"])
        judged[key] = judged.get(key, 0) + (1 if result["class"] != "none" or result["denials"] else 0)
    for document in read_documents([str(STACK)]):
        obj = document.obj
        key = (str(obj["kind"]), str(obj["metadata"].get("name") or obj["metadata"].get("generateName")))
        by_shape = len(generic_templates(obj, as_context(rules))) if obj["kind"] != "Pod" else 0
        assert judged.get(key, 0) >= by_shape, f"{document.where}: {key} has {by_shape} GPU pod specs, judged {judged.get(key)}"
    skipped = {(s["kind"], s["name"]) for s in report["skipped"]}
    assert skipped == {("Notebook", "research-cpu")}


def test_a_kind_ai_admission_does_not_know_is_read_generically_and_says_so() -> None:
    done = subprocess.run([CLI, "check", "-f", str(STACK / "notebook-gpu.yaml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith("DENY  Notebook kubeflow-user/research-gpu spec.template.spec  class=batch (")
    assert lines[0].endswith("reasons=gpu-model-missing,gpu-memory-missing  reader=generic: pod spec")
    assert ("      warning: Notebook is not in the kinds table; its pod spec at spec.template.spec was read "
            "generically, as a pod owned by the Notebook") in lines
    assert lines[-1] == "1 checked: 0 allowed, 0 allowed with warnings, 1 denied; 1 object without pod templates skipped"


def test_a_trainjob_takes_its_runtime_from_the_same_files(rules: Rules) -> None:
    alone = check(list(read_documents([str(STACK / "trainjob.yaml")])), context=as_context(rules)).results
    assert [r.verdict.warnings[0] for r in alone] == [
        'runtime ClusterTrainingRuntime "torchtune-llama3.2-1b" is not known here: judged from the TrainJob\'s own '
        "fields (the runtime is judged on its own)"]
    together = check(list(read_documents([str(STACK / "trainjob.yaml"), str(STACK / "clustertrainingruntime.yaml")])),
                     context=as_context(rules)).results
    (trainjob,) = [r for r in together if r.kind == "TrainJob"]
    assert not any("is not known here" in w for w in trainjob.verdict.warnings)
    pod = trainjob.mutated
    assert pod is not None
    (node,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
    # the runtime's node container (its image and command), with the TrainJob's resources: 1 GPU, not the runtime's 2
    assert node["image"].startswith("ghcr.io/kubeflow/trainer/torchtune-trainer")
    assert node["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_a_model_fully_sharded_over_a_64_pod_job_fits(rules: Rules) -> None:
    report = check(list(read_documents([str(STACK / "pytorchjob-405b-64-nodes.yaml")])), context=as_context(rules))
    pretrain = [r for r in report.results if r.name == "llama-405b-pretrain"]
    assert [r.verdict.allowed for r in pretrain] == [True, True]
    assert pretrain[1].verdict.warnings[0] == (
        "needs 3017.5Gi of GPU memory (405B params x 2 bytes (bf16) x 4 (training memory factor)), more than the "
        "pod's 8 x h100-80g hold (637.2Gi); it fits only sharded over all 512 GPUs of the job (64 pods from "
        "PyTorchJob Master 1 + Worker 63), 5.9Gi per GPU")
    # and what its pods will be told at /mutate (offline: no nodes, so no fabric and no packing), heard at apply
    assert [w.partition(":")[0] for w in pretrain[1].verdict.warnings[1:]] == ["no NCCL setting added",
                                                                               "pods not packed"]
    on_l4 = [r for r in report.results if r.name == "llama-405b-on-l4"]
    assert on_l4[0].verdict.message is not None
    assert on_l4[0].verdict.message.splitlines()[1] == (
        "- needs 3017.5Gi of GPU memory (405B params x 2 bytes (bf16) x 4 (training memory factor)); even sharded "
        "over all 16 GPUs of the job (2 pods from PyTorchJob Master 1 + Worker 1, 8 GPUs each) that is 188.6Gi per "
        "GPU, more than a l4-24g card holds (22.5Gi); 135 of them would hold it: use more pods or more GPUs per pod")
