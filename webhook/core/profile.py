"""The resource profile: how many accelerators of which model, how much GPU memory, preemptible, multi-node.

GPU counts follow the scheduler's effective-request rule, so the profile agrees with what the pod will
actually hold: init containers run one at a time before the app containers, except restartable (sidecar) init
containers that keep running beside everything started after them. The model and memory come from wherever the
pod states them (`webhook.core.models`); a distributed job's memory need is spread over all its GPUs
(`webhook.core.workloads.parallelism`).

The GPU count the need takes (``gpus_needed``): a whole model's need (``model-params`` x precision x the class's
memory factor) of a pod that spreads nothing on purpose takes the count the capacity denial gives (the next power
of two of the cards that hold it, within one node), and is spread over those GPUs only, not over every GPU asked
for; every other need (stated per GPU, of a multi-node job, of a data-parallel class, of a pod that states its
parallelism) takes every GPU the pod asks for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping

from . import names, podview
from .classify import Classification, classify
from .context import Context
from .dra import claims as dra
from .dra.rules import GpuDeviceClass
from .findings import Finding, deny
from .hints import Hints, read_hints
from .models import MemoryStatement, ModelChoice, annotated_models, device_choice, pinned_models, stated_memory
from .podview import PodFacts
from .quantity import QuantityError, format_bytes, parse_quantity
from .rules import ClassSettings, GpuModel
from .view import claims as claim_view
from .workloads.parallelism import (
    SINGLE,
    World,
    cards_holding,
    declared_parallelism,
    launcher_world,
    parallel_size,
    tensor_parallel,
    world_of,
)

_GB = Decimal(10**9)


# The per-request records (this, Hints, Classification, Finding, Verdict, AdmissionRequest) are plain dataclasses
# that nothing modifies once built. Not frozen: a frozen dataclass sets every field through object.__setattr__,
# about four times the construction cost. Not slots=True either: that makes dataclasses build a new class, which
# mypyc cannot compile as a native class, so every construction ran a generated __init__ in the interpreter.
@dataclass
class Profile:
    classification: Classification
    hints: Hints
    gpus: Mapping[str, int]                 # effective pod request per accelerator resource name
    mig_memory: Decimal | None              # memory a MIG slice brings, when every accelerator is a MIG slice
    model: GpuModel | None                  # the model judged against: the smallest of those the pod allows
    model_name: str | None                  # as the user wrote it
    model_source: str | None                # "annotation ai-admission.io/gpu-model", "nodeSelector gpu-type", ...
    memory_per_gpu: Decimal | None          # bytes of GPU memory each card must hold (over the GPUs the need takes)
    memory_total: Decimal | None            # bytes over all the job's cards (the pod's, for a single pod)
    memory_basis: MemoryBasis | None        # how the need was worked out (see memory_source)
    preemptible: bool                       # the first question's answer, as the pod is given it (its priority)
    multi_node: bool                        # the third's: one of several pods of one job, across nodes
    multi_node_reason: str | None
    facts: PodFacts = field(repr=False, compare=False)  # the pod's parts as read once, for later steps
    problems: tuple[Finding, ...] = field(default=())
    accelerator_containers: tuple[ContainerKey, ...] = ()  # init containers first, each list in order
    pinned_model: str | None = None          # what the pod's own nodeSelector/affinity pins, if anything
    pinned_where: str | None = None
    choice: ModelChoice | None = None        # every model the pod allows, and the names that are not models
    pinned: ModelChoice | None = None        # the node selection's choice (for conflicts with the annotation)
    memory_stated: bool = False              # the pod says its memory need (possibly as a share of the card)
    world: World = field(default_factory=lambda: SINGLE)  # the pods of the pod's job
    tensor_parallel: tuple[int, str] | None = None  # degree and where the pod says it (read for PCIe cards only)
    vendors: tuple[str, ...] = ()            # GPU vendors of the accelerator resources asked for (sorted)
    parallelism: str | None = None           # where the pod says it spreads its work over its GPUs on purpose
                                             # (read where a whole model's need would leave GPUs idle)
    gpus_needed: int | None = None           # the GPUs its memory need takes (None: the need or the card unknown)
    preemptible_reason: str | None = None    # where the answer to "can it be preempted?" came from

    @property
    def models(self) -> tuple[GpuModel, ...]:
        return self.choice.models if self.choice else (() if self.model is None else (self.model,))

    @property
    def card_memory(self) -> Decimal | None:
        """Memory of each GPU device the pod gets: a MIG slice's when its node label names one, else the card's."""
        if self.choice is not None and self.choice.device_memory is not None:
            return self.choice.device_memory
        return self.model.memory if self.model is not None else None

    @property
    def card_name(self) -> str:
        """What one GPU device of the pod is, for messages ("h100-80g card", "a100-80g MIG 1g.10gb slice")."""
        model = self.model.name if self.model is not None else "?"
        if self.choice is not None and self.choice.device_memory is not None:
            return f"{model} {self.choice.device}"
        return f"{model} card"

    @property
    def node_gpus(self) -> int | None:
        """GPUs one node holds where the pod can run: the instance type's, else the largest node of its models."""
        return node_gpus(self.choice, self.models)

    @property
    def gpus_beyond_need(self) -> int:
        """GPUs the pod asks for that its memory need does not take (0 when it takes them all, or is not known)."""
        return max(self.gpu_count - self.gpus_needed, 0) if self.gpus_needed is not None else 0

    @property
    def job_gpus(self) -> int:
        """GPUs of the whole job (this pod's times the job's pods): what a sharded model is spread over."""
        return max(self.gpu_count, 1) * self.world.pods
    claimed: dra.Claimed | None = None       # GPUs taken through DRA claims (see webhook.core.dra)

    @property
    def memory_source(self) -> str | None:
        """How the memory need was worked out, for messages ("annotation ...=40Gi per GPU")."""
        return _explain_memory(self.memory_basis)

    @property
    def workload(self) -> str:
        return self.classification.workload

    @property
    def gpu_count(self) -> int:
        return sum(self.gpus.values())

    @property
    def is_mig(self) -> bool:
        return self.mig_memory is not None

    def gpu_text(self) -> str:
        return ", ".join(f"{count} {name}" for name, count in sorted(self.gpus.items())) or "no accelerators"


