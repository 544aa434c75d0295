"""Env a container takes from ConfigMaps and Secrets (``envFrom``), a path to a GPU that no request shows.

A container whose ``envFrom`` ConfigMap holds ``NVIDIA_VISIBLE_DEVICES: all`` sees every GPU of its node through
the NVIDIA container runtime, and asks for none: the scheduler never counted them. Admission sees only the names
of the ConfigMaps and Secrets, never their keys, so:

- at admission, `void_env_from` gives each such container of a pod that asks for no GPU
  ``NVIDIA_VISIBLE_DEVICES=void`` in its own env (pod env wins over envFrom), outside GPU infrastructure's
  namespaces and where the user did not name the variable; where the rules do not void (a class's choice), the
  pod is told what admission could not see. (A GPU pod's containers that ask for none are voided anyway, whatever
  their env: `webhook.core.mutate.void_visible_devices`.)
- ``ai-admission check`` has the ConfigMaps and Secrets among its files: `expand` writes the keys they give into
  each container's env, after what the container sets itself, so the visible-devices check judges them, each
  entry saying where it came from (`SOURCE`).
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any, Callable, Iterator, Mapping

from .. import podview

# An env entry `expand` wrote: where its value came from, for messages (never in a patch or a stored object).
SOURCE = "x-ai-admission-source"
KINDS = {"configMapRef": "ConfigMap", "secretRef": "Secret"}

Lookup = Callable[[str, str, str], Mapping[str, Any] | None]   # (kind, name, namespace) -> the object, or None


def sources(container: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, name, prefix) of each ConfigMap or Secret the container takes env from."""
    found = []
    for item in podview.as_list(container.get("envFrom")):
        if not isinstance(item, dict):
            continue
        for key, kind in KINDS.items():
            ref = podview.as_dict(item.get(key))
            name = ref.get("name")
            if isinstance(name, str) and name:
                prefix = item.get("prefix")
                found.append((kind, name, prefix if isinstance(prefix, str) else ""))
    return found


def described(refs: list[tuple[str, str, str]]) -> str:
    return ", ".join(f'{kind} "{name}"' for kind, name, _ in refs)


def _keys(obj: Mapping[str, Any]) -> dict[str, str]:
    """The keys a ConfigMap or Secret gives as env, with their values (a Secret's ``data`` decoded)."""
    keys: dict[str, str] = {}
    for field_name, encoded in (("data", obj.get("kind") == "Secret"), ("stringData", False)):
        for key, value in podview.as_dict(obj.get(field_name)).items():
            if not isinstance(key, str) or not isinstance(value, str):
                continue
            if encoded:
                try:
                    value = base64.b64decode(value, validate=True).decode("utf-8", "replace")
                except (binascii.Error, ValueError):
                    continue
            keys[key] = value
    return keys


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container anywhere in an object: a mapping with an ``envFrom`` list (only containers have one)."""
    if isinstance(node, dict):
        if isinstance(node.get("envFrom"), list):
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def expand(obj: dict[str, Any], lookup: Lookup, namespace: str) -> dict[str, Any]:
    """A copy of ``obj`` whose containers carry the env their ConfigMaps and Secrets give (those ``lookup`` finds),
    after their own: the container's own entry for a name wins, as the kubelet resolves it. ``obj`` itself when no
    container takes env from one."""
    if not any(sources(c) for c in _containers(obj)):
        return obj
    result = copy.deepcopy(dict(obj))
    for container in _containers(result):
        own = set(podview.container_env(container))
        added = []
        for kind, name, prefix in sources(container):
            found = lookup(kind, name, namespace)
            if found is None:
                continue
            for key, value in _keys(found).items():
                if prefix + key not in own:
                    added.append({"name": prefix + key, "value": value, SOURCE: f'{kind} "{name}"'})
                    own.add(prefix + key)
        if added:
            container["env"] = [*podview.as_list(container.get("env")), *added]
    return result
