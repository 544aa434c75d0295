"""A backstop that cannot be down: the heart of the policy as ValidatingAdmissionPolicies, generated from the rules.

The webhooks run with ``failurePolicy: Ignore`` (an outage must not stop every pod in the cluster), so while the
server is unreachable a bare ``nvidia.com/gpu`` pod is admitted unchecked. A ValidatingAdmissionPolicy runs in
the API server itself. This module writes two, in CEL, for the rule at the heart of ai-admission: a pod, or a pod
template of a kind ai-admission judges, that asks for an accelerator must say which GPU model and how much GPU
memory, in any of the ways the webhook accepts, and reach no GPU but by asking. It denies exactly what the webhook
denies as ``gpu-model-missing``, ``gpu-memory-missing`` and the bypass paths every class denies (each with the
predicate of the library that finds it: `webhook.generate.ledger.BACKSTOP`), and nothing else: unknown models,
sizes that do not fit and everything else stay the webhook's.

How it is composed. Each pod-shaped thing of the request's object is a *view* (`webhook.generate.cel.views`),
read from the same kinds table the webhook walks; `facts` holds, per view, whether it asks for an accelerator
(`webhook.generate.cel.resources`), names its model (`.model`), states its memory (`.memory`) and which paths it
takes (`.paths`). A created pod is first tested plainly (`plain_pod`: the model and memory by the usual annotation
or label, no path tested plainly), so the common GPU pod never reaches the views.

What a policy cannot do, and so does not: it cannot read other objects. A pod that takes DRA claims may have its
model and memory in them, so such a pod (when the rules know GPU device classes) is left to the webhook; so is a
Katib trial of a kind ai-admission does not know (the webhook finds its pod specs by shape). On UPDATE, a
template whose facts are unchanged is not judged again (the webhook re-judges any changed template).

The API server must be 1.34 or later (the lists library's ``lists.range``; quantities and optionals from 1.29).
The GPU toleration MutatingAdmissionPolicy of the backstop-tolerations component is here too (`toleration_policy`).
"""

from __future__ import annotations

import re
from typing import Any

from webhook.core.context import Context
from webhook.core.names import MODE_LABEL
from webhook.core.rules import MODES, Rules
from webhook.core.validate import memory_fix, model_fix
from webhook.core.workloads.kinds import KINDS

from .cel.memory import shares_in_view, stated_in_view, stated_plainly
from .cel.model import named_in_view, named_plainly
from .cel.paths import codes_in_view, denied_paths, may_take_a_path, plainly_clear
from .cel.resources import asked, asks_for_accelerator, asks_or_malformed, device_test, shares_by_annotation
from .cel.text import anchored, cel_string, unbound, without_bind
from .cel.tolerations import TOLERATIONS_PATCH, toleration_variables
from .cel.views import EXPANDED, EXPERIMENT, TRIAL_PREFIX, Views, _group, _trial, resources_of, terms
from .webhooks import EXCLUDED_NAMESPACES, excluded_namespaces

NAME = "ai-admission-gpu-model-and-memory"
ACTIONS = {"deny": ["Deny"], "warn": ["Warn"], "audit": ["Audit"]}


# -- the rule, once over the views -----------------------------------------------------------------------------

def normalized(rules: Rules, views: str) -> str:
    """The views with what the rule reads of their pod spec: every container's resources (init containers too),
    the nodeSelector, the required node-affinity terms, and whether DRA claims may say the rest."""
    claims = "size(s.?resourceClaims.orValue([])) > 0" if rules.dra.device_classes else "false"
    containers = ("dyn(cel.bind(cl, s.?containers.orValue([]) + s.?initContainers.orValue([]) + "
                  "s.?ephemeralContainers.orValue([]), type(cl) == list ? cl : []))")
    return (f"{views}.map(v0, cel.bind(s, type(v0.s) == map ? v0.s : {{}}, {{'p': v0.p, 'a': v0.a, "
            f"'r': dyn({resources_of('s.?containers.orValue([])')} + {resources_of('s.?initContainers.orValue([])')}), "
            f"'ns': dyn(s.?nodeSelector.orValue({{}})), 't': dyn({terms('s')}), 'c': dyn({claims}), "
            f"'cs': {containers}, 'rc': dyn(s.?runtimeClassName.orValue('')), "
            f"'vols': dyn(s.?volumes.orValue([])), 'sa': dyn(s.?serviceAccountName.orValue('default'))}}))")