_ABSENT: Any = object()


def _plain_count(request: Any, limit: Any) -> int | None:
    """The device count when it is written the usual way ("1", 8, request absent or equal); else None, and
    the exact check (quantities, mismatches, fractions) in `_accelerator_amounts` decides."""
    value = request if limit is _ABSENT else limit
    if type(value) is str and value.isascii() and value.isdigit():
        count = int(value)
    elif type(value) is int and value >= 0:
        count = value
    else:
        return None
    if limit is not _ABSENT and request is not _ABSENT and request != limit:
        return None
    return count


def _accelerator_amounts(container: Mapping[str, Any], ctx: Context, where: Callable[[], str],
                         problems: list[Finding]) -> tuple[dict[str, int], bool]:
    """Accelerators one container asks for, and whether it names one with a malformed amount.

    For extended resources the limit is the request; both given must agree. ``where`` names the container in
    messages (built only when there is something to say).
    """
    res = container.get("resources")
    if not isinstance(res, dict):
        return {}, False
    requests = podview.as_dict(res.get("requests"))
    limits = podview.as_dict(res.get("limits"))
    amounts: dict[str, int] = {}
    malformed = False
    for name in requests.keys() | limits.keys():
        if not ctx.accelerators.is_accelerator(name):
            continue
        count = _plain_count(requests.get(name, _ABSENT), limits.get(name, _ABSENT))
        if count is not None:
            if count:
                amounts[name] = count
            continue
        try:
            request = parse_quantity(requests[name]) if name in requests else None
            limit = parse_quantity(limits[name]) if name in limits else None
        except QuantityError as exc:
            problems.append(deny("invalid-quantity", f"{where()}: resources for {name}: {exc}"))
            malformed = True
            continue
        if request is not None and limit is not None and request != limit:
            problems.append(deny("gpu-request-limit-mismatch",
                                 f"{where()}: {name} request ({requests[name]}) and limit ({limits[name]}) differ; "
                                 f"accelerators cannot be overcommitted, so set both to the same whole number"))
        value = limit if limit is not None else request
        assert value is not None
        if value != value.to_integral_value() or value < 0:
            problems.append(deny("invalid-quantity", f"{where()}: {name} must be a whole number of devices, not {value}"))
            malformed = True
            continue
        if value:
            amounts[name] = int(value)
    shares = ctx.accelerators.share_resources
    if amounts and shares:  # a share of one GPU by its memory (gpushare): one device, whatever the amount
        for name in amounts:
            if name in shares:
                amounts[name] = 1
    return amounts, malformed


