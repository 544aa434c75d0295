"""The AI stack as deployed: every GPU pod spec of the projects' published examples is judged, and judged right.

tests/manifests/stack holds manifests that follow the published examples of Kubeflow (training operator, Trainer,
Katib, notebooks), JobSet, LeaderWorkerSet, KServe, KubeRay, Volcano, the vLLM production stack, NVIDIA Dynamo,
Spark, Argo, HAMi and the GKE/EKS samples, field for field (each names the example it follows). What `check` says
of each pod spec in them (class, GPUs, the model judged against, the pods of the job, the deny reasons) is stated
in tests/fixtures/stack-expected.yaml; the webhook must say the same.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Server
from tests.support.contexts import as_context
from tests.support.fixtures import EXPECTED, STACK
from tests.support.reviews import admission_review
from webhook.cli.check import read_documents
from webhook.core.documents import check
from webhook.core.rules import Rules
from webhook.core.workloads.kinds import KINDS, group_of


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Pod":
        return admission_review(obj)
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    known = KINDS.get((group_of(str(obj["apiVersion"])), str(obj["kind"])))
    resource = known.resource if known else str(obj["kind"]).lower() + "s"
    namespace = obj["metadata"].get("namespace", "")
    return admission_review(obj, group=group, version=version, kind=obj["kind"], resource=resource, namespace=namespace)


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_the_webhook_says_what_check_says(server: Server, filename: str, rules: Rules) -> None:
    report = check(list(read_documents([str(STACK / filename)])), context=as_context(rules))
    for document in read_documents([str(STACK / filename)]):
        obj = document.obj
        mine = [r for r in report.results if r.document == document]
        response = server.review("/validate", _review(obj))
        if not mine:
            assert response == {"uid": response["uid"], "allowed": True}
            continue
        assert response["allowed"] is all(r.verdict.allowed for r in mine)
        expected = "\n".join(r.verdict.message for r in mine if r.verdict.message)
        assert response.get("status", {}).get("message", "") == expected
