"""The admission pipeline: request -> pod -> profile -> findings -> verdict -> response.

Pure functions over dicts and `Rules`. `judge` routes any object to what judges it (a pod, a DRA claim, a
controller's or CRD's templates); the server's `decide` calls it for a review and `webhook.core.documents` for
files and listed objects, so the webhook, ``check`` and ``audit`` give the same verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from . import podview
from .backends.scheduling import backend_findings, owner_mutation
from .bypasses.paths import bypass_findings
from .context import Context
from .dra import claims as dra
from .findings import Finding
from .mutate import Mutation, mutate_pod, void_ephemeral
from .podgroups import plan as groups
from .podgroups.support import GROUP as WORKLOAD_GROUP
from .podgroups.support import RESOURCE, PodGroupApi
from .profile import Profile, build_profile
from .review import MAX_WARNING_CHARS, AdmissionRequest, build_response
from .rules import MODES, Rules
from .validate import CheckContext, validate
from .view import claims as claim_view
from .workloads.kinds import group_of, pod_templates, templates_of
from .workloads.parallelism import World
from .workloads.templates import TABLE_READER, Resolver

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


_LAST_ASIDE = re.compile(r"\s*\([^()]*\)$")


def fitted(warning: str) -> str:
    """``warning`` short enough that the API server passes it on whole (it cuts one longer than
    `MAX_WARNING_CHARS` with an ellipsis): the asides at its end (a list of known models) go first, then what
    follows its last "; ", and only then is it cut."""
    while len(warning) > MAX_WARNING_CHARS:
        shorter = _LAST_ASIDE.sub("", warning)
        if shorter == warning:
            head, sep, _ = warning.rpartition("; ")
            shorter = head if sep else warning
        if shorter == warning:
            return warning[: MAX_WARNING_CHARS - 1] + "\u2026"
        warning = shorter
    return warning


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
        would = [fitted(f"ai-admission (warn mode) would deny: {f.message}") for f in denials]
        return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(would + warnings))
    audit = {"violations": ",".join(f.code for f in denials), "violation-messages": denial}
    return Verdict(allowed=True, mode=mode, profile=profile, findings=findings, warnings=tuple(warnings),
                   audit_annotations=audit)


def verdict_of(findings: Iterable[Finding], *, mode: str, header: str, profile: Profile | None = None,
               notes: Sequence[str] = ()) -> Verdict:
    """The one way findings become a verdict, for pods, templates, objects as a whole, claims and ephemeral
    containers: denials first (each kind in the order found), ``header`` and a line per denial as the message,
    ``notes`` then the warnings' messages as warnings, and the mode applied (`_apply_mode`)."""
    ordered = tuple(sorted(findings, key=lambda f: f.severity != "deny"))
    denials = [f for f in ordered if f.severity == "deny"]
    denial = "\n".join([header, *(f"- {f.message}" for f in denials)]) if denials else None
    return _apply_mode(mode=mode, profile=profile, findings=ordered, denial=denial,
                       warnings=[*notes, *(f.message for f in ordered if f.severity == "warn")])


def judge_pod(pod: Mapping[str, Any], *, ctx: Context, mode: str, subject: str, world: World | None = None,
              notes: tuple[str, ...] = (), claims: claim_view.ClaimSource | None = None, namespace: str = "",
              template: bool = False) -> Verdict:
    """Validate ``pod`` and turn findings into a verdict according to ``mode`` (deny, warn or audit).

    ``world``: the job's size when known from a controller's template; ``notes``: what the reader should know about
    how a template was read, passed on as warnings; ``claims``: the DRA claims and templates of the pod's
    namespace, for a pod that takes GPUs through them; ``namespace``: the request's (else the pod's own), which
    decides the exemptions of GPU infrastructure from the bypass findings (`webhook.core.bypasses.paths`);
    ``template``: the pod a controller's template makes, whose object `judge_object` holds to the backend as a whole.
    """
    profile = build_profile(pod, ctx, claims, world=world)
    findings = validate(CheckContext(pod, profile, ctx, namespace=namespace, template=template))
    return verdict_of(findings, mode=mode, header=_header(subject, profile), profile=profile, notes=notes)


@dataclass
class TemplateVerdict:
    path: str
    pod: dict[str, Any]
    verdict: Verdict
    reader: str = TABLE_READER   # what found the template: the kinds table, or the generic reader and its shape
    replicas: int = 1            # the pods it makes (what the GPUs beyond a pod's need add up over)
    mutated: dict[str, Any] | None = None  # the pod as /mutate will leave it (``check -o yaml`` shows it)

    @property
    def generic(self) -> bool:
        return self.reader != TABLE_READER