def _annotation_shares(facts: PodFacts, ctx: Context,
                       problems: list[Finding]) -> tuple[dict[str, int], tuple[ContainerKey, ...]] | None:
    """GPU shares a sharing scheduler hands out by pod annotation (KAI-Scheduler's ``gpu-fraction`` or
    ``gpu-memory``): the devices they stand for and the container that gets them, or None."""
    notes = facts.annotations
    for share in ctx.accelerators.share_annotations:
        present = [key for key in share.keys() if key in notes]
        if not present:
            continue
        for key in present:
            if _share_amount(notes[key], fraction=key == share.fraction) is None:
                wanted = "a fraction of one GPU above 0 and at most 1" if key == share.fraction else \
                    "a positive amount (MiB)"
                problems.append(deny("invalid-annotation", f"annotation {key}={notes[key]!r}: expected {wanted}"))
        devices = 1
        if share.devices and share.devices in notes:
            text = notes[share.devices].strip()
            if text.isdigit() and int(text) > 0:
                devices = int(text)
            else:
                problems.append(deny("invalid-annotation", f"annotation {share.devices}={notes[share.devices]!r}: "
                                                            f"expected a whole number of devices, 1 or more"))
        users: tuple[ContainerKey, ...] = (("containers", 0),) if podview.as_list(facts.spec.get("containers")) else ()
        if share.container and share.container in notes:  # an app container, or an init container (KAI allows it)
            wanted = notes[share.container]
            found = [(kind, index) for kind in ("containers", "initContainers")
                     for index, c in enumerate(podview.as_list(facts.spec.get(kind)))
                     if isinstance(c, dict) and c.get("name") == wanted]
            if found:
                users = (found[0],)
            else:
                problems.append(deny("invalid-annotation", f"annotation {share.container}={wanted!r} names no "
                                                            f"container of the pod"))
        return {share.resource: devices}, users
    return None


def _share_amount(text: str, *, fraction: bool) -> Decimal | None:
    """The value of a share annotation: a fraction in (0, 1], or a positive amount; None when it is neither."""
    try:
        value = Decimal(text.strip())
    except ArithmeticError:
        return None
    if not value.is_finite() or value <= 0 or (fraction and value > 1):
        return None
    return value


ContainerKey = tuple[str, int]  # ("initContainers" | "containers", index in that list)


def _asking(facts: PodFacts, kind: str, ctx: Context, problems: list[Finding],
            users: list[ContainerKey]) -> Iterator[tuple[dict[str, Any], dict[str, int]]]:
    """(container, accelerator amounts) for each container of ``kind``; records in ``users`` those that ask."""
    label = "init container" if kind == "initContainers" else "container"
    for index, container in enumerate(podview.as_list(facts.spec.get(kind))):
        if not isinstance(container, dict):
            continue
        amounts, malformed = _accelerator_amounts(
            container, ctx, lambda: f'{label} "{container.get("name", "?")}"', problems)  # noqa: B023 - called now
        if amounts or malformed:
            users.append((kind, index))
        yield container, amounts


def effective_gpus(facts: PodFacts, ctx: Context,
                   problems: list[Finding]) -> tuple[dict[str, int], tuple[ContainerKey, ...]]:
    """Effective pod request per accelerator: max(app + sidecars, each plain init container + sidecars before it).

    Also returns which containers ask for an accelerator (``nvidia.com/gpu: 0`` does not; a malformed amount
    does, so it is never silently treated as none), init containers first, so later steps need not parse the
    resources again.
    """
    users: list[ContainerKey] = []
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    if facts.spec.get("initContainers"):
        for container, amounts in _asking(facts, "initContainers", ctx, problems, users):
            if podview.is_sidecar(container):
                for name, count in amounts.items():
                    sidecars[name] = sidecars.get(name, 0) + count
            else:
                for name in {*amounts, *sidecars}:
                    init_peak[name] = max(init_peak.get(name, 0), amounts.get(name, 0) + sidecars.get(name, 0))
    app: dict[str, int] = dict(sidecars)
    for _, amounts in _asking(facts, "containers", ctx, problems, users):
        for name, count in amounts.items():
            app[name] = app.get(name, 0) + count
    if not app and not init_peak and ctx.accelerators.share_annotations:
        shares = _annotation_shares(facts, ctx, problems)
        if shares is not None:
            return shares[0], shares[1]
    if not init_peak:
        return app, tuple(users)
    result = {name: max(app.get(name, 0), init_peak.get(name, 0)) for name in {*app, *init_peak}}
    return {name: count for name, count in result.items() if count > 0}, tuple(users)


