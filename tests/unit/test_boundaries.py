"""Every threshold of the policy tested on both sides of its boundary.

A `>` that becomes `>=` changes only what happens exactly at the limit, so each limit is tested exactly at it
and one step past it: a card's memory, a node's GPU count, the /dev/shm caps (per GPU, the class maximum, the
fraction of the memory limit, no limit), the PCIe tensor-parallel warning, and which pods get NCCL settings.
In-process, through the functions the server calls (`judge_pod`, `mutate_verdict`): these are the fast tests
the mutation-testing run (`make mutation`) relies on.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.builders import INFINIBAND, NCCL, SHM, gpu_pod, rules_with, shm_size
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.core.admission import Verdict, fitted, judge_pod, mutate_verdict
from webhook.core.rules import Rules

GI = 2**30
MI = 2**20




def judge(pod: dict[str, Any], rules: Rules) -> Verdict:
    return judge_pod(pod, ctx=as_context(rules), mode="deny", subject="pod")


def denials(verdict: Verdict) -> list[str]:
    return [f.code for f in verdict.findings if f.severity == "deny"]


def warnings(verdict: Verdict) -> list[str]:
    return [f.code for f in verdict.findings if f.severity == "warn"]








# -- a card's memory -------------------------------------------------------------------------------------------

def test_memory_exactly_a_cards_fits(rules: Rules) -> None:
    card = rules.catalog["a100-80g"].memory
    assert card == 80 * GI
    assert judge(gpu_pod(memory="80Gi"), rules).allowed


def test_memory_a_mebibyte_over_a_card_is_denied(rules: Rules) -> None:
    verdict = judge(gpu_pod(memory=f"{80 * 1024 + 1}Mi"), rules)
    assert denials(verdict) == ["gpu-memory-exceeds"]
    assert "needs 80Gi of GPU memory per GPU" in (verdict.message or "")  # 80.001Gi shown to one decimal
    assert "but a a100-80g card holds 80Gi; use a model with more memory (" in (verdict.message or "")


def test_model_size_exactly_the_cards_memory_fits(rules: Rules) -> None:
    # 20B params x 2 bytes x 2 (a training memory factor of 2, from the rules) = 80e9 bytes over 1 card of 80e9
    exact = rules_with({"catalog": {"a100-80g": {"memory": "80G"}}, "classes": {"training": {"memoryFactor": 2}}})
    pod = gpu_pod(annotations={"ai-admission.io/model-params": "20B", "ai-admission.io/model-precision": "bf16"})
    assert judge(pod, exact).allowed
    over = gpu_pod(annotations={"ai-admission.io/model-params": "20000000001", "ai-admission.io/model-precision": "bf16"})
    verdict = judge(over, exact)
    assert denials(verdict) == ["gpu-memory-exceeds"]
    assert "ask for at least 2 GPUs (one node, one NVLink domain)" in (verdict.message or "")


def test_model_spread_over_the_pods_cards_fits_exactly(rules: Rules) -> None:
    exact = rules_with({"catalog": {"a100-80g": {"memory": "80G"}}, "classes": {"training": {"memoryFactor": 2}}})
    pod = gpu_pod(gpus=4, annotations={"ai-admission.io/model-params": "80B", "ai-admission.io/model-precision": "bf16"})
    assert judge(pod, exact).allowed  # 320e9 bytes over 4 x 80e9


# -- a node's GPU count ------------------------------------------------------------------------------------------

def test_exactly_a_nodes_gpus_is_allowed(rules: Rules) -> None:
    assert rules.catalog["h100-80g"].gpus_per_node == 8
    assert denials(judge(gpu_pod(gpus=8, model="h100-80g", memory="40Gi"), rules)) == []


def test_one_gpu_more_than_a_node_holds_is_denied(rules: Rules) -> None:
    verdict = judge(gpu_pod(gpus=9, model="h100-80g", memory="40Gi"), rules)
    assert denials(verdict) == ["gpu-count-exceeds-node"]
    assert "9 GPUs in one pod, but one h100-80g node holds 8" in (verdict.message or "")


def test_cards_needed_exactly_a_node_suggests_the_node(rules: Rules) -> None:
    exact = rules_with({"catalog": {"h100-80g": {"memory": "80G"}}, "classes": {"training": {"memoryFactor": 1}}})
    pod = gpu_pod(model="h100-80g", annotations={"ai-admission.io/model-params": "320B",
                                                 "ai-admission.io/model-precision": "bf16"})
    message = judge(pod, exact).message or ""
    assert "ask for at least 8 GPUs" in message  # 640e9 bytes = exactly 8 cards: one node still holds it
    bigger = gpu_pod(model="h100-80g", annotations={"ai-admission.io/model-params": "320000000001",
                                                    "ai-admission.io/model-precision": "bf16"})
    assert "that is 9 GPUs, more than the 8 one h100-80g node holds" in (judge(bigger, exact).message or "")


# -- /dev/shm ----------------------------------------------------------------------------------------------------



def test_shm_is_per_gpu_below_the_caps() -> None:
    rules = rules_with(SHM)
    assert shm_size(gpu_pod(gpus=2, memory="40Gi", limit="256Gi"), rules) == "16Gi"


def test_shm_stops_at_the_class_maximum() -> None:
    rules = rules_with(SHM)
    assert shm_size(gpu_pod(gpus=3, memory="40Gi", limit="256Gi"), rules) == "20Gi"  # 24Gi capped at max


def test_shm_is_at_most_the_fraction_of_the_memory_limit() -> None:
    rules = rules_with(SHM)
    assert shm_size(gpu_pod(gpus=2, memory="40Gi", limit="24Gi"), rules) == "12Gi"  # half of 24Gi < 16Gi
    assert shm_size(gpu_pod(gpus=2, memory="40Gi", limit="32Gi"), rules) == "16Gi"  # half is exactly per GPU


def test_shm_fraction_is_a_rule() -> None:
    rules = rules_with({**SHM, "mutation": {"maxShmFractionOfMemoryLimit": 0.25}})
    assert shm_size(gpu_pod(gpus=2, memory="40Gi", limit="32Gi"), rules) == "8Gi"


def test_shm_fraction_is_rounded_down_to_whole_mebibytes() -> None:
    rules = rules_with(SHM)
    assert shm_size(gpu_pod(gpus=2, memory="40Gi", limit="3001Mi"), rules) == "1500Mi"  # 1500.5Mi


def test_shm_without_a_memory_limit_is_the_class_default_with_a_warning() -> None:
    rules = rules_with(SHM)
    verdict = mutate_verdict(gpu_pod(gpus=2, memory="40Gi", limit=None), ctx=as_context(rules), mode="deny")
    volumes = {op["path"]: op for op in verdict.patch}["/spec/volumes"]["value"]
    assert volumes[0]["emptyDir"]["sizeLimit"] == "3Gi"
    assert verdict.warnings == ("pod has no memory limit; /dev/shm got the class default 3Gi (memory-backed, it "
                                "counts against the pod's memory)",)


def test_shm_with_the_default_rules(rules: Rules) -> None:
    assert shm_size(gpu_pod(gpus=8, memory="40Gi", limit="512Gi"), rules) == "32Gi"  # 4Gi per GPU
    assert shm_size(gpu_pod(gpus=8, memory="40Gi", limit="48Gi"), rules) == "24Gi"  # half the limit
    inference = gpu_pod(gpus=8, memory="40Gi", limit="512Gi", workload="inference")
    assert shm_size(inference, rules) == "16Gi"  # 2Gi per GPU


# -- NCCL ----------------------------------------------------------------------------------------------------------



def nccl_env(pod: dict[str, Any], rules: Rules) -> dict[str, str]:
    added: dict[str, str] = {}
    for op in mutate_verdict(pod, ctx=as_context(rules), mode="deny").patch:
        if op["path"].startswith("/spec/containers/0/env"):
            values = op["value"] if isinstance(op["value"], list) else [op["value"]]
            added.update({v["name"]: v["value"] for v in values})
    return added


def test_nccl_for_multi_node_training_on_an_infiniband_pool() -> None:
    rules = rules_with(INFINIBAND)
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi", env={"WORLD_SIZE": "2"}), rules) == NCCL
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi", annotations={"ai-admission.io/multi-node": "true"}), rules) == NCCL


def test_nccl_for_multi_node_inference_on_an_infiniband_pool() -> None:
    group = gpu_pod(gpus=8, memory="40Gi", env={"LWS_GROUP_SIZE": "2"}, workload="inference")
    assert nccl_env(group, rules_with(INFINIBAND)) == NCCL


def test_no_nccl_where_the_fabric_is_not_known(rules: Rules) -> None:
    """The default rules know no pool's fabric: an interface name the pod does not have stops NCCL at start."""
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi", env={"WORLD_SIZE": "2"}), rules) == {}