def object_subject(obj: Mapping[str, Any], *, kind: str, namespace: str = "", name: str = "") -> str:
    """How messages name ``obj`` (``name``/``namespace``, e.g. from the request, win over its metadata)."""
    meta = podview.metadata(obj)
    generate_name = meta.get("generateName")
    return podview.describe(kind=kind, name=name or str(meta.get("name") or "") or None,
                            generate_name=generate_name if isinstance(generate_name, str) else None,
                            namespace=namespace or str(meta.get("namespace") or "") or None)


def judge_object(obj: Mapping[str, Any], *, ctx: Context, mode: str, group: str | None = None,
                 kind: str | None = None, namespace: str = "", old: Mapping[str, Any] | None = None,
                 resolve: Resolver | None = None, generic: bool = True, claims: claim_view.ClaimSource | None = None,
                 ) -> tuple[Verdict, list[TemplateVerdict]] | None:
    """Judge every pod template of a controller or CRD as the pod it will produce (None: no templates to judge).

    A kind ai-admission does not know is read generically (``generic``): its pod specs that ask for accelerators
    are judged, and the verdict says they were read that way. On UPDATE (``old`` given) only templates that
    changed are judged, so scaling a legacy Deployment that predates the policy is not blocked. ``resolve`` finds
    objects a template refers to (a TrainJob's runtime) where they are known.
    """
    found = pod_templates(obj, ctx=ctx, group=group, kind=kind, resolve=resolve, generic=generic)
    if found is None:
        return None
    group = group if group is not None else group_of(str(obj.get("apiVersion", "")))
    kind = kind or str(obj.get("kind", ""))
    if old is not None:
        previous = pod_templates(old, ctx=ctx, group=group, kind=kind, resolve=resolve, generic=generic) or []
        before = {t.path: t.template for t in previous}
    else:
        before = {}
    subject = object_subject(obj, kind=kind, namespace=namespace)
    results = []
    profiles: list[Profile] = []  # of every template, judged or not (the backend holds the whole job)
    for template in found:
        if old is not None and before.get(template.path) == template.template:
            profiles.append(build_profile(template.pod, ctx, claims, world=template.world))
            continue
        pod = template.pod
        if namespace and "namespace" not in pod["metadata"]:
            pod["metadata"]["namespace"] = namespace
        verdict = judge_pod(pod, ctx=ctx, mode=mode, subject=f"{subject} {template.path}", world=template.world,
                            notes=template.notes, claims=claims, template=True)
        profile = verdict.profile
        assert profile is not None  # judge_pod always builds one
        mutation = mutate_pod(pod, profile, ctx, namespace=namespace)
        verdict = heard(verdict, mutation, ctx)
        results.append(TemplateVerdict(path=template.path, pod=pod, verdict=verdict, reader=template.reader,
                                       replicas=template.replicas, mutated=mutation.pod))
        profiles.append(profile)
    if not results:
        return None if old is None else (Verdict(allowed=True, mode=mode, profile=None), results)
    extra = backend_findings(obj, group=group, kind=kind, pods=[t.pod for t in found], profiles=profiles,
                             replicas=[t.replicas for t in found], ctx=ctx, namespace=namespace)
    if (group, kind) == groups.JOB and not ctx.rules.scheduler.active and results:
        grouping = groups.job_grouping_finding(
            obj, multi_node=any(groups.groups_class(p, ctx) and p.multi_node for p in profiles),
            support=ctx.cluster.pod_groups)
        extra = [*extra, grouping] if grouping is not None else extra
    if extra:  # the object as a whole: a result of its own, path "" (check and audit list it beside the templates)
        whole = verdict_of(extra, mode=mode, header=f"{subject} was denied by ai-admission:")
        results = [*results, TemplateVerdict(path="", pod={}, verdict=whole, reader=WHOLE_READER)]
    return _compose(mode, results), results


WHOLE_READER = "the object as a whole"  # the reader of the findings of an object as a whole (its backend's checks)


def heard(verdict: Verdict, mutation: Mutation, ctx: Context) -> Verdict:
    """A template's verdict with the warnings its pods get at /mutate (``mutation``: fabric, packing, gang,
    /dev/shm, NCCL, PriorityClass): those go to the controller that creates the pods, which reads none, so the
    person who applies the owner is told them here, at its /validate (and ``check`` and ``audit`` show them)."""
    profile = verdict.profile
    if profile is None or ctx.rules.classes.get(profile.workload) is None:
        return verdict
    told = [fitted(w) for w in mutation.warnings]
    fresh = tuple(w for w in dict.fromkeys(told) if w not in verdict.warnings)
    return replace(verdict, warnings=verdict.warnings + fresh) if fresh else verdict