def _mig_memory(gpus: Mapping[str, int], ctx: Context) -> Decimal | None:
    """Memory per slice when every accelerator is a MIG slice of one size (nvidia.com/mig-1g.10gb -> 10 GB)."""
    if not gpus or ctx.accelerators.mig_pattern is None:
        return None
    sizes = set()
    for name in gpus:
        match = ctx.accelerators.mig_pattern.match(name)
        if not match or "mem" not in match.groupdict():
            return None
        sizes.add(Decimal(match.group("mem")) * _GB)
    return min(sizes)


# How the GPU memory need was worked out, kept as data: the sentence is written only if a message needs it.
MemoryBasis = tuple[Any, ...]


def _memory_need(hints: Hints, ctx: Context, workload: str, gpu_count: int, mig_memory: Decimal | None,
                 stated: MemoryStatement | None, model: GpuModel | None,
                 world: World) -> tuple[Decimal | None, Decimal | None, MemoryBasis | None]:
    """(per GPU, total, basis) of the GPU memory the pod needs, or Nones when it does not say.

    A model size is spread over every GPU of the job (``world.pods`` pods of ``gpu_count`` each): the need when
    the model is fully sharded. A need stated per GPU is per GPU whatever the job's size.
    """
    cards = max(gpu_count, 1)
    if hints.gpu_memory is not None:
        return hints.gpu_memory, hints.gpu_memory * cards, ("annotation", hints.gpu_memory)
    if hints.model_params is not None and hints.model_precision is not None:
        policy = ctx.rules.classes.get(workload)
        factor = policy.memory_factor if policy else Decimal(1)
        per_param = ctx.rules.precisions[hints.model_precision]
        total = Decimal(hints.model_params) * per_param * factor
        basis = ("params", hints.model_params, per_param, hints.model_precision, factor, workload)
        return total / (cards * world.pods), total, basis
    if stated is not None:
        if stated.per_gpu is not None:
            return stated.per_gpu, stated.per_gpu * cards, ("stated", stated.per_gpu, stated.source)
        if stated.percent is not None and model is not None:
            per_gpu = model.memory * stated.percent / 100
            return per_gpu, per_gpu * cards, ("percent", stated.percent, stated.source, model.name)
        return None, None, None
    if mig_memory is not None:
        return mig_memory, mig_memory * gpu_count, ("mig",)
    return None, None, None


def node_gpus(choice: ModelChoice | None, models: tuple[GpuModel, ...]) -> int | None:
    """GPUs one node holds where a pod of ``choice`` can run: the instance type's, else the largest node of its
    models."""
    if choice is not None and choice.node_gpus is not None:
        return choice.node_gpus
    return max((m.gpus_per_node for m in models), default=None)


def _rightsized(per_gpu: Decimal | None, total: Decimal | None, basis: MemoryBasis | None, *, count: int,
                card: Decimal | None, node: int | None, takes_all: bool) -> tuple[Decimal | None, int | None]:
    """(memory per GPU, the GPUs the need takes) of a pod asking for ``count`` GPUs of ``card`` bytes, ``node`` to a
    node. A whole model's need of a pod that spreads nothing on purpose takes the count the capacity denial gives,
    the power of two of the cards that hold it (but no more than the pod asks for where those cards fit it: 3 GPUs
    holding a need of 2.5 cards take 3); any other need takes every GPU asked for, as worked out, and so does a pod
    that ``takes_all`` (one of a multi-node job or a data-parallel class, MIG slices). A pod that states its
    parallelism takes every GPU too: the caller reads that only where this count is below the pod's."""
    if per_gpu is None or not count:
        return per_gpu, None
    if basis is None or basis[0] != "params" or takes_all or total is None or card is None or card <= 0 or not node:
        return per_gpu, count
    cards = cards_holding(total, card)
    size = parallel_size(cards, node)
    needed = size if cards > count else min(size, count)
    return total / min(needed, count), needed


