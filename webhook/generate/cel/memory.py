"""How much GPU memory a pod states, in two precisions, and the record's byte counts:

- `stated_in_view` (exact): not ``gpu-memory-missing`` (`webhook.core.hints.read_hints`,
  `webhook.core.profile._memory_need`, `webhook.core.models.stated_memory`), over a view of the backstop;
- `stated_plainly` (a subset): ``ai-admission.io/gpu-memory`` in whole Mi, Gi or Ti (`PLAIN_MEMORY`), which
  every reader takes as a positive quantity: the backstop's fast pass and the native judgement;
- `memory_bytes`: that annotation's bytes per GPU; `byte_quantity`: a byte count written as the webhook writes it
  (`webhook.core.quantity.format_quantity`).
"""

from __future__ import annotations

from webhook.core import names
from webhook.core.quantity import BINARY_UNITS
from webhook.core.rules import Rules

from .model import every_term
from .precision import POD, Subset, mirrored
from .resources import quantity_text
from .text import cel_list, cel_string
from .views import annotation

PLAIN_SUFFIXES = ("Mi", "Gi", "Ti")
# a gpu-memory annotation any reader takes as a positive quantity
PLAIN_MEMORY = f"^[1-9][0-9]{{0,6}}({'|'.join(PLAIN_SUFFIXES)})$"
UNITS = {suffix: BINARY_UNITS[suffix] for suffix in PLAIN_SUFFIXES}


def _digits(value: str) -> str:
    """A node-label value the webhook reads as a number (``str(v).strip().isdigit()``)."""
    return (f"((type({value}) == string && {value}.trim().matches('^[0-9]+$')) || "
            f"(type({value}) == int && {value} >= 0))")


def shares_in_view(rules: Rules, v: str) -> tuple[str, str]:
    """(asks, states memory) through a sharing scheduler's annotations (`webhook.core.profile._annotation_shares`,
    `webhook.core.models._shared_memory`): the pod asks for shares by annotation when no container asks for an
    accelerator."""
    asks, memory = [], []
    for share in rules.accelerators.share_annotations:
        asks += [f"{annotation(v, key)} != ''" for key in share.keys()]
        if share.memory:
            memory.append(f"cel.bind(sm, {annotation(v, share.memory)}.trim(), "
                          f"sm.matches('^[0-9]+([.][0-9]+)?$') && double(sm) > 0.0)")
        if share.fraction:
            memory.append(f"cel.bind(sf, {annotation(v, share.fraction)}.trim(), "
                          f"sf.matches('^[0-9]*([.][0-9]+)?$') && sf != '' && sf != '.' && "
                          f"double(sf) > 0.0 && double(sf) <= 1.0)")
    return " || ".join(asks) or "false", " || ".join(memory) or "false"