def test_nccl_of_the_fabric_an_instance_type_names() -> None:
    rules = rules_with({"fabrics": {"env": {"efa": {"FI_EFA_USE_DEVICE_RDMA": "1"},
                                            "infiniband": INFINIBAND["fabrics"]["env"]["infiniband"]}}})
    pod = gpu_pod(gpus=8, memory="40Gi", env={"PET_NNODES": "4"})
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p4de.24xlarge"}
    assert nccl_env(pod, rules) == {"FI_EFA_USE_DEVICE_RDMA": "1"}
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "Standard_ND96amsr_A100_v4"}
    assert nccl_env(pod, rules) == NCCL


def test_nccl_of_the_models_fabric() -> None:
    rules = rules_with({"fabrics": {"byModel": {"a100-80g": "ethernet"}}})
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi", env={"WORLD_SIZE": "2"}), rules) == {"NCCL_IB_DISABLE": "1"}


@pytest.mark.parametrize("env", [None, {"WORLD_SIZE": "1"}])
def test_no_nccl_for_single_node_training(env: dict[str, str] | None) -> None:
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi", env=env), rules_with(INFINIBAND)) == {}


@pytest.mark.parametrize("workload", ["inference", "batch", "hpo"])
def test_no_nccl_for_single_pods_of_other_classes(workload: str) -> None:
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi", workload=workload), rules_with(INFINIBAND)) == {}