def _explain_memory(basis: MemoryBasis | None) -> str | None:
    if basis is None:
        return None
    if basis[0] == "annotation":
        return f"annotation {names.GPU_MEMORY}={format_bytes(basis[1])} per GPU"
    if basis[0] == "stated":
        return f"{basis[2]}, {format_bytes(basis[1])} per GPU"
    if basis[0] == "percent":
        return f"{basis[2]} of a {basis[3]} card"
    if basis[0] == "claim":  # DRA: the selector of a claim, ("claim", per GPU, where)
        return f"{basis[2]} per GPU"
    if basis[0] == "params":
        _, params, per_param, precision, factor, workload = basis
        explanation = f"{_params_text(params)} params x {per_param.normalize():f} bytes ({precision})"
        if factor != 1:
            explanation += f" x {factor.normalize():f} ({workload} memory factor)"
        return explanation
    return "implied by the MIG profile"


def _params_text(params: int) -> str:
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M")):
        if params >= scale:
            return f"{Decimal(params) / scale:.1f}".rstrip("0").rstrip(".") + suffix
    return str(params)


def _preemptible(hints: Hints, policy: ClassSettings | None, workload: str) -> tuple[bool, str | None]:
    """The answer to "can it be preempted?" the pod is given, and where it came from: annotation
    ``ai-admission.io/preemptible`` where the class has a PriorityClass for that answer, else the class's own (a
    pod whose annotation its class cannot honour is told so by `webhook.core.validate`, and its record says what it
    got, never what it asked)."""
    if policy is None:
        return False, None
    asked = hints.preemptible
    if asked is not None and policy.honours(asked):
        return asked, f"annotation {names.PREEMPTIBLE}={str(asked).lower()}"
    return policy.preemptible, f"class {workload}"


def _multi_node(facts: PodFacts, ctx: Context, hints: Hints, workload: str, world: World) -> tuple[bool, str | None]:
    """Whether the pod is one of several pods of one job (they talk over the network, NCCL between nodes)."""
    if hints.multi_node is not None:
        return hints.multi_node, f"annotation {names.MULTI_NODE}={str(hints.multi_node).lower()}"
    if world.pods > 1:
        return True, f"{world.pods} pods ({world.source})"
    if world.source is not None:  # its owner, operator or launcher says: one pod
        return False, f"1 pod ({world.source})"
    if workload == "training":
        replica_type = facts.labels.get("training.kubeflow.org/replica-type", "")
        if replica_type.lower() in ctx.rules.multi_node_replica_types:
            return True, f"replica type {replica_type}"
    return False, None


def _choose_model(hints: Hints, facts: PodFacts, ctx: Context,
                  pinned: ModelChoice | None) -> tuple[ModelChoice | None, str | None, str | None]:
    """(choice, name as written, where): the annotation first, then the node selection, then a sharing
    scheduler's annotation."""
    if hints.gpu_model:
        model = ctx.find_model(hints.gpu_model)
        choice = ModelChoice(written=hints.gpu_model, source=f"annotation {names.GPU_MODEL}",
                             models=(model,) if model else (), unknown=() if model else (hints.gpu_model,))
        return choice, choice.written, choice.source
    chosen = pinned or annotated_models(facts, ctx)
    if chosen is None:
        return None, None, None
    return chosen, chosen.written, chosen.source


def _served(gpus: Mapping[str, int], ctx: Context) -> list[tuple[str, GpuDeviceClass]]:
    """(resource, class) for each accelerator the pod asks for that a DRA device class serves (KEP-5004)."""
    return [(name, ctx.serving[name]) for name in sorted(gpus) if name in ctx.serving]


def _class_choice(served: list[tuple[str, GpuDeviceClass]], ctx: Context) -> ModelChoice | None:
    """The model a serving class pins (its selector's product), as a node selection would."""
    for resource, device_class in served:
        if device_class.product is None and device_class.model is None:
            continue
        model = ctx.catalog.get(device_class.model) if device_class.model else None
        written = device_class.product or device_class.model or ""
        return ModelChoice(written=written, source=f'device class "{device_class.name}" (which serves {resource})',
                           models=(model,) if model else (), unknown=() if model else (written,))
    return None