def _compose(mode: str, results: list[TemplateVerdict]) -> Verdict:
    """One verdict for an object from its templates' verdicts (each already in ``mode``), and the verdict of the
    object as a whole (path "") where there is one. A warning several templates share is said once, for them all;
    one template's names it."""
    messages = [r.verdict.message for r in results if r.verdict.message]
    audits = [r.verdict.audit_annotations for r in results if r.verdict.audit_annotations]
    audit = {key: ("," if key == "violations" else "\n").join(a[key] for a in audits) for key in audits[0]} if audits else {}
    paths: dict[str, list[str]] = {}
    for r in results:
        for w in r.verdict.warnings:
            paths.setdefault(w, []).append(r.path)
    return Verdict(allowed=all(r.verdict.allowed for r in results), mode=mode, profile=None,
                   findings=tuple(f for r in results for f in r.verdict.findings),
                   message="\n".join(messages) if messages else None,
                   warnings=tuple(f"{where[0]}: {w}" if len(where) == 1 and where[0] else w for w, where in paths.items()),
                   audit_annotations=audit)


def mutate_verdict(pod: Mapping[str, Any], *, ctx: Context, mode: str, claims: claim_view.ClaimSource | None = None,
                   namespace: str = "") -> Verdict:
    """Mutation always admits (validation is the validating webhook's job) and carries the patch."""
    profile = build_profile(pod, ctx, claims)
    mutation = mutate_pod(pod, profile, ctx, namespace=namespace)
    return Verdict(allowed=True, mode=mode, profile=profile, warnings=tuple(mutation.warnings),
                   patch=tuple(mutation.patch))


def pod_group_verdict(podgroup: Mapping[str, Any], *, version: str, ctx: Context, mode: str,
                      ) -> Verdict | None:
    """A PodGroup at its CREATE: the Job controller's gets what the profile of its Job's template knows
    (`webhook.core.podgroups.plan.for_job_controllers_group`), the Job as the server's watch has it; None for any
    other, with a queueing backend, or where the Job is not known (the watch is behind)."""
    support = ctx.cluster.pod_groups
    jobs = ctx.cluster.jobs
    if support.api is None or ctx.rules.scheduler.active or jobs is None:
        return None
    api = PodGroupApi(version=version, topology=support.api.topology, preemption=support.api.preemption)
    given = groups.for_job_controllers_group(podgroup, jobs, ctx, api)
    if given is None:
        return None
    profile, ops, notes = given
    return Verdict(allowed=True, mode=mode, profile=profile, warnings=notes, patch=tuple(ops))


def judge_claim(obj: Mapping[str, Any], *, ctx: Context, mode: str, kind: str, namespace: str = "",
                old: Mapping[str, Any] | None = None) -> Verdict | None:
    """A DRA ResourceClaim or ResourceClaimTemplate: its GPU requests must pin the model and state the memory.

    None (not judged): claims Kubernetes makes for pods (their template or pod was judged), an UPDATE that
    changes neither the requests nor the ai-admission annotations (the spec is immutable; metadata is not), and a
    claim that asks for no GPU (a NIC, a compute domain).
    """
    if kind not in claim_view.CLAIM_KINDS or dra.is_generated(obj):
        return None
    if not dra.analyse_claim(obj, kind, ctx).requests:
        return None
    if old is not None and dra.judged_parts(old, kind) == dra.judged_parts(obj, kind):
        return None
    return verdict_of(dra.claim_findings(obj, kind, ctx), mode=mode,
                      header=f"{object_subject(obj, kind=kind, namespace=namespace)} was denied by ai-admission:")


def subject_of(request: AdmissionRequest) -> str:
    return object_subject(request.object or {}, kind="pod", namespace=request.namespace, name=request.name)


def is_pod(group: str, kind: str) -> bool:
    return group == "" and kind == "Pod"


