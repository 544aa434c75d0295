"""The GPU tolerations a pod lacks (`webhook.core.mutate.add_tolerations`), and the JSON Patch that adds them.

A wanted toleration is a CEL list ``[key, operator, value, effect]``; it is missing where no toleration of the
pod covers it (`webhook.core.placement.covers`). They are added as the webhook adds them, after the pod's own, as
plain maps (never typed objects in a JSON Patch value), with no empty field (the typed pod drops them).
"""

from __future__ import annotations

from webhook.core.rules import Rules

from .resources import accelerator_names
from .text import add, cel_string

# the toleration of each accelerator the pod asks for (``variables.asked``), as the webhook gives it with no node watch
# (in the order of their names)
PER_ACCELERATOR = "variables.asked.sort().map(n, [string(n), 'Exists', '', 'NoSchedule'])"


def missing_tolerations(wanted: str) -> str:
    """The tolerations of ``wanted`` (a CEL list of [key, operator, value, effect]) that no toleration of the pod
    covers (`webhook.core.placement.covers`)."""
    covers = ("object.spec.?tolerations.orValue([]).exists(e, "
              "(e.?effect.orValue('') == '' || e.?effect.orValue('') == w[3]) && "
              "(e.?operator.orValue('') == 'Exists' ? (e.?key.orValue('') == '' || e.?key.orValue('') == w[0]) : "
              "(e.?key.orValue('') == w[0] && e.?value.orValue('') == w[2] && w[1] == 'Equal')))")
    return f"({wanted}).filter(w, !{covers})"


TOLERATION = ("{?'key': t[0] != '' ? optional.of(t[0]) : optional.none(), 'operator': t[1], "
              "?'value': t[2] != '' ? optional.of(t[2]) : optional.none(), "
              "?'effect': t[3] != '' ? optional.of(t[3]) : optional.none()}")

# ``variables.missing`` added after the pod's own tolerations
TOLERATIONS_PATCH = (f"size(variables.missing) == 0 ? [] : has(object.spec.tolerations) ? "
                     f"variables.missing.map(t, {add(cel_string('/spec/tolerations/-'), TOLERATION)}) : "
                     f"[{add(cel_string('/spec/tolerations'), f'variables.missing.map(t, {TOLERATION})')}]")


def toleration_variables(rules: Rules) -> list[dict[str, str]]:
    """``asked``: the accelerators the pod's containers ask for, each once; ``missing``: the ``Exists``/``NoSchedule``
    toleration of each that no toleration of the pod covers."""
    return [{"name": "asked", "expression": accelerator_names(rules)},
            {"name": "missing", "expression": missing_tolerations(PER_ACCELERATOR)}]
