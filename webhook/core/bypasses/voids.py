"""The bypasses' one write: ``NVIDIA_VISIBLE_DEVICES=void`` on containers that ask for no GPU, where the rules say
so (`webhook.core.bypasses.rules`: ``void`` per class, the exempt namespaces of GPU infrastructure).

The NVIDIA container runtime honours a container's ``NVIDIA_VISIBLE_DEVICES``: every CUDA image sets it to
``all``, and an ``envFrom`` ConfigMap or Secret may set it where admission cannot see; pod env wins over both, so
``void`` closes the path. Three writers, one rule: a pod's containers that ask for no GPU beside those that do
(`void_unasked`, a step of `webhook.core.mutate.STEPS`), a pod that asks for none whose containers take env from
ConfigMaps or Secrets (`void_env_from`), and ephemeral containers added to a running pod (`void_ephemeral`). A
container that names the variable itself is left alone everywhere: validation judges it
(`webhook.core.bypasses.paths`).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from .. import podview
from ..patch import Editor
from . import env_sources
from .rules import BypassRules

VOID = "void"


def voidable(spec: Mapping[str, Any], device_env: tuple[str, ...],
             kinds: tuple[str, ...] = ("initContainers", "containers")) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(kind, index, container) of each container of ``kinds`` that does not name a device variable itself."""
    for kind in kinds:
        for index, container in enumerate(podview.as_list(spec.get(kind))):
            if isinstance(container, dict) and not any(n in podview.container_env(container) for n in device_env):
                yield kind, index, container


def _exempt(bypasses: BypassRules, namespace: str, spec: Mapping[str, Any]) -> bool:
    return not bypasses.visible_devices_env or bypasses.exempt(namespace, spec.get("serviceAccountName"))


def void_unasked(edit: Editor, spec: Mapping[str, Any], bypasses: BypassRules, *, workload: str, namespace: str,
                 asking: set[tuple[str, int]]) -> None:
    """``void`` on each container of a GPU pod that asks for no GPU (a sidecar, an init container; ``asking``: the
    (kind, index) of those that do), where the class's rules void."""
    if _exempt(bypasses, namespace, spec) or not bypasses.voids(workload):
        return
    name = bypasses.visible_devices_env[0]
    for kind, index, _ in voidable(spec, bypasses.visible_devices_env):
        if (kind, index) not in asking:
            edit.extend(("spec", kind, index, "env"), [{"name": name, "value": VOID}])


def void_env_from(edit: Editor, spec: Mapping[str, Any], bypasses: BypassRules, *, workload: str,
                  namespace: str) -> list[str]:
    """``void`` on each container of a pod that asks for no GPU and takes env from a ConfigMap or a Secret, whose
    keys admission cannot see; where the rules do not void, what the user is told instead."""
    if not bypasses.enabled or _exempt(bypasses, namespace, spec):
        return []
    warnings: list[str] = []
    name = bypasses.visible_devices_env[0]
    for kind, index, container in voidable(spec, bypasses.visible_devices_env):
        refs = env_sources.sources(container)
        if not refs:
            continue
        if bypasses.voids(workload):
            edit.extend(("spec", kind, index, "env"), [{"name": name, "value": VOID}])
        else:
            warnings.append(f"container {container.get('name')!r} takes env from {env_sources.described(refs)}, "
                            f"which admission cannot read: if it sets {name}, the container sees GPUs it never "
                            f"asked for")
    return warnings


def void_ephemeral(edit: Editor, spec: Mapping[str, Any], bypasses: BypassRules, *, added: frozenset[int],
                   namespace: str) -> None:
    """``void`` on each ephemeral container just added to a running pod (their indices: ``added``): it can ask for
    no resources, so never for a GPU, yet runs under the pod's RuntimeClass with its image's own variable."""
    if _exempt(bypasses, namespace, spec) or not bypasses.void_visible_devices:
        return
    name = bypasses.visible_devices_env[0]
    for kind, index, _ in voidable(spec, bypasses.visible_devices_env, ("ephemeralContainers",)):
        if index in added:
            edit.extend(("spec", kind, index, "env"), [{"name": name, "value": VOID}])
