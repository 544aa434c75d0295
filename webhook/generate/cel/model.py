"""Which GPU model a pod names, in four precisions written from the same lists of the rules (the model labels, the
instance-type and GPU-name labels, the model annotations of other schedulers):

- `named_in_view` (exact): not ``gpu-model-missing`` (`webhook.core.profile._choose_model`, `webhook.core.models`
  `pinned_models`, `annotated_models`, `device_choice`), over a view of the backstop;
- `named_plainly` (a subset): the annotation or a nodeSelector on a model label, the backstop's fast pass;
- `named_by_label_only` (a subset): one model label of the nodeSelector and nothing else the webhook reads, so
  `webhook.core.mutate.pin_model` has nothing to pin (the native judgement);
- `model_of` (exact where it answers): the catalog model the pod names, looked up in the facts' model index, or
  ``'?'`` where CEL cannot read the pod as the webhook does, ``''`` where it names none.
"""

from __future__ import annotations

from webhook.core import names
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import MODEL

from .precision import POD, Exact, Subset, mirrored
from .text import cel_list, cel_string, listed
from .views import annotation

UNKNOWN = "'?'"  # a model CEL cannot name as the webhook does

NODE_AFFINITY_TERMS = ("object.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
                       ".?nodeSelectorTerms.orValue([])")


def view_keys(rules: Rules) -> list[str]:
    """Every node label a view may name its model by: model labels, instance types, GPU names."""
    return sorted({*rules.model_keys, *rules.instance_type_keys,
                   *([rules.gpu_name_labels.name_key] if rules.gpu_name_labels else [])})


def other_keys(rules: Rules) -> list[str]:
    """The node labels beside the model labels that name a model (instance types, GPU names)."""
    return [*rules.instance_type_keys, *([rules.gpu_name_labels.name_key] if rules.gpu_name_labels else [])]


def every_term(v: str, expression_test: str) -> str:
    """Every required node-affinity term of view ``v`` has a match expression passing ``expression_test`` (over
    ``e``): terms are alternatives, so each must say it."""
    return (f"(type({v}.t) == list && size({v}.t) > 0 && {v}.t.all(t, type(t) == map && "
            f"cel.bind(me, t.?matchExpressions.orValue([]), type(me) == list && "
            f"me.exists(e, type(e) == map && {expression_test}))))")


def named_in_view(rules: Rules, v: str, mig: str, device: str = "false") -> Exact:
    """The view ``v`` names its model (not `gpu-model-missing`). ``mig``: the view asks only for MIG slices whose
    size the name gives (they need no model unless the rules say); ``device``: it asks for a resource whose name is
    the device; a view whose DRA claims may say it (``v.c``) is the webhook's."""
    keys = cel_list(view_keys(rules))
    selector = (f"(type({v}.ns) == map && {keys}.exists(k, k in {v}.ns && type({v}.ns[k]) == string && "
                f"{v}.ns[k] != ''))")
    affinity = every_term(v, f"e.?operator.orValue('') == 'In' && e.?key.orValue('') in {keys} && "
                             f"cel.bind(vl, e.?values.orValue([]), type(vl) == list && "
                             f"vl.exists(x, type(x) == string && x != ''))")
    tests = [f"{annotation(v, names.GPU_MODEL)}.trim() != ''", selector, affinity]
    tests += [f"{annotation(v, key)}.split(',').exists(part, part.trim() != '')" for key in rules.accelerators.model_annotations]
    tests += [f"{annotation(v, note)} != ''" for note, key in sorted(rules.accelerators.node_selector_annotations.items())
              if key in rules.model_keys]
    if not rules.accelerators.mig_needs_model:
        tests.append(mig)
    if device != "false":
        tests.append(device)
    tests.append(f"{v}.c")
    return Exact("(" + "\n    || ".join(tests) + ")")


def _profile_names_model(pod: dict, rules: Rules) -> bool:
    from webhook.core.context import Context
    from webhook.core.profile import build_profile

    profile = build_profile(pod, Context(rules))
    return not profile.gpus or profile.choice is not None  # a pod that asks for no GPU names no model to judge