def fact_variables(rules: Rules, views: str) -> list[dict[str, str]]:
    """Per view (``variables.normed``, `normalized`), in variables of their own (each a short expression: the API
    server's type checker takes time quadratic in an expression's size, and an evaluator's parser has a depth):

    - ``accelerators``: each container's accelerators (`webhook.generate.cel.resources.asked`);
    - ``asking``: it asks for an accelerator, or for GPU shares by annotation;
    - ``modelNamed``, ``memoryStated``: not gpu-model-missing, not gpu-memory-missing; a pod is a MIG pod when every
      accelerator it asks for is a MIG slice whose size the name gives (`webhook.core.profile._mig_memory`); its
      memory is stated, too, when every accelerator is a MIG slice or a vGPU type whose name gives its frame buffer
      (`webhook.core.models.device_choice`), and its model is named when one is a device-named resource;
    - ``paths``: the reason codes of its paths to a GPU that are not requests (`webhook.generate.cel.paths`);

    and what the validation reads: ``noModel``, ``noMemory`` (the paths of the views that miss them), ``bypassed``.
    """
    mig_pattern = rules.accelerators.mig_pattern
    mig_regex = anchored(mig_pattern.pattern) if mig_pattern is not None else None
    mig_sized = mig_pattern is not None and "mem" in mig_pattern.groupindex
    mig = (f"(al.exists(l, size(l) > 0) && al.all(l, l.all(n, n.matches({cel_string(mig_regex)}))))"
           if mig_sized and mig_regex else "false")
    sized_tests = ([f"n.matches({cel_string(mig_regex)})"] if mig_sized and mig_regex else []) + \
        [device_test("n", device) for device in rules.accelerators.device_resources if device.sized]
    sized = mig if not any(device.sized for device in rules.accelerators.device_resources) else \
        f"(al.exists(l, size(l) > 0) && al.all(l, l.all(n, {' || '.join(sized_tests)})))"
    device = (f"al.exists(l, l.exists(n, {' || '.join(device_test('n', d) for d in rules.accelerators.device_resources)}))"
              if rules.accelerators.device_resources else "false")
    shared = shares_in_view(rules, "v")[0]

    def each(body: str) -> str:
        """``body`` for each view ``v`` with its accelerators ``al`` and whether it asks (``asks``)."""
        return (f"lists.range(size(variables.normed)).map(i, cel.bind(v, variables.normed[i], "
                f"cel.bind(al, variables.accelerators[i], cel.bind(asks, variables.asking[i], {body}))))")

    views_of = "lists.range(size(variables.normed))"
    return unbound([
        {"name": "normed", "expression": normalized(rules, views)},
        {"name": "accelerators", "expression": f"variables.normed.map(v, v.r.map(r, {asked(rules, 'r')}))"},
        {"name": "asking",
         "expression": f"lists.range(size(variables.normed)).map(i, cel.bind(v, variables.normed[i], "
                       f"variables.accelerators[i].exists(l, size(l) > 0) || ({shared})))"},
        {"name": "modelNamed", "expression": each(named_in_view(rules, "v", mig, device))},
        {"name": "memoryStated", "expression": each(stated_in_view(rules, "v", sized))},
        # per container of each view (app, init, ephemeral, as ``cs``): it asks for an accelerator, or names one
        # with a malformed amount
        {"name": "users", "expression": f"variables.normed.map(v, v.cs.map(c, type(c) == map && "
                                        f"{asks_or_malformed(rules, 'c.?resources.orValue({})')}))"},
        {"name": "paths",
         "expression": f"lists.range(size(variables.normed)).map(i, cel.bind(v, variables.normed[i], "
                       f"cel.bind(us, variables.users[i], cel.bind(asks, variables.asking[i], "
                       f"{codes_in_view(rules, 'v')}))))"},
        {"name": "noModel", "expression": f"{views_of}.filter(i, variables.asking[i] && !variables.modelNamed[i])"
                                          f".map(i, variables.normed[i].p)"},
        {"name": "noMemory", "expression": f"{views_of}.filter(i, variables.asking[i] && !variables.memoryStated[i])"
                                           f".map(i, variables.normed[i].p)"},
        {"name": "bypassed", "expression": f"{views_of}.filter(i, size(variables.paths[i]) > 0)"
                                           f".map(i, {{'p': dyn(variables.normed[i].p), 'bypass': dyn(variables.paths[i])}})"},
    ])


