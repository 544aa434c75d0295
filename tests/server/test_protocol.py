"""The AdmissionReview protocol and bad input, against the real server: every answer well-formed, no 5xx."""

from __future__ import annotations

import http.client
import json
import ssl

import pytest

from tests.conftest import Server
from tests.support.build import expected_compiled_modules
from tests.support.reviews import admission_review

GPU_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "bare", "namespace": "ml-team"},
    "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def test_healthz_and_readyz(server: Server) -> None:
    assert server.get("/healthz").json() == {"status": "ok"}
    ready = server.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    # the server runs the whole core compiled in a compiled build, and none of it in a pure one
    assert ready.json()["compiled"] == expected_compiled_modules()


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_other_operations_are_allowed_unchanged(server: Server, operation: str) -> None:
    review = admission_review(GPU_POD if operation != "DELETE" else None, operation=operation, old=GPU_POD,
                              name="bare", namespace="ml-team")
    response = server.review("/validate", review)
    assert response == {"uid": review["request"]["uid"], "allowed": True}


@pytest.mark.parametrize("sub_resource", ["ephemeralcontainers", "status", "binding", "eviction"])
def test_subresources_are_allowed_unchanged(server: Server, sub_resource: str) -> None:
    review = admission_review(GPU_POD, sub_resource=sub_resource)
    assert server.review("/validate", review) == {"uid": review["request"]["uid"], "allowed": True}


def test_other_kinds_are_allowed_unchanged(server: Server) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    review = admission_review(deployment, group="apps", kind="Deployment", resource="deployments")
    assert server.review("/validate", review) == {"uid": review["request"]["uid"], "allowed": True}


def test_dry_run_gets_the_same_verdict(server: Server) -> None:
    wet = server.review("/validate", admission_review(GPU_POD))
    dry = server.review("/validate", admission_review(GPU_POD, dry_run=True))
    assert dry["allowed"] is wet["allowed"] is False
    assert dry["status"] == wet["status"]


def test_missing_namespace_and_name_use_request_fields(server: Server) -> None:
    pod = {"metadata": {"generateName": "job-abc-"}, "spec": GPU_POD["spec"]}
    response = server.review("/validate", admission_review(pod, namespace="team-a", name=""))
    assert response["status"]["message"].startswith('pod "team-a/job-abc-*"')


def test_missing_maps_and_nulls_do_not_break(server: Server) -> None:
    pod = {"metadata": {"generateName": "x-", "labels": None, "annotations": None, "ownerReferences": None},
           "spec": {"containers": [{"name": "c", "resources": None, "env": None}], "initContainers": None,
                    "nodeSelector": None, "affinity": {"nodeAffinity": None}}}
    response = server.review("/validate", admission_review(pod))
    assert response["allowed"] is True


def test_garbage_quantities_are_denied_with_a_reason(server: Server) -> None:
    pod = {"metadata": {"name": "q"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "lots"}}},
        {"name": "d", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}},
    ]}}
    response = server.review("/validate", admission_review(pod))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "'lots' is not a quantity" in message
    assert "must be a whole number of devices" in message


def test_request_limit_mismatch_is_denied(server: Server) -> None:
    pod = {"metadata": {"name": "m"}, "spec": {"containers": [{"name": "c", "resources": {
        "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}]}}
    response = server.review("/validate", admission_review(pod))
    assert "request (1) and limit (2) differ" in response["status"]["message"]


def test_invalid_annotation_is_denied(server: Server) -> None:
    pod = {"metadata": {"name": "a", "annotations": {"ai-admission.io/workload-type": "gaming",
                                                     "ai-admission.io/model-params": "70B"}},
           "spec": {"containers": [{"name": "c"}]}}
    message = server.review("/validate", admission_review(pod))["status"]["message"]
    assert '"gaming" is not one of training, inference, batch, hpo' in message
    assert "needs ai-admission.io/model-precision beside it" in message


@pytest.mark.parametrize("body, fragment", [
    (b"{not json", "not valid JSON"),
    (b"[]", "expected a JSON object"),
    (b'{"kind": "Pod", "apiVersion": "v1"}', "expected kind AdmissionReview"),
    (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v2"}', "expected kind AdmissionReview"),
    (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "has no request"),
    (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"operation": "CREATE"}}',
     "has no uid"),
    (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u"}}',
     "has no operation"),
    (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "u", '
     b'"operation": "CREATE", "object": [1]}}', "request.object is not an object"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"\xff\xfe garbage", "not valid JSON"),
])
def test_malformed_input_gets_a_precise_400(server: Server, body: bytes, fragment: str) -> None:
    answer = server.post("/validate", data=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert fragment in answer.json()["error"]


def test_wrong_content_type_is_415(server: Server) -> None:
    answer = server.post("/validate", data=json.dumps(admission_review(GPU_POD)).encode(),
                         headers={"Content-Type": "text/plain"})
    assert answer.status_code == 415
    assert "application/json" in answer.json()["error"]


def test_huge_body_is_413_before_it_is_read(server: Server) -> None:
    """The limit is enforced from Content-Length, so a 5 MiB body is refused without being read."""
    context = ssl.create_default_context(cafile=server.ca)
    host, port = server.url.removeprefix("https://").split(":")
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    connection.putrequest("POST", "/validate")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(5 * 1024 * 1024))
    connection.endheaders()
    answer = connection.getresponse()
    assert answer.status == 413
    assert "larger than" in json.loads(answer.read())["error"]
    connection.close()


def test_unknown_paths_and_methods_answer_json(server: Server) -> None:
    assert server.get("/nope").status_code == 404
    assert server.get("/validate").status_code == 405
    assert server.get("/validate").json()["status"] == 405
    assert server.post("/validate/strict", {}).status_code == 404


def test_model_annotation_conflicting_with_node_selector_is_denied(server: Server) -> None:
    pod = {"metadata": {"name": "c", "annotations": {"ai-admission.io/gpu-model": "h100", "ai-admission.io/gpu-memory": "10Gi"}},
           "spec": {"nodeSelector": {"gpu-type": "a100-80g"},
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}}]}}
    message = server.review("/validate", admission_review(pod))["status"]["message"]
    assert 'annotation ai-admission.io/gpu-model says "h100" but nodeSelector gpu-type pins "a100-80g"' in message


@pytest.mark.parametrize("field, value", [("annotations", ["a", "b"]), ("labels", "text"), ("annotations", 7)])
def test_malformed_metadata_maps_are_mutated_without_an_internal_error(server: Server, field: str, value: object) -> None:
    pod = {"metadata": {"name": "m", field: value, "annotations" if field == "labels" else "labels": {"app": "x"}},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    response = server.review("/mutate", admission_review(pod))
    assert response["allowed"] is True
    assert not any("internal error" in w for w in response.get("warnings", []))
    assert "patch" in response


def test_no_worker_died(server: Server) -> None:
    """Run last in this module: after all the bad input above, the same workers are still serving."""
    before = server.worker_pids()
    for body in (b"{", b"[]", b"\x00" * 1000):
        server.post("/validate", data=body, headers={"Content-Type": "application/json"})
    assert server.worker_pids() == before
    assert "Worker exiting" not in server.log.read_text()
    assert "Traceback" not in server.log.read_text()
