"""The ``rightsizing:`` block of the rules: what a pod is told when it asks for more GPU than its need takes.

Two findings, each with an action that is a default a class may change (``classes.<class>.rightsizing``):
``overProvisioned`` (reason gpu-over-provisioned: ``deny``, ``warn`` or ``off``) and ``smallerCard`` (reasons
gpu-fits-smaller-model and gpu-fits-mig-slice: ``warn`` or ``off``; advice, never a denial: a card is also chosen
for its speed). A class whose pods are data-parallel by default (``dataParallel``: training, where every GPU holds a
replica or a shard of the model) takes every GPU it asks for: the GPUs beyond its memory need are its way of
working, not waste. Compiled once here, like the rest of the rules (`webhook.core.rightsizing.findings` applies
them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

OVER_PROVISIONED = "overProvisioned"
SMALLER_CARD = "smallerCard"
ACTIONS = ("deny", "warn", "off")
DEFAULT_SHARE = Decimal("0.75")


@dataclass(frozen=True)
class RightsizingRules:
    """The compiled ``rightsizing:`` block; ``actions`` is the default, ``by_class`` a class's own choices."""

    actions: Mapping[str, str] = field(default_factory=dict)              # finding -> deny | warn | off
    by_class: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    data_parallel: frozenset[str] = frozenset()                           # classes whose pods use every GPU
    smaller_share: Decimal = DEFAULT_SHARE  # a smaller device has at most this share of the memory of the card asked

    def action(self, finding: str, workload: str) -> str:
        """What ``finding`` gets for a pod of class ``workload`` (unknown classes: the default)."""
        return self.by_class.get(workload, {}).get(finding) or self.actions.get(finding, "off")


def _action(value: Any) -> str:
    """An action as written: YAML reads a bare ``off`` as false, which means the same."""
    return "off" if value is False else str(value)


def compile_rightsizing(spec: Mapping[str, Any] | None, classes: Mapping[str, Any]) -> RightsizingRules:
    """``spec`` is the schema-checked block; ``classes`` the rules' classes, each with its own ``rightsizing``."""
    by_class: dict[str, dict[str, str]] = {}
    data_parallel = set()
    for name, policy in classes.items():
        own = dict((policy or {}).get("rightsizing") or {})
        if own.pop("dataParallel", False):
            data_parallel.add(name)
        if own:
            by_class[name] = {key: _action(value) for key, value in own.items()}
    spec = spec or {}
    actions = {key: _action(spec[key]) for key in (OVER_PROVISIONED, SMALLER_CARD) if key in spec}
    return RightsizingRules(actions=actions, by_class=by_class, data_parallel=frozenset(data_parallel),
                            smaller_share=Decimal(str(spec.get("smallerShare", DEFAULT_SHARE))))