@pytest.mark.parametrize("workload", ["batch", "hpo"])
def test_nccl_for_multi_node_pods_of_every_class_that_runs_them(workload: str) -> None:
    """The third question decides, not the class: a batch job or a trial of several pods talks across nodes too."""
    pod = gpu_pod(gpus=8, memory="40Gi", env={"WORLD_SIZE": "2"}, workload=workload)
    assert nccl_env(pod, rules_with(INFINIBAND)) == NCCL


def test_nccl_for_single_node_pods_when_the_rules_say_so() -> None:
    rules = rules_with({**INFINIBAND, "classes": {"training": {"mutate": {"nccl": {"singleNode": True}}}}})
    assert nccl_env(gpu_pod(gpus=8, memory="40Gi"), rules) == NCCL


# -- tensor parallelism over PCIe ----------------------------------------------------------------------------------

def serving_pod(model: str, gpus: int, args: list[str]) -> dict[str, Any]:
    pod = gpu_pod(gpus=gpus, model=model, memory="16Gi", workload="inference")
    pod["spec"]["containers"][0]["args"] = args
    return pod


@pytest.mark.parametrize("args", [["--tensor-parallel-size", "2"], ["--tensor-parallel-size=2"],
                                  ["vllm serve m -tp 2 --port 8000"], ["--tp-size", "2"], ["--tp", "2"]])
def test_pcie_warning_when_the_pod_splits_one_model_over_cards(rules: Rules, args: list[str]) -> None:
    verdict = judge(serving_pod("l40s-48g", 2, args), rules)
    assert verdict.allowed and warnings(verdict) == ["tensor-parallel-over-pcie"]
    (text,) = verdict.warnings
    assert text.startswith("the model is split over 2 l40s-48g cards joined only by PCIe (")
    assert text.endswith('in container "main"); tensor parallelism will be slow, prefer an NVLink model or fewer, '
                         "larger cards")


