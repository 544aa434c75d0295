"""The course's three questions decide the policy, the class supplies defaults: can it be preempted (the
PriorityClass), how many GPUs of which model, does it communicate across nodes (packing, NCCL, the gang) — for
every workload however it is submitted. Training is recognised by its launcher; the record and ``check`` say the
answers the pod was given, each with where it came from.

The objects follow published recipes field for field: a torchrun fine-tune as a plain ``batch/v1`` Job (the
course: training submitted "as a Job or a custom CRD"), an Indexed Job running ``torchrun --nnodes`` across its
completions (the Kubernetes docs' Indexed Job with a headless Service), accelerate's and DeepSpeed's launchers, a
PyTorchJob of one Master, a Katib trial that is a 4-pod PyTorchJob.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.conftest import RULES_FILE
from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.core import names
from webhook.core.admission import mutate_verdict
from webhook.core.documents import Document, Report, Result, check
from webhook.core.profile import build_profile
from webhook.core.rules import Rules, RulesError, compile_rules

H100 = {"ai-admission.io/gpu-model": "h100-80g"}
RESOURCES = {"limits": {"nvidia.com/gpu": 8, "memory": "512Gi", "cpu": "64"},
             "requests": {"nvidia.com/gpu": 8, "memory": "512Gi", "cpu": "64"}}


def job(name: str, command: list[str], *, annotations: dict[str, str] | None = None, indexed: int | None = None,
        args: list[str] | None = None) -> dict[str, Any]:
    """A ``batch/v1`` Job of one GPU container, as a fine-tuning recipe writes it."""
    container: dict[str, Any] = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.07-py3", "command": command,
                                 "resources": copy.deepcopy(RESOURCES)}
    if args:
        container["args"] = args
    spec: dict[str, Any] = {"backoffLimit": 0, "template": {
        "metadata": {"annotations": {**H100, **(annotations or {})}},
        "spec": {"restartPolicy": "Never", "containers": [container]}}}
    if indexed:
        spec.update(completionMode="Indexed", completions=indexed, parallelism=indexed)
        spec["template"]["spec"]["subdomain"] = name
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml-team"}, "spec": spec}


def job_pod(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The pod the Job controller creates from ``obj``'s template (its labels, owner and completion index)."""
    name = obj["metadata"]["name"]
    template = copy.deepcopy(obj["spec"]["template"])
    labels = {**(template["metadata"].get("labels") or {}), "batch.kubernetes.io/job-name": name, "job-name": name,
              "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1"}
    notes = dict(template["metadata"].get("annotations") or {})
    if obj["spec"].get("completionMode") == "Indexed":
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        notes["batch.kubernetes.io/job-completion-index"] = str(index)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{name}-{index}-", "namespace": "ml-team", "labels": labels,
                         "annotations": notes,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "u-1",
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": template["spec"]}


def checked(rules: Rules, *objects: dict[str, Any]) -> Report:
    return check([Document("test.yaml", i, obj) for i, obj in enumerate(objects)], context=as_context(rules))


def only(report: Report) -> Result:
    assert len(report.results) == 1, [r.as_dict() for r in report.results]
    return report.results[0]


