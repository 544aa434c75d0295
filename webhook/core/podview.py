"""Tolerant read access to a pod dict as the API server sends it.

Controllers create pods with missing maps and lists, and an admission request can carry anything; every
accessor here returns an empty dict or list instead of failing on a missing, null or mistyped field, so the
policy core can read the pod without defensive code at every step.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def metadata(pod: Mapping[str, Any]) -> dict[str, Any]:
    return as_dict(pod.get("metadata"))


def spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    return as_dict(pod.get("spec"))


def string_map(value: Any) -> dict[str, str]:
    """Labels, annotations, nodeSelector: a map of strings (non-string values are ignored, not crashed on)."""
    return {k: v for k, v in as_dict(value).items() if isinstance(k, str) and isinstance(v, str)}


def labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return string_map(metadata(pod).get("labels"))


def annotation_map(pod: Mapping[str, Any]) -> dict[str, str]:
    return string_map(metadata(pod).get("annotations"))


def owners(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [o for o in as_list(metadata(pod).get("ownerReferences")) if isinstance(o, dict)]


def containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in as_list(spec(pod).get("containers")) if isinstance(c, dict)]


def init_containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in as_list(spec(pod).get("initContainers")) if isinstance(c, dict)]


def is_sidecar(container: Mapping[str, Any]) -> bool:
    """A restartable init container (KEP-753 sidecar) runs for the pod's life, like an app container."""
    return container.get("restartPolicy") == "Always"


def all_containers(pod: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield from init_containers(pod)
    yield from containers(pod)


def container_env(container: Mapping[str, Any]) -> dict[str, str | None]:
    """Env names to literal values; a variable set through ``valueFrom`` maps to None (set, value unknown)."""
    result: dict[str, str | None] = {}
    for item in as_list(container.get("env")):
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            value = item.get("value")
            result[item["name"]] = value if isinstance(value, str) else None
    return result


def pod_env(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """The env of every app container merged (signals such as WORLD_SIZE may be on any of them)."""
    merged: dict[str, str | None] = {}
    for container in containers(pod):
        for name, value in container_env(container).items():
            merged.setdefault(name, value)
    return merged


def resources(container: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(requests, limits) of a container, each possibly empty."""
    res = as_dict(container.get("resources"))
    return as_dict(res.get("requests")), as_dict(res.get("limits"))


class PodFacts:
    """The parts of one pod that several steps read, taken once: the policy reads a pod a dozen times per
    request (hints, classification, profile, findings, mutation), and rebuilding the label or annotation map
    at every step was a measurable share of a request. Built from the pod as received; never modified.
    """

    __slots__ = ("pod", "metadata", "spec", "labels", "annotations", "_owners", "_env", "_commands")

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self.pod = pod
        self.metadata = metadata(pod)
        self.spec = spec(pod)
        self.labels = string_map(self.metadata.get("labels"))
        self.annotations = string_map(self.metadata.get("annotations"))
        self._owners: list[dict[str, Any]] | None = None
        self._env: dict[str, str | None] | None = None
        self._commands: list[tuple[str, str]] | None = None

    @property
    def owners(self) -> list[dict[str, Any]]:
        if self._owners is None:
            self._owners = [o for o in as_list(self.metadata.get("ownerReferences")) if isinstance(o, dict)]
        return self._owners

    @property
    def env(self) -> dict[str, str | None]:
        """The merged env of the app containers (`pod_env`), built on first use: most pods never need it."""
        if self._env is None:
            self._env = pod_env(self.pod)
        return self._env

    @property
    def commands(self) -> list[tuple[str, str]]:
        """(container name, command and args joined by spaces) of each app container, built on first use: what a
        launcher signal (`webhook.core.rules.CommandMatch`) and the job's size read."""
        if self._commands is None:
            self._commands = [(str(c.get("name", "?")), command_line(c)) for c in containers(self.pod)]
        return self._commands


def command_line(container: Mapping[str, Any]) -> str:
    """A container's command and args, joined by spaces (what a shell would run, with no quoting)."""
    return " ".join(w for key in ("command", "args") for w in as_list(container.get(key)) if isinstance(w, str))


def describe(*, name: str | None, generate_name: str | None, namespace: str | None, kind: str = "pod") -> str:
    """How messages name an object: controllers leave ``name`` empty and set ``generateName``."""
    ns = f"{namespace}/" if namespace else ""
    if name:
        return f'{kind} "{ns}{name}"'
    if generate_name:
        return f'{kind} "{ns}{generate_name}*"'
    return f'{kind} in namespace "{namespace}"' if namespace else kind
