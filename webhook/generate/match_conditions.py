"""Which pods the API server need not send at all: a CEL ``matchConditions`` expression generated from the rules.

Most pods in a cluster are none of ai-admission's business (class ``none``): they get an empty patch and no
finding. Calling the webhook for them costs each such pod a round trip per webhook. The webhook configurations
therefore carry a condition (admissionregistration.k8s.io/v1 ``matchConditions``, evaluated by the API server)
that is true for every pod ai-admission could act on, and false only for pods it would leave alone.

A pod can be acted on only when one of these holds, so the condition is their disjunction:

- it asks for an accelerator: a resource of ``accelerators.resources``, matching ``accelerators.migPattern`` or a
  pattern of ``accelerators.deviceResources`` (passthrough GPUs, vGPU types), in the requests or limits of any
  container, init containers included (a malformed amount is a finding too);
- it takes DRA claims (``spec.resourceClaims``), when the rules know GPU device classes: its GPUs are in the
  claims, which the API server's CEL cannot look up;
- it carries an ``ai-admission.io/`` annotation (the class, the model, the memory: hints, or bad hints);
- it may take a path to a GPU that is not a request (a device variable, env from a ConfigMap or Secret that may
  hold one, a GPU RuntimeClass, privileged, a CDI annotation, a device-request mount, a hostPath, a DeviceClass's
  implicit resource): `webhook.generate.cel.paths.may_take_a_path`;
- it could match a signal that does not require an accelerator: the signal's owner kinds, label keys (and
  values), env names, each as CEL; a signal with ``requiresAccelerator`` is covered by the first clause.

The condition may be true for a pod the webhook then leaves alone (signal values and env values are not all
checked in CEL), never the other way round: ``tests/unit/test_match_conditions.py`` checks that "condition false"
implies "empty patch, no finding" for every fixture pod and for generated ones.

Regular expressions of the rules are written into CEL's ``matches`` (RE2, which like Python's ``re.search`` finds
a match anywhere). A pattern using what RE2 lacks (look-around, back-references) cannot be translated; the
rules then get no condition at all (`pod_condition` returns None) and the API server calls the webhook for
every pod, as without conditions.
"""

from __future__ import annotations

from typing import Iterable

from webhook.core.rules import EnvMatch, LabelMatch, OwnerMatch, Rules, Signal

from .cel.paths import may_take_a_path
from .cel.resources import asks_for_accelerator, shares_by_annotation
from .cel.text import Untranslatable, cel_list, cel_regex, cel_string

ANNOTATION_PREFIX = "ai-admission.io/"
CONDITION_NAME = "may-concern-ai-admission"

_LABELS = "object.metadata.labels"
_HAS_LABELS = f"has({_LABELS})"
_OWNERS = "object.metadata.ownerReferences"


def _all_of(clauses: list[str]) -> str:
    return " && ".join(f"({c})" for c in clauses) if len(clauses) > 1 else clauses[0]


def claims_clause(rules: Rules) -> list[str]:
    """The pod takes DRA claims (whether they hold GPUs is known only to the webhook's watch of them)."""
    return ["has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0"] if rules.dra.device_classes \
        else []


def annotation_clause() -> str:
    return (f"has(object.metadata.annotations) && "
            f"object.metadata.annotations.exists(k, k.startsWith({cel_string(ANNOTATION_PREFIX)}))")


def _owner(matches: tuple[OwnerMatch, ...]) -> str:
    tests = []
    for match in matches:
        test = f"o.kind == {cel_string(match.kind)}"
        if match.api_group is not None:
            group = (f"o.apiVersion.startsWith({cel_string(match.api_group + '/')})" if match.api_group
                     else "!o.apiVersion.contains('/')")
            test = f"{test} && {group}"
        tests.append(test)
    return f"has({_OWNERS}) && {_OWNERS}.exists(o, {' || '.join(tests)})"