def mutated(rules: Rules, pod: dict[str, Any], *, nodes: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The pod as /mutate leaves it, offline or (``nodes``) with the node watch seeing GKE A3 nodes."""
    ctx = with_nodes(gke_cluster(), rules) if nodes else as_context(rules)
    verdict = mutate_verdict(pod, ctx=ctx, mode="deny", namespace="ml-team")
    return apply_verdict(copy.deepcopy(pod), verdict), list(verdict.warnings)


# -- training however it is launched ---------------------------------------------------------------------------

SFT = job("llama3-8b-sft", ["torchrun", "--standalone", "--nproc_per_node=8", "sft.py"],
          annotations={"ai-admission.io/model-params": "8B", "ai-admission.io/model-precision": "bf16"})


def test_a_torchrun_fine_tune_in_a_plain_job_is_training_with_no_over_provisioned_warning(rules: Rules) -> None:
    result = only(checked(rules, SFT))
    assert result.workload == "training"
    assert result.reason == 'command "torchrun" in container "trainer"'
    assert result.verdict.allowed and "gpu-over-provisioned" not in result.verdict.reason_codes
    assert result.gpus_needed == 8  # its GPUs are its data-parallel world
    answers = result.answers()
    assert (answers["preemptible"], answers["multiNode"]) == (False, False)
    # sized with training's memory factor (4: gradients and optimiser state), not batch's 1.2
    profile = result.verdict.profile
    assert profile is not None and profile.memory_total == 8 * 10**9 * 2 * 4


def test_its_pod_gets_training_s_priority_not_batch_s(rules: Rules) -> None:
    pod, _ = mutated(rules, job_pod(SFT))
    assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"], pod["spec"]["preemptionPolicy"]) == (
        "ai-training", 100000, "PreemptLowerPriority")
    record = json.loads(pod["metadata"]["annotations"][names.PROFILE])
    assert (record["class"], record["preemptible"], record["multiNode"]) == ("training", False, False)


@pytest.mark.parametrize("command", [
    ["accelerate", "launch", "--multi_gpu", "--num_processes", "4", "train.py"],
    ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "ds_config.json"],
    ["python", "-m", "torch.distributed.run", "--nproc-per-node", "8", "train.py"],
    ["bash", "-c", "pip install -r requirements.txt && torchrun --nproc_per_node 8 train.py"],
    ["/usr/local/bin/horovodrun", "-np", "8", "python", "train.py"],
    ["composer", "-n", "8", "train.py"],
])
def test_each_launcher_makes_a_job_training(rules: Rules, command: list[str]) -> None:
    result = only(checked(rules, job("launched", command)))
    assert result.workload == "training", result.reason
    assert "in container \"trainer\"" in result.reason


def test_mpirun_is_training_only_where_it_passes_nccl_settings(rules: Rules) -> None:
    plain = only(checked(rules, job("mpi", ["mpirun", "-np", "8", "python", "solve.py"])))
    assert plain.workload == "batch"
    nccl = only(checked(rules, job("mpi", ["mpirun", "-np", "16", "-x", "NCCL_DEBUG=INFO", "python", "train.py"])))
    assert nccl.workload == "training"


def test_the_torch_distributed_env_makes_a_pod_training(rules: Rules) -> None:
    obj = job("env", ["python", "train.py"])
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "MASTER_ADDR", "value": "env-0.env"}]
    assert only(checked(rules, obj)).workload == "training"


def test_a_job_that_runs_no_launcher_stays_batch_and_is_told_how_to_choose(rules: Rules) -> None:
    result = only(checked(rules, job("embed", ["python", "embed.py", "--model-name", "torchrun-style"])))
    assert result.workload == "batch"
    assert result.reason == ("owner Job/embed; set annotation ai-admission.io/workload-type to choose another "
                             "class")


# -- across nodes ----------------------------------------------------------------------------------------------

TWO_NODES = job("llama-2node", ["torchrun"], indexed=2,
                args=["--nnodes=2", "--nproc_per_node=8", "--node_rank=$(JOB_COMPLETION_INDEX)",
                      "--master_addr=llama-2node-0.llama-2node", "--master_port=29500", "train.py"],
                annotations={"ai-admission.io/gpu-memory": "60Gi"})


def test_an_indexed_torchrun_job_is_multi_node_training_at_apply_and_at_its_pods(rules: Rules) -> None:
    result = only(checked(rules, TWO_NODES))
    assert (result.workload, result.answers()["multiNode"], result.answers()["jobPods"]) == ("training", True, 2)
    profile = build_profile(job_pod(TWO_NODES, 1), as_context(rules))
    assert (profile.workload, profile.multi_node, profile.world.pods) == ("training", True, 2)
    assert profile.multi_node_reason == '2 pods (--nnodes=2 in container "trainer")'


def test_its_pods_are_packed_and_told_of_their_fabric_as_a_pytorchjob_s(rules: Rules) -> None:
    pod, warnings = mutated(rules, job_pod(TWO_NODES, 1), nodes=True)
    terms = pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "llama-2node"}},
        "topologyKey": "cloud.google.com/gce-topology-subblock"}
    assert pod["spec"]["priorityClassName"] == "ai-training"
    # GKE A3 Mega's fabric needs what the pod must carry: told, nothing guessed (a batch pod was told nothing)
    assert any(w.startswith("NCCL talks TCP between nodes: fabric") for w in warnings), warnings
    offline, told = mutated(rules, job_pod(TWO_NODES, 1))
    assert "affinity" not in offline["spec"] and any(w.startswith("pods not packed") for w in told)


def test_a_launcher_that_says_one_node_is_not_multi_node(rules: Rules) -> None:
    profile = build_profile(job_pod(SFT), as_context(rules))
    assert (profile.multi_node, profile.multi_node_reason) == (False, '1 pod (--standalone in container "trainer")')


def test_a_pytorchjob_of_one_master_is_not_multi_node(rules: Rules) -> None:
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "single", "namespace": "ml-team"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {
               "metadata": {"annotations": {**H100, "ai-admission.io/gpu-memory": "40Gi"}},
               "spec": {"containers": [{"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                                        "command": ["torchrun", "--nproc_per_node=8", "train.py"],
                                        "resources": copy.deepcopy(RESOURCES)}]}}}}}}
    result = only(checked(rules, obj))
    assert result.answers()["multiNode"] is False
    assert result.answers()["multiNodeReason"] == "1 pod (PyTorchJob Master 1)"
    assert not any("not packed" in w for w in result.verdict.warnings)
    # its pod, as the training operator makes it (its env: one node)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "single-master-0", "namespace": "ml-team",
        "labels": {"training.kubeflow.org/job-name": "single", "training.kubeflow.org/replica-type": "master"},
        "annotations": {**H100, "ai-admission.io/gpu-memory": "40Gi"}},
        "spec": {"containers": [{"name": "pytorch", "image": "i", "resources": copy.deepcopy(RESOURCES),
                                 "env": [{"name": "PET_NNODES", "value": "1"}, {"name": "WORLD_SIZE", "value": "8"},
                                         {"name": "PET_NPROC_PER_NODE", "value": "8"}]}]}}
    assert build_profile(pod, as_context(rules)).multi_node is False


def katib_trial(replicas: int) -> dict[str, Any]:
    """A Katib trial's PyTorchJob (its trialTemplate's trialSpec, with the trial's labels), ``replicas`` workers."""
    template = {"metadata": {"labels": {"katib.kubeflow.org/trial": "random-abc", "katib.kubeflow.org/experiment": "random"},
                             "annotations": {**H100, "ai-admission.io/gpu-memory": "40Gi"}},
                "spec": {"containers": [{"name": "pytorch", "image": "docker.io/kubeflowkatib/pytorch-mnist-cpu:latest",
                                         "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1", "--lr=0.01"],
                                         "resources": copy.deepcopy(RESOURCES)}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "random-abc", "namespace": "ml-team",
                         "labels": {"katib.kubeflow.org/trial": "random-abc"}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": copy.deepcopy(template)},
                "Worker": {"replicas": replicas - 1, "restartPolicy": "OnFailure", "template": copy.deepcopy(template)}}}}


