"""Every fixture pod, posted over HTTPS to the real server (and through the core in-process): its whole outcome."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import Server
from tests.fixtures import PodCase, assert_warnings, pod_cases
from tests.reviews import admission_review, assert_valid_pod
from webhook.core.admission import judge_pod, mutate_verdict, object_subject
from webhook.core.profile import build_profile
from webhook.core.rules import Rules


@pod_cases()
def test_fixture_is_a_valid_pod(case: PodCase) -> None:
    assert_valid_pod(case.pod)


@pod_cases()
@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_validate_verdict_and_message(server: Server, case: PodCase, api_version: str) -> None:
    review = admission_review(copy.deepcopy(case.pod), api_version=api_version, namespace=case.namespace)
    response = server.review("/validate", review)
    assert response["allowed"] is case.allowed, response
    message = response.get("status", {}).get("message", "")
    if case.allowed:
        assert "status" not in response or response["status"]["code"] == 200
        assert "patch" not in response
    else:
        assert response["status"]["code"] == 403
        assert message.count("\n- ") == len(case.codes), message
    for fragment in case.message:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    for fragment in case.absent:
        assert fragment not in message
    assert_warnings(response.get("warnings", []), case.warnings)


@pod_cases()
def test_audit_mode_records_reason_codes(server: Server, case: PodCase) -> None:
    response = server.review("/validate/audit", admission_review(case.pod, namespace=case.namespace))
    assert response["allowed"] is True
    recorded = response.get("auditAnnotations", {}).get("violations", "")
    assert [c for c in recorded.split(",") if c] == case.codes


@pod_cases()
def test_warn_mode_turns_denials_into_warnings(server: Server, case: PodCase) -> None:
    response = server.review("/validate/warn", admission_review(case.pod, namespace=case.namespace))
    assert response["allowed"] is True
    would = [w for w in response.get("warnings", []) if w.startswith("ai-admission (warn mode) would deny")]
    assert len(would) == len(case.codes)


@pod_cases()
def test_profile_class(case: PodCase, rules: Rules) -> None:
    profile = build_profile(case.pod, rules)
    assert profile.workload == case.workload, profile.classification.reason
    assert profile.multi_node is case.multi_node


@pod_cases()
def test_core_gives_the_whole_outcome(case: PodCase, rules: Rules) -> None:
    """The same outcome from the functions the server calls, in-process (fast: mutation testing runs this)."""
    namespace = case.namespace or case.pod["metadata"].get("namespace", "ml-team")
    subject = object_subject(case.pod, kind="pod", namespace=namespace)
    verdict = judge_pod(copy.deepcopy(case.pod), rules=rules, mode="deny", subject=subject)
    assert verdict.allowed is case.allowed
    assert [f.code for f in verdict.findings if f.severity == "deny"] == case.codes
    for fragment in case.message:
        assert fragment in (verdict.message or ""), f"{fragment!r} not in {verdict.message!r}"
    assert_warnings(list(verdict.warnings), case.warnings)
    mutation = mutate_verdict(copy.deepcopy(case.pod), rules=rules, mode="deny")
    assert [dict(op) for op in mutation.patch] == case.patch
    assert_warnings(list(mutation.warnings), case.mutation_warnings)