def test_pcie_warning_from_the_env(rules: Rules) -> None:
    pod = serving_pod("l4-24g", 4, [])
    pod["spec"]["containers"][0]["env"] = [{"name": "TENSOR_PARALLEL_SIZE", "value": "4"}]
    verdict = judge(pod, rules)
    assert warnings(verdict) == ["tensor-parallel-over-pcie"]
    assert "(env TENSOR_PARALLEL_SIZE=4)" in verdict.warnings[0]


def test_no_pcie_warning_for_a_tensor_parallel_size_of_one(rules: Rules) -> None:
    assert warnings(judge(serving_pod("l40s-48g", 2, ["--tensor-parallel-size", "1"]), rules)) == []


def test_no_pcie_warning_for_data_parallel_pods(rules: Rules) -> None:
    """Independent replicas on PCIe cards (batch inference, a LoRA fine-tune) do not talk across the cards."""
    assert warnings(judge(serving_pod("t4-16g", 4, ["--data-parallel-size", "4"]), rules)) == []


def test_no_pcie_warning_on_nvlink_or_one_card(rules: Rules) -> None:
    assert warnings(judge(serving_pod("a100-80g", 2, ["--tensor-parallel-size", "2"]), rules)) == []
    assert warnings(judge(serving_pod("l40s-48g", 1, ["--tensor-parallel-size", "2"]), rules)) == []


def test_the_course_example_gets_its_nccl_env_on_its_infiniband_pool() -> None:
    """The course's worker, on a cluster whose rules say its gpu-type=a100-80g pool has InfiniBand seen as ib0."""
    from tests.support.fixtures import POD_CASES

    case = next(c for c in POD_CASES if c.name == "course-example-minimal")
    assert nccl_env(copy.deepcopy(case.pod), rules_with(INFINIBAND)) == NCCL


# -- a model sharded over the pods of its job ----------------------------------------------------------------------
# Training: params x 2 bytes (fp16) x 4 (memory factor) = 8 bytes a parameter, so an a100-80g (80Gi as its devices
# report it) holds exactly 10,737,418,240 parameters' worth. PET_NNODES (torchrun's) gives the job's pods.

def sharded(params: str, pods: int, *, model: str = "a100-80g", gpus: int = 1) -> dict[str, Any]:
    return gpu_pod(gpus=gpus, model=model, env={"PET_NNODES": str(pods)} if pods > 1 else None,
                   annotations={"ai-admission.io/model-params": params, "ai-admission.io/model-precision": "fp16"})


def findings(verdict: Verdict) -> list[tuple[str, str, str]]:
    return [(f.severity, f.code, f.message) for f in verdict.findings]


WEIGHTS = "(fp16) x 4 (training memory factor)"


def test_a_model_of_exactly_the_pods_cards_needs_no_sharding(rules: Rules) -> None:
    assert findings(judge(sharded("10.73741824B", 2), rules)) == []


def test_a_byte_more_than_the_pods_cards_fits_only_sharded_over_the_job(rules: Rules) -> None:
    assert findings(judge(sharded("10.737418241B", 2), rules)) == [(
        "warn", "gpu-memory-sharded",
        f"needs 80Gi of GPU memory (10.7B params x 2 bytes {WEIGHTS}), more than the pod's 1 x a100-80g hold (80Gi); "
        f"it fits only sharded over all 2 GPUs of the job (2 pods from env PET_NNODES=2), 40Gi per GPU")]


def test_exactly_every_card_of_the_job_fits_sharded(rules: Rules) -> None:
    verdict = judge(sharded("21.47483648B", 2), rules)
    assert verdict.allowed and [code for _, code, _ in findings(verdict)] == ["gpu-memory-sharded"]


