"""Placement in the native policies: a multi-node job packed into the narrowest topology domain that holds it, and
single-pod replicas spread over the keys their nodes have, as `webhook.core.mutate.add_topology` does, from the
nodes' facts the server writes to the policies' parameter (`webhook.core.view.cluster_facts`, read here as
``params``).

Each step of the webhook's is written once more in CEL from the same rules, and each CEL step says "I cannot
tell" (``'?'``, ``-1``) where the webhook reads something CEL cannot (a model named otherwise than by the
``ai-admission.io/gpu-model`` annotation or a nodeSelector on a model label, or a name the model index does not hold
as written; a job size summed over Volcano's per-task env; an init container asking for GPUs; an annotation the
webhook would refuse). A pod CEL cannot place as the webhook would gets no placement from the policy, and the
webhook, which runs after it and adds only what is still missing, places it:

- ``model``: the catalog model the pod names (`webhook.core.models`: the annotation first, else the first model
  label of its nodeSelector), looked up in the facts' model index; ``''`` when it names none (every GPU node);
- ``pods``: the job's pod count from its operator's env (`webhook.core.workloads.parallelism.world_of`), 0 when no
  env says (one pod, no source);
- ``multiNode``: `webhook.core.profile._multi_node` (the annotation, then the job size, then the replica type);
- ``packBy``: `webhook.core.placement.packing_key` over the facts' levels of the model's nodes;
- ``spreadKeys``: the class's spread keys the pod does not spread over yet, that its nodes have two values of.

The lists written are atomic (pod affinity) or keyed by two fields (spread constraints): both are JSON Patch
operations whose values are plain maps, never typed objects inside a list (a v1.36 API server panicked on one),
and the class policy joins them to its tolerations' into one mutation (each mutation of a policy costs the API
server a conversion of the pod and back).
"""

from __future__ import annotations

from webhook.core import names
from webhook.core.hints import FALSE_WORDS, TRUE_WORDS
from webhook.core.rules import ClassSettings, Rules
from webhook.core.view.cluster_facts import MODELS, PACK, SPREAD, SYNCED, TOLERATE

from .backstop import PER_ACCELERATOR, missing_tolerations, without_bind
from .match_conditions import cel_string

UNKNOWN = "'?'"  # a model CEL cannot name as the webhook does


def places(settings: ClassSettings) -> bool:
    """The class packs jobs or spreads replicas."""
    return settings.mutate.pod_affinity is not None or settings.mutate.topology_spread is not None


def fact_variables(rules: Rules) -> list[dict[str, str]]:
    """``facts`` (the parameter's data), ``synced`` (the server wrote the nodes' facts), ``model``."""
    return _unbound([{"name": "facts", "expression": "params.?data.orValue({})"},
                     {"name": "synced", "expression": f"{cel_string(SYNCED)} in variables.facts"},
                     {"name": "model", "expression": _model(rules)}])


def toleration_variables(rules: Rules) -> list[dict[str, str]]:
    """``missing``: the tolerations the pod lacks (`webhook.core.mutate.add_tolerations`). With the nodes' facts,
    those of the taints its model's nodes carry (a pod CEL cannot read as the webhook does: none, the webhook adds
    them); with none, one ``Exists`` per accelerator it asks for, as the webhook does with no node watch."""
    from_facts = (f"(variables.countable && variables.model != '?' ? {_target(TOLERATE)}.split(',')"
                  ".filter(t, t != '').map(t, t.split('|')) : [])")
    return _unbound([{"name": "missing",
                      "expression": missing_tolerations(f"variables.synced ? {from_facts} : {PER_ACCELERATOR}")}])


def _unbound(variables: list[dict[str, str]]) -> list[dict[str, str]]:
    """The variables as the admission environment takes them (`backstop.without_bind`)."""
    return [{**v, "expression": without_bind(v["expression"])} for v in variables]


def _listed(texts: tuple[str, ...] | list[str]) -> str:
    """A CEL list in the rules' own order (the first match wins)."""
    return "[" + ", ".join(cel_string(t) for t in texts) + "]"


def _normalized(text: str) -> str:
    """`normalize_model_name` in CEL."""
    return f"{text}.trim().lowerAscii().replace('_', '-')"


