"""How far a pod's work is spread: over how many pods (the job's world size), over how many of its cards one
model is split (tensor parallelism), whether the pod says it uses every card on purpose, and how many cards a
model needs (the sizes tensor parallelism takes).

All change what a pod needs. A 405B model does not fit the 8 cards of one pod, but a 64-pod job shards it over
512 cards; so the memory need of a distributed job is spread over all its GPUs, and the world size is read from
where the operators write it: the env they inject (torchrun's ``PET_NNODES``, ``WORLD_SIZE`` with
``PET_NPROC_PER_NODE``, LeaderWorkerSet's group size, Volcano's task sizes), else from the launcher's own count on
the command line (torchrun ``--nnodes``), or, for a controller's template, the
replica counts (see `webhook.core.workloads.templates`). Tensor parallelism is what makes PCIe cards slow: only a pod that says it
splits one model over its cards (vLLM's ``--tensor-parallel-size``, an env variable) is warned about it. A pod that
states a degree above 1 of tensor, pipeline or data parallelism (or names its parallelism by annotation) uses
every GPU it asks for on purpose: it is never told it asks for GPUs beyond its memory need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from .. import names, podview
from ..hints import Hints
from ..podview import PodFacts
from ..rules import DegreeSettings, Rules, WorldSettings


@dataclass
class World:
    """The number of pods of the pod's job (1: the pod is alone) and where it was read."""

    pods: int
    source: str | None = None


SINGLE = World(1)


def _count(value: str | None) -> int | None:
    """A pod count as operators write it: "64", or torchrun's elastic "min:max" (the most the job can use)."""
    if value is None:
        return None
    text = value.strip()
    if ":" in text:
        text = text.rpartition(":")[2]
    return int(text) if text.isdigit() and int(text) > 0 else None


def world_of(facts: PodFacts, rules: Rules) -> World:
    """How many pods the pod's job has, from the env its operator injected (the first source that says)."""
    env = facts.env
    settings = rules.world
    for name in settings.nodes_env:
        count = _count(env.get(name))
        if count is not None:
            return World(count, f"env {name}={env[name]}")
    processes = _count(env.get(settings.processes_env)) if settings.processes_env else None
    if processes is not None and settings.processes_env is not None:
        per_node = _count(env.get(settings.processes_per_node_env)) if settings.processes_per_node_env else None
        if per_node is not None and settings.processes_per_node_env is not None and processes % per_node == 0:
            return World(processes // per_node, f"env {settings.processes_env}={processes} / "
                                                f"{settings.processes_per_node_env}={per_node}")
        return World(processes, f"env {settings.processes_env}={processes}")
    pattern = settings.nodes_env_sum_pattern
    if pattern is not None:
        parts: list[tuple[str, int]] = []
        for name, value in sorted(env.items()):
            count = _count(value) if pattern.search(name) else None
            if count is not None:
                parts.append((name, count))
        if parts:
            return World(sum(c for _, c in parts), "env " + " + ".join(f"{n}={c}" for n, c in parts))
    if settings.nodes_args or settings.single_node_args:
        return launcher_world(facts, settings) or SINGLE
    return SINGLE


def launcher_world(facts: PodFacts, settings: WorldSettings) -> World | None:
    """The job's pods as its launcher counts them on a container's command line (torchrun ``--nnodes=2``,
    ``--standalone``), where no operator's env says: an Indexed Job's pod carries no count of its job but what its
    command says. None when no container says."""
    for name, line in facts.commands:
        if not line:
            continue
        for pattern in settings.nodes_args:
            found = pattern.search(line)
            count = _count(found.group(1)) if found is not None else None
            if found is not None and count is not None:
                return World(count, f'{found.group(0).strip()} in container "{name}"')
        for pattern in settings.single_node_args:
            found = pattern.search(line)
            if found is not None:
                return World(1, f'{found.group(0).strip()} in container "{name}"')
    return None


def _first_degree(facts: PodFacts, settings: DegreeSettings, least: int) -> tuple[int, str] | None:
    """The first degree of at least ``least`` the containers state where ``settings`` look (env, then the command
    line, container by container), and where; None when none does. A plain loop: every GPU pod is read so."""
    if not settings.env and not settings.args:
        return None
    for container in podview.containers(facts.pod):
        env = podview.container_env(container)
        for name in settings.env:
            value = env.get(name)
            if value is not None and value.strip().isdigit() and int(value) >= least:
                return int(value), f"env {name}={value.strip()}"
        words = [w for key in ("command", "args") for w in podview.as_list(container.get(key)) if isinstance(w, str)]
        line = " ".join(words)
        for pattern in settings.args:
            match = pattern.search(line)
            if match and match.group(1) and int(match.group(1)) >= least:
                return int(match.group(1)), f"{match.group(0).strip()} in container \"{container.get('name', '?')}\""
    return None


def tensor_parallel(facts: PodFacts, rules: Rules) -> tuple[int, str] | None:
    """The tensor-parallel degree a container states (env or command line), and where; None when none does."""
    return _first_degree(facts, rules.tensor_parallel, 0)


def declared_parallelism(facts: PodFacts, rules: Rules, hints: Hints, tensor: tuple[int, str] | None) -> str | None:
    """Where the pod says it spreads its work over several of its GPUs on purpose: annotation
    ``ai-admission.io/parallelism``, else its tensor-parallel degree (``tensor``, `tensor_parallel`'s) or the first
    degree of pipeline or data parallelism a container states, when above 1 (a degree of 1 spreads nothing:
    ``--tensor-parallel-size 1`` on 8 GPUs leaves 7 idle); None when it does not say."""
    if hints.parallelism:
        return f"annotation {names.PARALLELISM}={','.join(hints.parallelism)}"
    if tensor is not None and tensor[0] > 1:
        return tensor[1]
    found = _first_degree(facts, rules.parallelism, 2)
    return found[1] if found is not None else None


def cards_holding(total: Decimal, card: Decimal) -> int:
    """How many cards of ``card`` bytes together hold ``total`` bytes (at least one)."""
    return max(1, math.ceil(total / card))


def parallel_size(needed: int, node_gpus: int) -> int:
    """The GPU count that holds ``needed`` cards' worth: the next power of two (the sizes tensor parallelism takes),
    or the whole node when that is all a node has. The capacity denial suggests it, and rightsizing compares it with
    what a pod asks for."""
    size = 1
    while size < needed:
        size *= 2
    return size if size <= node_gpus or needed > node_gpus else node_gpus
