"""A bug in the policy admits the pod, says so and counts it: never a 500, never a dead worker.

In-process, through Flask's test client, with ``decide`` replaced by one that raises (the Flask shell is never
compiled, so the replacement is what the handler calls). The test suite's own guard (`_no_internal_errors` in
conftest) relies on the warning and the count checked here.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

import webhook.server.app
from tests.support.reviews import admission_review
from webhook.core.rules import Rules
from webhook.server.app import INTERNAL_ERROR_WARNING, create_app
from webhook.server.services import Services

POD = {"metadata": {"generateName": "train-", "namespace": "ml-team"},
       "spec": {"containers": [{"name": "main", "image": "registry.example.com/train:1",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _internal_errors() -> float:
    return REGISTRY.get_sample_value("ai_admission_internal_errors_total") or 0.0


@pytest.mark.parametrize("path", ["/validate", "/mutate", "/validate/warn"])
def test_an_internal_error_admits_the_pod_and_says_so(rules: Rules, monkeypatch: pytest.MonkeyPatch,
                                                      path: str) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in the policy")

    monkeypatch.setattr(webhook.server.app, "decide", broken)
    client = create_app(services=Services.fixed(rules)).test_client()
    review = admission_review(POD)
    before = _internal_errors()
    answer = client.post(path, json=review)
    assert answer.status_code == 200
    body = answer.get_json()
    assert body["apiVersion"] == review["apiVersion"] and body["kind"] == "AdmissionReview"
    assert body["response"] == {"uid": review["request"]["uid"], "allowed": True,
                                "warnings": [INTERNAL_ERROR_WARNING]}
    assert _internal_errors() == before + 1


def test_without_the_bug_the_same_pod_is_judged(rules: Rules) -> None:
    client = create_app(services=Services.fixed(rules)).test_client()
    before = _internal_errors()
    response = client.post("/validate", json=admission_review(POD)).get_json()["response"]
    assert response["allowed"] is False
    assert INTERNAL_ERROR_WARNING not in response.get("warnings", [])
    assert _internal_errors() == before