def _model(rules: Rules) -> str:
    """`webhook.core.profile._choose_model` where CEL can follow it, else ``'?'``."""
    facts = "variables.facts"
    # the index is one string ",name=model,...,": the name between a comma and "=", its model up to the next comma
    index = f"{facts}[?{cel_string(MODELS)}].orValue('')"
    lookup = (f"cel.bind(mn, {_normalized('mv')}, mn.contains(',') || mn.contains('=') ? {UNKNOWN} : "
              f"cel.bind(mx, ',' + mn + '=', cel.bind(mi, {index}, mi.contains(mx) ? "
              f"cel.bind(mr, mi.substring(mi.indexOf(mx) + size(mx)), mr.substring(0, mr.indexOf(','))) : {UNKNOWN})))")
    selector = "object.spec.?nodeSelector.orValue({})"
    other_keys = [*rules.instance_type_keys, *([rules.gpu_name_labels.name_key] if rules.gpu_name_labels else [])]
    unreadable = [f"{_listed(other_keys)}.exists(k, sl[?k].orValue('') != '')" if other_keys else "false",
                  f"{_listed(list(rules.node_selector_annotations))}.exists(a, a in an)"
                  if rules.node_selector_annotations else "false",
                  f"{_listed(list(rules.model_annotations))}.exists(a, an[?a].orValue('').trim() != '')"
                  if rules.model_annotations else "false",
                  "size(object.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
                  ".?nodeSelectorTerms.orValue([])) > 0"]
    return (f"cel.bind(an, object.metadata.?annotations.orValue({{}}), "
            f"cel.bind(mv, an[?{cel_string(names.GPU_MODEL)}].orValue('').trim(), mv != '' ? {lookup} : "
            f"cel.bind(sl, {selector}, cel.bind(mk, {_listed(rules.model_keys)}.filter(k, sl[?k].orValue('') != ''), "
            f"size(mk) > 0 ? cel.bind(mv, sl[mk[0]], {lookup}) : "
            f"({' || '.join(unreadable)}) ? {UNKNOWN} : ''))))")


def _count(value: str) -> str:
    """`parallelism._count`: "64" or "min:max" (the max), a positive whole number; 0 for none."""
    return (f"cel.bind(ct, {value}.trim(), cel.bind(cd, ct.contains(':') ? ct.substring(ct.lastIndexOf(':') + 1) : ct, "
            f"cd.matches('^[0-9]{{1,9}}$') && int(cd) > 0 ? int(cd) : 0))")


def _env(name: str) -> str:
    """The value of ``name`` in the app containers' merged env (`podview.pod_env`: the first container that sets
    it, the last entry of that container's), ``''`` when unset or set from a reference."""
    holders = f"object.spec.containers.filter(c, c.?env.orValue([]).exists(e, e.name == {cel_string(name)}))"
    last = f"cel.bind(es, hs[0].env.filter(e, e.name == {cel_string(name)}), es[size(es) - 1].?value.orValue(''))"
    return f"cel.bind(hs, {holders}, size(hs) > 0 ? {last} : '')"


def _pods(rules: Rules) -> str:
    """`parallelism.world_of`: the job's pods (0: no env says, one pod); -1 where only Volcano's sum would say."""
    world = rules.world
    found = "0"
    pattern = world.nodes_env_sum_pattern
    if pattern is not None:
        summed = (f"object.spec.containers.exists(c, c.?env.orValue([]).exists(e, "
                  f"e.name.matches({cel_string(pattern.pattern)})))")
        found = f"({summed} ? -1 : 0)"
    if world.processes_env:
        per_node = _count(_env(world.processes_per_node_env)) if world.processes_per_node_env else "0"
        found = (f"cel.bind(wp, {_count(_env(world.processes_env))}, wp > 0 ? "
                 f"cel.bind(wq, {per_node}, wq > 0 && wp % wq == 0 ? wp / wq : wp) : {found})")
    for name in reversed(world.nodes_env):
        found = f"cel.bind(wn, {_count(_env(name))}, wn > 0 ? wn : {found})"
    return found


def _multi_node(rules: Rules, workload: str) -> str:
    """`profile._multi_node`: 1, 0, or -1 where CEL cannot tell (an annotation the webhook refuses, an unknown
    job size)."""
    note = f"object.metadata.?annotations[?{cel_string(names.MULTI_NODE)}]"
    replica = ("false" if workload != "training" or not rules.multi_node_replica_types else
               f"object.metadata.?labels[?'training.kubeflow.org/replica-type'].orValue('').lowerAscii() in "
               f"{_listed(sorted(rules.multi_node_replica_types))}")
    by_shape = f"variables.pods > 1 ? 1 : variables.pods < 0 ? -1 : {replica} ? 1 : 0"
    return (f"{note}.hasValue() ? cel.bind(mn, {note}.value().trim().lowerAscii(), "
            f"mn in {_listed(sorted(TRUE_WORDS))} ? 1 : mn in {_listed(sorted(FALSE_WORDS))} ? 0 : -1) : ({by_shape})")


