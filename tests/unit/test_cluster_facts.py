"""The nodes' facts as the data of the native policies' parameter: what placement reads off the nodes, worked out
the way `webhook.core.placement` and `webhook.core.mutate` work it out, so that the policies' CEL only looks it up
(tests/e2e/test_native.py holds the CEL to the webhook's answers with this data on a real API server)."""

from __future__ import annotations

import re

from tests.support.clusters import eks_cluster, gb200_cluster, gke_cluster, with_nodes
from tests.support.contexts import as_context
from webhook.core import placement
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import facts_data, toleration_text
from webhook.core.view.targets import ALL_MODELS


def test_no_node_watch_no_facts(rules: Rules) -> None:
    assert facts_data(as_context(rules)) == {}


def test_gke_blocks_and_zones(rules: Rules) -> None:
    data = facts_data(as_context(with_nodes(gke_cluster(), rules)))
    assert data["synced"] == "true"
    # narrowest first, each with the GPUs of its largest domain: a host holds 8, a sub-block 16, a block 32
    blocks = ("cloud.google.com/gce-topology-host=8,cloud.google.com/gce-topology-subblock=16,"
              "cloud.google.com/gce-topology-block=32")
    assert data["pack.h100-80g"] == data["pack"] == blocks
    assert data["pack.l4-24g"] == ""  # the L4 nodes carry no level of the key set: the webhook does not pack
    # the A3 nodes are all in one zone; the L4 nodes in two
    assert data["spread.h100-80g"] == "kubernetes.io/hostname"
    assert data["spread.l4-24g"] == "kubernetes.io/hostname,topology.kubernetes.io/zone"
    assert data["tolerate.h100-80g"] == "nvidia.com/gpu|Exists||NoSchedule"


def test_the_model_index_answers_as_find_model_does(rules: Rules) -> None:
    in_force = with_nodes(gke_cluster(), rules)
    data = facts_data(as_context(in_force))
    names = {key[len("model."):]: name for key, name in data.items() if key.startswith("model.")}
    assert names["nvidia-h100-mega-80gb"] == "h100-80g"  # the label value GKE's nodes carry
    assert names["h100-80gb-hbm3"] == names["nvidia-h100-80gb-hbm3"] == "h100-80g"  # with or without nvidia-
    assert in_force.nodes is not None and set(names.values()) <= set(in_force.nodes.present)  # only present models
    assert "a100-80g" not in names.values()  # a model no node has is left to the webhook
    checked = 0
    for key, name in names.items():
        model = in_force.find_model(key)
        assert model is not None and model.name == name, key
        checked += 1
    assert checked >= 20  # the GKE nodes' two models go by a few dozen names
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", key) for key in data)  # every key a ConfigMap can hold


def test_each_target_of_placement_is_written(rules: Rules) -> None:
    for cluster in (gke_cluster, eks_cluster, gb200_cluster):
        in_force = with_nodes(cluster(), rules)
        assert in_force.nodes is not None
        data = facts_data(as_context(in_force))
        for model, target in in_force.nodes.placement.items():
            suffix = f".{model}" if model != ALL_MODELS else ""
            levels = [f"{level.key}={level.largest}" for level in placement.pack_candidates(target)]
            assert data[f"pack{suffix}"].split(",") == (levels or [""])
            assert data[f"tolerate{suffix}"] == ",".join(toleration_text(t)
                                                        for t in placement.target_tolerations(target, in_force.accelerators, in_force.rules))
    # the NVLink domain first: a GB200 job of one rack stays in its clique
    assert facts_data(as_context(with_nodes(gb200_cluster(), rules)))["pack"].startswith("nvidia.com/gpu.clique=72,")


def test_each_model_a_node_has_has_its_card(rules: Rules) -> None:
    """What validation reads of a model (`webhook.core.validate`), for the native judgement of a whole pod: memory,
    GPUs per node, vendor, interconnect; a model no node has has none (the webhook warns of it)."""
    in_force = with_nodes(gke_cluster(), rules)
    assert in_force.nodes is not None
    data = facts_data(as_context(in_force))
    cards = {key.removeprefix("card."): value.split("|") for key, value in data.items() if key.startswith("card.")}
    assert set(cards) == set(in_force.nodes.present) == {"h100-80g", "l4-24g"}
    memory, per_node, vendor, interconnect, resources, smaller = cards["h100-80g"]
    assert [memory, per_node, vendor, interconnect] == [str(int(in_force.catalog["h100-80g"].memory)), "8", "nvidia",
                                                        "nvlink"]
    # the resources of the model's vendor, each between spaces, for the judgement's `contains(' ' + name + ' ')`
    assert " nvidia.com/gpu " in resources and " amd.com/gpu " not in resources
    assert resources.startswith(" ") and resources.endswith(" ")
    # the largest smaller device of the cluster (`rightsizing.smaller`): an L4 card under an H100, none under an L4
    assert smaller == str(int(in_force.catalog["l4-24g"].memory)) and cards["l4-24g"][5] == "0"


def test_the_parameter_holds_few_keys(rules: Rules) -> None:
    """The API server converts the parameter for each policy it dispatches, at a cost that grows with its keys: the
    model index holds only the names of the models a node has, so the keys grow with the nodes' models, not with the
    catalog's hundreds of names."""
    in_force = with_nodes(gke_cluster(), rules)
    assert len(facts_data(as_context(in_force))) < 60 < len(in_force.nodes.index)