def _label(match: LabelMatch) -> str:
    if match.key is not None:
        value = f"{_LABELS}[{cel_string(match.key)}]"
        tests = [f"{cel_string(match.key)} in {_LABELS}"]
    else:
        assert match.key_pattern is not None
        value = f"{_LABELS}[k]"
        tests = [f"k.matches({cel_regex(match.key_pattern)})"]
    if match.values is not None:
        tests.append(f"{value} in {cel_list(match.values)}")
    if match.value_pattern is not None:
        tests.append(f"{value}.matches({cel_regex(match.value_pattern)})")
    if match.key is not None:
        return " && ".join([_HAS_LABELS, *tests])
    return f"{_HAS_LABELS} && {_LABELS}.exists(k, {' && '.join(tests)})"


def _env(match: EnvMatch) -> str:
    """A variable of this name in an app container (its value is left to the webhook: a superset)."""
    if match.name is not None:
        name = f"e.name == {cel_string(match.name)}"
    else:
        assert match.name_pattern is not None
        name = f"e.name.matches({cel_regex(match.name_pattern)})"
    return f"object.spec.containers.exists(c, has(c.env) && c.env.exists(e, {name}))"


def signal_clause(signal: Signal) -> str:
    """A pod could match ``signal`` (every condition of it, as far as CEL checks it)."""
    parts = ([_owner(signal.owners)] if signal.owners else []) + [_label(m) for m in signal.labels] + [
        _env(m) for m in signal.env]
    return _all_of(parts) if parts else "true"


def _label_key_only(signal: Signal) -> str | None:
    """The label key when a signal is just "this label is present" (most are): such signals share one clause."""
    if signal.owners or signal.env or len(signal.labels) != 1:
        return None
    (match,) = signal.labels
    return match.key if match.values is None and match.value_pattern is None else None


def _owner_kinds_only(signal: Signal) -> list[str] | None:
    """The owner kinds when a signal is just "owned by one of these kinds" in any API group."""
    if signal.labels or signal.env or not signal.owners or any(o.api_group is not None for o in signal.owners):
        return None
    return [o.kind for o in signal.owners]


def signal_clauses(signals: Iterable[Signal]) -> list[str]:
    """One clause per signal that does not require an accelerator (that one is covered by `asks_for_accelerator`),
    with the plain label-key and owner-kind signals folded into one clause each."""
    keys: list[str] = []
    kinds: list[str] = []
    others: list[str] = []
    for signal in signals:
        if signal.requires_accelerator:
            continue
        key, owner_kinds = _label_key_only(signal), _owner_kinds_only(signal)
        if key is not None:
            keys.append(key)
        elif owner_kinds is not None:
            kinds += owner_kinds
        else:
            others.append(signal_clause(signal))
    folded = [f"{_HAS_LABELS} && {cel_list(set(keys))}.exists(k, k in {_LABELS})"] if keys else []
    if kinds:
        folded.append(f"has({_OWNERS}) && {_OWNERS}.exists(o, o.kind in {cel_list(set(kinds))})")
    return folded + others


def pod_condition(rules: Rules) -> str | None:
    """The CEL expression that is true for every pod ai-admission may act on, one clause a line; None when the
    rules cannot be expressed in CEL (then no condition is set and every pod is sent)."""
    try:
        clauses = [asks_for_accelerator(rules), *shares_by_annotation(rules), *claims_clause(rules),
                   *may_take_a_path(rules), annotation_clause(),
                   *signal_clauses(rules.signals)]
    except Untranslatable:
        return None
    return "\n|| ".join(f"({c})" for c in clauses)


def match_conditions(rules: Rules, *, pods_only: bool) -> list[dict[str, str]]:
    """The ``matchConditions`` of a webhook entry; ``pods_only`` False: the entry also reviews other resources
    (controllers, CRDs), which the condition lets through unconditionally."""
    condition = pod_condition(rules)
    if condition is None:
        return []
    if rules.bypasses.enabled:  # a container added to a running pod is judged whatever the pod is
        condition = f"(has(request.subResource) && request.subResource == 'ephemeralcontainers')\n|| {condition}"
    if not pods_only:
        condition = f"request.resource.resource != 'pods'\n|| {condition}"
    return [{"name": CONDITION_NAME, "expression": condition}]
