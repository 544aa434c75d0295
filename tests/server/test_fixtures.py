"""Every fixture pod, posted over HTTPS to the real server (and through the core in-process): its whole outcome."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import Server
from tests.support.fixtures import PodCase, assert_warnings, pod_cases
from tests.support.reviews import admission_review


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
