"""The admission pipeline: request -> pod -> profile -> findings -> verdict -> response.

Pure functions over dicts and `Rules`; the Flask layer calls `handle_review` and serialises what it returns,
and the offline checker calls `judge_pod` on the same path, so both give the same verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from . import podview
from .cluster import UNKNOWN, ClusterFacts
from .findings import Finding
from .mutate import mutate_pod
from .policy import evaluate
from .profile import Profile, build_profile
from .review import AdmissionRequest, build_response
from .rules import MODES, Rules
from .templates import templates_of

VALIDATE = "validate"
MUTATE = "mutate"


@dataclass
class Verdict:
    """What ai-admission decided about one pod, before it is put into any protocol."""

    allowed: bool
    mode: str
    profile: Profile | None
    findings: tuple[Finding, ...] = ()
    message: str | None = None
    warnings: tuple[str, ...] = ()
    audit_annotations: Mapping[str, str] = field(default_factory=dict)
    patch: tuple[Mapping[str, Any], ...] = ()

    @property
    def reason_codes(self) -> list[str]:
        return [f.code for f in self.findings]


def resolve_mode(rules: Rules, *, namespace: str, path_mode: str | None) -> str:
    """The mode in force: the webhook path's (chosen per namespace label) > the rules' namespace map > default."""
    if path_mode in MODES:
        return path_mode
    return rules.namespace_modes.get(namespace, rules.default_mode)


def _header(subject: str, profile: Profile) -> str:
    c = profile.classification
    return f"{subject} ({c.workload}: {c.reason}) was denied by ai-admission:"


def _apply_mode(*, mode: str, profile: Profile | None, findings: tuple[Finding, ...], denial: str | None,
                warnings: list[str]) -> Verdict:
    """Turn findings into a verdict: in deny mode a denial rejects; warn and audit always admit."""
    denials = [f for f in findings if f.severity == "deny"]
    if not denials or denial is None:
        return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(warnings))
    if mode == "deny":
        return Verdict(allowed=False, mode=mode, profile=profile, findings=findings, message=denial,
                       warnings=tuple(warnings))
    if mode == "warn":
        would = [f"ai-admission (warn mode) would deny: {f.message}" for f in denials]
        return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(would + warnings))
    audit = {"violations": ",".join(f.code for f in denials), "violation-messages": denial}
    return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(warnings),
                   audit_annotations=audit)


def judge_pod(pod: Mapping[str, Any], *, rules: Rules, mode: str, subject: str) -> Verdict:
    """Validate ``pod`` and turn findings into a verdict according to ``mode`` (deny, warn or audit)."""
    profile = build_profile(pod, rules)
    findings = tuple(evaluate(pod, profile, rules))
    denials = [f for f in findings if f.severity == "deny"]
    denial = "\n".join([_header(subject, profile), *(f"- {f.message}" for f in denials)]) if denials else None
    return _apply_mode(mode=mode, profile=profile, findings=findings, denial=denial,
                       warnings=[f.message for f in findings if f.severity == "warn"])


@dataclass
class TemplateVerdict:
    path: str
    pod: dict[str, Any]
    verdict: Verdict


def object_subject(obj: Mapping[str, Any], *, kind: str, namespace: str = "", name: str = "") -> str:
    """How messages name ``obj`` (``name``/``namespace``, e.g. from the request, win over its metadata)."""
    meta = podview.metadata(obj)
    generate_name = meta.get("generateName")
    return podview.describe(kind=kind, name=name or str(meta.get("name") or "") or None,
                            generate_name=generate_name if isinstance(generate_name, str) else None,
                            namespace=namespace or str(meta.get("namespace") or "") or None)


def judge_object(obj: Mapping[str, Any], *, rules: Rules, mode: str, group: str | None = None,
                 kind: str | None = None, namespace: str = "", old: Mapping[str, Any] | None = None,
                 ) -> tuple[Verdict, list[TemplateVerdict]] | None:
    """Judge every pod template of a controller or CRD as the pod it will produce (None: no templates known).

    On UPDATE (``old`` given) only templates that changed are judged, so scaling a legacy Deployment that
    predates the policy is not blocked.
    """
    found = templates_of(obj, group=group, kind=kind)
    if found is None:
        return None
    kind = kind or str(obj.get("kind", ""))
    previous = {t.path: t.template for t in templates_of(old, group=group, kind=kind) or []} if old else {}
    subject = object_subject(obj, kind=kind, namespace=namespace)
    results = []
    for template in found:
        if old is not None and previous.get(template.path) == template.template:
            continue
        pod = template.pod
        if namespace and "namespace" not in pod["metadata"]:
            pod["metadata"]["namespace"] = namespace
        verdict = judge_pod(pod, rules=rules, mode=mode, subject=f"{subject} {template.path}")
        results.append(TemplateVerdict(path=template.path, pod=pod, verdict=verdict))
    return _compose(mode, results), results


def _compose(mode: str, results: list[TemplateVerdict]) -> Verdict:
    """One verdict for an object from its templates' verdicts (each already in ``mode``)."""
    messages = [r.verdict.message for r in results if r.verdict.message]
    audits = [r.verdict.audit_annotations for r in results if r.verdict.audit_annotations]
    audit = {key: ("," if key == "violations" else "\n").join(a[key] for a in audits) for key in audits[0]} if audits else {}
    return Verdict(allowed=all(r.verdict.allowed for r in results), mode=mode, profile=None,
                   findings=tuple(f for r in results for f in r.verdict.findings),
                   message="\n".join(messages) if messages else None,
                   warnings=tuple(f"{r.path}: {w}" for r in results for w in r.verdict.warnings),
                   audit_annotations=audit)


