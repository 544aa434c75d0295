"""Which of the four workload classes a pod belongs to, and why.

Precedence: the explicit annotation, then the ordered signals of the rules (labels, owner kinds, env, a
distributed launcher on the command line), then
shape (an accelerator pod with no signal gets the rules' default class). Every answer carries a reason a
person can read in ``kubectl get pod -o yaml`` or in a denial message.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import names
from .hints import Hints
from .podview import PodFacts
from .rules import Rules, Signal

NONE = "none"


@dataclass
class Classification:
    workload: str
    reason: str
    source: str  # "annotation" | "signal" | "default" | "none"


def _match(signal: Signal, facts: PodFacts) -> list[str] | None:
    """The evidence for each condition of ``signal``, or None when one does not hold (the pod's merged env is
    built only if a signal gets as far as needing it)."""
    evidence: list[str] = []
    if signal.owners:
        owner = next((o for o in facts.owners if any(m.matches(o) for m in signal.owners)), None)
        if owner is None:
            return None
        evidence.append(f"owner {owner.get('kind')}/{owner.get('name', '')}".rstrip("/"))
    for label_match in signal.labels:
        found = label_match.matches(facts.labels)
        if found is None:
            return None
        evidence.append(f"label {found}")
    for env_match in signal.env:
        found = env_match.matches(facts.env)
        if found is None:
            return None
        evidence.append(f"env {found}")
    for command_match in signal.commands:
        found = command_match.matches(facts.commands)
        if found is None:
            return None
        evidence.append(found)
    return evidence


def _owner_only(signal: Signal) -> bool:
    """A signal that reads nothing but the owner's kind: the class is a guess from how the pod is made (a Job is
    batch, a ReplicaSet inference), so its reason says how to choose another."""
    return bool(signal.owners) and not (signal.labels or signal.env or signal.commands)


def annotated_reason(workload: str) -> str:
    """Why a pod that names its class is of that class (the native policies write the same words)."""
    return f"annotation {names.WORKLOAD_TYPE}={workload}"


def classify(facts: PodFacts, *, rules: Rules, hints: Hints, has_accelerator: bool) -> Classification:
    if hints.workload_type:
        return Classification(hints.workload_type, annotated_reason(hints.workload_type), "annotation")
    labels = facts.labels
    owner_kinds = {o["kind"] for o in facts.owners if isinstance(o.get("kind"), str)}
    signals = rules.signals
    for index in rules.signal_index.candidates(labels, owner_kinds):
        signal = signals[index]
        if ((signal.requires_accelerator and not has_accelerator)
                or (signal.owner_kinds and signal.owner_kinds.isdisjoint(owner_kinds))
                or not signal.label_keys <= labels.keys()):
            continue
        evidence = _match(signal, facts)
        if evidence is not None:
            reason = ", ".join(evidence)
            if _owner_only(signal):
                reason += f"; set annotation {names.WORKLOAD_TYPE} to choose another class"
            return Classification(signal.workload, reason, "signal")
    if has_accelerator:
        return Classification(rules.default_class,
                              f"requests an accelerator and carries no workload signal; default class "
                              f"{rules.default_class} (set annotation {names.WORKLOAD_TYPE} to choose)",
                              "default")
    return Classification(NONE, "requests no accelerator and carries no workload signal", "none")
