"""The generic reader: the GPU pod specs of an object whose kind has no table entry, found by their shape.

The kinds table (`webhook.core.workloads.kinds`) knows where each kind keeps its pod templates and what its controller adds.
Every other custom resource that will make GPU pods is read here, by shape, so that a new operator's CRD is judged
the day it is installed instead of passing unseen. Two shapes make a pod:

- a **pod spec**: a map with a ``containers`` list of maps (a Knative Service's, an Argo Rollout's, a queue
  system's wrapper). When it is the ``spec`` of a pod template, the template's labels and annotations come with it.
- a **container object**: a map whose ``resources`` (requests/limits) ask for an accelerator, outside any pod spec:
  one container under a name of its own (an LLM-serving operator's ``runner``, ``worker``, ``engine``, ``decoder``),
  or ``image`` and ``resources`` written straight into ``spec`` (NVIDIA's NIMService). The pod it makes has that
  container, and the *nearest enclosing scheduling context*: for each pod field (``nodeSelector``, ``affinity``,
  ``tolerations``, ``runtimeClassName``, ``resourceClaims``, ...), the value of the closest map on the way from
  the container up to the object that has it; the labels and annotations likewise (``labels``,
  ``podLabels``, ``metadata.labels``).

Either way the object's own ``ai-admission.io/`` annotations are the base of the pod's: where a user states the
model and memory of a CRD the webhook does not know. The owner is the object itself (its controller is not
known), so classification falls to the annotation, the pod's labels and the default class; the world size is not
known (the table is for what the generic reader cannot know).

Built-in API groups are never read this way: their kinds with pod templates are in the table, and the others
(LimitRange, ResourceQuota, a CRD's schema) only look like containers.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Iterator, Mapping, Sequence

from .. import names, podview
from ..context import Context
from .templates import Owner, Template, asks_for_accelerators, dig, pod_from

POD_SPEC_READER = "generic: pod spec"
CONTAINER_READER = "generic: container object"
COUNT_READER = "generic: GPU count field"
MAX_DEPTH = 12

# API groups of Kubernetes itself (https://kubernetes.io/docs/reference/generated/kubernetes-api/): their kinds
# that make pods are table entries.
BUILT_IN_GROUPS = frozenset({
    "", "apps", "batch", "autoscaling", "policy", "networking.k8s.io", "rbac.authorization.k8s.io",
    "storage.k8s.io", "scheduling.k8s.io", "node.k8s.io", "admissionregistration.k8s.io", "apiextensions.k8s.io",
    "apiregistration.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "flowcontrol.apiserver.k8s.io", "certificates.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
    "resource.k8s.io", "storagemigration.k8s.io", "internal.apiserver.k8s.io", "extensions",
})

# Pod fields a container object takes from its nearest enclosing map that has them, with the JSON type each must be.
CONTEXT_FIELDS: tuple[tuple[str, type], ...] = (
    ("nodeSelector", dict), ("affinity", dict), ("tolerations", list), ("runtimeClassName", str),
    ("schedulerName", str), ("priorityClassName", str), ("resourceClaims", list), ("hostNetwork", bool),
    ("hostIPC", bool), ("hostPID", bool), ("volumes", list), ("topologySpreadConstraints", list),
    ("serviceAccountName", str), ("imagePullSecrets", list),
)
# What a container object keeps of itself: the fields of a core v1 Container.
CONTAINER_FIELDS = ("name", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "volumeMounts",
                    "volumeDevices", "securityContext", "lifecycle", "livenessProbe", "readinessProbe",
                    "startupProbe")
_LABEL_KEYS = ("labels", "podLabels")
_ANNOTATION_KEYS = ("annotations", "podAnnotations")
_NOT_WALKED = frozenset({"apiVersion", "kind", "metadata", "status"})
_POD_PARTS = ("podTemplate", "podSpec", "pod")  # a map's pod fields kept beside it, for the pods it makes


def readable(group: str) -> bool:
    """Whether objects of ``group`` are read generically (custom resources, not Kubernetes' own kinds)."""
    return group not in BUILT_IN_GROUPS


RESOURCE_KEYS = ("resources", "computeResources")  # Tekton names a step's resources computeResources


def _amounts(part: Any) -> dict[str, Any]:
    """A ``requests`` or ``limits`` map, with the entries of a map nested in it lifted up (an operator's own level,
    such as BentoML Yatai's ``requests.custom``)."""
    amounts: dict[str, Any] = {}
    for key, value in podview.as_dict(part).items():
        if isinstance(value, dict):
            amounts.update({k: v for k, v in value.items() if isinstance(v, (str, int, float))})
        else:
            amounts[key] = value
    return amounts


def _resources(value: Mapping[str, Any]) -> dict[str, Any] | None:
    """The container's resources as a core v1 ResourceRequirements (requests, limits, claims), or None."""
    for key in RESOURCE_KEYS:
        found = value.get(key)
        if isinstance(found, dict):
            resources = {part: _amounts(found[part]) for part in ("requests", "limits") if isinstance(found.get(part), dict)}
            if isinstance(found.get("claims"), list):
                resources["claims"] = found["claims"]
            return resources
    return None


def _asks(value: Mapping[str, Any], ctx: Context) -> bool:
    """A map whose resources ask for an accelerator (requests or limits)."""
    resources = _resources(value)
    return resources is not None and any(ctx.accelerators.is_accelerator(name) for part in ("requests", "limits")
                                         for name in resources.get(part, {}))


def _is_pod_spec(value: Mapping[str, Any]) -> bool:
    containers = value.get("containers")
    return isinstance(containers, list) and bool(containers) and all(isinstance(c, dict) for c in containers)


Found = tuple[str, str, dict[str, Any], tuple[Mapping[str, Any], ...]]  # (shape, path, map, enclosing maps)


def _walk(value: Any, path: str, chain: tuple[Mapping[str, Any], ...], ctx: Context, depth: int) -> Iterator[Found]:
    """Pod specs and container objects under ``value``, outermost first; ``chain`` holds the maps that enclose it,
    nearest last. Nothing inside a find is searched again."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        if _is_pod_spec(value):
            yield POD_SPEC_READER, path, value, chain
            return
        if _asks(value, ctx):
            yield CONTAINER_READER, path, value, chain
            return
        inner = (*chain, value)
        for key, child in value.items():
            if depth == 0 and key in _NOT_WALKED:
                continue
            yield from _walk(child, f"{path}.{key}".lstrip("."), inner, ctx, depth + 1)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, f"{path}[{index}]", chain, ctx, depth + 1)


def _hint_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """The object's own annotations meant for ai-admission: the base of every pod read from it."""
    return {k: v for k, v in podview.annotation_map(obj).items() if k.startswith(names.PREFIX)}


def _metadata_of(maps: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) from the enclosing maps, nearest winning."""
    labels: dict[str, str] = {}
    notes: dict[str, str] = {}
    for value in maps:
        meta = podview.as_dict(value.get("metadata"))
        for key in _LABEL_KEYS:
            labels.update(podview.string_map(value.get(key)))
        labels.update(podview.string_map(meta.get("labels")))
        for key in _ANNOTATION_KEYS:
            notes.update(podview.string_map(value.get(key)))
        notes.update(podview.string_map(meta.get("annotations")))
    return labels, notes


def _image(value: Any) -> str | None:
    """An image as written: a string, or an operator's ``{repository, tag}`` map."""
    if isinstance(value, str):
        return value
    image = podview.as_dict(value)
    repository = image.get("repository") or image.get("name")
    if isinstance(repository, str):
        tag = image.get("tag")
        return f"{repository}:{tag}" if isinstance(tag, (str, int, float)) and str(tag) else repository
    return None


def _container_pod(found: Mapping[str, Any], path: str,
                   chain: tuple[Mapping[str, Any], ...]) -> dict[str, Any]:
    """The pod template a container object makes: the container, and the nearest scheduling context."""
    container: dict[str, Any] = {k: found[k] for k in CONTAINER_FIELDS if k in found}
    container["resources"] = _resources(found)
    if not isinstance(container.get("name"), str):
        container["name"] = path.rpartition(".")[2].split("[")[0] or "main"
    for key in ("env", "envFrom", "ports", "volumeMounts", "command", "args"):
        if key in container and not isinstance(container[key], list):
            del container[key]
    image = _image(found.get("image"))
    if image is not None:
        container["image"] = image
    spec: dict[str, Any] = {"containers": [container]}
    maps: list[Mapping[str, Any]] = [*chain, found]  # NIMService keeps nodeSelector beside image and resources
    # nearest first; beside each map, the pod template it carries for its pods (Tekton's spec.podTemplate)
    sources: list[Mapping[str, Any]] = []
    for enclosing in maps[::-1]:
        sources.append(enclosing)
        sources.extend(podview.as_dict(enclosing.get(part)) for part in _POD_PARTS)
    for key, kind in CONTEXT_FIELDS:
        value = next((m[key] for m in sources if isinstance(m.get(key), kind)), None)
        if value is not None:
            spec[key] = value
    labels, notes = _metadata_of(maps[1:])  # the root object's own metadata is not the pod's
    return {"metadata": {"labels": labels, "annotations": notes}, "spec": spec}


# Fields that hold a workload's GPU count where it has no container (Kaiwo's ``gpus: 4``, Run:ai's
# ``gpu: {value: "0.5"}``), compared without case or underscores; the vendor from a ``gpuVendor`` beside them.
_COUNT_KEYS = frozenset({"gpu", "gpus", "gpucount", "numgpus", "gpunum"})
_VENDOR_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "gpu.intel.com/i915"}


