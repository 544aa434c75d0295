"""The findings of GPUs asked beyond the need, with the count that suffices.

``gpu-over-provisioned``: a whole model's need takes fewer GPUs than the pod asks for (`Profile.gpus_needed`, the
capacity denial's count: the next power of two of the cards that hold it, within one node, one NVLink domain). The
profile leaves alone what takes every GPU on purpose (a data-parallel class, a stated parallelism, a multi-node
job) and a need stated per GPU, which says what each GPU holds whatever the count.

Messages fit the 256 characters the API server passes a warning on whole.
"""

from __future__ import annotations

from .. import names
from ..findings import Finding, deny, warn
from ..profile import Profile
from ..quantity import format_bytes
from ..rules import GpuModel, Rules
from .rules import OVER_PROVISIONED


def one_node(model: GpuModel) -> str:
    """Where the GPUs of one count sit: one node, and for an NVLink model one NVLink domain."""
    return "one node, one NVLink domain" if model.interconnect == "nvlink" else "on one node"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def over_provisioned(profile: Profile, rules: Rules) -> Finding | None:
    """The pod asks for more GPUs than its whole-model need takes, and says nothing of using them all."""
    action = rules.rightsizing.action(OVER_PROVISIONED, profile.workload)
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


def rightsizing_findings(profile: Profile, rules: Rules) -> list[Finding]:
    """Every finding of GPUs asked beyond the need, for a pod that asks for GPUs of a model of their vendor (one
    that names another is denied for it, and told nothing of its size)."""
    model = profile.model
    if model is None or (profile.vendors and model.vendor not in profile.vendors):
        return []
    found = over_provisioned(profile, rules)
    return [found] if found is not None else []