def _pod_views(cel: Views) -> str:
    """The one view of each subject that is a pod."""
    pod = cel.view("'pod'", ["o.?metadata.?annotations.orValue({})"], "o.?spec.orValue({})")
    return f"variables.subjects.map(o, [{pod}])"


def _kind_variable(group: str, kind: str) -> str:
    return "of_" + re.sub(r"[^A-Za-z0-9]", "_", f"{group}_{kind}")


def _template_variables(cel: Views, scope: str | None) -> list[dict[str, str]]:
    """The views of the subjects (``variables.views``: a list of views per subject), read kind by kind.

    Each kind's reader is a variable of its own, which the API server evaluates only when it is read (for the
    request's kind, or an Experiment's trial's). The API server's CEL type checker takes time quadratic in the size
    of one expression: all kinds' readers in one expression took 10 s to compile on a v1.36 API server, one
    variable per kind under 0.3 s in all, and a policy is not enforced before it is compiled.

    ``roots``: what is read, the subjects themselves, or for a Katib Experiment their trial specs, each read as the
    object of its own kind (``kinds``: ``group/Kind`` of each root) with paths under the trial's.
    """
    readable = [key for key in readable_kinds() if key != EXPERIMENT]
    variables = [
        {"name": "trials", "expression": f"variables.resource == {cel_string(EXPERIMENT[0] + '/experiments')}"},
        {"name": "roots",
         "expression": without_bind(f"variables.trials ? variables.subjects.map(o, {_trial('o')}) : variables.subjects")},
        {"name": "kinds",
         "expression": without_bind(f"variables.trials ? variables.roots.map(tr, {_group('tr')} + '/' + "
                                    f"string(tr.?kind.orValue(''))) : "
                                    f"variables.subjects.map(o, request.kind.group + '/' + request.kind.kind)")},
    ]
    chain = []
    for group, kind in sorted(readable):
        views = cel.kind_views(group, kind, "o")
        assert views is not None
        name = _kind_variable(group, kind)
        variables.append({"name": name, "expression": without_bind(f"variables.roots.map(o, {views})")})
        chain.append(f"k == {cel_string(group + '/' + kind)} ? variables.{name}[i]")
    # one kind a line: a reviewer reads the policy kind by kind
    found = ("lists.range(size(variables.kinds)).map(i, cel.bind(k, variables.kinds[i],\n  "
             + "\n  : ".join(chain) + "\n  : []))")
    prefixed = f"vs.map(v, {{'p': dyn({cel_string(TRIAL_PREFIX)} + v.p), 'a': v.a, 's': v.s}})"
    views = f"{found}.map(vs, variables.trials ? {prefixed} : vs)"
    if scope is None:
        views = f"variables.resource == '/pods' ? {_pod_views(cel)} : ({views})"
    return [*variables, {"name": "views", "expression": without_bind(views)}]


def _view_variables(cel: Views, scope: str | None) -> list[dict[str, str]]:
    if scope == PODS:
        return [{"name": "views", "expression": without_bind(_pod_views(cel))}]
    return _template_variables(cel, scope)


def readable_kinds() -> list[tuple[str, str]]:
    """(group, kind) of the kinds whose templates the policy reads (the others are left to the webhook); an
    Experiment's, through its trial's kind."""
    return [key for key in KINDS if key == EXPERIMENT or key in EXPANDED or KINDS[key].sites]


def _resource_rules(scope: str | None = None) -> list[dict[str, Any]]:
    by_scope: dict[tuple[str, str], list[str]] = {}
    for group, kind in readable_kinds():
        entry = KINDS[(group, kind)]
        resources = by_scope.setdefault((group, entry.scope), [])
        if entry.resource not in resources:
            resources.append(entry.resource)
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
              "scope": "Namespaced"}] if scope in (None, PODS) else []
    if scope == PODS:
        return rules
    rules += [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
               "resources": sorted(resources), "scope": scope}
              for (group, scope), resources in sorted(by_scope.items())]
    return rules




