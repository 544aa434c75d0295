"""Placement in the native policy: a multi-node job packed into the narrowest topology domain that holds it, and
single-pod replicas spread over the keys their nodes have, as `webhook.core.mutate.add_topology` does, from the
nodes' facts the server writes to the policy's parameter (`webhook.core.view.cluster_facts`, read as ``params``).

The facts say what depends on the nodes, already worked out (`webhook.core.placement`): each model's packing levels
and the spread keys its nodes have two values of. The policy reads the pod (its model, the job's size, its labels:
`webhook.generate.cel.model`, `.job`) and looks the answer up; it says "I cannot tell" (``'?'``, ``-1``) where the
webhook reads something CEL cannot, and then places nothing: the webhook, which runs after it and adds only what
is still missing, places the pod.

Each class's settings are a CEL map keyed by the class (`variables.cls`), so one policy places the pods of every
class; a class that places nothing is not in the maps.
"""

from __future__ import annotations

from typing import Mapping

from webhook.core.rules import ClassSettings, Rules
from webhook.core.view.cluster_facts import PACK, SPREAD, SYNCED, TOLERATE

from .cel import job
from .cel.model import model_of, present_model_keys
from .cel.text import add, cel_list, cel_string, listed, plain_map, unbound, without_bind
from .cel.tolerations import PER_ACCELERATOR, missing_tolerations

PACKS, SPREADS = "variables.packing", "variables.spreading"


def packing_classes(classes: Mapping[str, ClassSettings]) -> dict[str, ClassSettings]:
    return {w: s for w, s in classes.items() if s.mutate.pod_affinity is not None}


def spreading_classes(classes: Mapping[str, ClassSettings]) -> dict[str, ClassSettings]:
    return {w: s for w, s in classes.items() if s.mutate.topology_spread is not None}


def places(classes: Mapping[str, ClassSettings]) -> bool:
    """Some class packs jobs or spreads replicas."""
    return bool(packing_classes(classes) or spreading_classes(classes))


def fact_variables(rules: Rules) -> list[dict[str, str]]:
    """``facts`` (the parameter's data), ``synced`` (the server wrote the nodes' facts), ``modelKeys`` (the model
    labels the nodeSelector gives a value), ``model``."""
    return unbound([{"name": "facts", "expression": "params.?data.orValue({})"},
                    {"name": "synced", "expression": f"{cel_string(SYNCED)} in variables.facts"},
                    {"name": "modelKeys", "expression": present_model_keys(rules)},
                    {"name": "model", "expression": model_of(rules, keys="variables.modelKeys")}])


def toleration_variables(classes: Mapping[str, ClassSettings]) -> list[dict[str, str]]:
    """``missing``: the tolerations the pod lacks (`webhook.core.mutate.add_tolerations`). With the nodes' facts,
    those of the taints its model's nodes carry (a pod CEL cannot read as the webhook does: none, the webhook adds
    them); with none, one ``Exists`` per accelerator it asks for, as the webhook does with no node watch. A pod of
    no class that asks for no GPU is none of the webhook's business: none."""
    from_facts = (f"(variables.countable && variables.model != '?' ? {job.target(TOLERATE)}.split(',')"
                  ".filter(t, t != '').map(t, t.split('|')) : [])")
    business = f"(variables.cls in {cel_list(classes)} || size(variables.asked) > 0)"
    return unbound([{"name": "missing",
                     "expression": f"!{business} ? [] : "
                                   + missing_tolerations(f"variables.synced ? {from_facts} : {PER_ACCELERATOR}")}])


def job_variables(rules: Rules) -> list[dict[str, str]]:
    """``pods`` and ``multiNode``: the job's size and whether the pod is one of several (the replica type counts
    for training, as `webhook.core.profile._multi_node` has it)."""
    replica = job.replica_multi_node(rules)
    replica = f"(variables.cls == 'training' && {replica})" if replica != "false" else "false"
    # the env says the job's size only of a pod that asks for GPUs (`webhook.core.profile.build_profile`)
    return unbound([{"name": "pods", "expression": f"size(variables.counted) > 0 ? {job.pods(rules)} : 0"},
                    {"name": "multiNode", "expression": job.multi_node(rules, replica)}])