def test_a_byte_more_than_every_card_of_the_job_is_denied_even_sharded(rules: Rules) -> None:
    assert findings(judge(sharded("21.474836481B", 2), rules)) == [(
        "deny", "gpu-memory-exceeds",
        f"needs 160Gi of GPU memory (21.5B params x 2 bytes {WEIGHTS}); even sharded over all 2 GPUs of the job "
        f"(2 pods from env PET_NNODES=2, 1 GPU each) that is 80Gi per GPU, more than a a100-80g card holds (80Gi); 3 "
        f"of them would hold it: use a model with more memory per card (h100-nvl-94g, gh200-96g, rtx-pro-6000-96g, "
        f"h200-141g, b200-180g, gb200-186g)")]


def test_one_pod_is_no_job_to_shard_over(rules: Rules) -> None:
    assert findings(judge(sharded("10.737418241B", 1), rules)) == [(
        "deny", "gpu-memory-exceeds",
        f"needs 80Gi of GPU memory (10.7B params x 2 bytes {WEIGHTS}) but 1 x a100-80g give 80Gi; ask for at least "
        f"2 GPUs (one node, one NVLink domain)")]


def test_a_job_too_big_for_every_card_asks_for_more_pods(rules: Rules) -> None:
    (finding,) = findings(judge(sharded("200B", 2), rules))
    assert finding[2].endswith("745.1Gi per GPU, more than a a100-80g card holds (80Gi); 19 of them would hold "
                               "it: use more pods or more GPUs per pod")


def test_the_node_an_instance_type_names_sets_how_many_gpus_a_pod_may_take(rules: Rules) -> None:
    """p3.8xlarge: 4 V100s a node (the model alone would say 8)."""
    pod = sharded("8.589934593B", 1, gpus=4)
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p3.8xlarge"}
    assert findings(judge(pod, rules)) == [(
        "deny", "gpu-memory-exceeds",
        f"needs 64Gi of GPU memory (8.6B params x 2 bytes {WEIGHTS}) but 4 x v100-16g give 64Gi; that is 5 GPUs, more "
        f"than the 4 one v100-16g node holds; use a model with more memory per card (a10g-24g, a10-24g, l4-24g, "
        f"a30-24g, v100-32g, a100-40g, a100-40g-pcie, l40s-48g and 11 more)")]


def test_a_model_too_big_for_a_node_of_the_largest_cards_is_sharded_over_pods(rules: Rules) -> None:
    (finding,) = findings(judge(sharded("400B", 1, gpus=8), rules))
    assert finding[2].endswith("but 8 x a100-80g give 640Gi; that is 38 GPUs, more than the 8 one a100-80g node "
                               "holds; shard the model over several pods")


def test_pcie_cards_are_asked_for_on_one_node(rules: Rules) -> None:
    (finding,) = findings(judge(sharded("6.1B", 1, model="l40s-48g"), rules))
    assert finding[2].endswith("but 1 x l40s-48g give 45Gi; ask for at least 2 GPUs (on one node)")


def test_a_need_per_gpu_beyond_every_card_asks_to_shard(rules: Rules) -> None:
    assert findings(judge(gpu_pod(memory="300Gi"), rules)) == [(
        "deny", "gpu-memory-exceeds", "needs 300Gi of GPU memory per GPU (annotation ai-admission.io/gpu-memory=300Gi "
                                      "per GPU) but a a100-80g card holds 80Gi; shard the model further")]


def test_several_unknown_models_are_named_together(rules: Rules) -> None:
    pod = gpu_pod(memory="40Gi")
    pod["spec"]["nodeSelector"] = {}
    terms = [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["z100", "z200"]}]}]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    assert findings(judge(pod, rules)) == [(
        "deny", "gpu-model-unknown", 'GPU models "z100", "z200" (required node affinity gpu-type In [z100, z200]) are '
                                     "not in the catalog; known nvidia models: a100-80g, h100-80g, h200-141g, "
                                     "b200-180g, l40s-48g, l4-24g, a10g-24g, t4-16g and 13 more")]


def test_an_accelerator_of_no_known_vendor_is_no_vendor_mismatch(rules: Rules) -> None:
    """A DRA device class's extended resource names no vendor: any model may be pinned beside it."""
    pod = gpu_pod(memory="40Gi")
    for amounts in pod["spec"]["containers"][0]["resources"].values():
        amounts["deviceclass.resource.kubernetes.io/gpu.nvidia.com"] = amounts.pop("nvidia.com/gpu")
    assert judge(pod, rules).allowed and findings(judge(pod, rules)) == []