def plain_pod(rules: Rules) -> str:
    """A created pod the pods' rule plainly passes, tested first so the common GPU pod never reaches the views
    (measured with the API server's own validator, v1.36: the views cost the course example's pod 520 us): its
    model named and its memory stated plainly (`named_plainly`, `stated_plainly`: what `named_in_view` and
    `stated_in_view` read first), and `plainly_clear`. Anything else goes through the views, as before."""
    return (f"request.resource.resource == 'pods' && {named_plainly(rules)} && {stated_plainly(rules)} && "
            f"{plainly_clear(rules)}")


PODS, TEMPLATES = "pods", "templates"


def policy_name(scope: str | None) -> str:
    """The pods' policy keeps the one name the backstop had; the kinds' is named apart."""
    return f"{NAME}-{TEMPLATES}" if scope == TEMPLATES else NAME


def validating_policy(rules: Rules, scope: str | None = None) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy for ``rules``: for pods (``scope`` PODS), for the pod templates of the kinds
    (TEMPLATES), or both in one (None). Shipped as two: a pod is never judged by the kinds' part, and its policy
    stays small."""
    views = Views(rules)
    subject = ("(variables.resource == '/pods' ? 'pod' : object.kind + ' ' + object.metadata.?name.orValue('')) + "
               "(variables.resource == '/pods' ? '' : ' ' + {paths}.join(', '))")
    model = model_fix(Context(rules), None)
    memory = memory_fix(Context(rules), None)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(scope), "labels": {"app.kubernetes.io/name": "ai-admission"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": _resource_rules(scope), "matchPolicy": "Equivalent"},
            # most pods ask for no accelerator: they skip the views (the test is by name only, a superset of the
            # rule's); controllers and CRDs always go on
            "matchConditions": [{"name": "may-ask-for-accelerators",
                                 "expression": " || ".join(["request.resource.resource != 'pods'",
                                                            asks_for_accelerator(rules),
                                                            *shares_by_annotation(rules),
                                                            *(may_take_a_path(rules) if denied_paths(rules) else [])])}],
            "variables": [
                *([{"name": "plain", "expression": plain_pod(rules)}] if scope == PODS else []),
                {"name": "resource", "expression": "request.resource.group + '/' + request.resource.resource"},
                {"name": "subjects",
                 "expression": "request.operation == 'UPDATE' && oldObject != null ? [object, oldObject] : [object]"},
                *_view_variables(views, scope),
                # on UPDATE a template whose facts did not change is not judged (a legacy template keeps scaling)
                {"name": "judged",
                 "expression": "variables.views[0].filter(v, size(variables.views) < 2 || "
                               "!variables.views[1].exists(w, w == v))"},
                *fact_variables(rules, "variables.judged"),
            ],
            # one validation: the API server reports only the first that fails, and each part names its own
            "validations": [{
                "expression": ("variables.plain || " if scope == PODS else "") +
                              "size(variables.noModel) == 0 && size(variables.noMemory) == 0 && "
                              "size(variables.bypassed) == 0",
                "reason": "Forbidden",
                "message": f"a pod or pod template asks for GPUs but does not say which model ({model}) or how "
                           f"much GPU memory it needs ({memory}), or reaches GPUs without asking for them",
                # the API server evaluates a message expression whether its validation passed or not: a pod that
                # passes plainly must not pay for the views here
                "messageExpression": ("variables.plain ? '' : " if scope == PODS else "") + "[" + ", ".join([
                    f"size(variables.noModel) > 0 ? {subject.format(paths='variables.noModel')} + "
                    f"' asks for GPUs but does not say which model: ' + {cel_string(model)} : ''",
                    f"size(variables.noMemory) > 0 ? {subject.format(paths='variables.noMemory')} + "
                    f"' asks for GPUs but does not say how much GPU memory it needs: ' + {cel_string(memory)} : ''",
                    f"size(variables.bypassed) > 0 ? {subject.format(paths='variables.bypassed.map(f, f.p)')} + "
                    f"' reaches GPUs without asking for them (' + "
                    f"variables.bypassed.map(f, f.bypass.join(', ')).join(' | ') + '): remove that and ask for the GPU "
                    f"in resources with its model and memory' : ''",
                ]) + "].filter(part, part != '').join('; ')",
            }],
        },
    }


_NAMESPACED = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"],
                "scope": "Namespaced"}]


def bindings(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None,
             policy: str = NAME) -> list[dict[str, Any]]:
    """One binding per way a namespace gets its mode, as the webhooks resolve it: the ``ai-admission.io/mode``
    label (warn, audit), else the rules' namespace map, else their default. Cluster-scoped kinds take the
    default. ``namespace_expressions`` narrow every binding (tests bind one namespace at a time)."""
    extra = list(namespace_expressions or [])
    found = []

    def bind(name: str, mode: str, expressions: list[dict[str, Any]], namespaced_only: bool) -> None:
        match: dict[str, Any] = {"namespaceSelector": {"matchExpressions": [*expressions, *extra]}}
        if namespaced_only:
            match["resourceRules"] = _NAMESPACED
        found.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                      "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "ai-admission"}},
                      "spec": {"policyName": policy, "validationActions": ACTIONS[mode], "matchResources": match}})

    unlabelled = {"key": MODE_LABEL, "operator": "NotIn", "values": ["warn", "audit"]}
    for mode in MODES:
        mapped = sorted(ns for ns, m in rules.namespace_modes.items() if m == mode)
        others = sorted(ns for ns, m in rules.namespace_modes.items() if m != mode)
        if mode == rules.default_mode:
            excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": [*EXCLUDED_NAMESPACES, *others]}
            bind(f"{policy}-{mode}", mode, [excluded, unlabelled], namespaced_only=False)
        elif mapped:
            bind(f"{policy}-{mode}", mode, [excluded_namespaces(), unlabelled,
                                           {"key": "kubernetes.io/metadata.name", "operator": "In", "values": mapped}],
                 namespaced_only=True)
        if mode != "deny":
            bind(f"{policy}-{mode}-label", mode, [excluded_namespaces(), {"key": MODE_LABEL, "operator": "In", "values": [mode]}],
                 namespaced_only=True)
    return found


def manifests(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The two policies (pods, and the kinds' templates) and their bindings, as `ai-admission manifests policy`
    prints them."""
    return [validating_policy(rules, PODS), validating_policy(rules, TEMPLATES),
            *bindings(rules, namespace_expressions), *bindings(rules, namespace_expressions, policy_name(TEMPLATES))]


