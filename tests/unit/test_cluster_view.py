"""The cluster's view is one value beside the rules, and `in_force` the one place the two meet: the server's
watches, ``check``'s files and ``check --cluster``'s read of a cluster all go through it, so the three cannot
merge in different orders again. A request reads the view's PriorityClasses and claims directly."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.clusters import discovered, gke_cluster
from tests.support.nodes import gfd_node
from tests.support.reviews import admission_review, apply_verdict
from webhook.core.admission import decide
from webhook.core.documents import Document, check
from webhook.core.dra.claims import ClaimIndex
from webhook.core.review import parse_review
from webhook.core.rules import Rules
from webhook.core.view.cluster_view import CLUSTER, INPUT, NOTHING_KNOWN, ClusterView, Objects, in_force
from webhook.core.view.priority_state import PriorityClassState
from webhook.server.services import Services

from .test_backends import backend_rules, course_job, kueue_queues, local_queue
from .test_services import DEVICE_CLASS, claim_watch, node_watch

H100 = "NVIDIA-H100-80GB-HBM3"


def test_nothing_known_leaves_the_files_rules_as_they_are(rules: Rules) -> None:
    assert in_force(rules, NOTHING_KNOWN) is rules
    assert rules.nodes is None and rules.queues is None


def test_in_force_adds_the_nodes_the_device_classes_and_the_queues() -> None:
    rules = backend_rules("kueue", nodes=False)
    view = ClusterView(nodes=discovered(gke_cluster(), rules), device_classes=(Objects((DEVICE_CLASS,), CLUSTER),),
                       queues=Objects(tuple(kueue_queues()), CLUSTER))
    merged = in_force(rules, view)
    assert merged.nodes is not None and set(merged.nodes.present) == {"h100-80g", "l4-24g"}
    assert "example.com/gpu" in merged.dra.extended_resources and "example.com/gpu" not in rules.dra.extended_resources
    assert merged.queues is not None and merged.queues.names("ml-team") == ["batch", "training"]
    assert rules.nodes is None and rules.queues is None  # the file's rules are left alone


def test_later_device_classes_win_by_name() -> None:
    rules = backend_rules("default", nodes=False)
    renamed = copy.deepcopy(DEVICE_CLASS)
    renamed["spec"]["extendedResourceName"] = "example.com/accelerator"
    merged = in_force(rules, ClusterView(device_classes=(Objects((DEVICE_CLASS,), CLUSTER),
                                                         Objects((renamed,), INPUT))))
    assert merged.dra.device_classes["gpu.example.com"].source == INPUT
    assert "example.com/accelerator" in merged.dra.extended_resources


def job_named_queue(queue: str) -> dict[str, Any]:
    job = course_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


def pytorchjob_reasons(report: Any) -> list[str]:
    """The denials of the PyTorchJob as a whole (its queue; no result when there is nothing to say of it)."""
    assert [r.path for r in report.results if r.kind == "PyTorchJob" and r.path], report.results  # templates judged
    return [f.code for r in report.results if r.kind == "PyTorchJob" and r.path is None
            for f in r.verdict.findings if f.severity == "deny"]


def test_check_takes_the_clusters_queues_over_its_inputs() -> None:
    """With the cluster read (``check --cluster``), its queues are the ones that exist; the files' are a stand-in
    only where the cluster's are not known."""
    rules = backend_rules("kueue")
    documents = [Document("job.yaml", i, o) for i, o in enumerate([*kueue_queues(), job_named_queue("nightly")])]
    assert pytorchjob_reasons(check(documents, rules=rules)) == ["queue-not-found"]
    cluster = ClusterView(queues=Objects((*kueue_queues(), local_queue("nightly", "gpu-cq")), CLUSTER))
    assert pytorchjob_reasons(check(documents, rules=rules, cluster=cluster)) == []


def test_the_servers_view_is_what_its_watches_know_and_a_reload_keeps_it(rules: Rules) -> None:
    services = Services(rules, node_watch=node_watch(rules, gfd_node("gpu-1", H100)), claim_watch=claim_watch(DEVICE_CLASS))
    view = services.view
    assert view.nodes.known and [c.source for c in view.device_classes] == [CLUSTER]
    assert view.claims is services.claim_index and view.priority_classes is services.priority_classes
    assert services.rules == in_force(rules, view)
    services.set_rules(rules)
    assert services.rules.nodes is not None and "example.com/gpu" in services.rules.dra.extended_resources


def test_a_request_reads_the_views_priority_classes_and_claims(rules: Rules) -> None:
    """The PriorityClasses' state comes from the view: a class the cluster lacks is not set, with a warning."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "ml-team",
                                                            "annotations": {"ai-admission.io/workload-type": "training"}},
           "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                    "nodeSelector": {"nvidia.com/gpu.product": H100}}}
    request = parse_review(admission_review(pod, namespace="ml-team"))
    known = decide(request, rules=rules, endpoint="mutate")
    assert known is not None and apply_verdict(pod, known)["spec"]["priorityClassName"] == "ai-training"
    lacking = ClusterView(priority_classes=PriorityClassState(missing_priority_classes=frozenset({"ai-training"}),
                                                              checked=True), claims=ClaimIndex())
    missing = decide(request, rules=rules, endpoint="mutate", view=lacking)
    assert missing is not None and "priorityClassName" not in apply_verdict(pod, missing)["spec"]
    assert any('"ai-training"' in w for w in missing.warnings), missing.warnings
