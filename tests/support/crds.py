"""CustomResourceDefinitions of the AI kinds, for the test API server.

Each is named as its project publishes it (group, kind, plural and scope from `webhook.core.workloads.kinds`, which cites the
project's API types, or from the rules' ``genericKinds``), served at the versions the test manifests use. The schema keeps every field
(``x-kubernetes-preserve-unknown-fields``): what the tests observe is admission, not each project's own
validation, and a pruning schema would drop the very fields ai-admission reads.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from webhook.core.rules import GenericKind
from webhook.core.workloads.kinds import KINDS, group_of

BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})


def _entries(generic: Iterable[GenericKind]) -> dict[tuple[str, str], tuple[str, str]]:
    """(group, kind) -> (plural, scope) of the table's kinds and of the rules' kinds read by shape."""
    found = {key: (k.resource, k.scope) for key, k in KINDS.items()}
    found.update({(k.group, k.kind): (k.resource, k.scope) for k in generic})
    return found


def served_versions(documents: Iterable[Mapping[str, Any]],
                    generic: Iterable[GenericKind] = ()) -> dict[tuple[str, str], set[str]]:
    """(group, kind) -> the versions the documents are written in."""
    known = _entries(generic)
    found: dict[tuple[str, str], set[str]] = {}
    for obj in documents:
        api_version = str(obj.get("apiVersion", ""))
        key = (group_of(api_version), str(obj.get("kind", "")))
        if key in known and key[0] not in BUILT_IN_GROUPS:
            found.setdefault(key, set()).add(api_version.rpartition("/")[2])
    return found


def _approval(group: str) -> dict[str, str]:
    """Groups under k8s.io and kubernetes.io are protected: their CRDs carry an approval (the Spark operator's
    cites its API review; this one says it is a test's)."""
    protected = any(group == d or group.endswith("." + d) for d in ("k8s.io", "kubernetes.io"))
    return {"api-approved.kubernetes.io": "unapproved, a test's copy"} if protected else {}


def crds(documents: Iterable[Mapping[str, Any]], generic: Iterable[GenericKind] = ()) -> list[dict[str, Any]]:
    """One CRD per AI kind of ``documents`` (several kinds of one group share nothing but the group); ``generic``:
    the rules' kinds read by shape, whose CRDs are made too."""
    generic = list(generic)
    known = _entries(generic)
    result = []
    for (group, kind), versions in sorted(served_versions(documents, generic).items()):
        resource, scope = known[(group, kind)]
        ordered = sorted(versions)
        result.append({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{resource}.{group}", "annotations": _approval(group)},
            "spec": {
                "group": group, "scope": scope,
                "names": {"kind": kind, "plural": resource, "singular": kind.lower(), "listKind": f"{kind}List"},
                "versions": [{"name": version, "served": True, "storage": version == ordered[-1],
                              "schema": {"openAPIV3Schema": {"type": "object",
                                                             "x-kubernetes-preserve-unknown-fields": True}}}
                             for version in ordered],
            },
        })
    return result