# -- the GPU toleration as a MutatingAdmissionPolicy -----------------------------------------------------------

TOLERATIONS = "ai-admission-gpu-tolerations"


def toleration_policy(rules: Rules, namespace_expressions: list[dict[str, Any]] | None = None, *,
                      name: str = TOLERATIONS, unless: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.36+) and its binding that give a
    pod the toleration of each accelerator resource it asks for, as `webhook.core.mutate.add_tolerations` does (key:
    the resource, ``Exists``, ``NoSchedule``; not when a toleration the pod has already covers it), so that pods
    created while the webhook is down still reach tainted GPU nodes. The class's own pool tolerations and a DRA
    claim's device-class taint stay the webhook's. Empty when the rules add no GPU tolerations. ``unless``: one
    more match condition, for the pods another policy gives their tolerations (the native set's class policies)."""
    if not rules.mutation.gpu_tolerations:
        return []
    labels = {"app.kubernetes.io/name": "ai-admission"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Ignore",  # a toleration is a convenience; the webhook adds it again when it is up
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}],
                                 "matchPolicy": "Equivalent"},
            "matchConditions": [*([unless] if unless else []),
                                {"name": "may-ask-for-accelerators", "expression": str(asks_for_accelerator(rules))}],
            "variables": unbound(toleration_variables(rules)),
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": TOLERATIONS_PATCH}}],
        },
    }
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": labels},
               "spec": {"policyName": name,
                        "matchResources": {"namespaceSelector": {
                            "matchExpressions": [excluded_namespaces(), *(namespace_expressions or [])]}}}}
    return [policy, binding]
