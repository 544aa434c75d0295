"""What each part of the mutation adds, exactly, including the parts a rule must turn on.

The fixtures show the default rules' mutation whole; these tests show the rest: the gang-scheduler hints, the
RDMA device, required pod affinity, the PriorityClass when the cluster lacks it or disagrees with the rules, an
envFrom container, and where /dev/shm reads the memory limit from (pod-level resources, sidecars). Each states
the patched pod, or the warning and the absence of the change. In-process and fast: the mutation-testing run
(`make mutation`) relies on them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.builders import INFINIBAND, NCCL, SHM, gpu_pod, rules_with, shm_size
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.core.admission import Verdict, mutate_verdict
from webhook.core.rules import Rules
from webhook.core.view.priority_state import UNCHECKED as UNKNOWN
from webhook.core.view.priority_state import PriorityClassState

GANG = {"classes": {"training": {"mutate": {"gang": {"schedulerName": "volcano",
                                                      "podGroupAnnotation": "scheduling.k8s.io/group-name"}}}}}
RDMA = {"classes": {"training": {"mutate": {"rdma": {"resource": "rdma/ib", "amount": 1, "ipcLock": True}}}}}
LEAF = "network.topology.nvidia.com/leaf"
REQUIRED = {"classes": {"training": {"mutate": {"podAffinity": {"topologyKey": LEAF, "mode": "required"}}}}}
PREFERRED = {"classes": {"training": {"mutate": {"podAffinity": {"topologyKey": LEAF}}}}}
# rules that know the pool's fabric and a fixed topology key: offline, the mutation of a multi-node pod then has
# nothing left to warn about (the nodes' own topology and fabric: tests/unit/test_placement.py)
KNOWN = {"fabrics": INFINIBAND["fabrics"], "classes": PREFERRED["classes"]}
JOB = {"training.kubeflow.org/job-name": "llama-ft"}


def multi_node(**labels: str) -> dict[str, Any]:
    """A worker of a 2-pod PyTorchJob as the training operator creates it (WORLD_SIZE from its env)."""
    return gpu_pod(gpus=8, memory="40Gi", env={"WORLD_SIZE": "2"}, labels=dict(labels))


def single_node(**labels: str) -> dict[str, Any]:
    return gpu_pod(gpus=8, memory="40Gi", labels=dict(labels))


def merged(*changes: dict[str, Any]) -> dict[str, Any]:
    """Rules changes taken together (nested maps merged)."""
    result: dict[str, Any] = {}

    def into(target: dict[str, Any], change: dict[str, Any]) -> None:
        for key, value in change.items():
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                into(target[key], value)
            else:
                target[key] = value

    for change in changes:
        into(result, copy.deepcopy(change))
    return result


def mutated(pod: dict[str, Any], rules: Rules, state: PriorityClassState = UNKNOWN) -> tuple[dict[str, Any], Verdict]:
    verdict = mutate_verdict(pod, ctx=as_context(rules, priority_classes=state), mode="deny")
    return apply_verdict(pod, verdict), verdict


# -- gang scheduling -----------------------------------------------------------------------------------------------

def test_gang_hints_for_a_multi_node_job() -> None:
    pod, verdict = mutated(multi_node(**JOB), rules_with(merged(GANG, KNOWN)))
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llama-ft"
    assert verdict.warnings == ()


def test_gang_hints_replace_only_the_default_scheduler() -> None:
    rules = rules_with(GANG)
    default = multi_node(**JOB)
    default["spec"]["schedulerName"] = "default-scheduler"  # what the API server fills in
    assert mutated(default, rules)[0]["spec"]["schedulerName"] == "volcano"
    own = multi_node(**JOB)
    own["spec"]["schedulerName"] = "kai-scheduler"
    own["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "mine"
    pod, _ = mutated(own, rules)
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "mine"


def test_no_gang_hints_without_a_job_label() -> None:
    pod, verdict = mutated(multi_node(), rules_with(merged(GANG, KNOWN)))
    assert "schedulerName" not in pod["spec"]
    assert "scheduling.k8s.io/group-name" not in pod["metadata"]["annotations"]
    assert verdict.warnings == ("multi-node pod carries no job-name label; no pod group was set",)


def test_no_gang_hints_for_a_single_node_pod() -> None:
    pod, verdict = mutated(single_node(**JOB), rules_with(GANG))
    assert "schedulerName" not in pod["spec"]
    assert verdict.warnings == ()


# -- RDMA ------------------------------------------------------------------------------------------------------------

def test_rdma_device_and_ipc_lock_for_a_multi_node_job() -> None:
    pod, _ = mutated(multi_node(**JOB), rules_with(RDMA))
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["rdma/ib"] == "1"
    assert container["resources"]["requests"]["rdma/ib"] == "1"
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


@pytest.mark.parametrize("asked", ["limits", "requests"])
def test_an_rdma_device_the_pod_asks_for_is_left_alone(asked: str) -> None:
    pod = multi_node(**JOB)
    resources = pod["spec"]["containers"][0]["resources"]
    resources[asked]["rdma/ib"] = "2"
    resources["limits" if asked == "requests" else "requests"].pop("rdma/ib", None)
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["IPC_LOCK", "SYS_PTRACE"]}}
    result, _ = mutated(pod, rules_with(RDMA))
    assert result["spec"]["containers"][0]["resources"] == resources
    assert result["spec"]["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK", "SYS_PTRACE"]}}


def test_no_rdma_for_a_single_node_pod() -> None:
    pod, _ = mutated(single_node(**JOB), rules_with(RDMA))
    container = pod["spec"]["containers"][0]
    assert "rdma/ib" not in container["resources"]["limits"]
    assert "securityContext" not in container


# -- pod affinity ------------------------------------------------------------------------------------------------------

TERM = {"labelSelector": {"matchLabels": JOB}, "topologyKey": LEAF}


def test_required_pod_affinity_packs_the_job_under_one_switch() -> None:
    pod, _ = mutated(multi_node(**JOB), rules_with(REQUIRED))
    assert pod["spec"]["affinity"] == {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}}


def test_a_required_term_already_there_is_not_added_again() -> None:
    pod = multi_node(**JOB)
    other = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
    pod["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [other, TERM]}}
    result, _ = mutated(pod, rules_with(REQUIRED))
    assert result["spec"]["affinity"] == pod["spec"]["affinity"]


def test_preferred_pod_affinity_by_a_fixed_key() -> None:
    rules = rules_with(PREFERRED)
    pod, _ = mutated(multi_node(**JOB), rules)
    assert pod["spec"]["affinity"] == {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": TERM}]}}
    again, _ = mutated(pod, rules)
    assert again["spec"]["affinity"] == pod["spec"]["affinity"]


def test_no_pod_affinity_offline_with_the_default_rules_and_the_pod_is_told(rules: Rules) -> None:
    """The shipped rules invent no topology label: offline the nodes' keys are not known, so nothing is added."""
    pod, verdict = mutated(multi_node(**JOB), rules)
    assert "affinity" not in pod["spec"]
    assert any(w.startswith("pods not packed: the cluster's topology is not known here") for w in verdict.warnings)


