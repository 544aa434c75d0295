"""A server whose rules choose a scheduler backend (Kueue here): an owner's CREATE through /mutate comes back with
the queue, priority and suspension Kueue reads, as a JSON Patch the owner stays valid under; dry run is the same;
an owner's UPDATE is not mutated (Kueue's labels are immutable once its Workload exists), and a plain pod takes the
pod words. Validation through /validate denies a queue that does not exist only where queues are known."""

from __future__ import annotations

import copy
from typing import Any, Iterator

import kubernetes_validate
import pytest

from tests.conftest import RULES_FILE, Server, start_server, stop_server
from tests.support import backend_crds, owners
from tests.support.reviews import K8S_VERSION, admission_review, apply_patch, assert_valid_pod, decode_patch

PLURALS = {"PyTorchJob": "pytorchjobs", "Job": "jobs", "Deployment": "deployments", "Pod": "pods"}


def review_for(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return admission_review(obj, group=group, version=version, kind=obj["kind"], resource=PLURALS[obj["kind"]],
                            namespace=obj["metadata"]["namespace"], **kwargs)


@pytest.fixture(scope="module")
def kueue_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("kueue")
    rules = tmp / "rules.yaml"
    rules.write_text(RULES_FILE.read_text().replace("\nscheduler:\n  backend: default\n",
                                                    "\nscheduler:\n  backend: kueue\n", 1))
    server = start_server(tmp, rules=rules)
    try:
        yield server
    finally:
        stop_server(server)


def test_a_pytorchjobs_create_gets_kueues_labels_on_the_owner(kueue_server: Server) -> None:
    job = owners.course_pytorchjob()
    for dry_run in (False, True):
        response = kueue_server.review("/mutate", review_for(copy.deepcopy(job), dry_run=dry_run))
        assert response["allowed"] is True
        patched = apply_patch(job, response)
        assert patched["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "training",
                                                 "kueue.x-k8s.io/priority-class": "ai-training"}
        backend_crds.validate(patched)
        # no node watch here: no level to name, and the owner is told
        assert any("pods not packed" in w for w in response.get("warnings", []))
    again = kueue_server.review("/mutate", review_for(patched))
    assert decode_patch(again) == []


def test_a_jobs_create_is_queued_suspended_and_its_update_left_alone(kueue_server: Server) -> None:
    job = owners.batch_job()
    response = kueue_server.review("/mutate", review_for(job))
    patched = apply_patch(job, response)
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "batch"
    assert patched["spec"]["suspend"] is True
    kubernetes_validate.validate(patched, K8S_VERSION, strict=True)
    update = kueue_server.review("/mutate", review_for(job, operation="UPDATE", old=job))
    assert update["allowed"] is True and "patch" not in update


def test_a_deployments_template_carries_the_queue_label(kueue_server: Server) -> None:
    deployment = owners.inference_deployment()
    patched = apply_patch(deployment, kueue_server.review("/mutate", review_for(deployment)))
    assert patched["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "inference"
    kubernetes_validate.validate(patched, K8S_VERSION, strict=True)


def test_a_plain_pod_takes_the_pod_words_and_is_valid(kueue_server: Server) -> None:
    pod = owners.plain_pod()
    patched = apply_patch(pod, kueue_server.review("/mutate", review_for(pod)))
    assert patched["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert patched["spec"]["priorityClassName"] == "ai-training"
    assert_valid_pod(patched)


def test_without_known_queues_a_named_queue_is_not_judged(kueue_server: Server) -> None:
    job = owners.course_pytorchjob()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "anything"}
    response = kueue_server.review("/validate", review_for(job))
    assert response["allowed"] is True
