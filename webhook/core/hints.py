"""The ``ai-admission.io/*`` annotations a user writes, parsed once and checked.

A hint that cannot be understood is a finding (the user meant something, and silently ignoring it would give
them a profile they did not ask for), and the rest of the pipeline sees only parsed values.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from . import names
from .findings import Finding, deny
from .podview import PodFacts
from .quantity import QuantityError, parse_model_params, parse_quantity
from .rules import WORKLOAD_CLASSES, Rules

PARALLELISMS = ("tensor", "pipeline", "data", "expert")  # what annotation ai-admission.io/parallelism may say
TRUE_WORDS = frozenset({"true", "yes", "1"})  # how a yes/no annotation may say yes (the native policies read it too)
FALSE_WORDS = frozenset({"false", "no", "0"})


@dataclass
class Hints:
    workload_type: str | None = None
    gpu_model: str | None = None
    gpu_memory: Decimal | None = None
    model_params: int | None = None
    model_precision: str | None = None
    preemptible: bool | None = None
    multi_node: bool | None = None
    gang: bool | None = None
    parallelism: tuple[str, ...] = ()  # the kinds of parallelism the pod says spread its work over its GPUs
    problems: tuple[Finding, ...] = ()


def _bool(value: str, key: str, problems: list[Finding]) -> bool | None:
    text = value.strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    problems.append(deny("invalid-annotation", f'annotation {key}: "{value}" is not "true" or "false"'))
    return None


def _parallelism(value: str, problems: list[Finding]) -> tuple[str, ...]:
    """"tensor", "data", "tensor,pipeline": the kinds of parallelism the pod names (each known)."""
    words = tuple(w.strip().lower() for w in value.split(",") if w.strip())
    unknown = [w for w in words if w not in PARALLELISMS]
    if not words or unknown:
        problems.append(deny("invalid-annotation",
                             f'annotation {names.PARALLELISM}: "{value}" is not one or more of '
                             f'{", ".join(PARALLELISMS)} (comma-separated)'))
        return ()
    return words


_KEYS = frozenset({names.WORKLOAD_TYPE, names.GPU_MODEL, names.GPU_MEMORY, names.MODEL_PARAMS,
                   names.MODEL_PRECISION, names.PREEMPTIBLE, names.MULTI_NODE, names.GANG, names.PARALLELISM})
NO_HINTS = Hints()


def read_hints(facts: PodFacts, rules: Rules) -> Hints:
    notes = facts.annotations
    if not _KEYS.intersection(notes):  # most pods carry none: one set operation, no parsing
        return NO_HINTS
    problems: list[Finding] = []

    workload = notes.get(names.WORKLOAD_TYPE)
    if workload is not None:
        workload = workload.strip().lower()
        if workload not in WORKLOAD_CLASSES:
            problems.append(deny("invalid-annotation",
                                 f'annotation {names.WORKLOAD_TYPE}: "{notes[names.WORKLOAD_TYPE]}" is not one of '
                                 f'{", ".join(WORKLOAD_CLASSES)}'))
            workload = None

    memory = None
    if names.GPU_MEMORY in notes:
        try:
            memory = parse_quantity(notes[names.GPU_MEMORY])
            if memory <= 0:
                raise QuantityError("it must be positive")
        except QuantityError as exc:
            problems.append(deny("invalid-annotation",
                                 f"annotation {names.GPU_MEMORY} (GPU memory per GPU, e.g. 40Gi): {exc}"))
            memory = None

    params = None
    if names.MODEL_PARAMS in notes:
        try:
            params = parse_model_params(notes[names.MODEL_PARAMS])
        except QuantityError as exc:
            problems.append(deny("invalid-annotation", f"annotation {names.MODEL_PARAMS}: {exc}"))

    precision = notes.get(names.MODEL_PRECISION)
    if precision is not None:
        precision = precision.strip().lower()
        if precision not in rules.precisions:
            problems.append(deny("invalid-annotation",
                                 f'annotation {names.MODEL_PRECISION}: "{notes[names.MODEL_PRECISION]}" is not one '
                                 f"of {', '.join(rules.precisions)}"))
            precision = None
    elif params is not None:
        problems.append(deny("invalid-annotation",
                             f"annotation {names.MODEL_PARAMS} needs {names.MODEL_PRECISION} beside it "
                             f"(one of {', '.join(rules.precisions)}) to turn parameters into bytes"))

    return Hints(
        workload_type=workload,
        gpu_model=(notes.get(names.GPU_MODEL) or "").strip() or None,
        gpu_memory=memory,
        model_params=params,
        model_precision=precision,
        preemptible=_bool(notes[names.PREEMPTIBLE], names.PREEMPTIBLE, problems) if names.PREEMPTIBLE in notes else None,
        multi_node=_bool(notes[names.MULTI_NODE], names.MULTI_NODE, problems) if names.MULTI_NODE in notes else None,
        gang=_bool(notes[names.GANG], names.GANG, problems) if names.GANG in notes else None,
        parallelism=_parallelism(notes[names.PARALLELISM], problems) if names.PARALLELISM in notes else (),
        problems=tuple(problems),
    )