def judge(obj: Mapping[str, Any], *, ctx: Context, mode: str, group: str, kind: str, namespace: str = "",
          subject: str | None = None, old: Mapping[str, Any] | None = None, claims: claim_view.ClaimSource | None = None,
          resolve: Resolver | None = None,
          ) -> tuple[Verdict, list[TemplateVerdict]] | None:
    """The verdict for any object, by what it is: a pod, a DRA claim or claim template, or an object with pod
    templates (a controller, an AI CRD, a kind found by shape); None when there is nothing to judge.

    ``subject``: how messages name a pod (default: from its metadata); ``old``: the object before an UPDATE, so
    that only what changed is judged; ``claims``: the DRA claims of the namespace; ``resolve``: finds objects a
    template refers to (a TrainJob's runtime), where they are known.
    """
    if is_pod(group, kind):
        verdict = judge_pod(obj, ctx=ctx, mode=mode, claims=claims, namespace=namespace,
                            subject=subject or object_subject(obj, kind="pod", namespace=namespace))
        return verdict, []
    if group == dra.GROUP:
        claim = judge_claim(obj, ctx=ctx, mode=mode, kind=kind, namespace=namespace, old=old)
        return (claim, []) if claim is not None else None
    return judge_object(obj, ctx=ctx, mode=mode, group=group, kind=kind, namespace=namespace, old=old,
                        resolve=resolve, claims=claims)


# What a request is judged as (`Route.action`): a pod mutated at its CREATE, the Job controller's PodGroup at its
# CREATE, an owner of the kinds table given a backend's words at its CREATE, an object judged (a pod, a claim, a
# controller's templates), an ephemeral container added to a running pod; "" for what ai-admission does not act on.
MUTATE_POD, POD_GROUP, OWNER, JUDGE, EPHEMERAL_CONTAINER, NOTHING = (
    "mutate-pod", "pod-group", "owner", "judge", "ephemeral", "")


@dataclass(frozen=True)
class Route:
    """A request as it is judged, worked out once from the request and the rules (`route_of`): what is done with
    it, in which namespace and mode, the subject its messages name, the kind judged, the object before an UPDATE,
    and whether its verdict may be remembered (a pod at its CREATE that takes no DRA claims: the verdict then reads
    only the pod, the rules and the view's PriorityClass and Workload API states). The server's decision cache and
    `decide` both read it, so neither works any of it out again."""

    action: str
    namespace: str
    mode: str
    subject: str = ""
    kind: str = ""
    old: Mapping[str, Any] | None = None
    cacheable: bool = False


def route_of(request: AdmissionRequest, *, rules: Rules, endpoint: str, path_mode: str | None = None) -> Route:
    """What `decide` does with ``request`` at ``endpoint``. Pods are judged (and mutated) on CREATE; controllers and
    AI CRDs have their templates validated on CREATE and UPDATE, and so are DRA claims and claim templates; of the
    subresources only ``pods/ephemeralcontainers`` is acted on; status, scale, binding and the others never are."""
    obj = request.object
    namespace = request.namespace or str(podview.metadata(obj or {}).get("namespace") or "")
    mode = resolve_mode(rules, namespace=namespace, path_mode=path_mode)
    pod = request.resource == "pods"
    subject = subject_of(request) if pod else ""
    action = NOTHING
    if obj is None:
        pass
    elif request.sub_resource:
        if pod and request.sub_resource == EPHEMERAL and request.operation == "UPDATE":
            action = EPHEMERAL_CONTAINER
    elif request.is_pod_create and endpoint == MUTATE:
        action = MUTATE_POD
    elif request.group == WORKLOAD_GROUP and request.resource == RESOURCE:
        action = POD_GROUP if endpoint == MUTATE and request.operation == "CREATE" else NOTHING
    elif endpoint == MUTATE and request.operation == "CREATE" and not pod:
        action = OWNER
    elif endpoint == VALIDATE and request.operation in ("CREATE", "UPDATE") and (not pod or request.is_pod_create):
        action = JUDGE
    spec = podview.as_dict(obj.get("spec")) if isinstance(obj, dict) else {}
    cacheable = action in (MUTATE_POD, JUDGE) and pod and isinstance(obj, dict) and not spec.get("resourceClaims")
    return Route(action=action, namespace=namespace, mode=mode, subject=subject,
                 kind="Pod" if pod else request.kind,
                 old=request.old_object if request.operation == "UPDATE" else None, cacheable=cacheable)


