"""The findings of GPUs asked beyond the need, each with the count or the device that suffices.

- ``gpu-over-provisioned``: a whole model's need takes fewer GPUs than the pod asks for (`Profile.gpus_needed`, the
  capacity denial's count: the next power of two of the cards that hold it, within one node, one NVLink domain).
  The profile leaves alone what takes every GPU on purpose (a data-parallel class, a stated parallelism, a
  multi-node job) and a need stated per GPU, which says what each GPU holds whatever the count.
- ``gpu-fits-smaller-model`` and ``gpu-fits-mig-slice``: with the node watch on, the need of one GPU fits one card
  of a smaller model the cluster has, or a MIG slice a node offers (`webhook.core.rightsizing.smaller`). The need
  of one GPU is a need stated per GPU (``ai-admission.io/gpu-memory``), or a whole model's need that one of the
  pod's cards holds, of a pod that spreads nothing on purpose; shares of a card, MIG slices and needs read off the
  card itself (a memory label, a percentage) are left alone.

Messages fit the 256 characters the API server passes a warning on whole.
"""

from __future__ import annotations

from decimal import Decimal

from .. import names, podview
from ..context import Context
from ..findings import Finding, deny, warn
from ..profile import Profile
from ..quantity import format_bytes
from ..rules import GpuModel
from .rules import OVER_PROVISIONED, SMALLER_CARD
from .smaller import Device, smaller_devices


def one_node(model: GpuModel) -> str:
    """Where the GPUs of one count sit: one node, and for an NVLink model one NVLink domain."""
    return "one node, one NVLink domain" if model.interconnect == "nvlink" else "on one node"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def over_provisioned(profile: Profile, ctx: Context) -> Finding | None:
    """The pod asks for more GPUs than its whole-model need takes, and says nothing of using them all."""
    action = ctx.rules.rightsizing.action(OVER_PROVISIONED, profile.workload)
    model = profile.model
    needed = profile.gpus_needed
    if action == "off" or model is None or needed is None or not profile.gpus_beyond_need:
        return None
    total = profile.memory_total
    assert total is not None  # a count below the asked one is only worked out from a whole model's need
    count = profile.gpu_count
    verb = "holds" if needed == 1 else "hold"
    message = (f"needs {format_bytes(total)} of GPU memory, which {needed} {model.name} {verb} ({one_node(model)}): "
               f"{profile.gpus_beyond_need} of its {count} GPUs would sit idle. Ask for {_plural(needed, 'GPU')}, or, "
               f"if it uses them all, say so: --tensor-parallel-size {count} or annotation {names.PARALLELISM}: data")
    return deny("gpu-over-provisioned", message) if action == "deny" else warn("gpu-over-provisioned", message)


def one_gpu_need(profile: Profile) -> tuple[Decimal, str] | None:
    """(the need of one GPU, what it is, for messages), where a smaller device can be judged against it."""
    basis = profile.memory_basis
    if basis is None or profile.is_mig or (profile.choice is not None and profile.choice.device_memory is not None):
        return None
    if basis[0] == "annotation" and profile.memory_per_gpu is not None:
        return profile.memory_per_gpu, "each GPU needs"
    if (basis[0] == "params" and profile.gpus_needed == 1 and profile.memory_total is not None
            and profile.parallelism is None and not profile.multi_node):
        return profile.memory_total, "the model needs"
    return None


def _device_finding(device: Device, need: Decimal, what: str, profile: Profile, ctx: Context) -> Finding:
    model = profile.model
    assert model is not None
    size = format_bytes(device.memory)
    if device.mig is not None:
        return warn("gpu-fits-mig-slice",
                    f"the {format_bytes(need)} {what} fits a MIG {device.mig} slice ({size}), which "
                    f"{device.model.name} nodes of this cluster offer: ask for the slice (nvidia.com/mig-{device.mig}) "
                    f"rather than a whole {model.name}")
    nodes = ctx.nodes
    has = nodes.present.get(device.model.name, "") if nodes is not None else ""
    return warn("gpu-fits-smaller-model",
                f"the {format_bytes(need)} {what} fits one {device.model.name} card ({size}), which this cluster has "
                f"({has}): select it ({_selector(profile, device.model, ctx)}) rather than {model.name}, unless "
                f"the work needs the larger card's speed")


def _selector(profile: Profile, model: GpuModel, ctx: Context) -> str:
    """How to select ``model``: by the model key of the pod's own nodeSelector where the model's nodes carry it,
    else by the first model key they carry (the nodes' label values are the merged catalog's), else by name."""
    own = podview.as_dict(profile.facts.spec.get("nodeSelector"))
    keys = [k for k in ctx.rules.model_keys if k in own] + list(ctx.rules.model_keys)
    key = next((k for k in keys if k in model.labels), None)
    if key is None:
        return f'annotation "{names.GPU_MODEL}: {model.name}"'
    return f'nodeSelector "{key}: {model.labels[key]}"'


def smaller_devices_findings(profile: Profile, ctx: Context) -> list[Finding]:
    """The smallest card of a smaller model, and the smallest MIG slice, of the cluster that hold the need of one
    GPU (with the node watch on)."""
    model = profile.model
    memory = profile.card_memory
    if ctx.nodes is None or model is None or memory is None \
            or ctx.rules.rightsizing.action(SMALLER_CARD, profile.workload) == "off":
        return []
    need = one_gpu_need(profile)
    if need is None:
        return []
    devices = [d for d in smaller_devices(ctx, model, memory) if d.memory >= need[0]]
    card = next((d for d in devices if d.mig is None), None)
    piece = next((d for d in devices if d.mig is not None), None)
    return [_device_finding(d, need[0], need[1], profile, ctx) for d in (card, piece) if d is not None]


def rightsizing_findings(profile: Profile, ctx: Context) -> list[Finding]:
    """Every finding of GPUs asked beyond the need, for a pod that asks for GPUs of a model of their vendor (one
    that names another is denied for it, and told nothing of its size)."""
    model = profile.model
    if (ctx.nodes is None and not profile.gpus_beyond_need) or model is None \
            or (profile.vendors and model.vendor not in profile.vendors):
        return []  # the common pod: its need takes every GPU, and no node is known to name a smaller card of
    found = over_provisioned(profile, ctx)
    return ([found] if found is not None else []) + smaller_devices_findings(profile, ctx)