def test_no_pod_affinity_without_a_job_label_or_for_one_pod(rules: Rules) -> None:
    assert "affinity" not in mutated(multi_node(), rules)[0]["spec"]
    assert "affinity" not in mutated(single_node(**JOB), rules)[0]["spec"]


# -- NCCL and envFrom ----------------------------------------------------------------------------------------------------

def test_a_container_with_env_from_gets_no_nccl_env_and_a_warning() -> None:
    pod = multi_node(**JOB)
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "nccl-tuning"}}]
    result, verdict = mutated(pod, rules_with(INFINIBAND))
    assert "NCCL_IB_DISABLE" not in {e["name"] for e in result["spec"]["containers"][0]["env"]}
    assert ('container "main" uses envFrom, which an added env would override; NCCL defaults were not added to it'
            in verdict.warnings)


def test_nccl_env_keeps_what_the_container_set() -> None:
    pod = multi_node(**JOB)
    pod["spec"]["containers"][0]["env"].append({"name": "NCCL_SOCKET_IFNAME", "value": "eth1"})
    result, _ = mutated(pod, rules_with(INFINIBAND))
    env = {e["name"]: e["value"] for e in result["spec"]["containers"][0]["env"]}
    assert env == {"WORLD_SIZE": "2", "NCCL_SOCKET_IFNAME": "eth1", "NCCL_IB_DISABLE": NCCL["NCCL_IB_DISABLE"]}


# -- the PriorityClass ---------------------------------------------------------------------------------------------------