def test_a_multi_pod_trial_is_packed_and_grouped_as_training_is(rules: Rules) -> None:
    for result in checked(rules, katib_trial(4)).results:
        assert (result.workload, result.answers()["multiNode"], result.answers()["jobPods"]) == ("hpo", True, 4)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "random-abc-worker-0", "namespace": "ml-team",
        "labels": {"katib.kubeflow.org/trial": "random-abc", "training.kubeflow.org/job-name": "random-abc",
                   "training.kubeflow.org/replica-type": "worker"},
        "annotations": {**H100, "ai-admission.io/gpu-memory": "40Gi"}},
        "spec": {"containers": [{"name": "pytorch", "image": "i", "resources": copy.deepcopy(RESOURCES),
                                 "env": [{"name": "PET_NNODES", "value": "4"}]}]}}
    patched, _ = mutated(rules, pod, nodes=True)
    terms = patched["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"training.kubeflow.org/job-name": "random-abc"}}
    assert patched["spec"]["priorityClassName"] == "ai-hpo"


# -- can it be preempted? -------------------------------------------------------------------------------------

def test_a_preemptible_training_job_runs_below_the_non_preemptible_classes(rules: Rules) -> None:
    pod, _ = mutated(rules, job_pod(job("spot", ["torchrun", "--standalone", "t.py"],
                                        annotations={"ai-admission.io/preemptible": "true",
                                                     "ai-admission.io/gpu-memory": "40Gi"})))
    spec = pod["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "ai-training-preemptible", 50000, "PreemptLowerPriority")
    protected = min(s.priority_class.value for s in rules.classes.values()
                    if not s.preemptible and s.priority_class is not None)
    preemptible = max(s.priority_class.value for s in rules.classes.values()
                      if s.preemptible and s.priority_class is not None)
    assert preemptible < spec["priority"] < protected
    assert json.loads(pod["metadata"]["annotations"][names.PROFILE])["preemptible"] is True


def test_a_batch_job_that_may_not_be_preempted_is_not_left_where_others_preempt_it(rules: Rules) -> None:
    obj = job("must-finish", ["python", "embed.py"],
              annotations={"ai-admission.io/preemptible": "false", "ai-admission.io/gpu-memory": "40Gi"})
    result = only(checked(rules, obj))
    assert (result.workload, result.answers()["preemptible"]) == ("batch", False)
    assert result.answers()["preemptibleReason"] == "annotation ai-admission.io/preemptible=false"
    pod, _ = mutated(rules, job_pod(obj))
    spec = pod["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "ai-batch-protected", 100000, "Never")
    assert spec["priority"] >= max(s.priority_class.value for s in rules.classes.values() if s.priority_class)
    assert json.loads(pod["metadata"]["annotations"][names.PROFILE])["preemptible"] is False


def test_an_answer_the_rules_cannot_honour_is_told_with_the_rule_s_name_and_recorded_as_given(rules: Rules) -> None:
    obj = job("trial", ["python", "train.py"], annotations={"ai-admission.io/preemptible": "false",
                                                            "ai-admission.io/gpu-memory": "40Gi"})
    obj["spec"]["template"]["metadata"]["labels"] = {"katib.kubeflow.org/trial": "trial"}
    result = only(checked(rules, obj))
    assert result.workload == "hpo" and result.verdict.allowed
    assert result.verdict.reason_codes == ["preemptible-not-honoured"]
    assert result.verdict.warnings == (
        "annotation ai-admission.io/preemptible=false is not honoured: the rules give hpo pods no PriorityClass for "
        "it (classes.hpo.priorityClassIfNotPreemptible), so it runs at ai-hpo (10000), which other classes preempt",)
    pod, _ = mutated(rules, job_pod(obj))
    assert pod["spec"]["priorityClassName"] == "ai-hpo"
    assert json.loads(pod["metadata"]["annotations"][names.PROFILE])["preemptible"] is True  # what it got


def test_the_other_answer_s_priority_class_is_allowed_and_generated(rules: Rules) -> None:
    from webhook.generate.webhooks import priority_classes
    made = {pc["metadata"]["name"]: (pc["value"], pc["preemptionPolicy"]) for pc in priority_classes(rules)}
    assert made["ai-training-preemptible"] == (50000, "PreemptLowerPriority")
    assert made["ai-batch-protected"] == (100000, "Never")
    assert "ai-batch-protected" in rules.classes["batch"].allowed_priority_classes


def test_the_rules_refuse_an_other_answer_s_class_for_the_class_s_own_answer() -> None:
    document = yaml.safe_load(RULES_FILE.read_text())
    document["classes"]["training"]["priorityClassIfNotPreemptible"] = {"name": "ai-x", "value": 5}
    with pytest.raises(RulesError, match="priorityClassIfNotPreemptible"):
        compile_rules(document, source="test")