def stated_in_view(rules: Rules, v: str, sized: str) -> str:
    """The view ``v`` states its memory need (not `gpu-memory-missing`). ``sized``: every accelerator it asks
    for is a MIG slice or a vGPU type whose name gives its memory; a view whose claims may say it (``v.c``) is the
    webhook's."""
    memory = (f"cel.bind(gm, {annotation(v, names.GPU_MEMORY)}.trim(), gm != '' && isQuantity(gm) && "
              f"quantity(gm).isGreaterThan(quantity('0')))")
    precisions = cel_list(rules.precisions)
    params = (f"(cel.bind(mp, {annotation(v, names.MODEL_PARAMS)}.trim(), "
              f"mp.matches('^[0-9]+([.][0-9]+)?\\\\s*[kKmMbBtT]?$') && "
              f"cel.bind(u, mp.substring(size(mp) - 1).lowerAscii(), "
              f"cel.bind(num, u in ['k', 'm', 'b', 't'] ? mp.substring(0, size(mp) - 1).trim() : mp, "
              f"double(num) * (u == 'k' ? 1e3 : u == 'm' ? 1e6 : u == 'b' ? 1e9 : u == 't' ? 1e12 : 1.0) "
              f">= 1.0))) && {annotation(v, names.MODEL_PRECISION)}.trim().lowerAscii() in {precisions})")
    tests = [memory, params]
    if rules.accelerators.share_annotations:
        tests.append(shares_in_view(rules, v)[1])
    accelerators = rules.accelerators
    sharing = sorted({*accelerators.memory_resources, *accelerators.memory_percent_resources, *accelerators.share_resources})
    if sharing:
        amount = (f"cel.bind(q, {quantity_text('mv')}, q != '' && isQuantity(q) && "
                  f"quantity(q).isGreaterThan(quantity('0')))")
        value = ("cel.bind(li, cel.bind(l0, r.?limits.orValue({}), type(l0) == map ? l0 : {}), "
                 "cel.bind(rq, cel.bind(r0, r.?requests.orValue({}), type(r0) == map ? r0 : {}), "
                 "n in li ? li[n] : (n in rq ? rq[n] : '')))")
        tests.append(f"{v}.r.exists(r, type(r) == map && {cel_list(sharing)}.exists(n, "
                     f"cel.bind(mv, {value}, {amount})))")
    for key in rules.memory_keys:
        selected = (f"(type({v}.ns) == map && {cel_string(key)} in {v}.ns && "
                    f"type({v}.ns[{cel_string(key)}]) == string && "
                    f"{v}.ns[{cel_string(key)}].trim().matches('^[0-9]+$'))")
        filtered = every_term(v, f"e.?key.orValue('') == {cel_string(key)} && "
                                 f"e.?operator.orValue('') in ['In', 'Gt'] && "
                                 f"cel.bind(vl, e.?values.orValue([]), type(vl) == list && "
                                 f"vl.exists(x, {_digits('x')}))")
        tests.append(f"({selected} || {filtered})")
    tests += [sized, f"{v}.c"]
    return "(" + "\n    || ".join(tests) + ")"


def _profile_states_memory(pod: dict, rules: Rules) -> bool:
    from webhook.core.context import Context
    from webhook.core.profile import build_profile

    profile = build_profile(pod, Context(rules))
    return not profile.gpus or profile.memory_stated


@mirrored(POD, _profile_states_memory)
def stated_plainly(rules: Rules) -> Subset:
    """``ai-admission.io/gpu-memory`` in whole Mi, Gi or Ti."""
    notes = "object.metadata.?annotations.orValue({})"
    return Subset(f"{notes}[?{cel_string(names.GPU_MEMORY)}].orValue('').matches({cel_string(PLAIN_MEMORY)})")


def memory_bytes() -> str:
    """The bytes per GPU of a gpu-memory annotation that `stated_plainly` passed (read by its suffix, with
    ``endsWith`` and ``replace``, which work on bytes: ``substring`` counts characters)."""
    found = "0"
    for suffix, amount in reversed(UNITS.items()):
        found = f"gm.endsWith('{suffix}') ? int(gm.replace('{suffix}', '')) * {amount} : {found}"
    return f"cel.bind(gm, object.metadata.annotations[{cel_string(names.GPU_MEMORY)}], {found})"


def byte_quantity(value: str, suffixes: tuple[str, ...] = tuple(BINARY_UNITS)) -> str:
    """`webhook.core.quantity.format_quantity` of a whole byte count ``value``: the largest binary suffix that
    divides it. ``suffixes``: the only ones it can take, where the caller knows (a count of whole MiB below a
    bound), smallest first; below the smallest, the count as is."""
    expression = f"string({value})"
    for suffix in suffixes:  # the smallest first: the largest suffix ends up outermost
        unit = BINARY_UNITS[suffix]
        expression = f"({value} % {unit} == 0 ? string({value} / {unit}) + '{suffix}' : {expression})"
    return f"({value} == 0 ? '0' : {expression})"
