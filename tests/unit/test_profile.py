"""Profile edge cases: the scheduler's effective-request rule, requests vs limits, models, memory, multi-node."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.support.builders import NCCL, rules_with
from tests.support.contexts import as_context
from webhook.core.profile import build_profile
from webhook.core.rules import Rules


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None,
        node_selector: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"name": "p", "annotations": annotations or {}, "labels": labels or {}}, "spec": spec}


def gpu(name: str, count: Any, *, resource: str = "nvidia.com/gpu", kind: str = "limits",
        restart: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "resources": {kind: {resource: count}}}
    if restart:
        container["restartPolicy"] = restart
    return container


def test_app_containers_add_up(rules: Rules) -> None:
    assert build_profile(pod(gpu("a", "2"), gpu("b", "3")), as_context(rules)).gpus == {"nvidia.com/gpu": 5}


def test_plain_init_container_counts_only_when_larger(rules: Rules) -> None:
    assert build_profile(pod(gpu("app", "2"), init=[gpu("warmup", "4")]), as_context(rules)).gpus == {"nvidia.com/gpu": 4}
    assert build_profile(pod(gpu("app", "4"), init=[gpu("warmup", "1")]), as_context(rules)).gpus == {"nvidia.com/gpu": 4}


def test_sidecar_init_containers_run_beside_the_app(rules: Rules) -> None:
    profile = build_profile(pod(gpu("app", "2"), init=[gpu("proxy", "1", restart="Always")]), as_context(rules))
    assert profile.gpus == {"nvidia.com/gpu": 3}


def test_sidecar_started_before_a_plain_init_container_runs_beside_it(rules: Rules) -> None:
    init = [gpu("sidecar", "1", restart="Always"), gpu("prepare", "4")]
    assert build_profile(pod(gpu("app", "1"), init=init), as_context(rules)).gpus == {"nvidia.com/gpu": 5}


def test_sidecar_started_after_a_plain_init_container_does_not_add_to_it(rules: Rules) -> None:
    init = [gpu("prepare", "4"), gpu("sidecar", "1", restart="Always")]
    assert build_profile(pod(gpu("app", "1"), init=init), as_context(rules)).gpus == {"nvidia.com/gpu": 4}


def test_requests_without_limits_count(rules: Rules) -> None:
    assert build_profile(pod(gpu("a", "2", kind="requests")), as_context(rules)).gpus == {"nvidia.com/gpu": 2}


def test_numbers_from_hand_written_yaml_count(rules: Rules) -> None:
    assert build_profile(pod(gpu("a", 2)), as_context(rules)).gpus == {"nvidia.com/gpu": 2}


def test_two_gpu_resource_names_are_kept_apart(rules: Rules) -> None:
    profile = build_profile(pod(gpu("n", "1"), gpu("a", "2", resource="amd.com/gpu")), as_context(rules))
    assert profile.gpus == {"nvidia.com/gpu": 1, "amd.com/gpu": 2}
    assert profile.gpu_count == 3
    assert profile.gpu_text() == "2 amd.com/gpu, 1 nvidia.com/gpu"


def test_other_extended_resources_are_not_gpus(rules: Rules) -> None:
    profile = build_profile(pod({"name": "c", "resources": {"limits": {"rdma/ib": "1", "cpu": "2"}}}), as_context(rules))
    assert profile.gpus == {}
    assert profile.workload == "none"


def test_zero_gpus_is_no_gpu(rules: Rules) -> None:
    assert build_profile(pod(gpu("a", "0")), as_context(rules)).gpus == {}


def test_mig_slice_implies_memory(rules: Rules) -> None:
    profile = build_profile(pod(gpu("a", "2", resource="nvidia.com/mig-3g.40gb")), as_context(rules))
    assert profile.is_mig
    assert profile.memory_per_gpu == Decimal(40 * 10**9)
    assert profile.memory_total == Decimal(80 * 10**9)


def test_gpu_memory_annotation_is_per_gpu(rules: Rules) -> None:
    profile = build_profile(pod(gpu("a", "4"), annotations={"ai-admission.io/gpu-memory": "20Gi"}), as_context(rules))
    assert profile.memory_per_gpu == 20 * 2**30
    assert profile.memory_total == 80 * 2**30


@pytest.mark.parametrize("workload, factor", [("training", 4), ("inference", Decimal("1.2"))])
def test_model_params_use_the_class_memory_factor(rules: Rules, workload: str, factor: Any) -> None:
    notes = {"ai-admission.io/model-params": "7.5B", "ai-admission.io/model-precision": "int4",
             "ai-admission.io/workload-type": workload}
    profile = build_profile(pod(gpu("a", "1"), annotations=notes), as_context(rules))
    assert profile.memory_total == Decimal(7_500_000_000) * Decimal("0.5") * Decimal(factor)


@pytest.mark.parametrize("where, value, expected", [
    ({"annotations": {"ai-admission.io/gpu-model": "H100"}}, "H100", "h100-80g"),
    ({"node_selector": {"gpu-type": "a100-80g"}}, "a100-80g", "a100-80g"),
    ({"node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}, "NVIDIA-A100-SXM4-40GB", "a100-40g"),
    ({"node_selector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}, "nvidia-h100-80gb", "h100-80g"),
    ({"node_selector": {"nvidia.com/gpu.product": "NVIDIA_L4"}}, "NVIDIA_L4", "l4-24g"),
])
def test_model_sources(rules: Rules, where: dict[str, Any], value: str, expected: str) -> None:
    profile = build_profile(pod(gpu("a", "1"), **where), as_context(rules))
    assert profile.model_name == value
    assert profile.model is not None and profile.model.name == expected


def test_annotation_model_wins_over_node_selector(rules: Rules) -> None:
    profile = build_profile(pod(gpu("a", "1"), annotations={"ai-admission.io/gpu-model": "l4"},
                                node_selector={"gpu-type": "a100-80g"}), as_context(rules))
    assert profile.model is not None and profile.model.name == "l4-24g"
    assert profile.model_source == "annotation ai-admission.io/gpu-model"


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": expressions} for expressions in terms]}}}


def test_affinity_with_several_values_is_judged_against_the_smallest_model(rules: Rules) -> None:
    p = pod(gpu("a", "1"))
    p["spec"]["affinity"] = affinity([{"key": "gpu-type", "operator": "In", "values": ["a100-80g", "h100-80g"]}])
    profile = build_profile(p, as_context(rules))
    assert profile.model_name == "[a100-80g, h100-80g]"
    assert [m.name for m in profile.models] == ["h100-80g", "a100-80g"]  # 81559Mi < 81920Mi
    assert profile.model is not None and profile.model.name == "h100-80g"
    assert profile.model_source == "required node affinity gpu-type In [a100-80g, h100-80g]"


def test_affinity_terms_are_alternatives(rules: Rules) -> None:
    p = pod(gpu("a", "1"))
    p["spec"]["affinity"] = affinity([{"key": "gpu-type", "operator": "In", "values": ["l4-24g"]}],
                                     [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L40S"]}])
    assert [m.name for m in build_profile(p, as_context(rules)).models] == ["l4-24g", "l40s-48g"]
    p["spec"]["affinity"] = affinity([{"key": "gpu-type", "operator": "In", "values": ["l4-24g"]}],
                                     [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])
    assert build_profile(p, as_context(rules)).model_name is None  # the second term runs anywhere: no model is pinned


def test_preemptible_comes_from_class_and_annotation_overrides(rules: Rules) -> None:
    batch = build_profile(pod(gpu("a", "1")), as_context(rules))
    assert batch.workload == "batch" and batch.preemptible is True
    pinned = build_profile(pod(gpu("a", "1"), annotations={"ai-admission.io/preemptible": "false"}), as_context(rules))
    assert pinned.preemptible is False


def test_multi_node_annotation_and_world_size(rules: Rules) -> None:
    single = pod({"name": "t", "env": [{"name": "WORLD_SIZE", "value": "1"}], "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                 annotations={"ai-admission.io/workload-type": "training"})
    assert build_profile(single, as_context(rules)).multi_node is False
    forced = pod(gpu("a", "1"), annotations={"ai-admission.io/multi-node": "true"})
    assert build_profile(forced, as_context(rules)).multi_node is True


def test_a_variable_set_twice_in_a_container_takes_the_later_value_as_the_kubelet_does(rules: Rules) -> None:
    twice = pod({"name": "t", "env": [{"name": "WORLD_SIZE", "value": "1"}, {"name": "WORLD_SIZE", "value": "4"}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "u", "env": [{"name": "WORLD_SIZE", "value": "8"}]},
                annotations={"ai-admission.io/workload-type": "training"})
    profile = build_profile(twice, as_context(rules))
    assert (profile.multi_node, profile.multi_node_reason) == (True, "4 pods (env WORLD_SIZE=4)")  # first container


def test_a_container_asking_for_zero_gpus_is_not_a_gpu_container(rules: Rules) -> None:
    from webhook.core.mutate import mutate_pod

    p = pod({"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "8Gi"}}},
            {"name": "logger", "resources": {"limits": {"nvidia.com/gpu": "0", "memory": "1Gi"}}},
            annotations={"ai-admission.io/workload-type": "training", "ai-admission.io/multi-node": "true"},
            node_selector={"gpu-type": "a100-80g"})
    infiniband = rules_with({"fabrics": {"byNodeLabel": [{"key": "gpu-type", "fabric": "infiniband"}],
                                         "env": {"infiniband": NCCL}}})
    mutated = mutate_pod(p, build_profile(p, as_context(infiniband)), as_context(infiniband)).pod
    trainer, logger = mutated["spec"]["containers"]
    assert [m["mountPath"] for m in trainer["volumeMounts"]] == ["/dev/shm"]
    assert {e["name"] for e in trainer["env"]} == {"NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME"}
    # no /dev/shm and no NCCL for it; only the void that keeps the runtime from handing it the image's GPUs
    assert "volumeMounts" not in logger and logger["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]


# -- how a container's accelerator amounts are read: the usual way, and every malformed way --------------------------

def amounts_and_problems(rules: Rules, *containers: dict[str, Any]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    profile = build_profile(pod(*containers), as_context(rules))
    return profile.gpus, [(f.code, f.message) for f in profile.problems]


@pytest.mark.parametrize("requests, limits, count", [
    (None, "2", 2), ("2", None, 2), ("2", "2", 2), (None, 2, 2), (2, 2, 2), ("2", 2, 2), (None, "2.0", 2),
    (None, "0", 0), ("0", None, 0), (None, "1e1", 10), ("4", "4.0", 4),
], ids=["limit", "request", "both", "int", "ints", "str-and-int", "decimal", "zero", "zero-request", "exponent",
        "equal-quantities"])
def test_amounts_written_every_valid_way(rules: Rules, requests: Any, limits: Any, count: int) -> None:
    resources = {kind: {"nvidia.com/gpu": value} for kind, value in (("requests", requests), ("limits", limits))
                 if value is not None}
    gpus, problems = amounts_and_problems(rules, {"name": "main", "resources": resources})
    assert gpus == ({"nvidia.com/gpu": count} if count else {})
    assert problems == []


@pytest.mark.parametrize("resources, expected", [
    ({"limits": {"nvidia.com/gpu": "lots"}},
     ("invalid-quantity", 'container "main": resources for nvidia.com/gpu: \'lots\' is not a quantity')),
    ({"limits": {"nvidia.com/gpu": "0.5"}},
     ("invalid-quantity", 'container "main": nvidia.com/gpu must be a whole number of devices, not 0.5')),
    ({"limits": {"nvidia.com/gpu": "-1"}},
     ("invalid-quantity", 'container "main": nvidia.com/gpu must be a whole number of devices, not -1')),
    ({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
     ("gpu-request-limit-mismatch", 'container "main": nvidia.com/gpu request (1) and limit (2) differ; '
      "accelerators cannot be overcommitted, so set both to the same whole number")),
], ids=["not-a-quantity", "fraction", "negative", "mismatch"])
def test_malformed_amounts_are_named_with_their_container(rules: Rules, resources: dict[str, Any],
                                                          expected: tuple[str, str]) -> None:
    _, problems = amounts_and_problems(rules, {"name": "main", "resources": resources})
    code, start = expected
    assert [p[0] for p in problems] == [code]
    assert problems[0][1].startswith(start), problems[0][1]


def test_a_mismatch_counts_the_limit(rules: Rules) -> None:
    gpus, _ = amounts_and_problems(rules, {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"},
                                                                        "limits": {"nvidia.com/gpu": "2"}}})
    assert gpus == {"nvidia.com/gpu": 2}


def test_only_accelerators_are_counted(rules: Rules) -> None:
    gpus, problems = amounts_and_problems(rules, {"name": "main", "resources": {
        "limits": {"cpu": "lots", "memory": "1Gi", "nvidia.com/gpu": "1", "example.com/foo": "0.5"}}})
    assert gpus == {"nvidia.com/gpu": 1}
    assert problems == []


def test_an_init_container_is_named_as_one(rules: Rules) -> None:
    profile = build_profile(pod(gpu("app", "1"), init=[gpu("warmup", "0.5")]), as_context(rules))
    assert [f.message for f in profile.problems] == [
        'init container "warmup": nvidia.com/gpu must be a whole number of devices, not 0.5']


# -- sidecars (restartable init containers) in the effective request ------------------------------------------------

@pytest.mark.parametrize("warmup, expected", [(4, {"nvidia.com/gpu": 5}), (1, {"nvidia.com/gpu": 3})],
                         ids=["init-peak-wins", "app-and-sidecars-win"])
def test_sidecars_add_to_the_app_and_to_the_init_containers_after_them(rules: Rules, warmup: int,
                                                                        expected: dict[str, int]) -> None:
    """KEP-753: a sidecar runs from its start on, so it adds to every plain init container after it and to the
    app containers; the pod asks for the larger of the two sums."""
    init = [gpu("proxy", "1", restart="Always"), gpu("warmup", str(warmup)), gpu("monitor", "1", restart="Always")]
    assert build_profile(pod(gpu("app", "1"), init=init), as_context(rules)).gpus == expected


def test_an_init_container_before_any_sidecar_counts_alone(rules: Rules) -> None:
    init = [gpu("warmup", "2"), gpu("proxy", "1", restart="Always")]
    assert build_profile(pod(gpu("app", "0"), init=init), as_context(rules)).gpus == {"nvidia.com/gpu": 2}
    init = [gpu("warmup", "2"), gpu("proxy", "2", restart="Always")]
    assert build_profile(pod(gpu("app", "1"), init=init), as_context(rules)).gpus == {"nvidia.com/gpu": 3}


def test_sidecars_of_different_accelerators_stay_apart(rules: Rules) -> None:
    init = [gpu("proxy", "1", restart="Always", resource="amd.com/gpu"), gpu("warmup", "2")]
    profile = build_profile(pod(gpu("app", "1"), init=init), as_context(rules))
    assert profile.gpus == {"nvidia.com/gpu": 2, "amd.com/gpu": 1}


def test_the_largest_plain_init_container_sets_the_peak(rules: Rules) -> None:
    init = [gpu("download", "3"), gpu("convert", "1")]
    assert build_profile(pod(gpu("app", "1"), init=init), as_context(rules)).gpus == {"nvidia.com/gpu": 3}
