"""Accelerator resources: which names are accelerators, which a pod asks for, and how many GPUs it holds.

One resource test, in three precisions written from the same parts of the rules (the listed resources, the MIG
pattern, the device-named patterns, the pattern of names that look like GPUs):

- `names_accelerator` (a superset of `Accelerators.is_accelerator`): the webhooks' ``matchConditions`` and the backstop's
  first test; no exemption is tested, so a sharing parameter that looks like a GPU is let through;
- `is_accelerator` (exact): what the backstop's rule reads;
- `counted` (a subset of `Accelerators.is_device`): what the native policy counts in whole devices as the webhook does
  (a listed GPU resource that is not a share, or a MIG slice); any other accelerator leaves a pod to the webhook.

Amounts are read as the webhook reads them (`webhook.core.profile._accelerator_amounts`): the limit, else the
request, a positive whole number. `object` in an admission policy is the typed pod, so a pod's resources are maps
of quantities and are read directly; the views of other kinds' templates (`views`) may hold anything and are read
through `with_limits_and_requests`.
"""

from __future__ import annotations

import re

from webhook.core.dra.rules import DEVICE_CLASS_RESOURCE_PREFIX
from webhook.core.rules import DeviceResource, Rules

from .precision import POD, RESOURCE, Exact, Subset, Superset, mirrored
from .text import anchored, caseless_regex, cel_list, cel_regex, cel_string

APP = "object.spec.containers"
INIT = "object.spec.?initContainers.orValue([])"
EVERY = f"({APP} + {INIT})"  # app and init containers, in that order
# the same in the webhooks' conditions, without optionals (which some evaluators of conditions lack)
ALL_CONTAINERS = "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : []))"


def _listed(rules: Rules) -> list[str]:
    """The resources the rules name: their GPU resources and the DRA device classes' extended resources."""
    return sorted(rules.accelerators.gpu_resources | rules.dra.extended_resources)


def device_test(name: str, device: DeviceResource) -> str:
    """``name`` is a resource of the rules' ``deviceResources`` entry ``device`` (`Accelerators.device_resource`)."""
    regex = caseless_regex(re.compile(anchored(device.pattern.pattern)))
    if device.exclude is None:
        return f"{name}.matches({regex})"
    return f"({name}.matches({regex}) && !{name}.matches({caseless_regex(device.exclude)}))"


def _mig(rules: Rules) -> str | None:
    """The MIG pattern, anchored as `re.match` reads it."""
    return cel_string(anchored(rules.accelerators.mig_pattern.pattern)) if rules.accelerators.mig_pattern is not None else None


@mirrored(RESOURCE, lambda n, rules: rules.accelerators.is_accelerator(n))
def names_accelerator(rules: Rules, name: str = "n") -> Superset:
    """``name`` may be an accelerator: listed, a MIG slice, device-named, or looking like a GPU (no exemption)."""
    tests = [f"{name} in {cel_list(_listed(rules))}"] if _listed(rules) else []
    if rules.accelerators.mig_pattern is not None:
        tests.append(f"{name}.matches({cel_regex(rules.accelerators.mig_pattern)})")
    tests += [f"{name}.matches({caseless_regex(d.pattern)})" for d in rules.accelerators.device_resources]
    if rules.accelerators.unknown_accelerator_pattern is not None:
        tests.append(f"{name}.matches({caseless_regex(rules.accelerators.unknown_accelerator_pattern)})")
    return Superset(" || ".join(tests) or "false")


@mirrored(RESOURCE, lambda n, rules: rules.accelerators.is_accelerator(n))
def is_accelerator(rules: Rules, name: str = "n") -> Exact:
    """`Accelerators.is_accelerator`: a listed resource, a DRA device class's, the MIG pattern, a device-named one, or
    one that looks like a GPU (`Accelerators.is_unknown_accelerator`: not a sharing parameter, not one the rules exempt)."""
    listed = _listed(rules)
    tests = [f"{name} in {cel_list(listed)}"] if listed else []
    mig = _mig(rules)
    if mig is not None:
        tests.append(f"{name}.matches({mig})")
    tests += [device_test(name, device) for device in rules.accelerators.device_resources]
    if rules.accelerators.unknown_accelerator_pattern is not None:
        accelerators = rules.accelerators
        exempt = sorted({*accelerators.not_accelerators, *accelerators.memory_resources,
                         *accelerators.memory_percent_resources})
        test = f"{name}.matches({caseless_regex(rules.accelerators.unknown_accelerator_pattern)})"
        if exempt:
            test += f" && !({name} in {cel_list(exempt)})"
        if mig is not None:
            test += f" && !{name}.matches({mig})"
        test += "".join(f" && !{device_test(name, device)}" for device in rules.accelerators.device_resources)
        if rules.accelerators.not_devices_pattern is not None:
            test += (f" && !{name}.substring({name}.lastIndexOf('/') + 1)"
                     f".matches({caseless_regex(rules.accelerators.not_devices_pattern)})")
        tests.append(f"({test})")
    return Exact("(" + " || ".join(tests or ["false"]) + ")")