def _class_memory(served: list[tuple[str, GpuDeviceClass]]) -> MemoryStatement | None:
    """The memory of each device when every accelerator the pod asks for is served by a class that pins it."""
    sized = [(resource, c) for resource, c in served if c.memory is not None]
    if not sized or len(sized) != len(served):
        return None
    resource, device_class = min(sized, key=lambda item: item[1].memory or 0)
    what = "MIG profile" if device_class.mig else "memory"
    return MemoryStatement(per_gpu=device_class.memory, percent=None,
                           source=f'device class "{device_class.name}" (which serves {resource}; its {what})')


class Reading:
    """What the sources of a pod's GPUs read (`SOURCES`): the pod's facts, the context, its GPUs (its own requests
    with its claims'), its claims, and, worked out once, the DRA classes serving its extended resources and what its
    device-named resources pin."""

    __slots__ = ("facts", "ctx", "gpus", "claimed", "served", "device", "device_memory")

    def __init__(self, facts: PodFacts, ctx: Context, gpus: Mapping[str, int], claimed: dra.Claimed | None) -> None:
        self.facts = facts
        self.ctx = ctx
        self.gpus = gpus
        self.claimed = claimed
        self.served = _served(gpus, ctx) if gpus and ctx.serving else []
        self.device, self.device_memory = (device_choice(gpus, ctx) if gpus and ctx.accelerators.device_resources
                                           else (None, None))


@dataclass(frozen=True)
class GpuSource:
    """A source of what a pod's GPUs are, beside its own requests and node selection: the model it pins
    (``pin``: given what pinned it before, what pins it after) and the memory of each GPU it states (``stated``;
    read only where nothing before it stated one)."""

    name: str
    pin: Callable[[Reading, ModelChoice | None], ModelChoice | None]
    stated: Callable[[Reading], MemoryStatement | None]


def _served_pin(reading: Reading, pinned: ModelChoice | None) -> ModelChoice | None:
    """KEP-5004: the class serving an extended resource pins the model where nothing before it did."""
    if pinned is not None or not reading.served:
        return pinned
    return _class_choice(reading.served, reading.ctx)


def _claims_pin(reading: Reading, pinned: ModelChoice | None) -> ModelChoice | None:
    """A claim's selector pins the model where the pod's own nodeSelector does not (and a conflict is a problem of
    the claims, `webhook.core.dra.claims.Claimed.pinned`)."""
    return reading.claimed.pinned(pinned, reading.ctx) if reading.claimed is not None else pinned


def _device_pin(reading: Reading, pinned: ModelChoice | None) -> ModelChoice | None:
    """A passthrough GPU or a vGPU type: only nodes with that device offer the resource."""
    return pinned if pinned is not None else reading.device


def _no_memory(reading: Reading) -> MemoryStatement | None:
    return None  # a claim's memory is its need's (`Claimed.memory_need`), read after the pod's own


# Beside the pod's own requests and node selection, in the order each pins the model and states the memory.
SOURCES: tuple[GpuSource, ...] = (
    GpuSource("DRA classes serving extended resources", _served_pin, lambda r: _class_memory(r.served) if r.served else None),
    GpuSource("DRA claims", _claims_pin, _no_memory),
    GpuSource("device-named resources", _device_pin, lambda r: r.device_memory),
)