def decide(request: AdmissionRequest, *, ctx: Context, endpoint: str, path_mode: str | None = None,
           route: Route | None = None) -> Verdict | None:
    """The verdict for a request, or None when ai-admission does not act on it (allowed, unchanged), by its
    ``route`` (`route_of`; worked out here where the caller has none), in ``ctx``: the rules file and the cluster as
    last seen (its nodes, DeviceClasses and queues, PriorityClasses, claims and the Workload API's support).
    """
    route = route or route_of(request, rules=ctx.rules, endpoint=endpoint, path_mode=path_mode)
    action, namespace, mode = route.action, route.namespace, route.mode
    if action == NOTHING or request.object is None:
        return None
    if action == EPHEMERAL_CONTAINER:
        return ephemeral_verdict(request.object, request.old_object, ctx=ctx, mode=mode, namespace=namespace,
                                 mutate=endpoint == MUTATE, subject=route.subject)
    if action == POD_GROUP:
        return pod_group_verdict(request.object, version=request.version, ctx=ctx, mode=mode)
    if action == OWNER:
        return owner_verdict(request.object, ctx=ctx, mode=mode, group=request.group, kind=request.kind,
                             namespace=namespace)
    claims = ctx.cluster.claims
    source = claims.source(namespace) if claims is not None else None
    if action == MUTATE_POD:
        return mutate_verdict(request.object, ctx=ctx, mode=mode, claims=source, namespace=namespace)
    judged = judge(request.object, ctx=ctx, mode=mode, group=request.group, kind=route.kind, namespace=namespace,
                   subject=route.subject or None, old=route.old, claims=source)
    return judged[0] if judged else None


def owner_verdict(obj: Mapping[str, Any], *, ctx: Context, mode: str, group: str, kind: str,
                  namespace: str = "") -> Verdict | None:
    """An owner of the kinds table at its CREATE, with the scheduler backend's vocabulary written on it and its
    templates (`webhook.core.backends.scheduling.owner_mutation`); None when the backend writes nothing."""
    if not ctx.rules.scheduler.active:
        return None
    found = templates_of(obj, ctx=ctx, group=group, kind=kind)
    if not found:
        return None
    for template in found:
        if namespace and "namespace" not in template.pod["metadata"]:
            template.pod["metadata"]["namespace"] = namespace
    mutation = owner_mutation(obj, group=group, kind=kind, templates=found, ctx=ctx)
    if not mutation.patch and not mutation.warnings:
        return None
    return Verdict(allowed=True, mode=mode, profile=None, warnings=tuple(fitted(w) for w in mutation.warnings),
                   patch=tuple(mutation.patch))


EPHEMERAL = "ephemeralcontainers"


def ephemeral_verdict(pod: Mapping[str, Any], old: Mapping[str, Any] | None, *, ctx: Context, mode: str,
                      namespace: str, mutate: bool, subject: str) -> Verdict | None:
    """An ephemeral container added to a running pod (``kubectl debug``, the ``pods/ephemeralcontainers``
    subresource): it can ask for no resources, so it never asks for a GPU, but it runs under the pod's
    RuntimeClass with its image's own ``NVIDIA_VISIBLE_DEVICES``. /mutate sets ``void`` on it (where the rules say
    so, outside GPU infrastructure's namespaces); /validate judges its paths to a GPU (a device variable,
    privileged, a device-request mount). None when no container was added."""
    before = {c.get("name") for c in podview.as_list(podview.spec(old or {}).get("ephemeralContainers"))
              if isinstance(c, dict) and isinstance(c.get("name"), str)}
    added = [(index, c) for index, c in enumerate(podview.as_list(podview.spec(pod).get("ephemeralContainers")))
             if isinstance(c, dict) and not (isinstance(c.get("name"), str) and c["name"] in before)]
    bypasses = ctx.rules.bypasses
    if not added or not bypasses.enabled:
        return None
    if mutate:
        voided = void_ephemeral(pod, frozenset(index for index, _ in added), ctx.rules, namespace)
        return Verdict(allowed=True, mode=mode, profile=None, patch=tuple(voided.patch)) if voided.patch else None
    view = {"apiVersion": "v1", "kind": "Pod", "metadata": podview.metadata(pod),
            "spec": {"ephemeralContainers": [c for _, c in added],
                     "serviceAccountName": podview.spec(pod).get("serviceAccountName")}}
    profile = build_profile(view, ctx)
    findings = bypass_findings(view, profile, ctx, namespace)
    if not findings:
        return None
    return verdict_of(findings, mode=mode, header=f"{subject}: an ephemeral container was denied by ai-admission:",
                      profile=profile)


def respond(request: AdmissionRequest, verdict: Verdict | None) -> dict[str, Any]:
    if verdict is None:
        return build_response(api_version=request.api_version, uid=request.uid, allowed=True)
    return build_response(api_version=request.api_version, uid=request.uid, allowed=verdict.allowed,
                          message=verdict.message, warnings=verdict.warnings, patch=verdict.patch,
                          audit_annotations=verdict.audit_annotations)