def test_the_class_priority_with_its_value_and_preemption_policy(rules: Rules) -> None:
    pod, verdict = mutated(single_node(), rules)
    assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"], pod["spec"]["preemptionPolicy"]) == (
        "ai-training", 100000, "PreemptLowerPriority")
    assert verdict.warnings == ()


def test_a_priority_class_missing_from_the_cluster_is_not_set(rules: Rules) -> None:
    facts = PriorityClassState(missing_priority_classes=frozenset({"ai-training"}), checked=True)
    pod, verdict = mutated(single_node(), rules, facts)
    assert not {"priorityClassName", "priority", "preemptionPolicy"} & set(pod["spec"])
    assert verdict.warnings == ('PriorityClass "ai-training" does not exist in this cluster, so it was not set (the API '
                                'server would refuse the pod); create it with kubectl apply -k manifests/',)


def test_a_priority_class_that_differs_leaves_the_values_to_the_api_server(rules: Rules) -> None:
    facts = PriorityClassState(differing_priority_classes={"ai-training": "value 5 in the cluster"}, checked=True)
    pod = single_node()
    pod["spec"].update(priority=0, preemptionPolicy="PreemptLowerPriority")  # as the Priority plugin resolved them
    result, verdict = mutated(pod, rules, facts)
    assert result["spec"]["priorityClassName"] == "ai-training"
    assert "priority" not in result["spec"] and "preemptionPolicy" not in result["spec"]
    assert verdict.warnings == (
        'PriorityClass "ai-training" differs from ai-admission\'s rules (value 5 in the cluster), so spec.priority '
        "and spec.preemptionPolicy were left to the API server; make them agree (recreate the class with kubectl "
        "apply -k manifests/, or fix the rules)",)


def test_a_pod_that_names_its_priority_class_keeps_it(rules: Rules) -> None:
    pod = single_node()
    pod["spec"].update(priorityClassName="ai-batch", priority=1000)
    result, _ = mutated(pod, rules)
    assert (result["spec"]["priorityClassName"], result["spec"]["priority"]) == ("ai-batch", 1000)
    assert "preemptionPolicy" not in result["spec"]


# -- /dev/shm: where the memory limit is read, and a volume already there ---------------------------------------------

def test_shm_reads_a_pod_level_memory_limit_first() -> None:
    pod = gpu_pod(gpus=2, memory="40Gi", limit="256Gi")
    pod["spec"]["resources"] = {"limits": {"memory": "24Gi"}}  # pod-level resources (KEP-2837)
    assert shm_size(pod, rules_with(SHM)) == "12Gi"


def test_shm_counts_sidecars_but_not_init_containers() -> None:
    pod = gpu_pod(gpus=2, memory="40Gi", limit="16Gi")
    pod["spec"]["initContainers"] = [
        {"name": "fetch-weights", "image": "registry.example.com/fetch:1",
         "resources": {"limits": {"memory": "100Gi"}}},  # done before the app starts
        {"name": "metrics", "image": "registry.example.com/exporter:1", "restartPolicy": "Always",
         "resources": {"limits": {"memory": "8Gi"}}}]  # a sidecar: runs beside the app
    assert shm_size(pod, rules_with(SHM)) == "12Gi"  # half of 16Gi + 8Gi


def test_a_sidecar_without_a_memory_limit_means_no_limit() -> None:
    pod = gpu_pod(gpus=2, memory="40Gi", limit="16Gi")
    pod["spec"]["initContainers"] = [{"name": "metrics", "image": "registry.example.com/exporter:1",
                                      "restartPolicy": "Always"}]
    assert shm_size(pod, rules_with(SHM)) == "3Gi"  # the class's withoutMemoryLimit


@pytest.mark.parametrize("medium, warned", [("Memory", False), ("", True)])
def test_an_shm_volume_already_there(rules: Rules, medium: str, warned: bool) -> None:
    pod = single_node()
    pod["spec"]["volumes"] = [{"name": "ai-admission-shm", "emptyDir": {"medium": medium}}]
    result, verdict = mutated(pod, rules)
    assert result["spec"]["volumes"] == pod["spec"]["volumes"]
    assert "volumeMounts" not in result["spec"]["containers"][0]
    warning = 'volume "ai-admission-shm" already exists and is not ai-admission\'s; /dev/shm was not added'
    assert (warning in verdict.warnings) is warned
