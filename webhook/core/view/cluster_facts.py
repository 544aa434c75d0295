"""What the webhook learns from the nodes, as the data of one object that the native policies read as their
parameter (``paramRef``), so that placement needs no webhook either (`webhook.generate.native`).

A MutatingAdmissionPolicy cannot read Nodes; the server watches them (`webhook.cluster.nodes`), and one of its
workers (`webhook.cluster.cluster_facts`) writes this function's answer for the rules in force to the ClusterFacts
object ``ai-admission-cluster-facts`` whenever it changes. The data is what `webhook.core.placement` reads off the
nodes, already worked out, so that the policies' CEL only looks it up (a map of strings, as a ConfigMap's data):

Why a kind of our own (`crd`), not a ConfigMap: a v1.36 API server reads a built-in paramKind through its shared
informer factory, and once no binding names that paramKind (the native set deleted and applied again, say) it
stops that informer for good: every policy then reads a frozen copy of the ConfigMap until the API server restarts
(measured here: a reinstalled set packed jobs by another cluster's topology; kubernetes/kubernetes#130887, fix in
review as #141015). A CRD paramKind gets an informer of its own each time.

- ``synced``: present once the server has written the nodes' facts (a policy that finds no ``synced`` acts as the
  webhook does with no node watch, which is: it leaves placement alone);
- ``models``: the catalog model each name of the model index stands for (`Rules.find_model`'s first two
  lookups: the name as written, then with or without ``nvidia-``), for the names a plain key can hold, as one
  string ``,name=model,name=model,`` (one string, not a key per name: the API server converts the parameter for
  every policy it dispatches, and its cost grows with the number of keys; a substring search costs next to none);
- ``pack.<model>`` and ``pack`` (every GPU node): the levels a multi-node job may be packed by, narrowest first, as
  ``key=GPUs of its largest domain`` joined by commas (`placement.pack_candidates`);
- ``spread.<model>`` and ``spread``: the topology keys the classes spread over that have at least two values among
  the model's nodes (the webhook spreads over no other key);
- ``tolerate.<model>`` and ``tolerate``: the tolerations of the GPU taints the model's nodes carry
  (`placement.target_tolerations`), each as ``key|operator|value|effect``, joined by commas;
- ``card.<model>``: what validation reads of each model a node of the cluster has, as ``memory bytes|GPUs per
  node|vendor|interconnect``, so a policy can tell that the webhook would find nothing to say of a pod
  (`webhook.generate.native_record`; a model no node has is the webhook's to warn of).

Pure: the same rules give the same data, so two replicas that see the same nodes write the same object.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from webhook.core import placement
from webhook.core.rules import Rules

NAME = "ai-admission-cluster-facts"
GROUP, VERSION, KIND, PLURAL = "ai-admission.io", "v1alpha1", "ClusterFacts", "clusterfacts"
SYNCED = "synced"
MODELS, PACK, SPREAD, TOLERATE, CARD = "models", "pack", "spread", "tolerate", "card."
_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # keys as a ConfigMap's: plain to read and to look up
_NAME = re.compile(r"^[-._a-zA-Z0-9]{1,240}$")  # a name of the model index: no "," nor "=" (its separators)


def target_key(prefix: str, model: str) -> str:
    """``pack.<model>``, or ``pack`` for every GPU node (`placement.ALL_MODELS`)."""
    return f"{prefix}.{model}" if model != placement.ALL_MODELS else prefix


def spread_keys(rules: Rules) -> list[str]:
    """Every topology key a class spreads its replicas over."""
    return sorted({key for settings in rules.classes.values() if settings.mutate.topology_spread is not None
                   for key in settings.mutate.topology_spread.topology_keys})


def toleration_text(toleration: Mapping[str, Any]) -> str:
    """``key|operator|value|effect``: taint keys, values and effects hold neither ``|`` nor ``,``."""
    return "|".join(str(toleration.get(field) or "") for field in ("key", "operator", "value", "effect"))


def card_text(memory: Any, gpus_per_node: int, vendor: str, interconnect: str) -> str:
    """``memory bytes|GPUs per node|vendor|interconnect``: none of them holds ``|``."""
    return f"{int(memory)}|{gpus_per_node}|{vendor}|{interconnect}"


def facts_data(rules: Rules) -> dict[str, str]:
    """The object's data for the rules in force; empty when the cluster's nodes are not known."""
    if rules.nodes is None:
        return {}
    data = {SYNCED: "true"}
    names = {key: model.name for key, model in rules.model_index.items()}
    for key in list(names):  # find_model's second lookup: the name with or without nvidia-
        other = key[len("nvidia-"):] if key.startswith("nvidia-") else "nvidia-" + key
        names.setdefault(other, names[key])
    index = [f"{key}={name}" for key, name in sorted(names.items())
             if _NAME.match(key) and _KEY.match(target_key(PACK, name))]
    data[MODELS] = "," + ",".join(index) + ","
    for name, card in sorted(rules.catalog.items()):
        if name in rules.nodes.present and _KEY.match(CARD + name):
            data[CARD + name] = card_text(card.memory, card.gpus_per_node, card.vendor, card.interconnect)
    spread = spread_keys(rules)
    for model, target in sorted(rules.nodes.placement.items()):
        if not _KEY.match(target_key(PACK, model)):
            continue
        data[target_key(PACK, model)] = ",".join(f"{level.key}={level.largest}"
                                                 for level in placement.pack_candidates(target))
        data[target_key(SPREAD, model)] = ",".join(key for key in spread if target.distinct.get(key, 0) >= 2)
        tolerations = [toleration_text(t) for t in placement.target_tolerations(target, rules)]
        data[target_key(TOLERATE, model)] = ",".join(dict.fromkeys(tolerations))  # each once, as the webhook adds it
    return data


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition of the parameter: one map of strings."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}", "labels": {"app.kubernetes.io/name": "ai-admission"}},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": PLURAL},
                 "versions": [{"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object",
                     "description": "What ai-admission's server learns from the nodes (topology levels, spread keys, "
                                    "GPU taints, the model index), for the native MutatingAdmissionPolicies. "
                                    "Written by the server; not for editing.",
                     "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}}}}}}]}}


def param(namespace: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    """The parameter object itself, as the server writes it."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": NAME, "namespace": namespace, "labels": {"app.kubernetes.io/name": "ai-admission"}},
            "data": dict(data or {})}
