"""The AdmissionReview protocol: parse a request, build the one response shape the API server accepts.

Two kinds of failure, two types (as in kopf): a `ReviewError` means the HTTP request itself is unusable (not
JSON, not an AdmissionReview, no uid) and becomes a 4xx with a JSON body; a bad *object* under review is the
policy's business and becomes ``allowed: false`` inside a well-formed response. `build_response` is the only
place that writes response dicts.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TypedDict

import orjson

from .podview import as_dict

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_WARNING_CHARS = 256  # the API server may truncate longer warnings


class ReviewError(Exception):
    """The request cannot be reviewed at all; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class StatusDict(TypedDict, total=False):
    code: int
    message: str
    reason: str


class ResponseDict(TypedDict, total=False):
    uid: str
    allowed: bool
    status: StatusDict
    patch: str
    patchType: str
    warnings: list[str]
    auditAnnotations: dict[str, str]


@dataclass
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the webhook uses, checked for type."""

    api_version: str
    uid: str
    operation: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str
    name: str
    namespace: str
    dry_run: bool
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None = field(repr=False, default=None)

    @property
    def is_pod_create(self) -> bool:
        return (self.operation == "CREATE" and self.group == "" and self.resource == "pods"
                and not self.sub_resource)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse_review(body: Any) -> AdmissionRequest:
    """Check the envelope and return the request; raise `ReviewError` saying what is wrong."""
    if not isinstance(body, dict):
        raise ReviewError(f"expected a JSON object (an AdmissionReview), got {type(body).__name__}")
    api_version = body.get("apiVersion")
    if body.get("kind") != "AdmissionReview" or api_version not in API_VERSIONS:
        raise ReviewError(f"expected kind AdmissionReview with apiVersion {' or '.join(API_VERSIONS)}, got "
                          f"kind {body.get('kind')!r} apiVersion {api_version!r}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("AdmissionReview request has no uid")
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise ReviewError("AdmissionReview request has no operation")
    kind = as_dict(request.get("kind"))
    resource = as_dict(request.get("resource"))
    obj = request.get("object")
    old = request.get("oldObject")
    if obj is not None and not isinstance(obj, dict):
        raise ReviewError("AdmissionReview request.object is not an object")
    return AdmissionRequest(
        api_version=api_version, uid=uid, operation=operation,
        group=_str(resource.get("group", kind.get("group"))), version=_str(resource.get("version", kind.get("version"))),
        kind=_str(kind.get("kind")), resource=_str(resource.get("resource")),
        sub_resource=_str(request.get("subResource")),
        name=_str(request.get("name")), namespace=_str(request.get("namespace")),
        dry_run=request.get("dryRun") is True,
        object=obj, old_object=old if isinstance(old, dict) else None,
    )


def _short(text: str) -> str:
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 1] + "\u2026"


def build_response(*, api_version: str, uid: str, allowed: bool, message: str | None = None, code: int | None = None,
                   warnings: Sequence[str] = (), patch: Sequence[Mapping[str, Any]] | None = None,
                   audit_annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The AdmissionReview answer: apiVersion and kind echoed, uid, and only the fields that carry something."""
    response: ResponseDict = {"uid": uid, "allowed": allowed}
    if not allowed or message:
        status: StatusDict = {"code": code or (200 if allowed else 403)}
        if message:
            status["message"] = message
        if not allowed:
            status["reason"] = "Forbidden"
        response["status"] = status
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode()
    if warnings:
        response["warnings"] = [_short(w) for w in warnings]
    if audit_annotations:
        response["auditAnnotations"] = dict(audit_annotations)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