@mirrored(RESOURCE, lambda n, rules: rules.accelerators.is_device(n))
def counted(rules: Rules, name: str = "n") -> Subset:
    """``name`` is counted in whole devices, as the webhook counts them and CEL can: a listed GPU resource that is
    not a share of memory, or a MIG slice."""
    devices = sorted(r for r in rules.accelerators.gpu_resources if r not in rules.accelerators.share_resources)
    tests = [f"{name} in {cel_list(devices)}"] if devices else []
    mig = _mig(rules)
    if mig is not None:
        tests.append(f"{name}.matches({mig})")
    return Subset("(" + " || ".join(tests or ["false"]) + ")")


def _pod_names(pod: dict, kinds: tuple[str, ...] = ("containers", "initContainers")) -> list[str]:
    """The resource names a pod's containers name (for the mirrors)."""
    found: list[str] = []
    for kind in kinds:
        for container in (pod.get("spec") or {}).get(kind) or []:
            resources = container.get("resources") or {} if isinstance(container, dict) else {}
            for part in ("limits", "requests"):
                found += [n for n in (resources.get(part) or {}) if isinstance(n, str)]
    return found


@mirrored(POD, lambda pod, rules: any(rules.accelerators.is_accelerator(n) for n in _pod_names(pod)))
def asks_for_accelerator(rules: Rules) -> Superset:
    """Some container (init containers too) names an accelerator resource in its requests or limits (whatever
    the amount: a malformed one is a finding too)."""
    test = names_accelerator(rules, "r")
    if test == "false":
        return Superset("false")
    return Superset(f"{ALL_CONTAINERS}.exists(c, has(c.resources) && ("
                    f"(has(c.resources.limits) && c.resources.limits.exists(r, {test})) || "
                    f"(has(c.resources.requests) && c.resources.requests.exists(r, {test}))))")


@mirrored(POD, lambda pod, rules: any(n.startswith(DEVICE_CLASS_RESOURCE_PREFIX) for n in _pod_names(pod)))
def asks_for_device_class_resource(rules: Rules) -> Exact:
    """Some container names a DeviceClass's extended resource (``deviceclass.resource.kubernetes.io/<class>``)."""
    prefix = cel_string(DEVICE_CLASS_RESOURCE_PREFIX)
    return Exact(f"{ALL_CONTAINERS}.exists(c, has(c.resources) && ("
                 f"(has(c.resources.limits) && c.resources.limits.exists(r, r.startsWith({prefix}))) || "
                 f"(has(c.resources.requests) && c.resources.requests.exists(r, r.startsWith({prefix})))))")


def shares_by_annotation(rules: Rules) -> list[Superset]:
    """The pod carries an annotation of a sharing scheduler that hands out GPU shares (``gpu-fraction``)."""
    keys = {key for share in rules.accelerators.share_annotations for key in share.keys()}
    if not keys:
        return []
    return [Superset(f"has(object.metadata.annotations) && {cel_list(keys)}.exists(k, k in "
                     f"object.metadata.annotations)")]


# -- amounts --------------------------------------------------------------------------------------------------

def quantity_text(value: str) -> str:
    """A quantity as the webhook reads it: a string (trimmed) or a number written as one."""
    return (f"cel.bind(qv, {value}, type(qv) == string ? qv.trim() : "
            f"((type(qv) == int || type(qv) == uint || type(qv) == double) ? string(qv) : ''))")


def _whole_and(value: str, comparison: str) -> str:
    """``value`` is a whole quantity ``q`` and ``comparison`` (of ``q``) holds."""
    return f"cel.bind(q, {quantity_text(value)}, isQuantity(q) && quantity(q).isInteger() && {comparison})"


def positive_amount(value: str) -> str:
    """A positive whole amount, as the webhook reads an accelerator's (`webhook.core.profile`)."""
    return _whole_and(value, "quantity(q).isGreaterThan(quantity('0'))")


def with_limits_and_requests(resources: str, body: str) -> str:
    """``body`` with ``li`` and ``rq`` bound to the limits and requests of ``resources`` (maps, whatever was sent:
    the views of other kinds' templates)."""
    return (f"cel.bind(rr, {resources}, "
            f"cel.bind(li, cel.bind(l0, type(rr) == map ? rr.?limits.orValue({{}}) : {{}}, "
            f"type(l0) == map ? l0 : {{}}), "
            f"cel.bind(rq, cel.bind(r0, type(rr) == map ? rr.?requests.orValue({{}}) : {{}}, "
            f"type(r0) == map ? r0 : {{}}), "
            f"{body})))")


def asked_names(test: str, limits: str = "li", requests: str = "rq") -> str:
    """The resources ``n`` of ``limits`` and ``requests`` that pass ``test`` and ask for a positive whole amount,
    the limit's, else the request's."""
    return (f"{limits}.filter(n, {test} && {positive_amount(f'{limits}[n]')}) + "
            f"{requests}.filter(n, !(n in {limits}) && {test} && {positive_amount(f'{requests}[n]')})")


