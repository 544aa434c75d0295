"""What the webhook learns from the nodes, as the data of one object that the native policies read as their
parameter (``paramRef``), so that placement needs no webhook either (`webhook.generate.native`).

A MutatingAdmissionPolicy cannot read Nodes; the server watches them (`webhook.cluster.nodes`), and one of its
workers (`webhook.cluster.cluster_facts`) writes this function's answer for the server's context (the rules and
the cluster's view) to the ClusterFacts object ``ai-admission-cluster-facts`` whenever it changes. The data is
what `webhook.core.placement` reads off the nodes, already worked out, so that the policies' CEL only looks it up
(a map of strings, as a ConfigMap's data):

Why a kind of our own (`crd`), not a ConfigMap: a v1.36 API server reads a built-in paramKind through its shared
informer factory, and once no binding names that paramKind (the native set deleted and applied again, say) it
stops that informer for good: every policy then reads a frozen copy of the ConfigMap until the API server restarts
(measured here: a reinstalled set packed jobs by another cluster's topology; kubernetes/kubernetes#130887, fix in
review as #141015). A CRD paramKind gets an informer of its own each time.

- ``synced``: present once the server has written the nodes' facts (a policy that finds no ``synced`` acts as the
  webhook does with no node watch, which is: it leaves placement alone);
- ``model.<name>``: the catalog model each name of the model index stands for (`Rules.find_model`'s first two
  lookups: the name as written, then with or without ``nvidia-``), for the names a plain key can hold, of the
  models a node of the cluster has (a pod that names another is one no node can run: the policy leaves it to the
  webhook): a key per name, which a policy looks up at once (the catalog's whole index as one string, searched,
  cost 120 us a pod with the API server's own CEL; the present models' names are a few dozen keys, and the API
  server's conversion of the parameter for each activation grows little with them);
- ``pack.<model>`` and ``pack`` (every GPU node): the levels a multi-node job may be packed by, narrowest first, as
  ``key=GPUs of its largest domain`` joined by commas (`placement.pack_candidates`);
- ``spread.<model>`` and ``spread``: the topology keys the classes spread over that have at least two values among
  the model's nodes (the webhook spreads over no other key);
- ``tolerate.<model>`` and ``tolerate``: the tolerations of the GPU taints the model's nodes carry
  (`placement.target_tolerations`), each as ``key|operator|value|effect``, joined by commas;
- ``priorityClasses``: the state of each PriorityClass the rules set, as ``,name=state,...,`` (``as-rules``, or
  ``differs`` where the cluster's value or preemption policy is not the rules'; a class the cluster lacks is not
  listed), so the native policy writes a class only as the webhook would (`webhook.core.mutate.set_priority`), and
  judges a pod whole only where the webhook would not warn of its class; absent while the server has not checked;
- ``card.<model>``: what validation reads of each model a node of the cluster has, as ``memory bytes|GPUs per
  node|vendor|interconnect| resources of its vendor |bytes of the largest smaller device`` (`Accelerators.vendor_of`
  and `webhook.core.rightsizing.smaller.largest_smaller`, worked out here rather than in the policy's CEL: a
  memory need per GPU above the last holds in no smaller card nor MIG slice of the cluster, 0 where there is
  none), so a policy can tell that the webhook would find nothing to say of a pod
  (`webhook.generate.native_record`; a model no node has is the webhook's to warn of). The count of fields is
  the card's version: a policy reads only the one it was generated for.

Pure: the same rules give the same data, so two replicas that see the same nodes write the same object.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from webhook.core import placement
from webhook.core.rightsizing.smaller import largest_smaller
from webhook.core.view.priority_state import PriorityClassState

from ..context import Context
from .targets import ALL_MODELS

NAME = "ai-admission-cluster-facts"
GROUP, VERSION, KIND, PLURAL = "ai-admission.io", "v1alpha1", "ClusterFacts", "clusterfacts"
SYNCED = "synced"
MODEL, PACK, SPREAD, TOLERATE, CARD = "model.", "pack", "spread", "tolerate", "card."
PRIORITY_CLASSES = "priorityClasses"
AS_RULES, DIFFERS = "as-rules", "differs"
_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")  # keys as a ConfigMap's: plain to read and to look up
_NAME = re.compile(r"^[-._a-zA-Z0-9]{1,240}$")  # a name of the model index: no "," nor "=" (its separators)


def target_key(prefix: str, model: str) -> str:
    """``pack.<model>``, or ``pack`` for every GPU node (`ALL_MODELS`)."""
    return f"{prefix}.{model}" if model != ALL_MODELS else prefix


def spread_keys(ctx: Context) -> list[str]:
    """Every topology key a class spreads its replicas over."""
    return sorted({key for settings in ctx.rules.classes.values() if settings.mutate.topology_spread is not None
                   for key in settings.mutate.topology_spread.topology_keys})


def toleration_text(toleration: Mapping[str, Any]) -> str:
    """``key|operator|value|effect``: taint keys, values and effects hold neither ``|`` nor ``,``."""
    return "|".join(str(toleration.get(field) or "") for field in ("key", "operator", "value", "effect"))


def card_text(memory: Any, gpus_per_node: int, vendor: str, interconnect: str, resources: tuple[str, ...] = (),
              smaller: Any = 0) -> str:
    """``memory bytes|GPUs per node|vendor|interconnect| resources of the vendor |bytes of the largest smaller
    device``: none of them holds ``|``, and the resources are separated and surrounded by spaces (a resource name
    holds none), for a policy to find one."""
    return f"{int(memory)}|{gpus_per_node}|{vendor}|{interconnect}| {' '.join(resources)} |{int(smaller)}"


def priority_text(ctx: Context, state: PriorityClassState) -> str | None:
    """``,name=state,...,`` of the rules' PriorityClasses as the cluster has them; None while not checked."""
    if not state.checked:
        return None
    wanted = sorted({s.priority_class.name for s in ctx.rules.classes.values() if s.priority_class is not None})
    found = [f"{name}={DIFFERS if name in state.differing_priority_classes else AS_RULES}" for name in wanted
             if name not in state.missing_priority_classes]
    return "," + ",".join(found) + ","


