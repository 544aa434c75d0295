"""Talking to the end-to-end tests' API server as a controller does: create pods with kubectl, read them back, and
the warnings the API server passes on."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from typing import Any

from tests.support.control_plane import ControlPlane

DENIED_BY = 'admission webhook "validate.ai-admission.io" denied the request'
# DefaultTolerationSeconds, a built-in admission plugin, adds these to every pod
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def create(plane: ControlPlane, namespace: str, *pods: dict[str, Any],
           dry_run: bool = False) -> subprocess.CompletedProcess[str]:
    """``kubectl create -f -`` (a real POST per pod, as a controller makes them); the CompletedProcess."""
    args = ["create", "-n", namespace, "-o", "json", "-f", "-", *(["--dry-run=server"] if dry_run else [])]
    return plane.kubectl(*args, input="\n".join(json.dumps(pod) for pod in pods))


def get_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    done = plane.kubectl("get", "pod", "-n", namespace, name, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def named(pod: dict[str, Any], name: str) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    result["metadata"]["name"] = name
    return result


def warnings(stderr: str) -> list[str]:
    """kubectl's ``Warning:`` lines: the API server passes each webhook warning on as a Warning header."""
    return [line.removeprefix("Warning: ") for line in stderr.splitlines() if line.startswith("Warning: ")]


def for_apiserver(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A fixture pod as a create request in ``namespace``.

    ``spec.priority``/``preemptionPolicy`` stay: the Priority plugin accepts them when they equal what it
    resolves (0 and PreemptLowerPriority with no class), as on the cluster the fixtures were taken from.
    Owner references stay too (they classify the pod); only their uids must be UUIDs.
    """
    result = copy.deepcopy(pod)
    meta = result["metadata"]
    for key in SERVER_SET_METADATA:
        meta.pop(key, None)
    meta["namespace"] = namespace
    for owner in meta.get("ownerReferences", []):
        try:
            uuid.UUID(str(owner.get("uid")))
        except ValueError:
            owner["uid"] = str(uuid.uuid4())
    for key in SERVER_SET_SPEC:
        result["spec"].pop(key, None)
    result.pop("status", None)
    return result


# Set by the API server or naming objects of the fixture's cluster: a create must not carry them.
SERVER_SET_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")


SERVER_SET_SPEC = ("nodeName",)