def whole_amount(value: str) -> str:
    """A whole, non-negative amount (zero too), as the webhook reads an accelerator's: not malformed."""
    return _whole_and(value, "!quantity(q).isLessThan(quantity('0'))")


def asks_or_malformed(rules: Rules, resources: str) -> str:
    """The container ``resources`` (any value) counts as asking for an accelerator: a positive whole amount, or a
    malformed one (`webhook.core.profile.effective_gpus`: never silently treated as none)."""
    test = is_accelerator(rules, "n")
    body = (f"li.exists(n, {test} && ({positive_amount('li[n]')} || !{whole_amount('li[n]')})) || "
            f"rq.exists(n, !(n in li) && {test} && ({positive_amount('rq[n]')} || !{whole_amount('rq[n]')}))")
    return with_limits_and_requests(resources, body)


def asked(rules: Rules, resources: str) -> str:
    """`_accelerator_amounts`: the accelerators one container's ``resources`` (any value) ask for."""
    return with_limits_and_requests(resources, asked_names(is_accelerator(rules, "n")))


def limits(container: str) -> str:
    """A typed container's limits (a map of quantities)."""
    return f"{container}.?resources.?limits.orValue({{}})"


def requests(container: str) -> str:
    return f"{container}.?resources.?requests.orValue({{}})"


def typed_positive(value: str) -> str:
    """`positive_amount` of a typed pod's quantity (a string): plain digits first, the quantity library after."""
    text = f"string({value})"
    return (f"({text}.matches('^[1-9][0-9]{{0,8}}$') || (isQuantity({text}) && quantity({text}).isInteger() && "
            f"quantity({text}).isGreaterThan(quantity('0'))))")


def typed_amount(value: str) -> str:
    """The whole amount of a typed pod's quantity that `typed_positive` passed."""
    text = f"string({value})"
    return f"({text}.matches('^[0-9]{{1,9}}$') ? int({text}) : quantity({text}).asInteger())"


def typed_asked(test: str, container: str) -> str:
    """`asked_names` of a typed container: the resources passing ``test`` with a positive whole amount, the limit's,
    else the request's."""
    li, rq = limits(container), requests(container)
    return (f"{li}.filter(n, {test} && {typed_positive(f'{li}[n]')}) + "
            f"{rq}.filter(n, !(n in {li}) && {test} && {typed_positive(f'{rq}[n]')})")


def counted_asks(rules: Rules, container: str) -> str:
    """The counted resources (`counted`) a typed container asks for."""
    return typed_asked(counted(rules), container)


def container_gpus(rules: Rules, container: str) -> str:
    """The GPUs a typed container asks for in a pod whose accelerators are all counted: the amount of each counted
    resource it asks for (`counted_asks`), the limit's else the request's, summed."""
    li, rq = limits(container), requests(container)
    return (f"({counted_asks(rules, container)}).map(n, n in {li} ? {typed_amount(f'{li}[n]')} : "
            f"{typed_amount(f'{rq}[n]')}).sum()")


ORDINARY = "(n in ['cpu', 'memory', 'ephemeral-storage'] || n.startsWith('hugepages-'))"


def countable(rules: Rules, container: str) -> str:
    """Every accelerator a typed container names is one the webhook counts in devices and CEL can (`counted`);
    the usual names are let through first, so the long accelerator test runs only for the rest."""
    each = f"{ORDINARY} || {counted(rules)} || !{is_accelerator(rules, 'n')}"
    return f"{limits(container)}.all(n, {each}) && {requests(container)}.all(n, {each})"


def counted_asks_of_every(rules: Rules) -> str:
    """Each container's counted asks (`counted_asks`), app containers then init containers: read once, for the
    names the pod asks for and for each container's GPUs."""
    return f"{EVERY}.map(c, {counted_asks(rules, 'c')})"


def amounts(container: str, names: str) -> str:
    """The GPUs a typed container asks for of ``names`` (a list its `counted_asks` gave): their amounts, the limit's
    else the request's, summed."""
    li, rq = limits(container), requests(container)
    return f"{names}.map(n, n in {li} ? {typed_amount(f'{li}[n]')} : {typed_amount(f'{rq}[n]')}).sum()"


def counted_names(rules: Rules, asks: str | None = None) -> str:
    """The counted accelerators a countable pod's containers ask for, each once, in the order asked (``asks``:
    `counted_asks_of_every`, where a policy holds it)."""
    return f"{asks or counted_asks_of_every(rules)}.flatten().distinct()"


def accelerator_names(rules: Rules) -> str:
    """Every accelerator the pod's containers (init too) ask for, each once (`asked`, with the exact test)."""
    every = f"{EVERY}.map(c, {asked(rules, 'c.?resources.orValue({})')}).flatten()"
    return f"{every}.distinct()"