def mutate_verdict(pod: Mapping[str, Any], *, rules: Rules, mode: str, facts: ClusterFacts = UNKNOWN) -> Verdict:
    """Mutation always admits (validation is the validating webhook's job) and carries the patch."""
    profile = build_profile(pod, rules)
    mutation = mutate_pod(pod, profile, rules, missing_priority_classes=facts.missing_priority_classes,
                          differing_priority_classes=facts.differing_priority_classes)
    return Verdict(allowed=True, mode=mode, profile=profile, warnings=tuple(mutation.warnings),
                   patch=tuple(mutation.patch))


def subject_of(request: AdmissionRequest) -> str:
    return object_subject(request.object or {}, kind="pod", namespace=request.namespace, name=request.name)


def decide(request: AdmissionRequest, *, rules: Rules, endpoint: str, path_mode: str | None = None,
           facts: ClusterFacts = UNKNOWN) -> Verdict | None:
    """The verdict for a request, or None when ai-admission does not act on it (allowed, unchanged).

    Pods are judged (and mutated) on CREATE; controllers and AI CRDs have their templates validated on CREATE
    and UPDATE. Subresources (status, scale, ephemeralcontainers, binding, ...) are never judged.
    """
    if request.object is None or request.sub_resource:
        return None
    namespace = request.namespace or str(podview.metadata(request.object).get("namespace") or "")
    mode = resolve_mode(rules, namespace=namespace, path_mode=path_mode)
    if request.is_pod_create:
        if endpoint == MUTATE:
            return mutate_verdict(request.object, rules=rules, mode=mode, facts=facts)
        return judge_pod(request.object, rules=rules, mode=mode, subject=subject_of(request))
    if endpoint != VALIDATE or request.operation not in ("CREATE", "UPDATE") or request.resource == "pods":
        return None
    judged = judge_object(request.object, rules=rules, mode=mode, group=request.group, kind=request.kind,
                          namespace=namespace, old=request.old_object if request.operation == "UPDATE" else None)
    return judged[0] if judged else None


def respond(request: AdmissionRequest, verdict: Verdict | None) -> dict[str, Any]:
    if verdict is None:
        return build_response(api_version=request.api_version, uid=request.uid, allowed=True)
    return build_response(api_version=request.api_version, uid=request.uid, allowed=verdict.allowed,
                          message=verdict.message, warnings=verdict.warnings, patch=verdict.patch,
                          audit_annotations=verdict.audit_annotations)
