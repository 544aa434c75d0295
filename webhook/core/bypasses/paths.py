"""Every path to a GPU that is not an accelerator request, found in a pod (or the pod a template makes).

ai-admission's promise is that no pod gets a GPU without saying which model and how much memory. The device plugin
is not the only way a container reaches a GPU (sources in rules/default.yaml, ``bypasses``, and
docs/admins/bypasses.md):

- ``NVIDIA_VISIBLE_DEVICES`` with a device value: the NVIDIA container runtime hands the container those GPUs
  (``all``, indexes, UUIDs, CDI names). Only the lower-case ``void`` and ``none`` and an empty value mean none, and
  ``void`` wins over ``none`` over devices in a list (NVIDIA/nvidia-container-toolkit
  internal/config/image/devices.go). A value from ``valueFrom`` or one that expands ``$(...)`` cannot be checked.
- ``runtimeClassName: nvidia`` without a GPU request: that runtime honours the image's own
  ``NVIDIA_VISIBLE_DEVICES=all``, which every CUDA base image sets.
- ``privileged: true``: every device of the node; with a GPU request, every GPU instead of the ones allocated.
- CDI and NRI annotations (``nvidia.cdi.k8s.io/container.<name>``: the toolkit's NRI plugin injects what they
  name; ``cdi.k8s.io/``: runtimes that pass pod annotations through).
- A volume mounted under ``/var/run/nvidia-container-devices``: the toolkit's device-request mounts.
- hostPath volumes of device nodes (``/dev``, ``/dev/nvidia*``, ``/dev/dri``, ``/dev/kfd``), the NVIDIA driver
  root, CDI spec directories, the kubelet's device-plugin socket.
- ``deviceclass.resource.kubernetes.io/<class>`` of a DeviceClass not known here.

Each is a finding with its own reason code, as deny or warn as the rules choose per class; GPU infrastructure's
namespaces (the device plugin, DCGM, GPU feature discovery, the driver) are exempt. What admission cannot see is
documented instead: an image's own ENV, and the keys of an ``envFrom`` ConfigMap, which the mutation's
``NVIDIA_VISIBLE_DEVICES=void`` on containers that ask for no GPU overrides (pod env wins over both).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from .. import podview
from ..context import Context
from ..dra.rules import DEVICE_CLASS_RESOURCE_PREFIX
from ..findings import Finding
from ..profile import ContainerKey, Profile
from . import env_sources
from .rules import PATHS, BypassRules

CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")
ASK_INSTEAD = ("ask for the GPU in resources (nvidia.com/gpu) with its model and memory (annotations "
               "ai-admission.io/gpu-model and ai-admission.io/gpu-memory)")
VOID = "void"


def containers_of(spec: Mapping[str, Any]) -> Iterator[tuple[ContainerKey, dict[str, Any]]]:
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(podview.as_list(spec.get(kind))):
            if isinstance(container, dict):
                yield (kind, index), container


def _named(container: Mapping[str, Any], kind: str) -> str:
    what = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}.get(kind, "container")
    return f'{what} "{container.get("name", "?")}"'


def visible_devices_problem(entry: Mapping[str, Any], *, any_value: bool) -> str | None:
    """Why an env entry of a device variable hands out devices (None: it hands out none).

    ``any_value``: a variable with no "no device" words (AMD_VISIBLE_DEVICES): any value but an empty one.
    """
    if entry.get("valueFrom") is not None:
        return " from valueFrom, which cannot be checked here"
    value = entry.get("value")
    text = value if isinstance(value, str) else ""
    if "$(" in text:
        return f"={text}, which expands another variable and cannot be checked here"
    tokens = [t.strip() for t in text.split(",") if t.strip()]
    if not tokens or (not any_value and (VOID in tokens or "none" in tokens)):
        return None
    return f"={text}"


def _host_path(volume: Mapping[str, Any]) -> str | None:
    path = podview.as_dict(volume.get("hostPath")).get("path")
    return path if isinstance(path, str) else None


def bypass_findings(pod: Mapping[str, Any], profile: Profile, ctx: Context, namespace: str) -> list[Finding]:
    """The pod's paths to a GPU that are not its accelerator requests, each as its class's rules say."""
    bypasses: BypassRules = ctx.rules.bypasses
    spec = podview.spec(pod)
    if not bypasses.enabled or bypasses.exempt(namespace, spec.get("serviceAccountName")):
        return []
    workload = profile.workload
    found: list[Finding] = []

    def add(path: str, message: str) -> None:
        action = bypasses.action(path, workload)
        if action != "off":
            found.append(Finding(code=PATHS[path], message=message, severity="deny" if action == "deny" else "warn"))

    asking = set(profile.accelerator_containers)
    containers = list(containers_of(spec))
    device_env = set(bypasses.visible_devices_env)
    any_value_env = set(bypasses.other_env)
    for (kind, _), container in containers:
        for entry in podview.as_list(container.get("env")):
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str) or (name not in device_env and name not in any_value_env):
                continue
            problem = visible_devices_problem(entry, any_value=name in any_value_env)
            if problem and isinstance(entry.get(env_sources.SOURCE), str):
                problem += f" (from {entry[env_sources.SOURCE]}, by envFrom)"
            if problem:
                add("visibleDevicesEnv", f"{_named(container, kind)} sets {name}{problem}: the container runtime "
                                         f"hands it GPUs the scheduler never counted; remove it (or set it to "
                                         f"{VOID}) and {ASK_INSTEAD}")
    runtime_class = spec.get("runtimeClassName")
    if isinstance(runtime_class, str) and runtime_class in bypasses.runtime_classes and not profile.gpu_count:
        add("runtimeClass", f'runtimeClassName "{runtime_class}" runs the pod under the NVIDIA container runtime, '
                            f"which gives a container that asks for no GPU the GPUs its image names (CUDA images "
                            f"set NVIDIA_VISIBLE_DEVICES=all); remove runtimeClassName, or {ASK_INSTEAD}")
    for key, container in containers:
        if podview.as_dict(container.get("securityContext")).get("privileged") is not True:
            continue
        if key in asking:
            add("privilegedWithGpu", f"{_named(container, key[0])} asks for GPUs and is privileged, so it sees every "
                                     f"GPU of its node, not the ones it was given; remove privileged: true")
        else:
            add("privileged", f"{_named(container, key[0])} is privileged: on a GPU node it sees every GPU, beside "
                              f"the pods they were given to; remove privileged: true, or run it in a namespace the "
                              f"rules exempt for GPU infrastructure (bypasses.exempt)")
    for note in sorted(podview.annotation_map(pod)):
        if any(note.startswith(prefix) for prefix in bypasses.annotation_prefixes):
            add("cdiAnnotations", f"annotation {note} asks the NVIDIA NRI plugin or a CDI-aware runtime to inject "
                                  f"devices outside the scheduler's count; remove it and {ASK_INSTEAD}")
    mounts = bypasses.device_request_mounts
    if mounts is not None:
        for (kind, _), container in containers:
            for mount in podview.as_list(container.get("volumeMounts")):
                path = podview.as_dict(mount).get("mountPath")
                if isinstance(path, str) and mounts.search(path):
                    add("deviceRequestMounts", f"{_named(container, kind)} mounts a volume at {path}, which the "
                                               f"NVIDIA container runtime reads as a device request; remove the "
                                               f"mount and {ASK_INSTEAD}")
    for volume in podview.as_list(spec.get("volumes")):
        path = _host_path(podview.as_dict(volume))
        if path is not None and any(p.search(path) for p in bypasses.host_device_paths):
            add("hostDevices", f'volume "{podview.as_dict(volume).get("name", "?")}" mounts the node\'s {path} '
                               f"(hostPath): device nodes, the driver root, CDI specs or the kubelet's device-plugin "
                               f"socket reach GPUs outside the scheduler; remove it and {ASK_INSTEAD}")
    for (kind, _), container in containers:
        requests, limits = podview.resources(container)
        for name in sorted({*requests, *limits}):
            if not isinstance(name, str) or not name.startswith(DEVICE_CLASS_RESOURCE_PREFIX):
                continue
            device_class = name[len(DEVICE_CLASS_RESOURCE_PREFIX):]
            if device_class in ctx.device_classes or ctx.accelerators.is_accelerator(name):
                continue
            add("unknownDeviceClass", f"{_named(container, kind)} asks for {name}, a DeviceClass ai-admission does "
                                      f"not know (not in the rules, not seen in the cluster): if its devices are "
                                      f"GPUs, their model and memory are not judged; add it to dra.deviceClasses")
    return found
