"""The admission pipeline: request -> pod -> profile -> findings -> verdict -> response.

Pure functions over dicts and `Rules`; the Flask layer calls `handle_review` and serialises what it returns,
and the offline checker calls `judge_pod` on the same path, so both give the same verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from . import podview
from .findings import Finding
from .mutate import mutate_pod
from .policy import evaluate
from .profile import Profile, build_profile
from .review import AdmissionRequest, build_response
from .rules import MODES, Rules

VALIDATE = "validate"
MUTATE = "mutate"


@dataclass(frozen=True)
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


def judge_pod(pod: Mapping[str, Any], *, rules: Rules, mode: str, subject: str) -> Verdict:
    """Validate ``pod`` and turn findings into a verdict according to ``mode`` (deny, warn or audit)."""
    profile = build_profile(pod, rules)
    findings = tuple(evaluate(pod, profile, rules))
    denials = [f for f in findings if f.severity == "deny"]
    warnings = [f.message for f in findings if f.severity == "warn"]
    if not denials:
        return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(warnings))
    text = "\n".join([_header(subject, profile), *(f"- {f.message}" for f in denials)])
    if mode == "deny":
        return Verdict(allowed=False, mode=mode, profile=profile, findings=findings, message=text,
                       warnings=tuple(warnings))
    if mode == "warn":
        would = [f"ai-admission (warn mode) would deny: {f.message}" for f in denials]
        return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(would + warnings))
    audit = {"violations": ",".join(f.code for f in denials), "violation-messages": text}
    return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(warnings),
                   audit_annotations=audit)


def mutate_verdict(pod: Mapping[str, Any], *, rules: Rules, mode: str) -> Verdict:
    """Mutation always admits (validation is the validating webhook's job) and carries the patch."""
    profile = build_profile(pod, rules)
    mutation = mutate_pod(pod, profile, rules)
    return Verdict(allowed=True, mode=mode, profile=profile, warnings=tuple(mutation.warnings),
                   patch=tuple(mutation.patch))


def subject_of(request: AdmissionRequest) -> str:
    meta = podview.metadata(request.object or {})
    return podview.describe(name=request.name or meta.get("name") or None,
                            generate_name=meta.get("generateName") if isinstance(meta.get("generateName"), str) else None,
                            namespace=request.namespace or meta.get("namespace") or None)


def decide(request: AdmissionRequest, *, rules: Rules, endpoint: str, path_mode: str | None = None) -> Verdict | None:
    """The verdict for a request, or None when ai-admission does not act on it (allowed, unchanged)."""
    if not request.is_pod_create or request.object is None:
        return None
    mode = resolve_mode(rules, namespace=request.namespace or str(podview.metadata(request.object).get("namespace") or ""),
                        path_mode=path_mode)
    if endpoint == MUTATE:
        return mutate_verdict(request.object, rules=rules, mode=mode)
    return judge_pod(request.object, rules=rules, mode=mode, subject=subject_of(request))


def respond(request: AdmissionRequest, verdict: Verdict | None) -> dict[str, Any]:
    if verdict is None:
        return build_response(api_version=request.api_version, uid=request.uid, allowed=True)
    return build_response(api_version=request.api_version, uid=request.uid, allowed=verdict.allowed,
                          message=verdict.message, warnings=verdict.warnings, patch=verdict.patch,
                          audit_annotations=verdict.audit_annotations)
