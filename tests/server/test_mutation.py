"""/mutate over HTTPS: every fixture's patch applies, validates, keeps user values and is idempotent."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import Server
from tests.support.fixtures import PodCase, assert_warnings, pod_cases
from tests.support.invariants import assert_user_values_kept, assert_well_formed, resolve
from tests.support.reviews import admission_review, apply_patch, decode_patch


def assert_contains(actual: Any, expected: Any, where: str = "") -> None:
    """``expected`` is a subset of ``actual``: dict keys recursively, list items each matched by some item."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a mapping, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}/{key} missing"
            assert_contains(actual[key], value, f"{where}/{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        for item in expected:
            assert any(_contains(a, item) for a in actual), f"{where}: no item matches {item!r} in {actual!r}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _contains(actual: Any, expected: Any) -> bool:
    try:
        assert_contains(actual, expected)
        return True
    except AssertionError:
        return False


def mutate(server: Server, pod: dict[str, Any], **review: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    response = server.review("/mutate", admission_review(copy.deepcopy(pod), **review))
    assert response["allowed"] is True
    return response, apply_patch(pod, response)


@pod_cases()
@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_patch_applies_validates_and_keeps_user_values(server: Server, case: PodCase, api_version: str) -> None:
    response, mutated = mutate(server, case.pod, api_version=api_version, namespace=case.namespace)
    assert decode_patch(response) == case.patch
    assert_well_formed(mutated)
    assert_user_values_kept(case.pod, mutated)
    if case.mutated is not None:
        assert_contains(mutated, case.mutated)
    for pointer, expected in case.mutated_at.items():
        assert resolve(mutated, pointer) == expected, pointer
    for fragment in case.absent_after_mutation:
        assert fragment not in str(mutated), fragment
    assert_warnings(response.get("warnings", []), case.mutation_warnings)


@pod_cases()
def test_second_mutation_is_empty(server: Server, case: PodCase) -> None:
    _, once = mutate(server, case.pod, namespace=case.namespace)
    response, twice = mutate(server, once, namespace=case.namespace)
    assert decode_patch(response) == []
    assert twice == once


@pod_cases()
def test_class_label_and_profile_are_recorded(server: Server, case: PodCase) -> None:
    _, mutated = mutate(server, case.pod, namespace=case.namespace)
    labels = mutated["metadata"].get("labels") or {}
    if case.workload == "none":
        assert mutated == case.pod
        return
    assert labels["ai-admission.io/workload-type"] == case.workload
    assert f'"class":"{case.workload}"' in mutated["metadata"]["annotations"]["ai-admission.io/profile"]


def test_dry_run_mutation_is_the_same(server: Server) -> None:
    from tests.support.fixtures import POD_CASES

    case = next(c for c in POD_CASES if c.name == "course-example-minimal")
    wet, _ = mutate(server, case.pod)
    dry, _ = mutate(server, case.pod, dry_run=True)
    assert decode_patch(dry) == decode_patch(wet) != []


def test_a_container_added_to_a_running_pod_is_voided_and_stays_valid(server: Server) -> None:
    """``kubectl debug`` through the pods/ephemeralcontainers subresource: /mutate sets NVIDIA_VISIBLE_DEVICES=void
    on the added container (it can ask for no GPU, and its CUDA image would show it every GPU under the NVIDIA
    runtime); /validate denies one that sets a device value itself."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "vllm-0", "namespace": "serving", "uid": "6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"},
           "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.4",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                                                "targetContainerName": "vllm", "stdin": True, "tty": True}]
    review = admission_review(copy.deepcopy(debugged), operation="UPDATE", sub_resource="ephemeralcontainers",
                              old=copy.deepcopy(pod))
    response = server.review("/mutate", review)
    assert response["allowed"] is True
    patched = apply_patch(debugged, response)
    assert patched["spec"]["ephemeralContainers"][0]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert_well_formed(patched)
    grabbing = copy.deepcopy(debugged)
    grabbing["spec"]["ephemeralContainers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    denied = server.review("/validate", admission_review(grabbing, operation="UPDATE",
                                                         sub_resource="ephemeralcontainers", old=copy.deepcopy(pod)))
    assert denied["allowed"] is False
    assert 'ephemeral container "debugger" sets NVIDIA_VISIBLE_DEVICES=all' in denied["status"]["message"]
