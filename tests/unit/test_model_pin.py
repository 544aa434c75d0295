"""A model named only by annotation is pinned by a label its nodes carry: with the node watch on, a model key every
node of the model carries with one value naming it (the rules' ``modelNodeSelectorKey`` first); offline, or while
no node of the model is known, the rules' key. A key no node carries would leave the pod Pending for ever with no
word (LeaderWorkerSet pods named ``h100-80g`` by annotation on GKE A3 nodes bound 0 of 2): where the model's nodes
share no such label, nothing is pinned and the pod is told. The denial's fix names the same label.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.support.clusters import H100, gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.nodes import gfd_node
from tests.support.reviews import apply_verdict
from webhook.core import names
from webhook.core.admission import judge, mutate_verdict
from webhook.core.context import Context
from webhook.core.rules import Rules


def annotated(model: str = "h100-80g") -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "memory": "64Gi", "cpu": "8"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml-team",
                         "annotations": {names.GPU_MODEL: model, names.GPU_MEMORY: "40Gi",
                                         names.WORKLOAD_TYPE: "inference"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                                     "resources": {"limits": limits, "requests": dict(limits)}}]}}


def pinned(ctx: Context, pod: dict[str, Any]) -> tuple[dict[str, str] | None, list[str]]:
    verdict = mutate_verdict(pod, ctx=ctx, mode="deny", namespace="ml-team")
    return apply_verdict(copy.deepcopy(pod), verdict)["spec"].get("nodeSelector"), list(verdict.warnings)


def test_on_nodes_that_carry_no_gpu_type_the_pod_is_pinned_by_a_label_they_carry(rules: Rules) -> None:
    ctx = with_nodes(gke_cluster(), rules)
    selector, warnings = pinned(ctx, annotated())
    assert selector == {"nvidia.com/gpu.product": H100}
    assert not any("not pinned" in w for w in warnings)
    # the pinned pod reads as the same model, and a second /mutate adds nothing
    again = annotated()
    again["spec"]["nodeSelector"] = selector
    verdict = mutate_verdict(again, ctx=ctx, mode="deny", namespace="ml-team")
    assert verdict.profile is not None and verdict.profile.model is not None
    assert verdict.profile.model.name == "h100-80g"
    assert not any("nodeSelector" in op["path"] for op in verdict.patch)


def test_nodes_that_carry_the_rules_key_are_pinned_by_it(rules: Rules) -> None:
    nodes = [gfd_node(f"a100-{i}", "NVIDIA-A100-SXM4-80GB", labels={"gpu-type": "a100-80g"}) for i in range(2)]
    assert pinned(with_nodes(nodes, rules), annotated("a100-80g"))[0] == {"gpu-type": "a100-80g"}


def test_offline_and_before_any_node_of_the_model_the_rules_key_is_used(rules: Rules) -> None:
    assert pinned(as_context(rules), annotated())[0] == {"gpu-type": "h100-80g"}
    a100_only = [gfd_node("a100-0", "NVIDIA-A100-SXM4-80GB")]
    assert pinned(with_nodes(a100_only, rules), annotated())[0] == {"gpu-type": "h100-80g"}


def test_nodes_that_share_no_model_label_pin_nothing_and_the_pod_is_told(rules: Rules) -> None:
    # one pool time-sliced (GPU feature discovery renames its product -SHARED), one not: no value names them all
    nodes = [gfd_node("whole-0", H100), gfd_node("sliced-0", f"{H100}-SHARED")]
    selector, warnings = pinned(with_nodes(nodes, rules), annotated())
    assert selector is None
    assert ("the h100-80g named by annotation ai-admission.io/gpu-model is not pinned: its nodes share no label of "
            "the rules' modelKeys that names it, so the scheduler may place the pod on another model; add a "
            "nodeSelector on a label its nodes carry") in warnings


def test_the_denial_s_fix_names_a_label_the_cluster_s_nodes_carry(rules: Rules) -> None:
    bare = annotated()
    del bare["metadata"]["annotations"][names.GPU_MODEL]
    found = judge(bare, ctx=with_nodes(gke_cluster(), rules), mode="deny", group="", kind="Pod",
                  namespace="ml-team")
    assert found is not None
    message = found[0].message or ""
    assert f'add nodeSelector "nvidia.com/gpu.product: {H100}" or annotation "ai-admission.io/gpu-model: h100-80g"' \
        in message, message
    offline = judge(bare, ctx=as_context(rules), mode="deny", group="", kind="Pod", namespace="ml-team")
    assert offline is not None and 'add nodeSelector "gpu-type: ' in (offline[0].message or "")