# -- warn mode's warnings fit the API server's 256 characters -------------------------------------------------------

def test_a_warning_of_exactly_the_limit_is_kept_whole() -> None:
    assert fitted("w" * 256) == "w" * 256
    assert fitted("w" * 257) == "w" * 255 + "\u2026"  # nothing to leave out: cut, as the API server would


def test_a_long_warning_drops_its_asides_then_its_last_clause() -> None:
    head = "h" * 200
    assert fitted(f"{head} (known models: {'m' * 60})") == head
    assert fitted(f"{head}; {'t' * 60} (an aside)") == head
    assert fitted(f"{head} (short)") == f"{head} (short)"


def test_warn_mode_says_what_to_add_within_the_limit(rules: Rules) -> None:
    pod = gpu_pod(model="")
    pod["spec"].pop("nodeSelector")
    verdict = judge_pod(pod, ctx=as_context(rules), mode="warn", subject="pod")
    assert verdict.allowed and list(verdict.warnings) == [
        'ai-admission (warn mode) would deny: 1 nvidia.com/gpu says how many GPUs but not which model: add '
        'nodeSelector "gpu-type: a100-80g" or annotation "ai-admission.io/gpu-model: a100-80g"',
        'ai-admission (warn mode) would deny: 1 nvidia.com/gpu does not say how much GPU memory it needs: add '
        'annotation "ai-admission.io/gpu-memory: 40Gi" (per GPU), or "ai-admission.io/model-params: 7B" with '
        '"ai-admission.io/model-precision: bf16"']


# -- tolerations the pod already has -------------------------------------------------------------------------------
# /mutate adds {key: nvidia.com/gpu, Exists, NoSchedule} (the nodes are not known here: the accelerator's own taint)
# and the class's pool taint, where a platform team configured one ({pool.example.com/gpu Equal training,
# NoSchedule}), unless a toleration of the pod already tolerates every taint the added one would.

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POOL_TOLERATION = {"key": "pool.example.com/gpu", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
POOLED = {"classes": {"training": {"mutate": {"tolerations": [POOL_TOLERATION]}}}}


def added_tolerations(rules: Rules, *present: dict[str, Any]) -> list[dict[str, Any]]:
    pod = gpu_pod(memory="40Gi")
    pod["spec"]["tolerations"] = list(present)
    return apply_verdict(pod, mutate_verdict(pod, ctx=as_context(rules), mode="deny"))["spec"]["tolerations"][len(present):]


@pytest.mark.parametrize("present,added", [
    ({"operator": "Exists"}, []),  # tolerates every taint
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, [POOL_TOLERATION]),  # any effect of that key
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, [POOL_TOLERATION]),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, [GPU_TOLERATION, POOL_TOLERATION]),
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
     [GPU_TOLERATION, POOL_TOLERATION]),  # one value only: not the taint of any value
    ({"key": "pool.example.com/gpu", "value": "training", "effect": "NoSchedule"}, [GPU_TOLERATION]),  # Equal: default
    ({"key": "pool.example.com/gpu", "operator": "Equal", "value": "inference", "effect": "NoSchedule"},
     [GPU_TOLERATION, POOL_TOLERATION]),
    ({"key": "pool.example.com/gpu", "operator": "Exists", "effect": ""}, [GPU_TOLERATION]),
    ({"key": "other", "operator": "Exists"}, [GPU_TOLERATION, POOL_TOLERATION]),
], ids=["everything", "gpu-any-effect", "gpu-noschedule", "gpu-noexecute", "gpu-one-value", "pool-equal-default",
        "pool-other-value", "pool-exists", "other-key"])
def test_a_toleration_already_there_is_not_added_again(present: dict[str, Any], added: list[dict[str, Any]]) -> None:
    assert added_tolerations(rules_with(POOLED), present) == added
