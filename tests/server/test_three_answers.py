"""The three questions over HTTPS, as the API server asks them: a torchrun fine-tune as a plain Job admitted as
training at its CREATE (no warning that its GPUs sit idle) and its pods mutated as training; an Indexed Job's pod
known for multi-node training by its ``--nnodes``; a preemptible training pod and a non-preemptible batch pod
given the PriorityClass of their answer; an answer the rules cannot honour said at the pod's /validate. Each
patched pod is checked against the Pod schema. The decisions in-process: tests/unit/test_three_answers.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.conftest import Server
from tests.support.reviews import admission_review, apply_patch, assert_valid_pod
from tests.unit.test_three_answers import SFT, TWO_NODES, job, job_pod
from webhook.core import names


def mutated(server: Server, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod as the API server stores it after /mutate, and the /validate answer for that pod."""
    response = server.review("/mutate", admission_review(copy.deepcopy(pod)))
    assert response["allowed"] is True
    patched = apply_patch(pod, response)
    assert_valid_pod(patched)
    return patched, server.review("/validate", admission_review(copy.deepcopy(patched)))


def test_a_plain_job_fine_tune_is_admitted_as_training_with_nothing_said_of_idle_gpus(server: Server) -> None:
    answer = server.review("/validate", admission_review(copy.deepcopy(SFT), group="batch", kind="Job",
                                                         resource="jobs"))
    assert answer["allowed"] is True
    assert not any("would sit idle" in w for w in answer.get("warnings", [])), answer.get("warnings")
    pod, validated = mutated(server, job_pod(SFT))
    assert validated["allowed"] is True and not validated.get("warnings")
    record = json.loads(pod["metadata"]["annotations"][names.PROFILE])
    assert (record["class"], record["reason"], record["gpusNeeded"], record["multiNode"]) == (
        "training", 'command "torchrun" in container "trainer"', 8, False)
    assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == ("ai-training", 100000)


def test_an_indexed_job_s_pod_is_one_of_a_multi_node_training_job(server: Server) -> None:
    pod, validated = mutated(server, job_pod(TWO_NODES, 1))
    assert validated["allowed"] is True
    record = json.loads(pod["metadata"]["annotations"][names.PROFILE])
    assert (record["class"], record["multiNode"], record["jobPods"]) == ("training", True, 2)


def test_the_answer_to_can_it_be_preempted_chooses_the_priority_class(server: Server) -> None:
    spot, _ = mutated(server, job_pod(job("spot", ["torchrun", "--standalone", "t.py"],
                                          annotations={names.PREEMPTIBLE: "true", names.GPU_MEMORY: "40Gi"})))
    keep, _ = mutated(server, job_pod(job("keep", ["python", "embed.py"],
                                          annotations={names.PREEMPTIBLE: "false", names.GPU_MEMORY: "40Gi"})))
    assert (spot["spec"]["priorityClassName"], spot["spec"]["priority"]) == ("ai-training-preemptible", 50000)
    assert (keep["spec"]["priorityClassName"], keep["spec"]["priority"], keep["spec"]["preemptionPolicy"]) == (
        "ai-batch-protected", 100000, "Never")
    assert json.loads(spot["metadata"]["annotations"][names.PROFILE])["preemptible"] is True
    assert json.loads(keep["metadata"]["annotations"][names.PROFILE])["preemptible"] is False


def test_an_answer_the_rules_cannot_honour_is_said_at_validate_after_mutate(server: Server) -> None:
    obj = job("trial", ["python", "train.py"], annotations={names.PREEMPTIBLE: "false", names.GPU_MEMORY: "40Gi"})
    obj["spec"]["template"]["metadata"]["labels"] = {"katib.kubeflow.org/trial": "trial"}
    pod, validated = mutated(server, job_pod(obj))
    assert pod["spec"]["priorityClassName"] == "ai-hpo"  # what /mutate gave it; /validate still says why
    assert validated["allowed"] is True
    assert validated["warnings"] == [
        "annotation ai-admission.io/preemptible=false is not honoured: the rules give hpo pods no PriorityClass for "
        "it (classes.hpo.priorityClassIfNotPreemptible), so it runs at ai-hpo (10000), which other classes preempt"]