@mirrored(POD, _profile_names_model)
def named_plainly(rules: Rules) -> Subset:
    """The annotation ``ai-admission.io/gpu-model`` or a nodeSelector on a model label names the model (what
    `named_in_view` reads first)."""
    notes = "object.metadata.?annotations.orValue({})"
    return Subset(f"({notes}[?{cel_string(names.GPU_MODEL)}].orValue('').trim() != '' || "
                  f"{cel_list(rules.model_keys)}.exists(k, object.spec.?nodeSelector[?k].orValue('') != ''))")


def _named_by_one_label(pod: dict, rules: Rules) -> bool:
    from webhook.core.context import Context
    from webhook.core.profile import build_profile

    profile = build_profile(pod, Context(rules))
    return not profile.gpus or (not profile.hints.gpu_model and profile.pinned_model is not None
                                and (profile.pinned_where or "").startswith("nodeSelector"))


@mirrored(POD, _named_by_one_label)
def named_by_label_only(rules: Rules, keys: str | None = None) -> Subset:
    """The model is named by one model label of the nodeSelector and by nothing else the webhook reads.
    ``keys``: the model labels the nodeSelector names a value of (`present_model_keys`), where a policy holds them
    already."""
    selector = "object.spec.?nodeSelector.orValue({})"
    clauses = [f"size({keys or present_model_keys(rules)}) == 1", f"size({NODE_AFFINITY_TERMS}) == 0"]
    if other_keys(rules):
        clauses.append(f"!{cel_list(other_keys(rules))}.exists(k, k in sl)")
    clauses.append(f"!({cel_string(names.GPU_MODEL)} in object.metadata.?annotations.orValue({{}}))")
    return Subset(f"cel.bind(sl, {selector}, {' && '.join(clauses)})")


def present_model_keys(rules: Rules) -> str:
    """The model labels the pod's nodeSelector gives a value, in the rules' order (the first wins)."""
    return f"{listed(rules.model_keys)}.filter(k, object.spec.?nodeSelector[?k].orValue('') != '')"


def normalized(text: str) -> str:
    """`webhook.core.rules.normalize_model_name` in CEL."""
    return f"{text}.trim().lowerAscii().replace('_', '-')"


def model_of(rules: Rules, facts: str = "variables.facts", keys: str | None = None) -> str:
    """`webhook.core.profile._choose_model` where CEL can follow it, else ``'?'``: the annotation first, else the
    first model label of the nodeSelector (``keys``: `present_model_keys`, where a policy holds them), looked up in
    the facts' model index (a key ``model.<name>`` per name of a present model); ``''`` where the pod names no
    model."""
    lookup = f"{facts}[?({cel_string(MODEL)} + {normalized('mv')})].orValue({UNKNOWN})"
    selector = "object.spec.?nodeSelector.orValue({})"
    unreadable = [f"{listed(other_keys(rules))}.exists(k, sl[?k].orValue('') != '')" if other_keys(rules) else "false",
                  f"{listed(list(rules.accelerators.node_selector_annotations))}.exists(a, a in an)"
                  if rules.accelerators.node_selector_annotations else "false",
                  f"{listed(list(rules.accelerators.model_annotations))}.exists(a, an[?a].orValue('').trim() != '')"
                  if rules.accelerators.model_annotations else "false",
                  f"size({NODE_AFFINITY_TERMS}) > 0"]
    return (f"cel.bind(an, object.metadata.?annotations.orValue({{}}), "
            f"cel.bind(mv, an[?{cel_string(names.GPU_MODEL)}].orValue('').trim(), mv != '' ? {lookup} : "
            f"cel.bind(sl, {selector}, cel.bind(mk, {keys or present_model_keys(rules)}, "
            f"size(mk) > 0 ? cel.bind(mv, sl[mk[0]], {lookup}) : "
            f"({' || '.join(unreadable)}) ? {UNKNOWN} : ''))))")
