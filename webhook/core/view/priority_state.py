"""What the cluster's PriorityClasses are, against the ones the rules set: learnt in the background, never on
the request path.

A pod naming a PriorityClass that does not exist is refused by the API server ("no PriorityClass with name ...
was found"), so one missing class would block every pod of its workload class. And mutation writes the class's
``value`` and ``preemptionPolicy`` into the pod beside its name (see `webhook.core.mutate.set_priority`), which is
only right while the class in the cluster has the values the rules give it. A watch of the PriorityClasses
(`webhook.cluster.priority_classes`) keeps this state current; mutation reads the last answer from memory, does
not set a class that is missing (the pod is admitted without it, with a warning), and for a class whose values
differ from the rules leaves the two fields to the API server (with a warning).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..rules import PriorityClassSpec


@dataclass(frozen=True)
class InstalledPriorityClass:
    """What the Priority admission plugin resolves a class name to."""

    value: int
    preemption_policy: str = "PreemptLowerPriority"  # the API server's default when a class names none


@dataclass(frozen=True)
class PriorityClassState:
    """The last known state; ``checked`` False means nothing is known yet (assume every class is as the rules say).

    ``differing_priority_classes`` maps a class name to what the cluster has, in words, when its value or
    preemptionPolicy is not the rules'.
    """

    missing_priority_classes: frozenset[str] = frozenset()
    checked: bool = False
    error: str | None = None
    differing_priority_classes: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "missingPriorityClasses": sorted(self.missing_priority_classes),
                "differingPriorityClasses": dict(sorted(self.differing_priority_classes.items())),
                "error": self.error}


UNCHECKED = PriorityClassState()  # nothing checked: every class is assumed to be as the rules say


def describe_difference(wanted: PriorityClassSpec, installed: InstalledPriorityClass) -> str | None:
    """How the installed class differs from the rules' (None when it does not)."""
    if (installed.value, installed.preemption_policy) == (wanted.value, wanted.preemption_policy):
        return None
    return (f"value {installed.value}, preemptionPolicy {installed.preemption_policy} in the cluster; "
            f"the rules say value {wanted.value}, preemptionPolicy {wanted.preemption_policy}")


def priority_class_state(wanted: Iterable[PriorityClassSpec],
                         installed: Mapping[str, InstalledPriorityClass]) -> PriorityClassState:
    """What mutation needs to know: which of the rules' classes the cluster lacks, and which differ."""
    specs = {spec.name: spec for spec in wanted}
    differing = {name: text for name, spec in specs.items() if name in installed
                 for text in [describe_difference(spec, installed[name])] if text}
    return PriorityClassState(frozenset(specs.keys() - installed.keys()), True, None, differing)


def installed_priority_class(obj: Mapping[str, Any]) -> InstalledPriorityClass:
    """A PriorityClass object as the Priority plugin resolves it."""
    value = obj.get("value")
    policy = obj.get("preemptionPolicy")
    return InstalledPriorityClass(value=int(value) if isinstance(value, int) else 0,
                                  preemption_policy=policy if isinstance(policy, str) and policy
                                  else "PreemptLowerPriority")
