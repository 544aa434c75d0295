"""The job a pod is one of, as the webhook reads it: its size (`webhook.core.workloads.parallelism.world_of`),
whether it is multi-node (`webhook.core.profile._multi_node`), the labels that name its job or its app, and the
facts of the nodes it runs on (`webhook.core.placement.target_of`). Each says "cannot tell" (``-1``) where the
webhook reads something CEL cannot.
"""

from __future__ import annotations

from webhook.core import names
from webhook.core.hints import FALSE_WORDS, TRUE_WORDS
from webhook.core.rules import Rules

from .text import cel_string, listed


def count(value: str) -> str:
    """`parallelism._count`: "64" or "min:max" (the max), a positive whole number; 0 for none."""
    return (f"cel.bind(ct, {value}.trim(), cel.bind(cd, ct.contains(':') ? ct.substring(ct.lastIndexOf(':') + 1) : ct, "
            f"cd.matches('^[0-9]{{1,9}}$') && int(cd) > 0 ? int(cd) : 0))")


ENTRIES = "ws"  # each app container's env entries of the names the job's size is read from


def env_value(name: str) -> str:
    """The value of ``name`` in the app containers' merged env (`podview.pod_env`: the first container that sets
    it, the last entry of that container's), ``''`` when unset or set from a reference; read from `ENTRIES`."""
    holders = f"{ENTRIES}.filter(l, l.exists(e, e.name == {cel_string(name)}))"
    last = f"cel.bind(es, hs[0].filter(e, e.name == {cel_string(name)}), es[size(es) - 1].?value.orValue(''))"
    return f"cel.bind(hs, {holders}, size(hs) > 0 ? {last} : '')"


def _entries(rules: Rules) -> str:
    """`ENTRIES`: each app container's env entries the job's size may be read from (most pods have none)."""
    world = rules.world
    names = [*world.nodes_env, *([world.processes_env] if world.processes_env else []),
             *([world.processes_per_node_env] if world.processes_per_node_env else [])]
    test = f"e.name in {listed(names)}"
    if world.nodes_env_sum_pattern is not None:
        test += f" || e.name.matches({cel_string(world.nodes_env_sum_pattern.pattern)})"
    return f"object.spec.containers.map(c, c.?env.orValue([]).filter(e, {test}))"


def pods(rules: Rules) -> str:
    """`parallelism.world_of`: the job's pods (0: no env says, one pod); -1 where only Volcano's sum would say."""
    world = rules.world
    found = "0"
    pattern = world.nodes_env_sum_pattern
    if pattern is not None:
        summed = f"{ENTRIES}.exists(l, l.exists(e, e.name.matches({cel_string(pattern.pattern)})))"
        found = f"({summed} ? -1 : 0)"
    if world.processes_env:
        per_node = count(env_value(world.processes_per_node_env)) if world.processes_per_node_env else "0"
        found = (f"cel.bind(wp, {count(env_value(world.processes_env))}, wp > 0 ? "
                 f"cel.bind(wq, {per_node}, wq > 0 && wp % wq == 0 ? wp / wq : wp) : {found})")
    for name in reversed(world.nodes_env):
        found = f"cel.bind(wn, {count(env_value(name))}, wn > 0 ? wn : {found})"
    return f"cel.bind({ENTRIES}, {_entries(rules)}, {ENTRIES}.all(l, size(l) == 0) ? 0 : {found})"


def replica_multi_node(rules: Rules) -> str:
    """The pod's replica type is one of the rules' multi-node replica types (a training pod's shape)."""
    if not rules.multi_node_replica_types:
        return "false"
    return (f"object.metadata.?labels[?'training.kubeflow.org/replica-type'].orValue('').lowerAscii() in "
            f"{listed(sorted(rules.multi_node_replica_types))}")


def multi_node(rules: Rules, replica: str, pods: str = "variables.pods") -> str:
    """`profile._multi_node`: 1, 0, or -1 where CEL cannot tell (an annotation the webhook refuses, an unknown job
    size). ``replica``: whether the replica type counts (training's shape), a CEL bool."""
    note = f"object.metadata.?annotations[?{cel_string(names.MULTI_NODE)}]"
    by_shape = f"{pods} > 1 ? 1 : {pods} < 0 ? -1 : {replica} ? 1 : 0"
    return (f"{note}.hasValue() ? cel.bind(mn, {note}.value().trim().lowerAscii(), "
            f"mn in {listed(sorted(TRUE_WORDS))} ? 1 : mn in {listed(sorted(FALSE_WORDS))} ? 0 : -1) : ({by_shape})")


def first_label(keys: tuple[str, ...] | list[str]) -> str:
    """The first of ``keys`` the pod carries as a label with a value, as [key, value] (``[]``: none)."""
    return (f"cel.bind(lb, object.metadata.?labels.orValue({{}}), cel.bind(jl, "
            f"{listed(keys)}.filter(k, lb[?k].orValue('') != ''), "
            f"size(jl) > 0 ? [jl[0], lb[jl[0]]] : []))")


def job_label(rules: Rules) -> str:
    """`mutate._Context.job_label`: the first of the rules' job labels the pod carries."""
    return first_label(rules.mutation.job_labels)


def app_label(rules: Rules) -> str:
    """The first of the rules' app labels the pod carries (what a spread selects by)."""
    return first_label(rules.mutation.app_labels)


def target(prefix: str, model: str = "variables.model", facts: str = "variables.facts") -> str:
    """The facts of the pod's nodes (`placement.target_of`: the model's, else every GPU node's)."""
    every = f"{facts}[?{cel_string(prefix)}]"
    return (f"({model} != '' ? {facts}[?({cel_string(prefix + '.')} + {model})]"
            f".orValue({every}.orValue('')) : {every}.orValue(''))")
