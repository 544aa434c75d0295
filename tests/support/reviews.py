"""Build AdmissionReview requests as the API server sends them, and read the answers."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import TYPE_CHECKING, Any

import jsonpatch
import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

if TYPE_CHECKING:
    from webhook.core.admission import Verdict

K8S_VERSION = latest_version()


def admission_review(obj: dict[str, Any] | None, *, operation: str = "CREATE", api_version: str = "admission.k8s.io/v1",
                     namespace: str | None = None, name: str | None = None, dry_run: bool = False,
                     sub_resource: str | None = None, group: str = "", version: str = "v1", kind: str = "Pod",
                     resource: str = "pods", old: dict[str, Any] | None = None, uid: str | None = None) -> dict[str, Any]:
    """A review carrying ``obj``; namespace and name come from the object as the API server fills them."""
    meta = (obj or old or {}).get("metadata") or {}
    namespace = meta.get("namespace", "ml-team") if namespace is None else namespace
    name = meta.get("name", "") if name is None else name
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "uid": "8c3f1e0a-1111-4a55-9a1e-3c1b7a4d0f00",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply_patch(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """Apply the returned JSON Patch as the API server does (to a copy; the original stays as it was)."""
    return jsonpatch.apply_patch(copy.deepcopy(pod), decode_patch(response))


def apply_verdict(pod: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """Apply the patch of an in-process /mutate verdict (`mutate_verdict`) to a copy of ``pod``."""
    return jsonpatch.apply_patch(copy.deepcopy(pod), list(verdict.patch))


def assert_valid_pod(pod: dict[str, Any]) -> None:
    """The pod validates against the Kubernetes OpenAPI schema of the newest version kubernetes-validate has."""
    try:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        location = "/".join(str(p) for p in exc.path)
        pytest.fail(f"pod is not a valid v{K8S_VERSION} Pod at {location or '(top)'}: {exc.message}")
