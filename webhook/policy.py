"""Validation: from a profile to findings, each with a message that says exactly what to add or change.

Deny findings are the hard rules (under-specified or impossible GPU requests, a priority class the workload
class may not take); warn findings are advice (host memory, PCIe tensor parallelism, QoS of training).
Whether a deny finding rejects the pod is the mode's business (see `admission`), not this module's.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Mapping

from . import names, podview
from .findings import Finding, deny, warn
from .profile import Profile, cards_needed
from .quantity import QuantityError, format_bytes, parse_quantity
from .rules import GpuModel, Rules


def _example_model(rules: Rules) -> GpuModel:
    return rules.catalog.get("a100-80g") or next(iter(rules.catalog.values()))


def _model_fix(rules: Rules) -> str:
    model = _example_model(rules)
    key = rules.model_keys[0]
    return (f'add nodeSelector "{key}: {model.label_value(key)}" or annotation '
            f'"{names.GPU_MODEL}: {model.name}" (known models: {", ".join(rules.catalog)})')


def _memory_fix(rules: Rules) -> str:
    precision = "bf16" if "bf16" in rules.precisions else next(iter(rules.precisions))
    return (f'add annotation "{names.GPU_MEMORY}: 40Gi" (per GPU), or "{names.MODEL_PARAMS}: 7B" with '
            f'"{names.MODEL_PRECISION}: {precision}"')


def _bigger_models(rules: Rules, need: Decimal) -> list[str]:
    return [m.name for m in sorted(rules.catalog.values(), key=lambda m: m.memory) if m.memory >= need]


def _gpu_findings(profile: Profile, rules: Rules) -> list[Finding]:
    found: list[Finding] = []
    model_needed = not (profile.is_mig and not rules.mig_needs_model)
    claimed = profile.claimed  # DRA: GPUs from claims are fixed in the claim
    if model_needed and profile.model_name is None:
        fix = claimed.model_fix(rules) if claimed is not None else _model_fix(rules)
        found.append(deny("gpu-model-missing", f"{profile.gpu_text()} says how many GPUs but not which model: {fix}"))
    elif profile.model_name is not None and profile.model is None:
        found.append(deny("gpu-model-unknown",
                          f'GPU model "{profile.model_name}" ({profile.model_source}) is not in the catalog; '
                          f'known models: {", ".join(rules.catalog)}'))
    if profile.model is not None and profile.hints.gpu_model and profile.pinned_model:
        pinned_model = rules.find_model(profile.pinned_model)
        if pinned_model is not None and pinned_model is not profile.model:
            found.append(deny("gpu-model-conflict",
                              f'annotation {names.GPU_MODEL} says "{profile.hints.gpu_model}" but '
                              f'{profile.pinned_where} pins "{profile.pinned_model}" ({pinned_model.name}); '
                              f"keep one of them"))
    if profile.memory_per_gpu is None:
        fix = claimed.memory_fix() if claimed is not None else _memory_fix(rules)
        found.append(deny("gpu-memory-missing",
                          f"{profile.gpu_text()} does not say how much GPU memory it needs: {fix}"))

    model = profile.model
    if model is None or profile.is_mig:
        return found
    count = profile.gpu_count
    if count > model.gpus_per_node:
        found.append(deny("gpu-count-exceeds-node",
                          f"{count} GPUs in one pod, but one {model.name} node holds {model.gpus_per_node}; "
                          f"split the work over several pods (one per node) or use fewer GPUs"))
    if profile.memory_per_gpu is not None and profile.memory_per_gpu > model.memory:
        card = format_bytes(model.memory)
        if profile.hints.gpu_memory is not None or (profile.memory_basis or ("",))[0] == "claim":  # per GPU
            bigger = _bigger_models(rules, profile.memory_per_gpu)
            advice = f"use a model with more memory ({', '.join(bigger)})" if bigger else "shard the model further"
            found.append(deny("gpu-memory-exceeds",
                              f"needs {format_bytes(profile.memory_per_gpu)} of GPU memory per GPU "
                              f"({profile.memory_source}) but a {model.name} card holds {card}; {advice}"))
        else:
            assert profile.memory_total is not None
            needed = cards_needed(profile.memory_total, model)
            domain = "one node, one NVLink domain" if model.interconnect == "nvlink" else "on one node"
            advice = f"ask for at least {needed} GPUs ({domain})"
            if needed > model.gpus_per_node:
                bigger = _bigger_models(rules, profile.memory_total / model.gpus_per_node)
                advice = (f"that is {needed} GPUs, more than the {model.gpus_per_node} one {model.name} node holds; "
                          + (f"use a model with more memory per card ({', '.join(bigger)})" if bigger
                             else "shard the model over several pods"))
            found.append(deny("gpu-memory-exceeds",
                              f"needs {format_bytes(profile.memory_total)} of GPU memory ({profile.memory_source}) "
                              f"but {count} x {model.name} give {format_bytes(model.memory * count)}; {advice}"))
    return found


def _priority_finding(pod: Mapping[str, Any], profile: Profile, rules: Rules) -> Finding | None:
    name = podview.spec(pod).get("priorityClassName")
    policy = rules.classes.get(profile.workload)
    if not isinstance(name, str) or not name or policy is None or name in policy.allowed_priority_classes:
        return None
    default = f" (or leave it empty and {policy.priority_class.name} is used)" if policy.priority_class else ""
    return deny("priority-class-not-allowed",
                f'priorityClassName "{name}" is not allowed for {profile.workload} pods; use one of '
                f'{", ".join(sorted(policy.allowed_priority_classes))}{default}')


def _host_memory_findings(pod: Mapping[str, Any], profile: Profile) -> list[Finding]:
    found = []
    spec = podview.spec(pod)
    for kind, index in sorted(profile.accelerator_containers):
        container = spec[kind][index]
        requests, limits = podview.resources(container)
        if "memory" not in requests and "memory" not in limits:
            found.append(warn("host-memory-request-missing",
                              f'container "{container.get("name", "?")}" uses GPUs but requests no host memory; '
                              f"set resources.requests.memory so the node can stage the model (else OOMKilled)"))
    return found


def _same(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return False


def _qos_finding(pod: Mapping[str, Any]) -> Finding | None:
    """Guaranteed QoS: every container has cpu and memory limits, and requests (if given) equal them."""
    for container in podview.all_containers(pod):
        requests, limits = podview.resources(container)
        for resource in ("cpu", "memory"):
            if resource not in limits or (resource in requests and not _same(requests[resource], limits[resource])):
                return warn("training-not-guaranteed",
                            f'training pod is not Guaranteed QoS (container "{container.get("name", "?")}" '
                            f"{resource}): set requests equal to limits so it is not evicted first")
    return None


def evaluate(pod: Mapping[str, Any], profile: Profile, rules: Rules) -> list[Finding]:
    """Every finding for ``pod``: deny findings first (in a stable order), then warnings."""
    found: list[Finding] = list(profile.problems)
    if profile.gpu_count:
        found.extend(_gpu_findings(profile, rules))
    priority = _priority_finding(pod, profile, rules)
    if priority:
        found.append(priority)
    if profile.gpu_count:
        if rules.warn_missing_host_memory:
            found.extend(_host_memory_findings(pod, profile))
        model = profile.model
        if (rules.warn_tensor_parallel_over_pcie and model is not None and model.interconnect == "pcie"
                and profile.gpu_count > 1 and profile.memory_total is not None and profile.memory_total > model.memory):
            found.append(warn("tensor-parallel-over-pcie",
                              f"the model spans {profile.gpu_count} {model.name} cards joined only by PCIe; tensor "
                              f"parallelism will be slow, prefer an NVLink model or fewer, larger cards"))
    policy = rules.classes.get(profile.workload)
    if policy is not None and policy.warn_guaranteed_qos:
        qos = _qos_finding(pod)
        if qos:
            found.append(qos)
    return sorted(found, key=lambda f: f.severity != "deny")