def _count(value: Any) -> Decimal | None:
    """A GPU count as such fields write it: a number, digits or a fraction in a string, or ``{value: ...}``."""
    if isinstance(value, dict) and set(value) == {"value"}:
        value = value["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        amount = Decimal(str(value).strip())
    except ArithmeticError:
        return None
    return amount if amount.is_finite() and amount > 0 else None


def _count_fields(value: Any, path: str, chain: tuple[Mapping[str, Any], ...],
                  depth: int) -> Iterator[tuple[str, Decimal, Mapping[str, Any], tuple[Mapping[str, Any], ...]]]:
    """(path, count, the map holding it, its enclosing maps) of each GPU count field."""
    if depth > MAX_DEPTH or not isinstance(value, dict):
        return
    for key, child in value.items():
        if depth == 0 and key in _NOT_WALKED:
            continue
        where = f"{path}.{key}".lstrip(".")
        if isinstance(key, str) and key.lower().replace("_", "") in _COUNT_KEYS and (amount := _count(child)):
            yield where, amount, value, chain
        elif isinstance(child, dict):
            yield from _count_fields(child, where, (*chain, value), depth + 1)
        elif isinstance(child, list):
            for index, item in enumerate(child):
                yield from _count_fields(item, f"{where}[{index}]", (*chain, value), depth + 1)


def _count_pod(amount: Decimal, holder: Mapping[str, Any], chain: tuple[Mapping[str, Any], ...], kind: str,
               ctx: Context) -> dict[str, Any]:
    """The pod a GPU count field makes: one container asking for that many GPUs (a fraction below one: a share of
    one GPU, as the sharing scheduler's annotation says it), with the nearest scheduling context."""
    vendor = holder.get("gpuVendor") or holder.get("vendor")
    resource = _VENDOR_RESOURCES.get(str(vendor).lower(), "nvidia.com/gpu") if vendor else "nvidia.com/gpu"
    found: dict[str, Any] = {"name": kind.lower() or "main"}
    share = next((s for s in ctx.accelerators.share_annotations if s.fraction), None)
    notes: dict[str, str] = {}
    if amount < 1 and share is not None and share.fraction:
        notes[share.fraction] = f"{amount.normalize():f}"
    else:
        count = str(int(amount.to_integral_value(rounding="ROUND_CEILING")))
        found["resources"] = {"limits": {resource: count}, "requests": {resource: count}}
    template = _container_pod(found, "", (*chain, holder))
    meta = template["metadata"]
    meta["annotations"] = {**meta["annotations"], **notes}
    return template


def generic_templates(obj: Mapping[str, Any], ctx: Context) -> list[Template]:
    """The pod specs and container objects asking for accelerators anywhere in an object of a kind with no table
    entry, each as the pod it makes (owned by the object)."""
    kind = str(obj.get("kind", ""))
    owner = Owner("{apiVersion}", kind)
    hints = _hint_annotations(obj)
    fields = {"name": str(podview.metadata(obj).get("name", ""))}
    templates = []
    for shape, path, found, chain in _walk(obj, "", (), ctx, 0):
        if shape == POD_SPEC_READER:
            parent_path, _, last = path.rpartition(".")
            parent = dig(obj, parent_path) if last == "spec" else None
            metadata = podview.as_dict(parent.get("metadata")) if isinstance(parent, dict) else {}
            template: dict[str, Any] = {"metadata": metadata, "spec": found}
            if not asks_for_accelerators(template, ctx):
                continue
            described = f"its pod spec at {path}"
        else:
            template = _container_pod(found, path, chain)
            described = f"the container object at {path} (with the scheduling fields nearest to it)"
        templates.append(_template(obj, path, template, shape, owner, fields, hints,
                                   f"{kind} is not in the kinds table; {described} was read generically, as a pod "
                                   f"owned by the {kind}"))
    if templates:
        return templates
    for path, amount, holder, chain in _count_fields(obj, "", (), 0):
        template = _count_pod(amount, holder, chain, kind, ctx)
        templates.append(_template(obj, path, template, COUNT_READER, owner, fields, hints,
                                   f"{kind} is not in the kinds table and holds no container; its field {path} = "
                                   f"{amount.normalize():f} was read as a pod asking for that many GPUs"))
    return templates


def _template(obj: Mapping[str, Any], path: str, template: dict[str, Any], shape: str, owner: Owner,
              fields: Mapping[str, str], hints: Mapping[str, str], note: str) -> Template:
    if hints:
        meta = podview.as_dict(template.get("metadata"))
        template = {**template, "metadata": {**meta, "annotations": {
            **hints, **podview.string_map(meta.get("annotations"))}}}
    pod = pod_from(obj, template, owner=owner, fields=fields)
    return Template(path, pod, template, reader=shape, notes=(note,))


_MENTION_KEYS = re.compile(r"gpu|accelerator|resourceprofile", re.IGNORECASE)
# maps whose keys are label or annotation names, not fields: a label "gpu: on" speaks of nodes, not of a request
_LABEL_MAPS = frozenset({"labels", "annotations", "nodeLabels", "nodeSelector", "matchLabels", "podLabels",
                         "podAnnotations", "selector"})


def gpu_mentions(obj: Mapping[str, Any], ctx: Context, *, limit: int = 3) -> list[str]:
    """Where an object the generic reader found nothing in still speaks of GPUs in fields of its own (KubeAI's
    ``resourceProfile: nvidia-gpu-l4:1``, KAITO's GPU instance type, Run:ai's ``gpu``): paths, at most ``limit``,
    so that ``check`` says it did not judge them instead of passing them over in silence."""  # noqa: D401
    found: list[str] = []

    def said(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return value > 0
        return bool(value)

    def walk(value: Any, path: str, depth: int) -> None:
        if len(found) >= limit or depth > MAX_DEPTH:
            return
        if isinstance(value, dict):
            for key, child in value.items():
                if (depth == 0 and key in _NOT_WALKED) or key in _LABEL_MAPS:
                    continue
                where = f"{path}.{key}".lstrip(".")
                named = isinstance(key, str) and bool(_MENTION_KEYS.search(key))
                typed = isinstance(child, str) and (("gpu" in child.lower() and named) or child in ctx.rules.instance_types)
                if (named and said(child) and not isinstance(child, (dict, list))) or typed:
                    found.append(where)
                elif named and isinstance(child, (dict, list)) and said(child):
                    found.append(where)
                else:
                    walk(child, where, depth + 1)
                if len(found) >= limit:
                    return
        elif isinstance(value, list):
            for index, child in enumerate(value):
                walk(child, f"{path}[{index}]", depth + 1)

    walk(obj, "", 0)
    return found
