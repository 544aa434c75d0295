"""The rules are the file, and the cluster is one view beside them: the server's watches, ``check``'s files and
``check --cluster``'s read of a cluster each make the view's parts (`webhook.core.view.observe`), and a request is
judged in the two side by side (`webhook.core.context.Context`), which looks in the view first and falls back on
the rules. Nothing of the cluster is merged into the rules."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from tests.support.clusters import discovered, gke_cluster
from tests.support.contexts import as_context
from tests.support.nodes import gfd_node
from tests.support.reviews import admission_review, apply_verdict
from webhook.core.admission import decide
from webhook.core.context import Context
from webhook.core.documents import Document, check
from webhook.core.review import parse_review
from webhook.core.rules import Rules
from webhook.core.view.claims import ClaimIndex
from webhook.core.view.cluster_view import CLUSTER, INPUT, NOTHING_KNOWN, Objects
from webhook.core.view.observe import observe
from webhook.core.view.priority_state import PriorityClassState
from webhook.server.services import Services

from .test_backends import backend_rules, course_job, kueue_queues, local_queue
from .test_services import DEVICE_CLASS, claim_watch, node_watch

H100 = "NVIDIA-H100-80GB-HBM3"


def test_the_rules_hold_only_what_the_file_says(rules: Rules) -> None:
    """No field of the rules is the cluster's; offline, the context answers from the rules alone."""
    assert not {f.name for f in dataclasses.fields(rules)} & {"nodes", "queues"}
    offline = Context(rules)
    assert offline.cluster is NOTHING_KNOWN and offline.catalog is rules.catalog
    assert offline.accelerators is rules.accelerators and offline.nodes is None
    assert offline.find_model("NVIDIA-H100-80GB-HBM3") is rules.find_model("h100-80g")


def test_the_view_holds_the_nodes_the_device_classes_and_the_queues() -> None:
    rules = backend_rules("kueue", nodes=False)
    view = observe(rules, nodes=discovered(gke_cluster(), rules), device_classes=(Objects((DEVICE_CLASS,), CLUSTER),),
                   queues=Objects(tuple(kueue_queues()), CLUSTER))
    context = Context(rules, view)
    assert context.nodes is not None and set(context.nodes.present) == {"h100-80g", "l4-24g"}
    assert "example.com/gpu" in context.accelerators.extended and "example.com/gpu" not in rules.dra.extended_resources
    assert context.accelerators.is_accelerator("example.com/gpu")
    assert "example.com/gpu" not in rules.accelerators.extended  # the file's rules are left alone
    assert view.queues is not None and view.queues.names("ml-team") == ["batch", "training"]
    # the catalog in force: the nodes' word on the models they have (their label values name them too), the
    # rules' on the rest
    merged = context.catalog["h100-80g"]
    assert merged is not rules.catalog["h100-80g"] and context.find_model("NVIDIA-H100-80GB-HBM3") is merged
    assert context.catalog["a100-80g"] is rules.catalog["a100-80g"]


def test_later_device_classes_win_by_name() -> None:
    rules = backend_rules("default", nodes=False)
    renamed = copy.deepcopy(DEVICE_CLASS)
    renamed["spec"]["extendedResourceName"] = "example.com/accelerator"
    context = Context(rules, observe(rules, device_classes=(Objects((DEVICE_CLASS,), CLUSTER),
                                                            Objects((renamed,), INPUT))))
    assert context.device_classes["gpu.example.com"].source == INPUT
    assert "example.com/accelerator" in context.accelerators.extended


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
    rules = backend_rules("kueue", nodes=False)
    documents = [Document("job.yaml", i, o) for i, o in enumerate([*kueue_queues(), job_named_queue("nightly")])]
    assert pytorchjob_reasons(check(documents, context=as_context(rules))) == ["queue-not-found"]
    cluster = observe(rules, queues=Objects((*kueue_queues(), local_queue("nightly", "gpu-cq")), CLUSTER))
    assert pytorchjob_reasons(check(documents, context=Context(rules, cluster))) == []


def test_the_servers_view_is_what_its_watches_know_and_a_reload_keeps_it(rules: Rules) -> None:
    services = Services(rules, node_watch=node_watch(rules, gfd_node("gpu-1", H100)), claim_watch=claim_watch(DEVICE_CLASS))
    context = services.context
    assert context.rules is rules and context.nodes is not None and set(context.nodes.present) == {"h100-80g"}
    assert context.device_classes["gpu.example.com"].source == CLUSTER
    assert context.cluster.claims is services.claim_index
    assert context.cluster.priority_classes is services.priority_classes
    nodes = context.nodes
    assert services.context.nodes is nodes  # worked out once per change of the watch, not per request
    services.set_rules(rules)
    again = services.context
    assert again.nodes is not None and again.nodes is not nodes and "example.com/gpu" in again.accelerators.extended


def test_a_request_reads_the_views_priority_classes_and_claims(rules: Rules) -> None:
    """The PriorityClasses' state comes from the view: a class the cluster lacks is not set, with a warning."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "ml-team",
                                                            "annotations": {"ai-admission.io/workload-type": "training"}},
           "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                    "nodeSelector": {"nvidia.com/gpu.product": H100}}}
    request = parse_review(admission_review(pod, namespace="ml-team"))
    known = decide(request, ctx=as_context(rules), endpoint="mutate")
    assert known is not None and apply_verdict(pod, known)["spec"]["priorityClassName"] == "ai-training"
    lacking = as_context(rules, priority_classes=PriorityClassState(missing_priority_classes=frozenset({"ai-training"}),
                                                                   checked=True), claims=ClaimIndex())
    missing = decide(request, ctx=lacking, endpoint="mutate")
    assert missing is not None and "priorityClassName" not in apply_verdict(pod, missing)["spec"]
    assert any('"ai-training"' in w for w in missing.warnings), missing.warnings
