"""Validation: from a pod and its profile to findings, each with a message that says exactly what to add or change.

`CHECKS` is every check a pod is held to, in order, as `webhook.core.mutate.STEPS` is every change made to it:
the profile's own problems, the GPUs (model, memory, count), GPUs asked beyond the need
(`webhook.core.rightsizing.findings`), the PriorityClass, accelerators the rules do not know,
host memory, tensor parallelism over PCIe, the QoS of training, a plain pod's scheduler backend (its queue and
topology), and the paths to a GPU that are not requests (`webhook.core.bypasses.paths`). Deny findings are the hard
rules; warn findings are advice. Whether a deny finding rejects the pod is the mode's business
(`webhook.core.admission.verdict_of`), not this module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

from . import names, placement, podview
from .backends.scheduling import backend_findings
from .bypasses.paths import bypass_findings
from .context import Context
from .findings import Finding, deny, warn
from .models import bigger_models, known_models, models_of
from .podgroups.plan import never_whole
from .profile import Profile
from .quantity import QuantityError, format_bytes, parse_quantity
from .rightsizing.findings import one_node, rightsizing_findings
from .rules import GpuModel
from .user_settings import user_setting_findings
from .workloads.parallelism import cards_holding, parallel_size


def _vendor(profile: Profile) -> str | None:
    return profile.vendors[0] if len(profile.vendors) == 1 else None


def model_fix(ctx: Context, vendor: str | None) -> str:
    model = models_of(ctx, vendor)[0]
    pin = placement.model_pin(ctx, model)  # with the node watch, a label the model's nodes carry
    selector = f'nodeSelector "{pin[0]}: {pin[1]}" or ' if pin is not None else ""
    known = _cluster_models(ctx) or f'known {vendor + " " if vendor else ""}models: {known_models(ctx, vendor)}'
    return f'add {selector}annotation "{names.GPU_MODEL}: {model.name}" ({known})'


# -- the cluster's nodes: the context's node catalog (webhook.core.view.node_catalog; None offline or with no node watch) --

def _cluster_models(ctx: Context, limit: int = 4) -> str | None:
    """"this cluster has a100-80g (3 nodes x 8 GPUs), ..." (a few: the API server cuts long warnings)."""
    if ctx.nodes is None:
        return None
    present = ctx.nodes.present
    if not present:
        return "this cluster has no node that publishes a GPU model"
    listed = [f"{name} ({what})" for name, what in list(present.items())[:limit]]
    more = f" and {len(present) - limit} more" if len(present) > limit else ""
    return f"this cluster has {', '.join(listed)}{more}"


def _model_not_in_cluster(profile: Profile, ctx: Context) -> Finding | None:
    """A model the catalog knows but no node has: the pod would stay Pending (a warning, as an autoscaled pool
    may be empty right now; the rules' nodeCatalog.modelWithoutNodes: deny makes it a denial)."""
    if ctx.nodes is None or not profile.models or any(m.name in ctx.nodes.present for m in profile.models):
        return None
    message = (f"no node of this cluster has GPU model {profile.model_name} ({profile.model_source}), so the pod "
               f"stays Pending until one joins; {_cluster_models(ctx)}")
    return deny("gpu-model-not-in-cluster", message) if ctx.rules.node_catalog.model_without_nodes == "deny" else \
        warn("gpu-model-not-in-cluster", message)


_EXAMPLE_GIB = (40, 20, 16, 12, 8, 4, 2, 1)


def example_memory(model: GpuModel | None) -> str:
    """A per-GPU memory need to show in a hint: a round figure that a card of ``model`` holds with room to spare."""
    if model is None:
        return "40Gi"
    return next((f"{g}Gi" for g in _EXAMPLE_GIB if g * 2**30 <= model.memory * Decimal("0.6")), "1Gi")


def memory_fix(ctx: Context, model: GpuModel | None) -> str:
    precision = "bf16" if "bf16" in ctx.rules.precisions else next(iter(ctx.rules.precisions))
    example = model or models_of(ctx, None)[0]
    return (f'add annotation "{names.GPU_MEMORY}: {example_memory(example)}" (per GPU), or '
            f'"{names.MODEL_PARAMS}: 7B" with "{names.MODEL_PRECISION}: {precision}"')


def _model_findings(profile: Profile, ctx: Context) -> list[Finding]:
    """Is the model named, known, of the vendor asked for, and not contradicted?"""
    found: list[Finding] = []
    vendor = _vendor(profile)
    choice = profile.choice
    model_needed = not (profile.is_mig and not ctx.accelerators.mig_needs_model)
    if choice is None:
        if model_needed:  # DRA: GPUs taken through claims are named in the claim
            fix = profile.claimed.model_fix(ctx) if profile.claimed is not None else model_fix(ctx, vendor)
            found.append(deny("gpu-model-missing",
                              f"{profile.gpu_text()} says how many GPUs but not which model: {fix}"))
        return found
    if choice.unknown:
        what = (f'GPU model "{choice.unknown[0]}"' if len(choice.unknown) == 1
                else "GPU models " + ", ".join(f'"{u}"' for u in choice.unknown))
        verb = "is" if len(choice.unknown) == 1 else "are"
        cluster = _cluster_models(ctx)
        found.append(deny("gpu-model-unknown", f"{what} ({choice.source}) {verb} not in the catalog" + (
            f" nor on any node; {cluster}" if cluster else
            f"; known {vendor + ' ' if vendor else ''}models: {known_models(ctx, vendor)}")))
    wrong = [m for m in choice.models if m.vendor not in profile.vendors] if profile.vendors else []
    if wrong:
        asked = " and ".join(r for r in sorted(profile.gpus) if ctx.accelerators.vendor_of(r))
        found.append(deny("gpu-vendor-mismatch",
                          f"{asked} asks for {'/'.join(profile.vendors)} GPUs but {choice.source} names "
                          f"{', '.join(f'{m.name} ({m.vendor})' for m in wrong)}; name one of the {'/'.join(profile.vendors)} "
                          f"models instead: {model_fix(ctx, vendor)}"))
    absent = _model_not_in_cluster(profile, ctx)
    if absent is not None:
        found.append(absent)
    pinned = profile.pinned
    if profile.hints.gpu_model and pinned is not None and choice.models and pinned.models:
        if choice.models[0] not in pinned.models:
            found.append(deny("gpu-model-conflict",
                              f'annotation {names.GPU_MODEL} says "{profile.hints.gpu_model}" but '
                              f'{pinned.source} pins "{pinned.written}" '
                              f"({', '.join(m.name for m in pinned.models)}); keep one of them"))
    return found


def _memory_findings(profile: Profile, ctx: Context, model: GpuModel) -> tuple[list[Finding], list[Finding]]:
    """(denials, warnings) of the memory need against the GPUs of ``model`` the pod gets."""
    denials: list[Finding] = []
    notes: list[Finding] = []
    per_gpu = profile.memory_per_gpu
    memory = profile.card_memory
    if per_gpu is None or memory is None or profile.is_mig or per_gpu <= 0:
        return denials, notes
    vendor = _vendor(profile)
    card = format_bytes(memory)
    name = profile.card_name
    basis = profile.memory_basis
    count = profile.gpu_count
    if basis is None or basis[0] != "params":
        if per_gpu > memory:
            bigger = bigger_models(ctx, per_gpu, vendor)
            advice = f"use a model with more memory ({bigger})" if bigger else "shard the model further"
            denials.append(deny("gpu-memory-exceeds",
                                f"needs {format_bytes(per_gpu)} of GPU memory per GPU ({profile.memory_source}) but "
                                f"a {name} holds {card}; {advice}"))
        return denials, notes
    total = profile.memory_total
    assert total is not None
    world = profile.world
    pod_cards = max(count, 1)
    if per_gpu > memory:
        needed = cards_holding(total, memory)
        node_gpus = profile.node_gpus or model.gpus_per_node
        if world.pods > 1:
            bigger = bigger_models(ctx, per_gpu, vendor)
            advice = (f"use a model with more memory per card ({bigger})" if bigger
                      else "use more pods or more GPUs per pod")
            denials.append(deny("gpu-memory-exceeds",
                                f"needs {format_bytes(total)} of GPU memory ({profile.memory_source}); even sharded "
                                f"over all {profile.job_gpus} GPUs of the job ({world.pods} pods from "
                                f"{world.source}, {pod_cards} GPU{'' if pod_cards == 1 else 's'} each) that is "
                                f"{format_bytes(per_gpu)} per GPU, more than a {name} holds ({card}); {needed} of them "
                                f"would hold it: {advice}"))
            return denials, notes
        advice = f"ask for at least {parallel_size(needed, node_gpus)} GPUs ({one_node(model)})"
        if needed > node_gpus:
            bigger = bigger_models(ctx, total / node_gpus, vendor)
            advice = (f"that is {needed} GPUs, more than the {node_gpus} one {model.name} node holds; "
                      + (f"use a model with more memory per card ({bigger})" if bigger
                         else "shard the model over several pods"))
        denials.append(deny("gpu-memory-exceeds",
                            f"needs {format_bytes(total)} of GPU memory ({profile.memory_source}) but {pod_cards} x "
                            f"{model.name} give {format_bytes(memory * pod_cards)}; {advice}"))
        return denials, notes
    if world.pods > 1 and total > memory * pod_cards:
        notes.append(warn("gpu-memory-sharded",
                          f"needs {format_bytes(total)} of GPU memory ({profile.memory_source}), more than the "
                          f"pod's {pod_cards} x {model.name} hold ({format_bytes(memory * pod_cards)}); it fits only "
                          f"sharded over all {profile.job_gpus} GPUs of the job ({world.pods} pods from "
                          f"{world.source}), {format_bytes(per_gpu)} per GPU"))
    return denials, notes


def _gpu_findings(profile: Profile, ctx: Context) -> tuple[list[Finding], list[Finding]]:
    """(denials, warnings) about the GPUs: model, memory, count."""
    found = _model_findings(profile, ctx)
    unsized = sorted(r for r in profile.gpus if (c := ctx.serving.get(r)) is not None and c.mig
                     and c.memory is None)
    if unsized:
        device_class = ctx.serving[unsized[0]]
        found.append(deny("mig-profile-unknown",
                          f"{', '.join(unsized)} asks for MIG slices of device class \"{device_class.name}\", which "
                          f"pins no MIG profile, so the slice may be of any size: ask for nvidia.com/mig-<profile> "
                          f"(nvidia.com/mig-1g.10gb), or for a device class whose selector pins one profile "
                          f"({device_class.attribute(device_class.profile_attribute or 'profile')} == \"1g.10gb\")"))
    if not profile.memory_stated:
        fix = profile.claimed.memory_fix() if profile.claimed is not None else memory_fix(ctx, profile.model)
        found.append(deny("gpu-memory-missing",
                          f"{profile.gpu_text()} does not say how much GPU memory it needs: {fix}"))
    model = profile.model
    if model is None or profile.is_mig or any(f.code == "gpu-vendor-mismatch" for f in found):
        return found, []
    count = profile.gpu_count
    node_gpus = profile.node_gpus or model.gpus_per_node
    sliced = profile.choice is not None and profile.choice.device_memory is not None
    if count > node_gpus and not sliced:
        found.append(deny("gpu-count-exceeds-node",
                          f"{count} GPUs in one pod, but one {model.name} node holds {node_gpus}; split the work over "
                          f"several pods (one per node) or use fewer GPUs"))
    denials, notes = _memory_findings(profile, ctx, model)
    return found + denials, notes


def _priority_finding(pod: Mapping[str, Any], profile: Profile, ctx: Context) -> Finding | None:
    name = podview.spec(pod).get("priorityClassName")
    policy = ctx.rules.classes.get(profile.workload)
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


@dataclass(frozen=True)
class CheckContext:
    """What every check reads: the pod, its profile, the rules, the namespace it is created in (the request's,
    else its own: GPU infrastructure's namespaces are exempt from the bypass checks), and whether it is the pod a
    controller's template makes (its object is then held to the backend as a whole, once)."""

    pod: Mapping[str, Any]
    profile: Profile
    ctx: Context
    namespace: str = ""
    template: bool = False


Check = Callable[[CheckContext], Iterable[Finding]]


def _problems(r: CheckContext) -> Iterable[Finding]:
    return r.profile.problems


def _gpus(r: CheckContext) -> Iterable[Finding]:
    if not r.profile.gpu_count:
        return ()
    denials, notes = _gpu_findings(r.profile, r.ctx)
    return [*denials, *notes]


def _rightsizing(r: CheckContext) -> Iterable[Finding]:
    """GPUs asked beyond the need (`webhook.core.rightsizing.findings`)."""
    if not r.profile.gpu_count:
        return ()
    return rightsizing_findings(r.profile, r.ctx)


def _unhonoured_preemptible(profile: Profile, ctx: Context) -> Finding | None:
    """A pod whose answer to "can it be preempted?" its class has no PriorityClass for: told what it runs at and
    which rule would change it (its record says what it got)."""
    asked = profile.hints.preemptible
    policy = ctx.rules.classes.get(profile.workload)
    if asked is None or policy is None or policy.honours(asked):
        return None
    own = policy.priority_class
    named = podview.spec(profile.facts.pod).get("priorityClassName")
    if named and (own is None or named != own.name):  # it chose its own (the class's is what /mutate gave it)
        return None
    level = f"{own.name} ({own.value}), " if own is not None else ""
    fate = "which other classes preempt" if policy.preemptible else "which no other class preempts"
    return warn("preemptible-not-honoured",
                f"annotation {names.PREEMPTIBLE}={str(asked).lower()} is not honoured: the rules give {profile.workload} "
                f"pods no PriorityClass for it (classes.{profile.workload}.{policy.otherwise_key}), so it runs at "
                f"{level}{fate}")


def _priority(r: CheckContext) -> Iterable[Finding]:
    found = _priority_finding(r.pod, r.profile, r.ctx)
    unhonoured = _unhonoured_preemptible(r.profile, r.ctx)
    return tuple(f for f in (found, unhonoured) if f is not None)


def _unknown_accelerators(r: CheckContext) -> Iterable[Finding]:
    if not r.profile.gpu_count:
        return ()
    return [warn("unknown-accelerator", f"{resource} is not an accelerator the rules know; it is judged as a GPU "
                                        f"(vendor not checked): add it to accelerators.resources with its vendor, "
                                        f"or to accelerators.notAccelerators if it is not a GPU")
            for resource in sorted(r.profile.gpus) if r.ctx.accelerators.is_unknown_accelerator(resource)]


def _host_memory(r: CheckContext) -> Iterable[Finding]:
    if not r.profile.gpu_count or not r.ctx.rules.warn_missing_host_memory:
        return ()
    return _host_memory_findings(r.pod, r.profile)


def _tensor_parallel(r: CheckContext) -> Iterable[Finding]:
    profile = r.profile
    model = profile.model
    parallel = profile.tensor_parallel
    if (not profile.gpu_count or not r.ctx.rules.warn_tensor_parallel_over_pcie or model is None
            or model.interconnect != "pcie" or parallel is None or parallel[0] <= 1 or profile.gpu_count <= 1):
        return ()
    return (warn("tensor-parallel-over-pcie",
                 f"the model is split over {parallel[0]} {model.name} cards joined only by PCIe ({parallel[1]}); "
                 f"tensor parallelism will be slow, prefer an NVLink model or fewer, larger cards"),)


def _qos(r: CheckContext) -> Iterable[Finding]:
    policy = r.ctx.rules.classes.get(r.profile.workload)
    if policy is None or not policy.warn_guaranteed_qos:
        return ()
    found = _qos_finding(r.pod)
    return (found,) if found else ()


def _whole_job(r: CheckContext) -> Iterable[Finding]:
    """A multi-node job more than its model's nodes hold (`webhook.core.podgroups.plan.never_whole`)."""
    found = never_whole(r.profile, r.ctx)
    return (found,) if found else ()


def _backend(r: CheckContext) -> Iterable[Finding]:
    """A plain pod's queue and topology (a template's pods are held to the backend through their object)."""
    if not r.ctx.rules.scheduler.active or r.template or podview.owners(r.pod):
        return ()
    return backend_findings(r.pod, group="", kind="Pod", pods=[r.pod], profiles=[r.profile], replicas=[1],
                            ctx=r.ctx, namespace=_namespace(r))


def _bypasses(r: CheckContext) -> Iterable[Finding]:
    if not r.ctx.rules.bypasses.enabled:
        return ()
    return bypass_findings(r.pod, r.profile, r.ctx, _namespace(r))


def _namespace(r: CheckContext) -> str:
    return r.namespace or str(podview.metadata(r.pod).get("namespace") or "")


def _user_settings(r: CheckContext) -> Iterable[Finding]:
    """NCCL settings and a /dev/shm the user set that the pod will not have (`webhook.core.user_settings`)."""
    return user_setting_findings(r.profile, r.ctx)


CHECKS: tuple[Check, ...] = (_problems, _gpus, _rightsizing, _priority, _unknown_accelerators, _host_memory,
                             _tensor_parallel, _qos, _whole_job, _backend, _bypasses, _user_settings)


def validate(context: CheckContext) -> list[Finding]:
    """Every finding of every check, in the order of `CHECKS` (`verdict_of` puts the denials first)."""
    return [finding for check in CHECKS for finding in check(context)]