def build_profile(pod: Mapping[str, Any], ctx: Context, claims: claim_view.ClaimSource | None = None, *,
                  world: World | None = None) -> Profile:
    """The whole profile of ``pod``; problems found on the way are returned in ``problems``, never raised.

    ``world``: the job's size when the caller knows it better than the pod's env (a controller's template, whose
    operator has not injected its env yet). ``claims`` finds the ResourceClaims and templates of the pod's
    namespace (DRA); without it, or for a claim it does not know, GPUs taken through claims are not seen.
    """
    facts = PodFacts(pod)
    hints = read_hints(facts, ctx.rules)
    problems: list[Finding] = list(hints.problems)
    gpus, users = effective_gpus(facts, ctx, problems)
    mig_memory = _mig_memory(gpus, ctx)
    claimed = dra.claimed_gpus(facts, ctx, claims)  # DRA: GPUs the pod takes through claims
    if claims is not None and facts.spec.get("resourceClaims"):
        problems.extend(dra.unknown_claims(facts, ctx, claims))
    if claimed is not None:
        gpus, users, mig_memory = claimed.joined(gpus, users, mig_memory)
    classification = classify(facts, rules=ctx.rules, hints=hints, has_accelerator=bool(gpus))
    workload = classification.workload
    reading = Reading(facts, ctx, gpus, claimed)
    pinned = pinned_models(facts, ctx) if gpus else None
    for source in SOURCES:
        pinned = source.pin(reading, pinned)
    if claimed is not None:
        problems.extend(claimed.problems)
    choice, model_name, model_source = _choose_model(hints, facts, ctx, pinned) if gpus else (None, None, None)
    model = choice.smallest if choice else None
    job = world if world is not None else (world_of(facts, ctx.rules) if gpus else SINGLE)
    if world is not None and world.pods == 1 and gpus:  # a template of one pod whose launcher says it has peers
        launched = launcher_world(facts, ctx.rules.world)
        job = launched if launched is not None and launched.pods > 1 else job
    stated = stated_memory(facts, ctx) if gpus else None
    for source in SOURCES:
        if stated is not None:
            break
        stated = source.stated(reading)
    per_gpu, total, memory_basis = _memory_need(hints, ctx, workload, sum(gpus.values()), mig_memory, stated,
                                                model, job)
    if per_gpu is None and claimed is not None:  # DRA: the claims' annotations, else their selectors
        per_gpu, total, memory_basis = _memory_need(claimed.hints, ctx, workload, sum(gpus.values()), None, None,
                                                    model, job)
        if per_gpu is None:
            per_gpu, total, memory_basis = claimed.memory_need(sum(gpus.values()))
    policy = ctx.rules.classes.get(workload)
    preemptible, preemptible_reason = _preemptible(hints, policy, workload)
    multi_node, multi_node_reason = _multi_node(facts, ctx, hints, workload, job)
    vendors = tuple(sorted({v for v in (ctx.accelerators.vendor_of(r) for r in gpus) if v}))
    count = sum(gpus.values())
    # what a pod's command line says of its parallelism is read where it decides something (a pattern search per
    # container is the costliest part of a profile): tensor parallelism over PCIe cards, which is slow (the
    # warning), and GPUs a whole model's need would leave idle (below)
    slow = count > 1 and model is not None and model.interconnect == "pcie" and ctx.rules.warn_tensor_parallel_over_pcie
    parallel = tensor_parallel(facts, ctx.rules) if slow else None
    declared = None
    gpus_needed = count if per_gpu is not None and count else None  # a need per GPU takes every GPU asked for
    if memory_basis is not None and memory_basis[0] == "params":  # a whole model's: the count that holds it
        card = choice.device_memory if choice is not None and choice.device_memory is not None else (
            model.memory if model is not None else None)
        held, needed = _rightsized(per_gpu, total, memory_basis, count=count, card=card,
                                   node=node_gpus(choice, choice.models if choice else ()),
                                   takes_all=(multi_node or mig_memory is not None
                                              or workload in ctx.rules.rightsizing.data_parallel))
        # what the pod says of its parallelism matters only where the need would leave GPUs idle (read only then)
        if needed is not None and needed < count:
            declared = declared_parallelism(facts, ctx.rules, hints, parallel if slow else tensor_parallel(facts, ctx.rules))
        if declared is None:
            per_gpu, gpus_needed = held, needed
    return Profile(
        classification=classification, hints=hints, gpus=gpus, mig_memory=mig_memory,
        model=model, model_name=model_name, model_source=model_source,
        memory_per_gpu=per_gpu, memory_total=total, memory_basis=memory_basis,
        preemptible=preemptible, preemptible_reason=preemptible_reason,
        multi_node=multi_node, multi_node_reason=multi_node_reason,
        problems=tuple(problems), accelerator_containers=users,
        pinned_model=pinned.written if pinned else None, pinned_where=pinned.source if pinned else None,
        choice=choice, pinned=pinned,
        memory_stated=per_gpu is not None or (stated is not None and stated.percent is not None),
        world=job, tensor_parallel=parallel, vendors=vendors,
        facts=facts, claimed=claimed, parallelism=declared, gpus_needed=gpus_needed,
    )