def _target(prefix: str) -> str:
    """The facts of the pod's nodes (`placement.target_of`: the model's, else every GPU node's)."""
    every = f"variables.facts[?{cel_string(prefix)}]"
    return (f"(variables.model != '' ? variables.facts[?({cel_string(prefix + '.')} + variables.model)]"
            f".orValue({every}.orValue('')) : {every}.orValue(''))")


def _job_label(rules: Rules) -> str:
    """`mutate._Context.job_label`: the first of the rules' job labels the pod carries, as [key, value]."""
    return (f"cel.bind(lb, object.metadata.?labels.orValue({{}}), cel.bind(jl, "
            f"{_listed(rules.mutation.job_labels)}.filter(k, lb[?k].orValue('') != ''), "
            f"size(jl) > 0 ? [jl[0], lb[jl[0]]] : []))")


def _app_label(rules: Rules) -> str:
    """The first of the rules' app labels the pod carries, as [key, value] (what a spread selects by)."""
    return (f"cel.bind(lb, object.metadata.?labels.orValue({{}}), cel.bind(al, "
            f"{_listed(rules.mutation.app_labels)}.filter(k, lb[?k].orValue('') != ''), "
            f"size(al) > 0 ? [al[0], lb[al[0]]] : []))")


def job_variables(rules: Rules, workload: str) -> list[dict[str, str]]:
    """``pods`` and ``multiNode``: the job's size and whether the pod is one of several."""
    return _unbound([{"name": "pods", "expression": _pods(rules)},
                     {"name": "multiNode", "expression": _multi_node(rules, workload)}])


def placement_variables(rules: Rules, workload: str, settings: ClassSettings) -> list[dict[str, str]]:
    """The variables the placement mutations read (`placement_mutations`); none for a class that places nothing.
    ``variables.countable``, ``appGpus``/``initGpus`` and the `fact_variables` come from the class policy."""
    if not places(settings):
        return []
    plan = settings.mutate
    found = job_variables(rules, workload)
    if plan.pod_affinity is not None:
        # the job's GPUs: one pod's (app containers and sidecars; an init container asking for GPUs: not here)
        gpus = "cel.bind(gi, variables.initGpus, size(gi) == 0 || gi.all(g, g == 0)) ? variables.appGpus.sum() : -1"
        job = ("(variables.podGpus > 1 ? variables.podGpus : 1) * "
               "(variables.pods > 2 ? variables.pods : 2)")
        levels = (f"{_target(PACK)}.split(',').filter(l, l.contains('=')).map(l, "
                  f"[dyn(l.substring(0, l.lastIndexOf('='))), dyn(int(l.substring(l.lastIndexOf('=') + 1)))])")
        fixed = plan.pod_affinity.topology_key
        if fixed:  # the rules' key, where the nodes carry it (with no facts, as the webhook with no node watch: as is)
            key = (f"!variables.synced ? {cel_string(fixed)} : "
                   f"cel.bind(lv, {levels}, lv.exists(l, l[0] == {cel_string(fixed)}) ? {cel_string(fixed)} : '')")
        else:  # the narrowest level whose largest domain holds the job's GPUs (with no facts: none)
            key = f"!variables.synced ? '' : cel.bind(lv, {levels}.filter(l, l[1] >= {job}), size(lv) > 0 ? lv[0][0] : '')"
        found += [
            {"name": "podGpus", "expression": gpus},
            {"name": "jobLabel", "expression": _job_label(rules)},
            # where the webhook packs: only a pod of a job of several (not one its operator says is alone), whose
            # model, size and GPUs CEL can read; the key by the nodes' levels
            {"name": "packBy",
             "expression": "variables.countable && (!variables.synced || variables.model != '?') && "
                           "variables.multiNode == 1 && variables.pods != 1 && variables.pods >= 0 && "
                           f"variables.podGpus >= 0 && size(variables.jobLabel) == 2 ? ({key}) : ''"},
        ]
    if plan.topology_spread is not None:
        spread = plan.topology_spread
        allowed = f"{_target(SPREAD)}.split(',')"
        present = "object.spec.?topologySpreadConstraints.orValue([]).map(t, t.topologyKey)"
        found += [
            {"name": "appLabel", "expression": _app_label(rules)},
            # with no facts the webhook knows no nodes and spreads over every key; with them, over the keys the
            # pod's nodes have two values of
            {"name": "spreadKeys",
             "expression": f"variables.countable && variables.multiNode == 0 && size(variables.appLabel) == 2 && "
                           f"(!variables.synced || variables.model != '?') ? "
                           f"cel.bind(pk, {present}, cel.bind(ok, variables.synced ? {allowed} : [], "
                           f"{_listed(spread.topology_keys)}.filter(k, !(k in pk) && (!variables.synced || k in ok))))"
                           f" : []"},
        ]
    return _unbound(found)


