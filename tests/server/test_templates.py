"""Controller and CRD templates: the webhook and `ai-admission check` give identical verdicts on real manifests."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import Server
from tests.support.builders import MANIFESTS, objects, run_check
from tests.support.reviews import admission_review

PLURALS = {"Deployment": "deployments", "CronJob": "cronjobs", "Job": "jobs", "PyTorchJob": "pytorchjobs",
           "JobSet": "jobsets", "InferenceService": "inferenceservices", "RayJob": "rayjobs", "Pod": "pods",
           "Service": "services"}


EXPECTED: dict[str, dict[tuple[str, str], tuple[bool, list[str]]]] = {
    "vllm-deployment.yaml": {("Deployment", "vllm-llama-70b"): (True, [])},
    "pytorchjob.yaml": {("PyTorchJob", "llama-pretrain"): (False, ["gpu-model-missing", "gpu-memory-missing"])},
    "jobset.yaml": {("JobSet", "gpt-neox"): (True, [])},
    "cronjob.yaml": {("CronJob", "nightly-embeddings"): (False, ["gpu-model-missing", "gpu-memory-missing"])},
    "inferenceservice.yaml": {("InferenceService", "llama3-8b"): (True, [])},
    "rayjob.yaml": {("RayJob", "tune-search"): (True, [])},
    "mixed.yaml": {("Deployment", "web"): (True, []), ("Pod", "debug-gpu"): (False, ["gpu-model-missing", "gpu-memory-missing"]),
                   ("Job", "tf-dist"): (True, [])},
}


def review_for(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return admission_review(obj, group=group, version=version, kind=obj["kind"], resource=PLURALS[obj["kind"]],
                            namespace=obj["metadata"].get("namespace", "default"), **kwargs)


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_webhook_and_cli_agree(server: Server, filename: str) -> None:
    path = MANIFESTS / filename
    done = run_check("-f", str(path), "-o", "json")
    cli = json.loads(done.stdout)
    expected = EXPECTED[filename]
    any_denied = any(not allowed for allowed, _ in expected.values())
    assert done.returncode == (1 if any_denied else 0), done.stderr
    for obj in objects(path):
        key = (obj["kind"], obj["metadata"]["name"])
        if key not in expected:
            assert obj["kind"] == "Service"
            assert {"kind": "Service", "name": "web"}.items() <= cli["skipped"][0].items()
            continue
        allowed, codes = expected[key]
        webhook = server.review("/validate", review_for(obj))
        audit = server.review("/validate/audit", review_for(obj))
        webhook_codes = [c for c in audit.get("auditAnnotations", {}).get("violations", "").split(",") if c]
        rows = [r for r in cli["results"] if (r["kind"], r["name"]) == key]
        assert rows, key
        cli_codes = [code for r in rows for code in r["denials"]]
        assert webhook["allowed"] is allowed is all(r["allowed"] for r in rows)
        assert webhook_codes == cli_codes == codes
        if not allowed:
            assert webhook["status"]["message"] == "\n".join(r["message"] for r in rows if r["message"])


def test_message_names_object_template_and_fix(server: Server) -> None:
    (job,) = objects(MANIFESTS / "pytorchjob.yaml")
    message = server.review("/validate", review_for(job))["status"]["message"]
    assert 'PyTorchJob "ml-team/llama-pretrain" spec.pytorchReplicaSpecs.Worker.template (training:' in message
    assert 'PyTorchJob "ml-team/llama-pretrain" spec.pytorchReplicaSpecs.Master.template (training:' in message
    assert '"ai-admission.io/gpu-memory: 40Gi"' in message
    assert 'nodeSelector "gpu-type: a100-80g"' in message


def test_update_judges_only_changed_templates(server: Server) -> None:
    (cron,) = objects(MANIFESTS / "cronjob.yaml")
    rescheduled = copy.deepcopy(cron)
    rescheduled["spec"]["schedule"] = "0 3 * * *"
    update = server.review("/validate", review_for(rescheduled, operation="UPDATE", old=cron))
    assert update["allowed"] is True
    changed = copy.deepcopy(cron)
    changed["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] = "embed:1.9"
    update = server.review("/validate", review_for(changed, operation="UPDATE", old=cron))
    assert update["allowed"] is False


def test_scale_and_status_subresources_are_not_judged(server: Server) -> None:
    (cron,) = objects(MANIFESTS / "cronjob.yaml")
    response = server.review("/validate", review_for(cron, operation="UPDATE", old=cron, sub_resource="status"))
    assert response == {"uid": response["uid"], "allowed": True}


def test_templates_are_not_mutated(server: Server) -> None:
    (deployment,) = objects(MANIFESTS / "vllm-deployment.yaml")
    response = server.review("/mutate", review_for(deployment))
    assert response["allowed"] is True and "patch" not in response
