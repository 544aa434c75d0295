"""Checks every mutated pod must pass, whatever the input: schema-valid, unique names, user values kept."""

from __future__ import annotations

from typing import Any, Iterator

from tests.support.reviews import assert_valid_pod

# Fields ai-admission may change although they are present: the Priority plugin's resolved values (set to the
# new class's values, or removed when the cluster's class differs from the rules), its own profile annotation, and
# the API server's default scheduler name (gang scheduling).
OWNED = {"/spec/priority", "/spec/preemptionPolicy", "/metadata/annotations/ai-admission.io~1profile"}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def leaves(value: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from leaves(child, f"{pointer}/{_escape(str(key))}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from leaves(child, f"{pointer}/{index}")
    else:
        yield pointer, value


def resolve(document: Any, pointer: str) -> Any:
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        document = document[int(part)] if isinstance(document, list) else document[part]
    return document


def assert_user_values_kept(original: dict[str, Any], mutated: dict[str, Any]) -> None:
    for pointer, value in leaves(original):
        if pointer in OWNED or (pointer == "/spec/schedulerName" and value == "default-scheduler"):
            continue
        try:
            now = resolve(mutated, pointer)
        except (KeyError, IndexError, TypeError):
            raise AssertionError(f"{pointer} (was {value!r}) is gone after mutation") from None
        assert now == value, f"{pointer} changed from {value!r} to {now!r}"


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    spec = pod.get("spec") or {}
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def assert_well_formed(pod: dict[str, Any]) -> None:
    assert_valid_pod(pod)
    spec = pod.get("spec") or {}
    volumes = [v["name"] for v in spec.get("volumes") or []]
    assert len(volumes) == len(set(volumes)), f"duplicate volume names {volumes}"
    for container in _containers(pod):
        paths = [m["mountPath"] for m in container.get("volumeMounts") or []]
        assert len(paths) == len(set(paths)), f"duplicate mountPaths in {container['name']}: {paths}"
        for mount in container.get("volumeMounts") or []:
            assert mount["name"] in volumes, f"{container['name']} mounts unknown volume {mount['name']}"
        env = [e["name"] for e in container.get("env") or []]
        assert len(env) == len(set(env)), f"duplicate env in {container['name']}: {env}"
    keys = [(c.get("topologyKey"), c.get("whenUnsatisfiable")) for c in spec.get("topologySpreadConstraints") or []]
    assert len(keys) == len(set(keys)), f"duplicate topology spread constraints {keys}"