def plain_map(**fields: str) -> str:
    """A CEL map of JSON values (each ``dyn``: a map literal's values must otherwise be of one type)."""
    return "{" + ", ".join(f"{cel_string(key)}: dyn({value})" for key, value in fields.items()) + "}"


def _term() -> str:
    return plain_map(labelSelector="{'matchLabels': {variables.jobLabel[0]: variables.jobLabel[1]}}",
                   topologyKey="variables.packBy")


def _same_term(term: str) -> str:
    """``term`` (a pod's) is the one the webhook would add (compared field by field: the webhook compares whole)."""
    return (f"{term}.?topologyKey.orValue('') == variables.packBy && "
            f"{term}.?labelSelector.?matchLabels.orValue({{}}) == {{variables.jobLabel[0]: variables.jobLabel[1]}} && "
            f"!has({term}.labelSelector.matchExpressions) && !has({term}.namespaces) && "
            f"!has({term}.namespaceSelector) && !has({term}.matchLabelKeys) && !has({term}.mismatchLabelKeys)")


def placement_patches(rules: Rules, settings: ClassSettings) -> list[str]:
    """The JSON Patch expressions of the class's placement (each a list of operations): the pod-affinity term,
    then the spread constraints."""
    plan = settings.mutate
    found: list[str] = []
    if plan.pod_affinity is not None:
        affinity = plan.pod_affinity
        field = ("requiredDuringSchedulingIgnoredDuringExecution" if affinity.required
                 else "preferredDuringSchedulingIgnoredDuringExecution")
        entry = _term() if affinity.required else plain_map(weight=str(affinity.weight), podAffinityTerm=_term())
        listed = f"object.spec.affinity.podAffinity.{field}"
        there = (f"{listed}.exists(t, {_same_term('t')})" if affinity.required
                 else f"{listed}.exists(p, has(p.podAffinityTerm) && {_same_term('p.podAffinityTerm')})")
        path = "/spec/affinity"

        def add(where: str, value: str) -> str:
            return f"[JSONPatch{{op: 'add', path: {cel_string(where)}, value: {value}}}]"

        in_list = f"{{{cel_string(field)}: [{entry}]}}"
        in_affinity = f"{{'podAffinity': {in_list}}}"
        expression = (f"variables.packBy == '' ? [] : "
                      f"!has(object.spec.affinity) ? {add(path, in_affinity)} : "
                      f"!has(object.spec.affinity.podAffinity) ? {add(path + '/podAffinity', in_list)} : "
                      f"!has({listed}) ? {add(f'{path}/podAffinity/{field}', f'[{entry}]')} : "
                      f"{there} ? [] : {add(f'{path}/podAffinity/{field}/-', entry)}")
        found.append(expression)
    if plan.topology_spread is not None:
        spread = plan.topology_spread
        constraint = plain_map(maxSkew=str(spread.max_skew), topologyKey="k",
                             whenUnsatisfiable=cel_string(spread.when_unsatisfiable),
                             labelSelector="{'matchLabels': {variables.appLabel[0]: variables.appLabel[1]}}")
        expression = (f"size(variables.spreadKeys) == 0 ? [] : has(object.spec.topologySpreadConstraints) ? "
                      f"variables.spreadKeys.map(k, JSONPatch{{op: 'add', path: '/spec/topologySpreadConstraints/-', "
                      f"value: {constraint}}}) : [JSONPatch{{op: 'add', path: '/spec/topologySpreadConstraints', "
                      f"value: variables.spreadKeys.map(k, {constraint})}}]")
        found.append(expression)
    return [without_bind(patch) for patch in found]
