"""GPUs claimed through Dynamic Resource Allocation: what a claim asks for, and what a pod taking claims holds.

A ResourceClaim (or the ResourceClaimTemplate a pod's claims are made from) lists device requests, each naming a
DeviceClass, a count and CEL selectors. For the GPU classes of the rules (`webhook.core.dra.rules`), ai-admission reads
the selectors (`webhook.core.dra.cel`) for the product name and the memory capacity, and the claim's own
``ai-admission.io/*`` annotations, and checks them against the catalog as it checks ``nvidia.com/gpu`` pods.
The same reading gives a pod that takes the claim its profile (`claimed_gpus`). Pure functions over dicts; the
claims a pod refers to come from a `ClaimSource` (the server's watch, or the files given to ``check``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Mapping

from webhook.core.findings import Finding, deny, warn
from webhook.core.hints import NO_HINTS, Hints, read_hints
from webhook.core.models import ModelChoice, bigger_models, known_models
from webhook.core.podview import PodFacts
from webhook.core.quantity import QuantityError, format_bytes, parse_quantity
from webhook.core.rules import GpuModel

from .. import names, podview
from ..context import Context
from ..view.claims import CLAIM, CLAIM_TEMPLATE, ClaimSource
from .cel import ATTRIBUTE, CAPACITY, Term, read_selector
from .rules import GpuDeviceClass, mig_profile_memory

GROUP = "resource.k8s.io"
# Claims made for a pod by Kubernetes itself, from a template (the resource claim controller) or from a pod's
# extended resources (the scheduler): the template, or the pod, was judged when it was admitted.
GENERATED = ("resource.kubernetes.io/pod-claim-name", "resource.kubernetes.io/extended-resource-claim")
EXAMPLE_MEMORY = "40Gi"  # the memory the messages suggest, as the pod messages do


ContainerKey = tuple[str, int]  # as in webhook.core.profile: ("initContainers" | "containers", index)
# (kind, name) -> the object of that kind and name in the pod's namespace, or None when it is not known


@dataclass
class GpuRequest:
    """One GPU request of a claim, or one alternative of a ``firstAvailable`` request, as far as it can be read."""

    request: str                  # the request's name, which containers refer to
    name: str                     # ``request``, or ``request/alternative``
    preferred: bool               # ``exactly``, or the first alternative: what a pod's profile counts
    device_class: GpuDeviceClass
    count: int                    # devices; allocationMode All: a node of the model, else 1
    all_devices: bool
    product: str | None           # the product name a selector pins
    model: GpuModel | None        # the catalog model the product name or the device class pins
    model_where: str | None
    memory: Decimal | None        # the memory each device must have (selectors, MIG profile or class)
    memory_where: str | None
    problems: list[Finding] = field(default_factory=list)


@dataclass
class ClaimAnalysis:
    kind: str
    name: str
    hints: Hints                  # the claim's ai-admission.io/* annotations (a template's and its claims')
    requests: list[GpuRequest]
    notes: dict[str, str] = field(default_factory=dict)  # its annotations as written, for messages

    @property
    def subject(self) -> str:
        return f'{self.kind} "{self.name}"'

    @property
    def states_memory(self) -> bool:
        hints = self.hints
        return hints.gpu_memory is not None or (hints.model_params is not None and hints.model_precision is not None)


def devices_of(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """``spec.devices`` of a claim, ``spec.spec.devices`` of a template."""
    spec = podview.as_dict(obj.get("spec"))
    if kind == CLAIM_TEMPLATE:
        spec = podview.as_dict(spec.get("spec"))
    return podview.as_dict(spec.get("devices"))


def annotations_of(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    """The claim's annotations; a template's own and those it gives its claims (those win)."""
    notes = podview.annotation_map(obj)
    if kind == CLAIM_TEMPLATE:
        notes.update(podview.annotation_map(podview.as_dict(obj.get("spec"))))
    return notes


def is_generated(obj: Mapping[str, Any]) -> bool:
    notes = podview.annotation_map(obj)
    return any(key in notes for key in GENERATED)


def model_name_of(product: str) -> str:
    """The node-label form of a product name, as the catalog knows it: "NVIDIA A100-SXM4-80GB" ->
    "NVIDIA-A100-SXM4-80GB" (GPU feature discovery's label); AMD's names have no spaces."""
    return "-".join(product.split())


def _alternatives(request: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, spec) of each way a request can be met: ``exactly``, or each ``firstAvailable`` entry in order.

    A request with ``deviceClassName`` beside its name is the flat v1beta1 form (``check`` reads files as written;
    the API server converts them to v1 before calling the webhook).
    """
    name = str(request.get("name", ""))
    if isinstance(request.get("exactly"), dict):
        return [(name, request["exactly"])]
    alternatives = podview.as_list(request.get("firstAvailable"))
    if alternatives:
        return [(f"{name}/{podview.as_dict(a).get('name', index)}", podview.as_dict(a))
                for index, a in enumerate(alternatives)]
    return [(name, dict(request))] if "deviceClassName" in request else []


def _terms(spec: Mapping[str, Any], domain: str) -> list[Term]:
    """What the request's selectors state about devices of ``domain``, and its ``capacity.requests``, which "is
    semantically equivalent to a CEL selector with device.capacity[<domain>].<name>.compareTo(quantity(<request
    quantity>)) >= 0" (resource.k8s.io/v1 CapacityRequirements; the domain defaults to the driver's)."""
    found: list[Term] = []
    for selector in podview.as_list(spec.get("selectors")):
        expression = podview.as_dict(podview.as_dict(selector).get("cel")).get("expression")
        if isinstance(expression, str):
            found.extend(t for t in read_selector(expression) if t.domain == domain)
    for name, amount in podview.as_dict(podview.as_dict(spec.get("capacity")).get("requests")).items():
        qualified, _, short = str(name).rpartition("/")
        if qualified in ("", domain) and isinstance(amount, (str, int)):
            found.append(Term(kind=CAPACITY, domain=domain, name=short, op=">=", value=str(amount)))
    return found


def _memory(terms: list[Term], device_class: GpuDeviceClass) -> tuple[Decimal | None, str | None]:
    """The largest memory the selectors require of a device; a required 0 (AMD: unknown) states none."""
    best: tuple[Decimal, str] | None = None
    for term in terms:
        if term.kind != CAPACITY or term.name != device_class.memory_capacity:
            continue
        try:
            amount = parse_quantity(term.value)
        except QuantityError:
            continue
        if amount > 0 and (best is None or amount > best[0]):
            best = amount, f'selector {device_class.capacity(term.name)} {term.op} {term.value}'
    if best is not None:
        return best
    if device_class.profile_attribute:
        for term in terms:
            profile_memory = mig_profile_memory(term.value) if term.kind == ATTRIBUTE else None
            if profile_memory is not None and term.name == device_class.profile_attribute:
                return profile_memory, f'selector {device_class.attribute(term.name)} == "{term.value}"'
    if device_class.memory is not None:
        return device_class.memory, f'device class "{device_class.name}"'
    return None, None


def _gpu_request(request: str, name: str, preferred: bool, spec: Mapping[str, Any], device_class: GpuDeviceClass,
                 ctx: Context) -> GpuRequest:
    terms = _terms(spec, device_class.domain)
    products = sorted({t.value for t in terms if t.kind == ATTRIBUTE and t.name == device_class.product_attribute})
    problems: list[Finding] = []
    product = products[0] if products else None
    if len(products) > 1:
        problems.append(deny("gpu-model-conflict",
                             f'request "{name}": the selectors pin the product names '
                             f'{" and ".join(_quoted(p) for p in products)}; no device has both'))
    model = ctx.find_model(model_name_of(product)) if product else None
    model_where = f'selector {device_class.product_selector(product)}' if product else None
    if device_class.model is not None:
        class_model = ctx.catalog.get(device_class.model)
        if product is None:
            model, model_where = class_model, f'device class "{device_class.name}"'
        elif model is not None and model is not class_model:
            problems.append(deny("gpu-model-conflict",
                                 f'request "{name}": device class "{device_class.name}" is {device_class.model} but '
                                 f'the selector pins {_quoted(product)} ({model.name}); no device is both'))
    if product and device_class.product_name_has_spaces and " " not in product:
        problems.append(warn("gpu-product-name-form",
                             f'request "{name}": product name {_quoted(product)} has no spaces, but the driver '
                             f'of {device_class.name} publishes names as nvidia-smi prints them, e.g. '
                             f'{_quoted(device_class.product_example)}; this selector may match no device'))
    memory, memory_where = _memory(terms, device_class)
    all_devices = spec.get("allocationMode") == "All"
    count = spec.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        count = 1
    if all_devices:
        count = model.gpus_per_node if model is not None and not device_class.mig else 1
    return GpuRequest(request=request, name=name, preferred=preferred, device_class=device_class, count=count,
                      all_devices=all_devices, product=product, model=model, model_where=model_where,
                      memory=memory, memory_where=memory_where, problems=problems)


def _quoted(text: str) -> str:
    return f'"{text}"'


def analyse_claim(obj: Mapping[str, Any], kind: str, ctx: Context) -> ClaimAnalysis:
    """The GPU requests of a ResourceClaim or ResourceClaimTemplate (other device classes are left out)."""
    classes = ctx.device_classes
    requests: list[GpuRequest] = []
    for request in podview.as_list(devices_of(obj, kind).get("requests")):
        if not isinstance(request, dict):
            continue
        for index, (name, spec) in enumerate(_alternatives(request)):
            device_class = classes.get(str(spec.get("deviceClassName", "")))
            if device_class is None or spec.get("adminAccess") is True:  # admin access: monitoring, not allocation
                continue
            requests.append(_gpu_request(str(request.get("name", "")), name, index == 0, spec, device_class, ctx))
    notes = annotations_of(obj, kind)
    hints = read_hints(PodFacts({"metadata": {"annotations": notes}}), ctx.rules) if notes else NO_HINTS
    return ClaimAnalysis(kind=kind, name=str(podview.metadata(obj).get("name") or ""), hints=hints,
                         requests=requests, notes=notes)


# -- the claim's own admission -----------------------------------------------------------------------------------

def model_fix(device_class: GpuDeviceClass, ctx: Context) -> str:
    return (f"add the selector {device_class.product_selector(device_class.product_example)} (the product name as "
            f"the driver publishes it; known models: {known_models(ctx, device_class.vendor)}), or use a device class that "
            f"pins one model")


def memory_fix(device_class: GpuDeviceClass, where: str) -> str:
    profile = (f' or {device_class.attribute(device_class.profile_attribute)} == "1g.10gb"'
               if device_class.profile_attribute else "")
    return (f"add the selector {device_class.memory_selector(EXAMPLE_MEMORY)} (per GPU){profile}, or annotation "
            f'"{names.GPU_MEMORY}: {EXAMPLE_MEMORY}" on {where}')


def _more_memory(ctx: Context, need: Decimal, vendor: str | None) -> str:
    bigger = bigger_models(ctx, need, vendor)
    return f"use a model with more memory ({bigger})" if bigger else "shard the model further"


def _request_findings(claim: ClaimAnalysis, req: GpuRequest, ctx: Context) -> list[Finding]:
    found = list(req.problems)
    label = f'request "{req.name}"'
    asks = f"{label} ({'all' if req.all_devices else req.count} x {req.device_class.name})"
    if req.all_devices and not ctx.rules.dra.allow_allocation_mode_all:
        most = f" (at most {req.model.gpus_per_node} for {req.model.name})" if req.model else ""
        found.append(deny("gpu-allocation-all",
                          f"{label} asks for every {req.device_class.name} device of a node (allocationMode: All); "
                          f"set allocationMode: ExactCount and a count{most}"))
    model_needed = not (req.device_class.mig and not ctx.accelerators.mig_needs_model)
    if model_needed and req.product is None and req.model is None:
        found.append(deny("gpu-model-missing",
                          f"{asks} does not pin the GPU model: {model_fix(req.device_class, ctx)}"))
    elif req.product is not None and req.model is None:
        found.append(deny("gpu-model-unknown",
                          f'{label}: product name {_quoted(req.product)} ({req.model_where}) is not in the '
                          f'catalog; known models: {known_models(ctx, req.device_class.vendor)}'))
    if req.memory is None and not claim.states_memory:
        found.append(deny("gpu-memory-missing",
                          f"{asks} does not say how much GPU memory it needs: "
                          f"{memory_fix(req.device_class, f'the {claim.kind}')}"))
    model = req.model
    if model is None or req.device_class.mig:
        return found
    if req.count > model.gpus_per_node and not req.all_devices:
        found.append(deny("gpu-count-exceeds-node",
                          f"{label} asks for {req.count} x {model.name}, but one {model.name} node holds "
                          f"{model.gpus_per_node}; split the work over several pods (one per node) or use fewer GPUs"))
    card = format_bytes(model.memory)
    if req.memory is not None and req.memory > model.memory:
        found.append(deny("gpu-memory-exceeds",
                          f"{label}: the {req.memory_where} asks for more memory than a {model.name} card holds "
                          f"({card}), so no device can match; "
                          f"{_more_memory(ctx, req.memory, req.device_class.vendor)}"))
    gpu_memory = claim.hints.gpu_memory
    if gpu_memory is not None and gpu_memory > model.memory:
        found.append(deny("gpu-memory-exceeds",
                          f"{label}: needs {format_bytes(gpu_memory)} of GPU memory per GPU (annotation "
                          f"{names.GPU_MEMORY}) but a {model.name} card holds {card}; "
                          f"{_more_memory(ctx, gpu_memory, req.device_class.vendor)}"))
    return found


def _params_findings(claim: ClaimAnalysis, ctx: Context) -> list[Finding]:
    """The model's weights (annotations model-params + model-precision) against the claim's cards.

    A claim has no workload class; its annotation ai-admission.io/workload-type, else the rules' default
    class, gives the memory factor (the pod that takes the claim is checked again with its own class).
    """
    hints = claim.hints
    if hints.gpu_memory is not None or hints.model_params is None or hints.model_precision is None:
        return []
    preferred = [r for r in claim.requests if r.preferred and not r.device_class.mig]
    count = sum(r.count for r in preferred)
    workload = hints.workload_type or ctx.rules.default_class
    policy = ctx.rules.classes.get(workload)
    factor = policy.memory_factor if policy else Decimal(1)
    total = Decimal(hints.model_params) * ctx.rules.precisions[hints.model_precision] * factor
    found: list[Finding] = []
    for model in {id(r.model): r.model for r in preferred if r.model is not None}.values():
        if count and total > model.memory * count:
            needed = max(1, math.ceil(total / model.memory))
            weights = (f"{names.MODEL_PARAMS}={claim.notes.get(names.MODEL_PARAMS)} x "
                       f"{names.MODEL_PRECISION}={claim.notes.get(names.MODEL_PRECISION)} x {factor.normalize():f} "
                       f"({workload} memory factor)")
            found.append(deny("gpu-memory-exceeds",
                              f"needs {format_bytes(total)} of GPU memory ({weights}) but {count} x {model.name} give "
                              f"{format_bytes(model.memory * count)}; ask for at least {needed} GPUs"))
    return found


def _total_findings(claim: ClaimAnalysis) -> list[Finding]:
    """All devices of a claim are allocated on one node: its requests of one model must fit one node."""
    found: list[Finding] = []
    by_model: dict[str, list[GpuRequest]] = {}
    for req in claim.requests:
        if req.preferred and req.model is not None and not req.device_class.mig and not req.all_devices:
            by_model.setdefault(req.model.name, []).append(req)
    for requests in by_model.values():
        model = requests[0].model
        assert model is not None
        total = sum(r.count for r in requests)
        if len(requests) > 1 and total > model.gpus_per_node:
            listed = ", ".join(_quoted(r.name) for r in requests)
            found.append(deny("gpu-count-exceeds-node",
                              f"requests {listed} ask for {total} x {model.name} in one claim, but one {model.name} "
                              f"node holds {model.gpus_per_node}; split the work over several pods (one per node) or "
                              f"use fewer GPUs"))
    return found


def claim_findings(obj: Mapping[str, Any], kind: str, ctx: Context) -> list[Finding]:
    """Every finding for a ResourceClaim or ResourceClaimTemplate: deny findings first, then warnings."""
    claim = analyse_claim(obj, kind, ctx)
    if not claim.requests:
        return []
    found = list(claim.hints.problems)
    for req in claim.requests:
        found.extend(_request_findings(claim, req, ctx))
    found.extend(_params_findings(claim, ctx))
    found.extend(_total_findings(claim))
    return sorted(found, key=lambda f: f.severity != "deny")


def judged_parts(obj: Mapping[str, Any] | None, kind: str) -> tuple[Any, ...]:
    """What the verdict on a claim depends on: an UPDATE that changes none of it (a finalizer, a label) is not
    judged again, so claims made before the policy keep working."""
    if obj is None:
        return ()
    notes = annotations_of(obj, kind)
    return devices_of(obj, kind), {k: v for k, v in notes.items() if k.startswith(names.PREFIX)}


# -- a pod that takes claims ----------------------------------------------------------------------------------

@dataclass
class Claimed:
    """The GPUs a pod takes through claims ai-admission knows, as its profile needs them.

    ``gpus`` is keyed ``<device class> (claim <name>)``, beside the pod's extended resources; each claim counts
    its requests once (containers sharing a claim share its devices), a ``firstAvailable`` request as its
    first alternative.
    """

    gpus: dict[str, int]
    users: list[ContainerKey]
    taints: dict[str, str | None]
    requests: list[tuple[str, ClaimAnalysis, GpuRequest]]   # (the pod's claim name, claim, preferred request)
    hints: Hints                                             # of the first claim whose annotations state memory
    problems: list[Finding] = field(default_factory=list)

    def joined(self, gpus: dict[str, int], users: tuple[ContainerKey, ...], mig_memory: Decimal | None,
               ) -> tuple[dict[str, int], tuple[ContainerKey, ...], Decimal | None]:
        """The pod's GPUs, GPU containers (init containers first) and MIG memory with the claims'."""
        merged_users = sorted({*users, *self.users}, key=lambda key: (key[0] != "initContainers", key[1]))
        if all(r.device_class.mig for _, _, r in self.requests) and (mig_memory is not None or not gpus):
            slices = [r.memory for _, _, r in self.requests]
            if all(m is not None for m in slices):
                mig_memory = min([m for m in slices if m is not None] + ([mig_memory] if mig_memory else []))
            else:
                mig_memory = None
        else:
            mig_memory = None
        return {**gpus, **self.gpus}, tuple(merged_users), mig_memory

    def pinned(self, pinned: ModelChoice | None, ctx: Context) -> ModelChoice | None:
        """What pins the pod's model: its own nodeSelector or affinity, else its claims."""
        pins = [(r.model, f'claim "{pod_name}" ({claim.subject} request "{r.name}", {r.model_where})', r)
                for pod_name, claim, r in self.requests if r.model is not None or r.product is not None]
        models = {id(m): m for m, _, _ in pins if m is not None}
        if len(models) > 1:
            self.problems.append(deny("gpu-model-conflict",
                                      f"the pod's claims pin different GPU models "
                                      f"({', '.join(sorted(m.name for m in models.values()))}); one pod runs on one "
                                      f"node, so take one model"))
        if not pins:
            return pinned
        model, claim_where, req = pins[0]
        if pinned is not None:
            if model is not None and pinned.models and model not in pinned.models:
                own = ", ".join(m.name for m in pinned.models)
                self.problems.append(deny("gpu-model-conflict",
                                          f'{pinned.source} pins "{pinned.written}" ({own}) but {claim_where} pins '
                                          f"{model.name}; keep one of them"))
            return pinned
        if model is not None:
            return ModelChoice(written=model.name, source=claim_where, models=(model,))
        name = model_name_of(req.product or "")
        return ModelChoice(written=name, source=claim_where, models=(), unknown=(name,))

    def memory_need(self, count: int) -> tuple[Decimal | None, Decimal | None, tuple[Any, ...] | None]:
        """(per GPU, total, basis) from the claims' selectors, when every GPU request of the pod states it."""
        stated = [(r.memory, f"{claim.subject} request \"{r.name}\": {r.memory_where}")
                  for _, claim, r in self.requests if r.memory is not None]
        if not stated or len(stated) < len(self.requests):
            return None, None, None
        memory, where = max(stated, key=lambda s: s[0] or 0)
        assert memory is not None
        return memory, memory * max(count, 1), ("claim", memory, where)

    def _missing(self, what: Callable[[GpuRequest], bool]) -> tuple[ClaimAnalysis, GpuRequest]:
        return next(((claim, r) for _, claim, r in self.requests if what(r)),
                    (self.requests[0][1], self.requests[0][2]))

    def model_fix(self, ctx: Context) -> str:
        claim, req = self._missing(lambda r: r.model is None and r.product is None)
        dc = req.device_class
        return (f"add the selector {dc.product_selector(dc.product_example)} to request \"{req.name}\" of "
                f"{claim.subject} (known models: {known_models(ctx, dc.vendor)})")

    def memory_fix(self) -> str:
        claim, req = self._missing(lambda r: r.memory is None)
        dc = req.device_class
        return (f"add the selector {dc.memory_selector(EXAMPLE_MEMORY)} to request \"{req.name}\" of "
                f"{claim.subject}, or annotation \"{names.GPU_MEMORY}: {EXAMPLE_MEMORY}\" (per GPU) on the pod")

    def toleration_keys(self, gpus: Mapping[str, int]) -> list[str]:
        """The taints to tolerate for ``gpus``: a claim's GPUs are tolerated under their class's taint key."""
        keys = {self.taints.get(name, name) for name in gpus}
        return sorted(k for k in keys if k)


def _claim_names(container: Mapping[str, Any], gpu_requests: Mapping[str, set[str]]) -> bool:
    """Whether the container uses a GPU of the pod's claims (a whole claim, or one of its GPU requests)."""
    for ref in podview.as_list(podview.as_dict(container.get("resources")).get("claims")):
        ref = podview.as_dict(ref)
        requests = gpu_requests.get(str(ref.get("name", "")))
        if requests and (not ref.get("request") or str(ref["request"]).split("/")[0] in requests):
            return True
    return False


def unknown_claims(facts: PodFacts, ctx: Context, claims: ClaimSource | None) -> list[Finding]:
    """A warning for each claim the pod takes that is not known here (not among check's input; not yet seen by the
    server's watch): what it holds was not judged with the pod."""
    if claims is None or not ctx.device_classes:
        return []
    found = []
    for entry in podview.as_list(facts.spec.get("resourceClaims")):
        entry = podview.as_dict(entry)
        template, claim_name = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        kind, name = (CLAIM_TEMPLATE, template) if isinstance(template, str) else (CLAIM, claim_name)
        if isinstance(name, str) and name and claims(kind, name) is None:
            found.append(warn("claim-not-known",
                              f'claim "{entry.get("name", "?")}" names {kind} "{name}", which is not known here: the '
                              f"devices it asks for were not judged with the pod (the {kind} is judged at its own "
                              f"admission)"))
    return found


def claimed_gpus(facts: PodFacts, ctx: Context, claims: ClaimSource | None) -> Claimed | None:
    """The GPUs the pod takes through claims ai-admission knows (None: none). A claim not known yet (its
    template is created after the pod, or the watch has not seen it) is left out: the pod is judged as if
    it did not ask for it, and the claim is judged at its own admission."""
    entries = podview.as_list(facts.spec.get("resourceClaims"))
    if claims is None or not entries or not ctx.device_classes:
        return None
    gpus: dict[str, int] = {}
    taints: dict[str, str | None] = {}
    requests: list[tuple[str, ClaimAnalysis, GpuRequest]] = []
    gpu_requests: dict[str, set[str]] = {}
    hints = NO_HINTS
    for entry in entries:
        entry = podview.as_dict(entry)
        pod_name = str(entry.get("name", ""))
        template, claim_name = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        kind, name = (CLAIM_TEMPLATE, template) if isinstance(template, str) else (CLAIM, claim_name)
        obj = claims(kind, name) if isinstance(name, str) and name else None
        if obj is None:
            continue
        claim = analyse_claim(obj, kind, ctx)
        preferred = [r for r in claim.requests if r.preferred]
        if not preferred:
            continue
        if hints is NO_HINTS and claim.states_memory:
            hints = claim.hints
        gpu_requests[pod_name] = {r.request for r in preferred}
        for req in preferred:
            key = f"{req.device_class.name} (claim {pod_name})"
            gpus[key] = gpus.get(key, 0) + req.count
            taints[key] = req.device_class.taint_key
            requests.append((pod_name, claim, req))
    if not requests:
        return None
    users: list[ContainerKey] = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(podview.as_list(facts.spec.get(kind))):
            if isinstance(container, dict) and _claim_names(container, gpu_requests):
                users.append((kind, index))
    return Claimed(gpus=gpus, users=users, taints=taints, requests=requests, hints=hints)