def facts_data(ctx: Context) -> dict[str, str]:
    """The object's data for the context (the rules, the nodes and the PriorityClasses' state); empty when the
    cluster's nodes are not known."""
    nodes = ctx.nodes
    if nodes is None:
        return {}
    data = {SYNCED: "true"}
    priorities = priority_text(ctx, ctx.cluster.priority_classes)
    if priorities is not None:
        data[PRIORITY_CLASSES] = priorities
    names = {key: model.name for key, model in nodes.index.items()}
    for key in list(names):  # find_model's second lookup: the name with or without nvidia-
        other = key[len("nvidia-"):] if key.startswith("nvidia-") else "nvidia-" + key
        names.setdefault(other, names[key])
    for key, name in sorted(names.items()):
        if name in nodes.present and _KEY.match(MODEL + key) and _KEY.match(target_key(PACK, name)):
            data[MODEL + key] = name
    for name, card in sorted(ctx.catalog.items()):
        if name in nodes.present and _KEY.match(CARD + name):
            accelerators = ctx.accelerators
            resources = tuple(sorted(r for r in accelerators.gpu_resources if accelerators.vendor_of(r) == card.vendor))
            data[CARD + name] = card_text(card.memory, card.gpus_per_node, card.vendor, card.interconnect, resources,
                                          largest_smaller(ctx, card))
    spread = spread_keys(ctx)
    for model, target in sorted(nodes.placement.items()):
        if not _KEY.match(target_key(PACK, model)):
            continue
        data[target_key(PACK, model)] = ",".join(f"{level.key}={level.largest}"
                                                 for level in placement.pack_candidates(target))
        data[target_key(SPREAD, model)] = ",".join(key for key in spread if target.distinct.get(key, 0) >= 2)
        tolerations = [toleration_text(t) for t in placement.target_tolerations(target, ctx.accelerators, ctx.rules)]
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
