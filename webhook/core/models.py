"""Which GPU model a pod will run on, and how much memory per GPU it says it needs, from every place users write it.

Users rarely write ai-admission's own annotations: they select nodes. A pod names its GPU model by the node labels
it selects (GPU feature discovery's ``nvidia.com/gpu.product``, GKE's accelerator label, AMD's node labeller, the
cluster's own key), by a cloud instance type, by a provisioner's GPU name (Karpenter), or through a GPU-sharing
scheduler's annotation (HAMi's ``nvidia.com/use-gputype``). It states its memory need by the memory label it
selects (``nvidia.com/gpu.memory``) or by a GPU-sharing memory resource (HAMi's ``nvidia.com/gpumem``). All of that
is read here, once per pod, into plain values for the profile.

A pod that names several models (affinity ``In`` with several values, a short card name that several models
share) can run on any of them, so it is judged against the smallest: what fits there fits everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping

from . import podview
from .context import Context
from .podview import PodFacts
from .quantity import QuantityError, format_bytes, parse_quantity
from .rules import GpuModel, InstanceType

MIB = Decimal(2**20)
GB = Decimal(10**9)


@dataclass
class ModelChoice:
    """The models a pod's node selection (or annotation) allows, as written and where it was read."""

    written: str                        # as the user wrote it ("a100-80g", "[NVIDIA-A100-SXM4-80GB, NVIDIA-H200]")
    source: str                         # where ("nodeSelector gpu-type", "required node affinity ...")
    models: tuple[GpuModel, ...]        # the known ones, smallest memory first
    unknown: tuple[str, ...] = ()       # values that name no catalog model
    node_gpus: int | None = None        # GPUs a node has, when instance types say so (the largest of them)
    fabric: str | None = None           # the network fabric, when every instance type selected says the same
    device_memory: Decimal | None = None  # memory of each device when the label names a MIG slice of the model
    device: str = ""                      # what that device is ("MIG 1g.10gb slice")

    @property
    def smallest(self) -> GpuModel | None:
        return self.models[0] if self.models else None


@dataclass
class MemoryStatement:
    """Memory per GPU a pod states outside ai-admission's annotations (bytes; or a share of each card)."""

    per_gpu: Decimal | None
    percent: Decimal | None
    source: str


# -- node selection -----------------------------------------------------------------------------------------------