def placement_variables(rules: Rules, classes: Mapping[str, ClassSettings]) -> list[dict[str, str]]:
    """The variables the placement patches read; none where no class places. ``variables.countable``,
    ``appGpus``/``initGpus``, ``cls`` and the `fact_variables` come from the policy."""
    packing, spreading = packing_classes(classes), spreading_classes(classes)
    found: list[dict[str, str]] = job_variables(rules) if packing or spreading else []
    if packing:
        # per class: [required, weight, the rules' fixed key ('' : the nodes' narrowest level)]
        settings = "{" + ", ".join(
            f"{cel_string(w)}: [dyn({str(a.required).lower()}), dyn({a.weight}), dyn({cel_string(a.topology_key or '')})]"
            for w, s in sorted(packing.items()) if (a := s.mutate.pod_affinity) is not None) + "}"
        # the job's GPUs: one pod's (app containers and sidecars; an init container asking for GPUs: not here)
        gpus = "cel.bind(gi, variables.initGpus, size(gi) == 0 || gi.all(g, g == 0)) ? variables.appGpus.sum() : -1"
        wanted = "(variables.podGpus > 1 ? variables.podGpus : 1) * (variables.pods > 2 ? variables.pods : 2)"
        levels = (f"{job.target(PACK)}.split(',').filter(l, l.contains('=')).map(l, "
                  f"[dyn(l.substring(0, l.lastIndexOf('='))), dyn(int(l.substring(l.lastIndexOf('=') + 1)))])")
        # the rules' key where the nodes carry it (with no facts, as the webhook with no node watch: as is); else
        # the narrowest level whose largest domain holds the job's GPUs (with no facts: none)
        key = (f"cel.bind(fk, string({PACKS}[2]), fk != '' ? (!variables.synced ? fk : "
               f"cel.bind(lv, {levels}, lv.exists(l, l[0] == fk) ? fk : '')) : "
               f"(!variables.synced ? '' : cel.bind(lv, {levels}.filter(l, l[1] >= {wanted}), "
               f"size(lv) > 0 ? lv[0][0] : '')))")
        found += [
            {"name": "packing", "expression": f"{settings}[?variables.cls].orValue([])"},
            {"name": "podGpus", "expression": gpus},
            {"name": "jobLabel", "expression": job.job_label(rules)},
            # where the webhook packs: only a pod of a job of several (not one its operator says is alone), whose
            # model, size and GPUs CEL can read; the key by the nodes' levels
            {"name": "packBy",
             "expression": f"size({PACKS}) == 3 && variables.countable && (!variables.synced || variables.model != '?') && "
                           "variables.multiNode == 1 && variables.pods != 1 && variables.pods >= 0 && "
                           f"variables.podGpus >= 0 && size(variables.jobLabel) == 2 ? ({key}) : ''"},
        ]
    if spreading:
        settings = "{" + ", ".join(
            f"{cel_string(w)}: [dyn({listed(t.topology_keys)}), dyn({t.max_skew}), dyn({cel_string(t.when_unsatisfiable)})]"
            for w, s in sorted(spreading.items()) if (t := s.mutate.topology_spread) is not None) + "}"
        allowed = f"{job.target(SPREAD)}.split(',')"
        present = "object.spec.?topologySpreadConstraints.orValue([]).map(t, t.topologyKey)"
        found += [
            {"name": "spreading", "expression": f"{settings}[?variables.cls].orValue([])"},
            {"name": "appLabel", "expression": job.app_label(rules)},
            # with no facts the webhook knows no nodes and spreads over every key; with them, over the keys the
            # pod's nodes have two values of
            {"name": "spreadKeys",
             "expression": f"size({SPREADS}) == 3 && variables.countable && variables.multiNode == 0 && "
                           f"size(variables.appLabel) == 2 && (!variables.synced || variables.model != '?') ? "
                           f"cel.bind(pk, {present}, cel.bind(ok, variables.synced ? {allowed} : [], "
                           f"{SPREADS}[0].filter(k, !(k in pk) && (!variables.synced || k in ok)))) : []"},
        ]
    return unbound(found)


