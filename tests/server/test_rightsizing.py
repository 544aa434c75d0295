"""GPUs asked beyond the need over HTTPS, with the rules a platform writes to deny them for one class: the denial
and its warn-mode form, the warning and the record of a class left at the default, and the metric that counts the
GPUs an admitted pod asks for beyond its need (at its creation only: not a dry run, not /mutate, not a denied pod).
The fixture pods' warnings and records are held over HTTPS by tests/server/test_fixtures.py and test_mutation.py.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import RULES_FILE, Server, start_server, stop_server
from tests.support.fixtures import FIXTURES, load_pod_case
from tests.support.metrics import metric, settled
from tests.support.reviews import admission_review, apply_patch, assert_valid_pod
from webhook.core import names
from webhook.server import batching

SERVER = load_pod_case(FIXTURES / "pods" / "vllm-7b-eight-h100.yaml").pod  # 7B bf16 on 8 H100s: 1 is enough
BEYOND = "ai_admission_gpus_beyond_need_total"


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose rules deny GPUs beyond the need for inference (batch keeps the default warning)."""
    folder = tmp_path_factory.mktemp("rightsizing")
    document = yaml.safe_load(RULES_FILE.read_text())
    document["classes"]["inference"]["rightsizing"] = {"overProvisioned": "deny"}
    rules = folder / "rules.yaml"
    rules.write_text(yaml.safe_dump(document))
    running = start_server(folder, rules=rules)
    yield running
    stop_server(running)


def as_batch(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found = copy.deepcopy(pod)
    found["metadata"]["annotations"][names.WORKLOAD_TYPE] = "batch"
    found["metadata"]["name"] = name
    return found


def beyond(server: Server, **labels: str) -> float:
    return metric(settled(server, lambda text: True, seconds=0.5), BEYOND, **labels)


def test_a_class_the_rules_deny_it_for_is_denied_and_warn_mode_says_so(strict: Server) -> None:
    denied = strict.review("/validate", admission_review(copy.deepcopy(SERVER)))
    assert denied["allowed"] is False and denied["status"]["code"] == 403
    assert ("- needs 15.6Gi of GPU memory, which 1 h100-80g holds (one node, one NVLink domain): 7 of its 8 GPUs "
            "would sit idle. Ask for 1 GPU") in denied["status"]["message"]
    warned = strict.review("/validate/warn", admission_review(copy.deepcopy(SERVER)))
    assert warned["allowed"] is True
    assert warned["warnings"][0].startswith("ai-admission (warn mode) would deny: needs 15.6Gi of GPU memory")


def test_the_default_class_is_warned_and_its_record_says_the_need_takes_one(strict: Server) -> None:
    pod = as_batch(SERVER, "embed-0")
    validated = strict.review("/validate", admission_review(copy.deepcopy(pod)))
    assert validated["allowed"] is True
    assert validated["warnings"] == [
        "needs 15.6Gi of GPU memory, which 1 h100-80g holds (one node, one NVLink domain): 7 of its 8 GPUs would "
        "sit idle. Ask for 1 GPU, or, if it uses them all, say so: --tensor-parallel-size 8 or annotation "
        "ai-admission.io/parallelism: data"]
    mutated = apply_patch(pod, strict.review("/mutate", admission_review(copy.deepcopy(pod))))
    assert_valid_pod(mutated)
    record = json.loads(mutated["metadata"]["annotations"][names.PROFILE])
    assert (record["gpus"], record["gpusNeeded"], record["gpuMemoryPerGpu"]) == ({"nvidia.com/gpu": 8}, 1, "15.6Gi")


def test_the_gpus_beyond_need_of_an_admitted_pod_are_counted_once_at_its_creation(strict: Server) -> None:
    pod = as_batch(SERVER, "embed-1")
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-L40S"}  # a model no other test counts
    labels = {"workload": "batch", "model": "l40s-48g"}
    time.sleep(3 * batching.INTERVAL)  # what earlier tests had counted has reached the files
    denied_before = beyond(strict, workload="inference")
    assert beyond(strict, **labels) == 0
    strict.review("/validate", admission_review(copy.deepcopy(pod), dry_run=True))  # kubectl apply --dry-run
    strict.review("/mutate", admission_review(copy.deepcopy(pod)))
    strict.review("/validate", admission_review(copy.deepcopy(SERVER)))  # inference: denied, holds nothing
    strict.review("/validate", admission_review(copy.deepcopy(pod)))
    settled(strict, lambda text: metric(text, BEYOND, **labels) > 0)
    time.sleep(3 * batching.INTERVAL)  # what else was counted has reached the files too
    assert beyond(strict, **labels) == 7
    assert beyond(strict, workload="inference") == denied_before

