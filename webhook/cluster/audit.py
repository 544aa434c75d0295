"""``ai-admission audit``: what the webhook would say about the pods and controllers that already run.

Before a namespace goes from ``audit`` to ``deny``, a platform wants to know what would be denied. The objects
are listed from the API and judged by `webhook.core.documents` (the code the webhook runs), then grouped per namespace
and reason. An object whose controller is listed too is judged through that controller's template (a pod of a
ReplicaSet of a Deployment is reported once, as the Deployment), and finished pods are left out: they will not
be created again. The same results feed the PolicyReports the server can write (`webhook.cluster.reports`); ``ai-admission
audit`` prints them (`webhook.cli.audit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from webhook.core.admission import resolve_mode
from webhook.core.context import Context
from webhook.core.documents import Document, Report, Result, check
from webhook.core.names import MODE_LABEL
from webhook.core.rules import MODES, Rules
from webhook.core.workloads.kinds import KINDS

from . import client as kube

FINISHED = frozenset({"Succeeded", "Failed"})
SOURCE = "ai-admission"


@dataclass
class Audit:
    """The judged objects and what could not be listed (a kind the credentials may not read)."""

    report: Report
    namespaces: list[str]
    modes: dict[str, str] = field(default_factory=dict)  # the mode in force per namespace
    errors: list[str] = field(default_factory=list)

    @property
    def denied(self) -> bool:
        return any(severity(r) == "deny" for r in self.report.results)


def severity(result: Result) -> str:
    """``deny`` when deny mode would reject it, ``warn`` when it would be admitted with a warning, else ``pass``."""
    severities = {f.severity for f in result.verdict.findings}
    return "deny" if "deny" in severities else ("warn" if "warn" in severities else "pass")


def kinds(api: Any, rules: Rules | None = None) -> list[tuple[str, str, str, str, bool]]:
    """(group, version, kind, plural, namespaced) of pods, of every kind of webhook.core.workloads.kinds and of the rules'
    ``genericKinds`` whose API group the cluster serves, of DeviceClasses (their GPU classes join the rules) and of
    ConfigMaps (what a container's envFrom gives it)."""
    versions = {"": "v1", **kube.preferred_versions(api)}  # the core group is not in /apis
    found = [("", "v1", "Pod", "pods", True)]
    listed: list[tuple[str, str, str, str]] = [(k.group, k.kind, k.resource, k.scope) for k in KINDS.values()]
    listed += [(k.group, k.kind, k.resource, k.scope) for k in (rules.generic_kinds if rules is not None else ())]
    found += [(group, versions[group], kind, resource, scope == "Namespaced") for group, kind, resource, scope in listed
              if group in versions]
    if versions.get("resource.k8s.io") == "v1":
        found.append(("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False))
    # the keys a container takes by envFrom are judged where they are readable: ConfigMaps (Secrets are not
    # read: an audit has no business with their values)
    found.append(("", "v1", "ConfigMap", "configmaps", True))
    return found


def list_objects(api: Any, namespace: str | None,
                 rules: Rules | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every pod and controller in ``namespace`` (all when None), and the DeviceClasses, as manifests; and the
    kinds that failed."""
    objects: list[dict[str, Any]] = []
    errors: list[str] = []
    for group, version, kind, plural, namespaced in kinds(api, rules):
        if namespace and not namespaced and kind != "DeviceClass":
            continue  # a cluster-scoped kind (ClusterTrainingRuntime) belongs to no namespace
        try:
            items, _ = kube.list_items(api, kube.collection(group, version, plural, namespace if namespaced else None))
        except kube.KubeError as exc:
            errors.append(f"cannot list {plural}{'.' + group if group else ''}: {exc}")
            continue
        for item in items:  # items of a list carry no kind of their own
            item["apiVersion"] = f"{group}/{version}" if group else version
            item["kind"] = kind
            (item.get("metadata") or {}).pop("managedFields", None)
            objects.append(item)
    return objects, errors


def _judged_elsewhere(obj: dict[str, Any], listed: set[str]) -> bool:
    meta = obj.get("metadata") or {}
    if obj["kind"] == "Pod" and (obj.get("status") or {}).get("phase") in FINISHED:
        return True
    return any(ref.get("controller") and ref.get("uid") in listed for ref in meta.get("ownerReferences") or [])


def judge(objects: Iterable[dict[str, Any]], *, context: Context) -> Report:
    objects = list(objects)
    listed = {str((o.get("metadata") or {}).get("uid")) for o in objects}
    documents = [Document(source="cluster", index=i, obj=o) for i, o in enumerate(objects)
                 if not _judged_elsewhere(o, listed)]
    return check(documents, context=context)


def namespace_modes(api: Any, rules: Rules, namespaces: Iterable[str], errors: list[str]) -> dict[str, str]:
    """The mode each namespace is in: its ``ai-admission.io/mode`` label routes it to /validate/<mode>, which
    wins over the rules' map (the namespace label is what a platform flips from audit to deny)."""
    labels: dict[str, dict[str, str]] = {}
    try:
        items, _ = kube.list_items(api, "/api/v1/namespaces")
        labels = {str(n["metadata"]["name"]): n["metadata"].get("labels") or {} for n in items}
    except kube.KubeError as exc:
        errors.append(f"cannot list namespaces (modes from the rules only): {exc}")
    modes = {}
    for namespace in namespaces:
        label = labels.get(namespace, {}).get(MODE_LABEL)
        modes[namespace] = resolve_mode(rules, namespace=namespace, path_mode=label if label in MODES else None)
    return modes


def audit(api: Any, *, context: Context, namespace: str | None) -> Audit:
    """What the webhook would say about what runs in the cluster (``namespace``, else every one), in ``context``:
    the rules, and what the server's watches know of the cluster (nothing from the command line)."""
    rules = context.rules
    objects, errors = list_objects(api, namespace, rules)
    report = judge(objects, context=context)
    namespaces = sorted({r.namespace for r in report.results} | ({namespace} if namespace else set()))
    return Audit(report=report, namespaces=namespaces, modes=namespace_modes(api, rules, namespaces, errors),
                 errors=errors)


# -- PolicyReports ---------------------------------------------------------------------------------------------

def _reference(result: Result) -> dict[str, str]:
    meta = result.document.obj.get("metadata") or {}
    return {"apiVersion": str(result.document.obj.get("apiVersion")), "kind": result.kind, "name": result.name,
            "namespace": result.namespace, "uid": str(meta.get("uid") or "")}


def report_results(results: Iterable[Result], mode: str) -> list[dict[str, Any]]:
    """``wgpolicyk8s.io/v1alpha2`` results: one per finding (fail for a deny finding, warn for advice), one pass
    for an accelerator pod or template with none. Without timestamps (`webhook.cluster.reports` adds them). The
    properties of a GPU pod or template say the GPUs one pod asks for and those its need takes (where known), and
    how many its pods ask for beyond the need in all (its replicas')."""
    entries = []
    for result in results:
        properties = {"class": result.workload, "mode": mode, **({"template": result.path}
                                                                                 if result.path else {}),
                      **_gpu_properties(result)}
        findings = result.verdict.findings
        if not findings and result.workload == "none":
            continue  # not an AI pod: nothing of ours to report
        for finding in findings or [None]:
            entries.append({
                "source": SOURCE, "policy": SOURCE, "category": "GPU workloads",
                "rule": finding.code if finding else "gpu-profile",
                "result": "pass" if finding is None else ("fail" if finding.severity == "deny" else "warn"),
                "severity": "high" if finding and finding.severity == "deny" else "medium",
                "scored": True, "message": finding.message if finding else "every GPU rule is met",
                "resources": [_reference(result)], "properties": properties,
            })
    return sorted(entries, key=lambda e: (e["resources"][0]["kind"], e["resources"][0]["name"], e["rule"]))


def _gpu_properties(result: Result) -> dict[str, str]:
    """A PolicyReport's properties are strings: ``gpus``, ``gpusNeeded``, ``gpusBeyondNeed``."""
    if not result.gpus:
        return {}
    found = {"gpus": str(result.gpus)}
    if result.gpus_needed is not None:
        found["gpusNeeded"] = str(result.gpus_needed)
        found["gpusBeyondNeed"] = str(result.gpus_beyond_need)
    return found


def report_summary(results: list[dict[str, Any]]) -> dict[str, int]:
    counts = {key: 0 for key in ("pass", "fail", "warn", "error", "skip")}
    for entry in results:
        counts[entry["result"]] += 1
    return counts