def _term() -> str:
    return plain_map(labelSelector="{'matchLabels': {variables.jobLabel[0]: variables.jobLabel[1]}}",
                     topologyKey="variables.packBy")


def _same_term(term: str) -> str:
    """``term`` (a pod's) is the one the webhook would add (compared field by field: the webhook compares whole)."""
    return (f"{term}.?topologyKey.orValue('') == variables.packBy && "
            f"{term}.?labelSelector.?matchLabels.orValue({{}}) == {{variables.jobLabel[0]: variables.jobLabel[1]}} && "
            f"!has({term}.labelSelector.matchExpressions) && !has({term}.namespaces) && "
            f"!has({term}.namespaceSelector) && !has({term}.matchLabelKeys) && !has({term}.mismatchLabelKeys)")


REQUIRED, PREFERRED = "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"


def placement_patches(classes: Mapping[str, ClassSettings]) -> list[str]:
    """The JSON Patch expressions of placement (each a list of operations): the pod-affinity term, then the spread
    constraints."""
    found: list[str] = []
    packing, spreading = packing_classes(classes), spreading_classes(classes)
    if packing:
        required = f"{PACKS}[0] == true"
        preferred = plain_map(weight=f"{PACKS}[1]", podAffinityTerm=_term())
        entry = f"({required} ? dyn({_term()}) : dyn({preferred}))"
        field = f"({required} ? {cel_string(REQUIRED)} : {cel_string(PREFERRED)})"
        listed_terms = f"({required} ? object.spec.affinity.podAffinity.?{REQUIRED}.orValue([]) : " \
                       f"object.spec.affinity.podAffinity.?{PREFERRED}.orValue([]))"
        there = (f"({required} ? {listed_terms}.exists(t, {_same_term('t')}) : "
                 f"{listed_terms}.exists(p, has(p.podAffinityTerm) && {_same_term('p.podAffinityTerm')}))")
        path = "'/spec/affinity'"
        has_list = (f"({required} ? has(object.spec.affinity.podAffinity.{REQUIRED}) : "
                    f"has(object.spec.affinity.podAffinity.{PREFERRED}))")
        in_list = f"{{{field}: [{entry}]}}"
        in_affinity = f"{{'podAffinity': {in_list}}}"
        at_list = f"'/spec/affinity/podAffinity/' + {field}"
        expression = (f"variables.packBy == '' ? [] : "
                      f"!has(object.spec.affinity) ? [{add(path, in_affinity)}] : "
                      f"!has(object.spec.affinity.podAffinity) ? [{add(cel_string('/spec/affinity/podAffinity'), in_list)}] : "
                      f"!{has_list} ? [{add(at_list, f'[{entry}]')}] : "
                      f"{there} ? [] : [{add(at_list + ' + ' + cel_string('/-'), entry)}]")
        found.append(expression)
    if spreading:
        constraint = plain_map(maxSkew=f"{SPREADS}[1]", topologyKey="k", whenUnsatisfiable=f"{SPREADS}[2]",
                               labelSelector="{'matchLabels': {variables.appLabel[0]: variables.appLabel[1]}}")
        expression = (f"size(variables.spreadKeys) == 0 ? [] : has(object.spec.topologySpreadConstraints) ? "
                      f"variables.spreadKeys.map(k, {add(cel_string('/spec/topologySpreadConstraints/-'), constraint)}) : "
                      f"[{add(cel_string('/spec/topologySpreadConstraints'), f'variables.spreadKeys.map(k, {constraint})')}]")
        found.append(expression)
    return [without_bind(patch) for patch in found]