def _terms(facts: PodFacts) -> list[list[dict[str, Any]]]:
    """The match expressions of each required node-affinity term (terms are ORed, expressions ANDed)."""
    affinity = podview.as_dict(podview.as_dict(facts.spec.get("affinity")).get("nodeAffinity"))
    required = podview.as_dict(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return [[e for e in podview.as_list(podview.as_dict(term).get("matchExpressions")) if isinstance(e, dict)]
            for term in podview.as_list(required.get("nodeSelectorTerms"))]


def _in_values(expression: Mapping[str, Any]) -> list[str]:
    if expression.get("operator") != "In":
        return []
    return [v for v in podview.as_list(expression.get("values")) if isinstance(v, str) and v]


def _listed(values: list[str]) -> str:
    return values[0] if len(values) == 1 else "[" + ", ".join(values) + "]"


def _by_memory(models: list[GpuModel]) -> tuple[GpuModel, ...]:
    unique = {m.name: m for m in models}
    return tuple(sorted(unique.values(), key=lambda m: (m.memory, m.name)))


def _named(values: list[str], ctx: Context, written: str, source: str) -> ModelChoice:
    """Models named directly by catalog name or node-label value (a MIG product label also sizes the device)."""
    models: list[GpuModel] = []
    unknown: list[str] = []
    slices: list[Decimal] = []
    profiles: set[str] = set()
    for value in values:
        model = ctx.find_model(value)
        if model is None:
            unknown.append(value)
            continue
        models.append(model)
        suffix = ctx.rules.model_label_suffix.search(value) if ctx.rules.model_label_suffix else None
        if suffix is not None and "mem" in suffix.groupdict() and suffix.group("mem"):
            slices.append(Decimal(suffix.group("mem")) * GB)
            profiles.add(f"{suffix.group('g')}g.{suffix.group('mem')}gb")
    sliced = bool(slices) and len(slices) == len(models)
    return ModelChoice(written=written, source=source, models=_by_memory(models), unknown=tuple(unknown),
                       device_memory=min(slices) if sliced else None,
                       device=f"MIG {'/'.join(sorted(profiles))} slice" if sliced else "")


def _instance_types(values: list[str], ctx: Context, written: str, source: str) -> ModelChoice:
    known: list[InstanceType] = [ctx.rules.instance_types[v] for v in values if v in ctx.rules.instance_types]
    unknown = tuple(v for v in values if v not in ctx.rules.instance_types)
    fabrics = {t.fabric for t in known}
    return ModelChoice(written=written, source=source, models=_by_memory([t.model for t in known]), unknown=unknown,
                       node_gpus=max((t.gpus for t in known), default=None),
                       fabric=fabrics.pop() if len(fabrics) == 1 else None)


def _gpu_names(names: list[str], memory: MemoryFilter, ctx: Context, written: str, source: str) -> ModelChoice:
    labels = ctx.rules.gpu_name_labels
    assert labels is not None
    models: list[GpuModel] = []
    unknown: list[str] = []
    for name in names:
        matching = [e for e in labels.entries if e.name == name.lower()]
        if not matching:
            unknown.append(name)
        models += [e.model for e in matching if memory.allows(e.memory_mib)]
    if memory.text and not models and not unknown:
        unknown.append(f"{_listed(names)} with {memory.text}")
    return ModelChoice(written=written + (f" with {memory.text}" if memory.text else ""), source=source,
                       models=_by_memory(models), unknown=tuple(unknown))


@dataclass
class MemoryFilter:
    """A constraint on a numeric node label (In values or Gt), e.g. Karpenter's GPU memory in MiB."""

    values: frozenset[int] | None = None
    greater_than: int | None = None
    text: str = ""

    def allows(self, value: int | None) -> bool:
        if self.values is None and self.greater_than is None:
            return True
        if value is None:
            return False
        return (self.values is None or value in self.values) and (self.greater_than is None or value > self.greater_than)

    def minimum(self) -> int | None:
        """The smallest value the constraint admits."""
        candidates = [min(self.values)] if self.values else []
        if self.greater_than is not None:
            candidates.append(self.greater_than + 1)
        return max(candidates) if candidates else None


def _integers(values: list[str]) -> list[int]:
    return [int(v) for v in values if v.strip().isdigit()]


def _memory_filter(key: str | None, selector: Mapping[str, Any], expressions: list[dict[str, Any]]) -> MemoryFilter:
    """What the pod says about the numeric label ``key`` in its nodeSelector and one affinity term."""
    if key is None:
        return MemoryFilter()
    value = selector.get(key)
    if isinstance(value, str) and value.strip().isdigit():
        return MemoryFilter(values=frozenset({int(value)}), text=f"{key}={value}")
    values: frozenset[int] | None = None
    greater: int | None = None
    parts: list[str] = []
    for expression in expressions:
        if expression.get("key") != key:
            continue
        operator = expression.get("operator")
        raw = [str(v) for v in podview.as_list(expression.get("values"))]
        numbers = _integers(raw)
        if operator == "In" and numbers:
            values = frozenset(numbers) if values is None else values & frozenset(numbers)
            parts.append(f"{key} In [{', '.join(raw)}]")
        elif operator == "Gt" and numbers:
            greater = numbers[0] if greater is None else max(greater, numbers[0])
            parts.append(f"{key} Gt {numbers[0]}")
    return MemoryFilter(values=values, greater_than=greater, text=" and ".join(parts))


def _from_selector(facts: PodFacts, ctx: Context, selector: Mapping[str, Any]) -> ModelChoice | None:
    for key in ctx.rules.model_keys:
        value = selector.get(key)
        if isinstance(value, str) and value:
            return _named([value], ctx, value, f"nodeSelector {key}")
    for key in ctx.rules.instance_type_keys:
        value = selector.get(key)
        if isinstance(value, str) and value:
            return _instance_types([value], ctx, value, f"nodeSelector {key}")
    labels = ctx.rules.gpu_name_labels
    if labels is not None:
        value = selector.get(labels.name_key)
        if isinstance(value, str) and value:
            terms = _terms(facts) or [[]]
            memory = _memory_filter(labels.memory_key, selector, terms[0])
            return _gpu_names([value], memory, ctx, value, f"nodeSelector {labels.name_key}")
    return None


def _from_term(expressions: list[dict[str, Any]], ctx: Context, selector: Mapping[str, Any]) -> ModelChoice | None:
    for expression in expressions:
        key = expression.get("key")
        values = _in_values(expression)
        if not values:
            continue
        where = f"required node affinity {key} In [{', '.join(values)}]"
        if key in ctx.rules.model_keys:
            return _named(values, ctx, _listed(values), where)
        if key in ctx.rules.instance_type_keys:
            return _instance_types(values, ctx, _listed(values), where)
        labels = ctx.rules.gpu_name_labels
        if labels is not None and key == labels.name_key:
            memory = _memory_filter(labels.memory_key, selector, expressions)
            return _gpu_names(values, memory, ctx, _listed(values), where)
    return None


def _union(choices: list[ModelChoice]) -> ModelChoice:
    if len(choices) == 1:
        return choices[0]
    node_gpus = [c.node_gpus for c in choices if c.node_gpus is not None]
    fabrics = {c.fabric for c in choices}
    return ModelChoice(written=" or ".join(c.written for c in choices),
                       source="required node affinity (" + "; ".join(c.source.removeprefix("required node affinity ")
                                                               for c in choices) + ")",
                       models=_by_memory([m for c in choices for m in c.models]),
                       unknown=tuple(u for c in choices for u in c.unknown),
                       node_gpus=max(node_gpus) if len(node_gpus) == len(choices) else None,
                       fabric=fabrics.pop() if len(fabrics) == 1 else None)


def pinned_models(facts: PodFacts, ctx: Context) -> ModelChoice | None:
    """The models the pod's own nodeSelector or required node affinity allows (None: it does not pin one).

    Affinity terms are alternatives: the pod pins its model only if every term names models.
    """
    selector = podview.string_map(facts.spec.get("nodeSelector"))
    choice = _from_selector(facts, ctx, selector)
    if choice is not None:
        return choice
    for annotation, key in ctx.accelerators.node_selector_annotations.items():  # a controller's webhook adds the selector
        value = facts.annotations.get(annotation)
        if value and key not in selector and key in ctx.rules.model_keys:
            return _named([value], ctx, value, f"annotation {annotation} (nodeSelector {key})")
    terms = _terms(facts)
    choices = [_from_term(expressions, ctx, selector) for expressions in terms]
    if not terms or any(c is None for c in choices):
        return None
    return _union([c for c in choices if c is not None])


def annotated_models(facts: PodFacts, ctx: Context) -> ModelChoice | None:
    """Models a GPU-sharing scheduler's annotation accepts (HAMi ``nvidia.com/use-gputype: "A100,H100"``).

    HAMi matches each listed type as a case-insensitive part of the card's name, so "A100" accepts every A100 and
    "A10" also an A100: the same rule here, over every name a catalog model goes by.
    """
    for key in ctx.accelerators.model_annotations:
        text = facts.annotations.get(key)
        if not text:
            continue
        wanted = [part for part in text.split(",") if part.strip()]
        if not wanted:  # "," names nothing: as if the annotation were not there
            continue
        models: list[GpuModel] = []
        unknown: list[str] = []
        for part in wanted:
            needle = _comparable(part)
            matching = [m for m in ctx.catalog.values() if any(needle in _comparable(n) for n in m.names())]
            models += matching
            if not matching:
                unknown.append(part.strip())
        return ModelChoice(written=text, source=f"annotation {key}", models=_by_memory(models), unknown=tuple(unknown))
    return None


def _comparable(name: str) -> str:
    return name.strip().upper().replace(" ", "-").replace("_", "-")


# -- device-named resources (passthrough GPUs, vGPU types) ---------------------------------------------------------

_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA"})  # words that name no model (pci.ids keeps "Tesla", GFD drops it)


def _words(name: str) -> frozenset[str]:
    return frozenset(w for w in re.split(r"[-_ .]+", name.strip().upper()) if w and w not in _VENDOR_WORDS)


def device_models(text: str, ctx: Context) -> tuple[GpuModel, ...]:
    """The catalog models a device's name names: a catalog name or label as such (``TESLA_T4``), else the models one
    of whose names is made of the most words of it (pci.ids' ``A100_PCIE_80GB`` is the model labelled
    ``NVIDIA-A100-80GB-PCIe``; ``H100_SXM5_80GB`` the one called ``H100``); several equally good: all of them."""
    model = ctx.find_model(text)
    if model is not None:
        return (model,)
    words = _words(text)
    best = 0
    found: list[GpuModel] = []
    for candidate in ctx.catalog.values():
        size = max((len(w) for n in candidate.names() if (w := _words(n)) and w <= words), default=0)
        if size > best:
            best, found = size, [candidate]
        elif size and size == best:
            found.append(candidate)
    return _by_memory(found)


def device_choice(gpus: Mapping[str, int], ctx: Context) -> tuple[ModelChoice | None, MemoryStatement | None]:
    """What the device-named resources among ``gpus`` pin (rules ``accelerators.deviceResources``): the model, and,
    when every accelerator is a vGPU type whose name gives its frame buffer, the memory of each device. (None, None)
    when the pod asks for none of them. A vGPU type of a model the catalog lacks still states its memory: its model
    is not needed, as a MIG slice's is not; a passthrough GPU of such a model is named but unknown."""
    named = [(name, found) for name in sorted(gpus) if (found := ctx.accelerators.device_resource(name)) is not None]
    if not named:
        return None, None
    models: list[GpuModel] = []
    unknown: list[str] = []
    sizes: list[Decimal] = []
    for _, (device, match) in named:
        text = match.group("model")
        named_models = device_models(text, ctx)
        models += [m for m in named_models if m not in models]
        if not named_models and not device.sized:
            unknown.append(text)
        if device.sized and match.group("mem"):
            sizes.append(Decimal(match.group("mem")) * GB)
    written = ", ".join(name for name, _ in named)
    sized = len(sizes) == len(gpus)
    kinds = sorted({device.device for _, (device, _) in named})
    choice = ModelChoice(written=written, source=f"resource {written}", models=_by_memory(models),
                         unknown=tuple(unknown), device_memory=min(sizes) if sized else None,
                         device=f"{'/'.join(kinds)} {'/'.join(n.partition('/')[2] for n, _ in named)}" if sized else "")
    memory = MemoryStatement(per_gpu=min(sizes), percent=None, source=f"{'/'.join(kinds)} type {written}") \
        if sized else None
    return choice, memory


# -- memory --------------------------------------------------------------------------------------------------------

def _selected_memory(facts: PodFacts, ctx: Context) -> MemoryStatement | None:
    """Memory per GPU from a device-memory node label the pod selects (GPU feature discovery, MiB)."""
    selector = podview.string_map(facts.spec.get("nodeSelector"))
    terms = _terms(facts)
    for key in ctx.rules.memory_keys:
        minimums: list[tuple[int, str]] = []
        for expressions in terms or [[]]:
            found = _memory_filter(key, selector, expressions)
            lowest = found.minimum()
            if lowest is None:
                minimums = []
                break
            minimums.append((lowest, found.text))
        if minimums:
            lowest, text = min(minimums)
            where = f"nodeSelector {text}" if key in selector else f"required node affinity {text}"
            return MemoryStatement(per_gpu=Decimal(lowest) * MIB, percent=None, source=where)
    return None


def _resource_amounts(facts: PodFacts, wanted: frozenset[str]) -> dict[str, Decimal]:
    """The largest amount any container asks for of each named resource (limits first, as HAMi reads them)."""
    found: dict[str, Decimal] = {}
    for container in podview.all_containers(facts.pod):
        requests, limits = podview.resources(container)
        for name in wanted:
            value = limits.get(name, requests.get(name))
            if value is None:
                continue
            try:
                amount = parse_quantity(value)
            except QuantityError:
                continue
            if amount > 0:
                found[name] = max(found.get(name, amount), amount)
    return found


def _shared_memory(facts: PodFacts, ctx: Context) -> MemoryStatement | None:
    """The memory of a GPU share: a share resource's amount (gpushare), a sharing scheduler's annotation."""
    if ctx.accelerators.share_resources:
        amounts = _resource_amounts(facts, frozenset(ctx.accelerators.share_resources))
        for name, share in ctx.accelerators.share_resources.items():
            if name in amounts:
                return MemoryStatement(per_gpu=amounts[name] * share.unit, percent=None,
                                       source=f"resource {name}: {amounts[name].normalize():f} "
                                              f"(units of {format_bytes(share.unit)})")
    notes = facts.annotations
    for shares in ctx.accelerators.share_annotations:
        if shares.memory and shares.memory in notes:
            amount = _positive(notes[shares.memory])
            if amount is not None:
                return MemoryStatement(per_gpu=amount * shares.memory_unit, percent=None,
                                       source=f"annotation {shares.memory}={notes[shares.memory]}")
        if shares.fraction and shares.fraction in notes:
            amount = _positive(notes[shares.fraction])
            if amount is not None and amount <= 1:
                return MemoryStatement(per_gpu=None, percent=amount * 100,
                                       source=f"annotation {shares.fraction}={notes[shares.fraction]}")
    return None


def _positive(text: str) -> Decimal | None:
    try:
        value = Decimal(text.strip())
    except ArithmeticError:
        return None
    return value if value.is_finite() and value > 0 else None


def stated_memory(facts: PodFacts, ctx: Context) -> MemoryStatement | None:
    """Memory per GPU the pod states through a sharing resource or a selected memory label, or None."""
    if ctx.accelerators.share_resources or ctx.accelerators.share_annotations:
        shared = _shared_memory(facts, ctx)
        if shared is not None:
            return shared
    accelerators = ctx.accelerators
    if accelerators.memory_resources or accelerators.memory_percent_resources:
        amounts = _resource_amounts(facts, frozenset(accelerators.memory_resources) | accelerators.memory_percent_resources)
        for name, unit in accelerators.memory_resources.items():
            if name in amounts:
                return MemoryStatement(per_gpu=amounts[name] * unit, percent=None,
                                       source=f"resource {name}: {amounts[name].normalize():f}")
        for name in sorted(accelerators.memory_percent_resources):
            if name in amounts:
                return MemoryStatement(per_gpu=None, percent=amounts[name],
                                       source=f"resource {name}: {amounts[name].normalize():f}%")
    if ctx.rules.memory_keys:
        return _selected_memory(facts, ctx)
    return None


# -- the catalog in messages -------------------------------------------------------------------------------------

def models_of(ctx: Context, vendor: str | None) -> list[GpuModel]:
    """The catalog's models of ``vendor`` (every model when the vendor is not known), in catalog order; those this
    cluster's nodes have first, when the nodes are known (see webhook.core.view.node_catalog)."""
    models = [m for m in ctx.catalog.values() if vendor is None or m.vendor == vendor] or list(ctx.catalog.values())
    present = ctx.nodes.present if ctx.nodes is not None else {}
    return [m for m in models if m.name in present] + [m for m in models if m.name not in present]


KNOWN_LISTED = 8


def known_models(ctx: Context, vendor: str | None) -> str:
    """The catalog's models of the vendor for a message: the first few (catalog order), and how many more."""
    names = [m.name for m in models_of(ctx, vendor)]
    more = len(names) - KNOWN_LISTED
    return ", ".join(names[:KNOWN_LISTED]) + (f" and {more} more" if more > 0 else "")


def bigger_models(ctx: Context, need: Decimal, vendor: str | None) -> str:
    """The models of the vendor whose cards hold ``need`` (smallest first, the first few), or "" when none does."""
    names = [m.name for m in sorted(models_of(ctx, vendor), key=lambda m: m.memory) if m.memory >= need]
    more = len(names) - KNOWN_LISTED
    return ", ".join(names[:KNOWN_LISTED]) + (f" and {more} more" if more > 0 else "")
