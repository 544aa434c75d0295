"""How closely a CEL predicate follows the Python it stands for, in its type, and the registry that ties the two.

Three precisions, three types (each a ``str``, the CEL text itself), so that a composition says what it may rely
on and mypy holds it to that:

- `Exact`: holds exactly where the Python holds;
- `Superset`: holds wherever the Python holds, and maybe elsewhere: safe to *send* a pod on (a webhook's
  ``matchConditions``: a pod it leaves out must be one the webhook would leave alone);
- `Subset`: holds only where the Python holds, maybe not everywhere: safe to *skip* on (the native judgement: a
  pod it calls whole must be one the webhook would add nothing to and find nothing in).

Negation swaps a superset and a subset (`negated`); a conjunction or disjunction of parts of one precision keeps it,
and an exact part takes the other's (`every`, `some`).

`mirrored` registers a predicate over a resource name or a pod with the Python function it stands for;
tests/unit/test_cel_library.py evaluates every registered predicate over the test corpus against that function,
by its precision, so a predicate and its Python cannot drift apart unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from webhook.core.rules import Rules


class Exact(str):
    """CEL that holds exactly where the Python it mirrors holds."""


class Superset(str):
    """CEL that holds wherever the Python it mirrors holds (and maybe elsewhere): safe to send a pod on."""


class Subset(str):
    """CEL that holds only where the Python it mirrors holds (maybe not everywhere): safe to skip a pod on."""


def negated(predicate: Exact | Superset | Subset) -> Exact | Superset | Subset:
    """``!(predicate)``: the negation of a superset is a subset, and the other way round."""
    text = f"!({predicate})"
    if isinstance(predicate, Superset):
        return Subset(text)
    if isinstance(predicate, Subset):
        return Superset(text)
    return Exact(text)


def _joined(parts: tuple[str, ...], operator: str, neutral: str) -> str:
    return f" {operator} ".join(f"({p})" for p in parts) if parts else neutral


def every(*parts: Exact | Subset) -> Subset:
    """All of ``parts`` (a subset: each part holds only where its Python does)."""
    return Subset(_joined(parts, "&&", "true"))


def some(*parts: Exact | Superset) -> Superset:
    """Any of ``parts`` (a superset: the disjunction holds wherever one of the Pythons does)."""
    return Superset(_joined(parts, "||", "false"))


Subject = str  # what a mirrored predicate is about: RESOURCE (its CEL reads ``n``) or POD (it reads ``object``)
RESOURCE, POD = "resource", "pod"


@dataclass(frozen=True)
class Mirror:
    """A predicate of the library and the Python it stands for."""

    name: str
    subject: Subject
    precision: type
    build: Callable[[Rules], str]
    python: Callable[[Any, Rules], bool]


MIRRORS: list[Mirror] = []

F = TypeVar("F", bound=Callable[..., Any])


def mirrored(subject: Subject, python: Callable[[Any, Rules], bool]) -> Callable[[F], F]:
    """Register ``build(rules)`` (its precision is its return type) as standing for ``python(subject, rules)``."""
    def register(build: F) -> F:
        precision = build.__annotations__.get("return")
        found = {"Exact": Exact, "Superset": Superset, "Subset": Subset}.get(str(precision), precision)
        assert found in (Exact, Superset, Subset), f"{build.__name__}: its return type names no precision"
        MIRRORS.append(Mirror(name=f"{build.__module__}.{build.__name__}", subject=subject, precision=found,
                              build=build, python=python))
        return build
    return register
