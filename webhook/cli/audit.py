"""``ai-admission audit``: what deny mode would reject among what already runs, per namespace and reason, and the
GPUs asked beyond the need (per namespace and class: what rightsizing would give back)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from webhook.cluster.audit import Audit, severity
from webhook.core.documents import Result


def _target(result: Result) -> str:
    return f"{result.kind} {result.name}" + (f" {result.path}" if result.path else "")


def beyond_need(results: list[Result]) -> dict[str, Any]:
    """The GPUs the pods of ``results`` ask for beyond their need: in all, and per class (those with any)."""
    by_class: dict[str, int] = defaultdict(int)
    for result in results:
        if result.gpus_beyond_need:
            by_class[result.workload] += result.gpus_beyond_need
    return {"total": sum(by_class.values()), "byClass": dict(sorted(by_class.items()))}


def _beyond_text(beyond: dict[str, Any]) -> str:
    if not beyond["total"]:
        return ""
    classes = ", ".join(f"{workload} {count}" for workload, count in beyond["byClass"].items())
    return f"; {beyond['total']} GPUs asked beyond the need ({classes})"


def summary(found: Audit) -> list[dict[str, Any]]:
    """Per namespace: the mode in force, counts, per reason code the objects it concerns, and the GPUs asked beyond
    the need."""
    by_namespace: dict[str, list[Result]] = defaultdict(list)
    for result in found.report.results:
        by_namespace[result.namespace].append(result)
    namespaces = []
    for namespace in found.namespaces:
        results = by_namespace.get(namespace, [])
        reasons: dict[str, dict[str, Any]] = {}
        for result in results:
            for finding in result.verdict.findings:
                entry = reasons.setdefault(finding.code, {"code": finding.code, "severity": finding.severity,
                                                          "objects": []})
                if _target(result) not in entry["objects"]:
                    entry["objects"].append(_target(result))
        for entry in reasons.values():
            entry["objects"].sort()
        namespaces.append({
            "namespace": namespace, "mode": found.modes.get(namespace), "judged": len(results),
            "denied": sum(severity(r) == "deny" for r in results), "warned": sum(severity(r) == "warn" for r in results),
            "reasons": sorted(reasons.values(), key=lambda r: (r["severity"] != "deny", -len(r["objects"]), r["code"])),
            "gpusBeyondNeed": beyond_need(results),
        })
    return namespaces


def render_text(found: Audit) -> str:
    lines = []
    for ns in summary(found):
        lines.append(f"namespace {ns['namespace']} (mode {ns['mode'] or '-'}): {ns['judged']} judged, "
                     f"{ns['denied']} would be denied, {ns['warned']} warned{_beyond_text(ns['gpusBeyondNeed'])}")
        for reason in ns["reasons"]:
            objects = reason["objects"]
            lines.append(f"  {reason['severity'].upper():<5} {reason['code']} ({len(objects)}): "
                         + "; ".join(objects[:10]) + (f"; ... {len(objects) - 10} more" if len(objects) > 10 else ""))
    results = found.report.results
    denied = sum(severity(r) == "deny" for r in results)
    warned = sum(severity(r) == "warn" for r in results)
    lines.append(f"{len(results)} judged in {len(found.namespaces)} namespaces: {denied} would be denied in deny "
                 f"mode, {warned} admitted with warnings{_beyond_text(beyond_need(results))}")
    lines.extend(f"warning: {error}" for error in found.errors)
    return "\n".join(lines) + "\n"


def render_json(found: Audit) -> str:
    results = [{**r.as_dict(), "severity": severity(r)} for r in found.report.results]
    for entry in results:
        entry.pop("file"), entry.pop("document")
    payload = {"namespaces": summary(found), "results": results, "gpusBeyondNeed": beyond_need(found.report.results),
               "errors": found.errors, "denied": found.denied}
    return json.dumps(payload, indent=2) + "\n"


