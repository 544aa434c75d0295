"""A pod CREATE through the admission chain of a v1.36 API server, in-process: the built-in plugins the policies
meet, the MutatingAdmissionPolicies, the mutating webhook, the ValidatingAdmissionPolicies and the validating
webhooks, as installed, with the policies' CEL evaluated by `tests.support.cel_engine` and the webhook called
in-process (the core's `decide`, as the server calls it).

What is emulated, each as the API server's source has it (k8s.io/apiserver/pkg/admission, v1.36):

- the order: Priority and DefaultTolerationSeconds (built-in), MutatingAdmissionPolicy, MutatingAdmissionWebhook;
  then ValidatingAdmissionPolicy, ValidatingAdmissionWebhook;
- reinvocation: any mutation a policy applied, or a webhook's change, runs the mutating chain once more; in the
  second pass the built-in plugins run again (Priority refuses a pod whose priority is not its class's), policies
  with ``reinvocationPolicy: IfNeeded`` that were invoked run again, and so does an IfNeeded webhook that ran, when
  the pod changed after it;
- a policy: its match constraints and its binding's namespace selector, its parameter (``parameterNotFoundAction:
  Allow`` skips the binding), every match condition (a false one skips it; an error, under ``Ignore``, too), its
  variables evaluated afresh for the conditions and for each mutation against the pod the mutations before it
  left, each mutation's JSON Patch applied in turn (an error drops that mutation only, under ``Ignore``);
- the pod as the API server decodes it (`defaulted`: a request defaulted to its limit), and after each mutation as
  the typed Pod holds it (`typed`): empty strings and nulls dropped, quantities in their canonical form;
- a validating policy: conditions, variables, its validations, and the binding's actions (Deny, Warn, Audit);
- a webhook: its rules, namespace selector and match conditions, ``failurePolicy: Ignore`` when unreachable.

Not emulated (the real API server lane, tests/e2e, runs those): defaulting of fields the policies do not read,
other built-in plugins, the policies' cost budgets, type-checking at creation.
"""

from __future__ import annotations

import copy
import re
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Mapping

import jsonpatch

from tests.support.cel_engine import CelError, evaluate
from webhook.core.admission import MUTATE, VALIDATE, Verdict, decide
from webhook.core.context import Context
from webhook.core.quantity import QuantityError, parse_quantity
from webhook.core.review import AdmissionRequest

NOT_READY = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# every cluster has these (the API server creates them)
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": (2000001000, "PreemptLowerPriority"),
                           "system-cluster-critical": (2000000000, "PreemptLowerPriority")}


# -- the typed pod ---------------------------------------------------------------------------------------------

def canonical_quantity(value: Any) -> Any:
    """A quantity as ``resource.Quantity`` writes it (its String()): the format it was written in, the largest
    suffix that keeps the number whole."""
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return value
    text = str(value).strip()
    if re.search(r"[eE]", text) and not re.search(r"(Ki|Mi|Gi|Ti|Pi|Ei)$", text):
        return value  # the exponent form: written as is (rare in pods)
    binary = bool(re.search(r"(Ki|Mi|Gi|Ti|Pi|Ei)$", text))
    if binary and amount == amount.to_integral_value() and abs(amount) >= 1024:
        whole = int(amount)
        for suffix, unit in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if whole % unit == 0:
                return f"{whole // unit}{suffix}"
        return str(whole)
    for suffix, exponent in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0), ("m", -3),
                             ("u", -6), ("n", -9)):
        scaled = amount / (Decimal(10) ** exponent)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return value


_QUANTITY_MAPS = ("limits", "requests")


def typed(doc: Any, parent: str = "") -> Any:
    """``doc`` as the API server's typed object writes it: empty strings and nulls are not written, quantities are
    canonical, numbers that are whole are integers."""
    if isinstance(doc, dict):
        found = {}
        for key, value in doc.items():
            if value is None or value == "":
                continue
            if parent in _QUANTITY_MAPS or (parent == "emptyDir" and key == "sizeLimit"):
                found[key] = canonical_quantity(value)
            else:
                found[key] = typed(value, key)
        return found
    if isinstance(doc, list):
        return [typed(v, parent) for v in doc]
    if isinstance(doc, float) and doc == int(doc):
        return int(doc)
    return doc


def defaulted(pod: dict[str, Any]) -> dict[str, Any]:
    """The defaults the API server gives a pod before admission that the policies read: each container's request of
    a resource it gives only the limit of is that limit (core/v1 ``SetDefaults_Pod``)."""
    spec = pod.get("spec") or {}
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
                requests = resources.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, value in resources["limits"].items():
                        requests.setdefault(name, value)
    return pod


# -- selectors and rules ---------------------------------------------------------------------------------------

def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against ``labels``."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def rule_matches(rules: list[dict[str, Any]], *, group: str, resource: str, operation: str) -> bool:
    for rule in rules:
        if (("*" in rule.get("apiGroups", []) or group in rule.get("apiGroups", []))
                and ("*" in rule.get("resources", []) or resource in rule.get("resources", []))
                and ("*" in rule.get("operations", []) or operation in rule.get("operations", []))):
            return True
    return False


# -- lazy variables ----------------------------------------------------------------------------------------------

_UNREAD = re.compile(r'Key not found in map : "([A-Za-z_][A-Za-z0-9_]*)"')


class Lazy:
    """A policy's variables as the API server has them: each evaluated the first time an expression reads it (an
    expression that stops before reading one never evaluates it: ``&&`` and ``?:`` as cel-go runs them), once per
    activation; one that errs makes the expression that reads it err."""

    def __init__(self, expressions: dict[str, str], activation: dict[str, Any]) -> None:
        self.expressions = expressions
        self.activation = activation
        self.values: dict[str, Any] = {}
        self.errors: dict[str, CelError] = {}

    def evaluate(self, expression: str, **more: Any) -> Any:
        """``expression`` with the variables it reads evaluated on the way (the binding reports a variable not
        given as a missing key: it is evaluated, and the expression again)."""
        while True:
            try:
                return evaluate(expression, **self.activation, **more, variables=self.values)
            except CelError as exc:
                missing = _UNREAD.search(str(exc))
                name = missing.group(1) if missing else None
                if name is None or name in self.values or name not in self.expressions:
                    raise
                if name in self.errors:
                    raise self.errors[name] from exc
                try:
                    self.values[name] = self.evaluate(self.expressions[name])
                except CelError as error:
                    self.errors[name] = error
                    raise


# -- the chain ---------------------------------------------------------------------------------------------------

Webhook = Callable[[str, str | None, AdmissionRequest], Verdict | None]  # (endpoint, path mode, request)


@dataclass
class Outcome:
    """What the API server answers a create: admitted or not, the pod it stores, the warnings it passes on."""

    allowed: bool
    pod: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    denied_by: str | None = None  # "webhook", "policy <name>", "Priority"
    message: str = ""
    webhook_calls: int = 0
    mutation_errors: list[str] = field(default_factory=list)  # policy errors ignored under failurePolicy Ignore
    applied: set[str] = field(default_factory=set)  # the mutating policies that applied a mutation


@dataclass
class Cluster:
    """What is installed: objects as applied (policies, bindings, webhook configurations), parameters, the
    namespaces' labels, the PriorityClasses (name -> (value, preemptionPolicy)), and the webhook itself (None:
    unreachable)."""

    objects: list[dict[str, Any]]
    namespaces: dict[str, dict[str, str]]
    priority_classes: dict[str, tuple[int, str]]
    webhook: Webhook | None = None
    params: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return sorted((o for o in self.objects if o["kind"] == kind), key=lambda o: o["metadata"]["name"])

    def bindings(self, kind: str, policy: str) -> list[dict[str, Any]]:
        return [b for b in self.of_kind(kind) if b["spec"]["policyName"] == policy]

    # the built-in plugins ----------------------------------------------------------------------------------

    def _priority(self, pod: dict[str, Any]) -> str | None:
        """Priority: the class's value and preemption policy; a refusal where the pod says another."""
        spec = pod["spec"]
        name = spec.get("priorityClassName")
        known = {**SYSTEM_PRIORITY_CLASSES, **self.priority_classes}
        if name:
            if name not in known:
                return f"no PriorityClass with name {name} was found"
            value, policy = known[name]
        else:
            value, policy = 0, "PreemptLowerPriority"
        if "priority" in spec and spec["priority"] != value:
            return (f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; priority "
                    f"admission controller computed {value} from the given PriorityClass name")
        if spec.get("preemptionPolicy") not in (None, policy):
            return "the string value of PreemptionPolicy must not be provided in pod spec"
        spec["priority"], spec["preemptionPolicy"] = value, policy
        return None

    @staticmethod
    def _toleration_seconds(pod: dict[str, Any]) -> None:
        tolerations = pod["spec"].setdefault("tolerations", [])
        for key in NOT_READY:
            if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": 300})

    # policies ------------------------------------------------------------------------------------------------

    def _param(self, policy: dict[str, Any], binding: dict[str, Any]) -> tuple[bool, Any]:
        """(run, params) for a binding: a binding whose parameter is not found is skipped (Allow)."""
        if "paramKind" not in policy["spec"]:
            return True, None
        ref = binding["spec"].get("paramRef")
        if ref is None:
            return True, None
        found = self.params.get((ref.get("namespace", ""), ref["name"]))
        if found is None:
            return ref.get("parameterNotFoundAction") != "Allow", None
        return True, found

    @staticmethod
    def _variables(policy: dict[str, Any], activation: dict[str, Any]) -> "Lazy":
        return Lazy({v["name"]: v["expression"] for v in policy["spec"].get("variables") or []}, activation)

    def _conditions(self, conditions: list[dict[str, Any]], variables: "Lazy") -> bool:
        """Every condition evaluated: a false one wins; an error (under Ignore) skips as well."""
        errors = False
        for condition in conditions:
            try:
                if variables.evaluate(condition["expression"]) is False:
                    return False
            except CelError:
                errors = True
        return not errors

    def _binding_matches(self, binding: dict[str, Any], namespace: str, group: str, resource: str,
                         operation: str) -> bool:
        match = binding["spec"].get("matchResources") or {}
        if not selects(match.get("namespaceSelector"), self.namespaces.get(namespace, {})):
            return False
        rules = match.get("resourceRules")
        return not rules or rule_matches(rules, group=group, resource=resource, operation=operation)

    def _mutating_policies(self, pod: dict[str, Any], request: dict[str, Any], namespace: str, *,
                           invoked: set[tuple[str, str]], second: bool,
                           outcome: Outcome) -> tuple[dict[str, Any], bool]:
        """One pass of the MutatingAdmissionPolicy plugin: the pod after it, and whether it applied a mutation.
        ``invoked``: filled in the first pass with the invocations made; in the second, those that may run again."""
        applied = False
        for policy in self.of_kind("MutatingAdmissionPolicy"):
            spec = policy["spec"]
            if not rule_matches(spec["matchConstraints"]["resourceRules"], group="", resource="pods",
                                operation="CREATE"):
                continue
            for binding in self.bindings("MutatingAdmissionPolicyBinding", policy["metadata"]["name"]):
                if not self._binding_matches(binding, namespace, "", "pods", "CREATE"):
                    continue
                run, params = self._param(policy, binding)
                if not run:
                    continue
                key = (policy["metadata"]["name"], binding["metadata"]["name"])
                activation = {"object": pod, "request": request, "params": params}
                if not self._conditions(spec.get("matchConditions") or [], self._variables(policy, activation)):
                    continue
                if second and (key not in invoked or spec.get("reinvocationPolicy") != "IfNeeded"):
                    continue
                invoked.add(key)
                for mutation in spec.get("mutations") or []:
                    variables = self._variables(policy, {"object": pod, "request": request, "params": params})
                    try:
                        ops = variables.evaluate(mutation["jsonPatch"]["expression"])
                        patched = jsonpatch.apply_patch(copy.deepcopy(pod), [dict(op) for op in ops])
                    except (CelError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                        outcome.mutation_errors.append(f"{key[0]}: {exc}")
                        continue
                    pod = typed(patched)
                    applied = True
                    outcome.applied.add(key[0])
        return pod, applied

    def _call(self, endpoint: str, mode: str | None, pod: dict[str, Any], namespace: str,
              outcome: Outcome) -> Verdict | None:
        assert self.webhook is not None
        outcome.webhook_calls += 1
        request = AdmissionRequest(api_version="admission.k8s.io/v1", uid=str(uuid.uuid4()), operation="CREATE",
                                   group="", version="v1", kind="Pod", resource="pods", sub_resource="",
                                   name=pod["metadata"].get("name", ""), namespace=namespace, dry_run=False,
                                   object=copy.deepcopy(pod))
        return self.webhook(endpoint, mode, request)

    def _webhook_entries(self, kind: str) -> list[dict[str, Any]]:
        return [w for c in self.of_kind(kind) for w in c["webhooks"]]

    def _entry_matches(self, entry: dict[str, Any], pod: dict[str, Any], request: dict[str, Any],
                       namespace: str) -> bool:
        if not rule_matches(entry["rules"], group="", resource="pods", operation="CREATE"):
            return False
        if not selects(entry.get("namespaceSelector"), self.namespaces.get(namespace, {})):
            return False
        return self._conditions(entry.get("matchConditions") or [], Lazy({}, {"object": pod, "request": request}))

    def _mutating_webhooks(self, pod: dict[str, Any], request: dict[str, Any], namespace: str, *,
                           ran: set[str], second: bool, outcome: Outcome) -> tuple[dict[str, Any], bool]:
        changed = False
        for entry in self._webhook_entries("MutatingWebhookConfiguration"):
            if second and (entry["name"] not in ran or entry.get("reinvocationPolicy") != "IfNeeded"):
                continue
            if not self._entry_matches(entry, pod, request, namespace):
                continue
            if self.webhook is None:
                continue  # unreachable: failurePolicy Ignore
            ran.add(entry["name"])
            verdict = self._call(MUTATE, None, pod, namespace, outcome)
            if verdict is None:
                continue
            outcome.warnings += list(verdict.warnings)
            if verdict.patch:
                after = typed(jsonpatch.apply_patch(copy.deepcopy(pod), [dict(op) for op in verdict.patch]))
                changed = changed or after != pod
                pod = after
        return pod, changed

    # validation ------------------------------------------------------------------------------------------------

    def _validating_policies(self, pod: dict[str, Any], request: dict[str, Any], namespace: str,
                             outcome: Outcome) -> None:
        for policy in self.of_kind("ValidatingAdmissionPolicy"):
            spec = policy["spec"]
            if not rule_matches(spec["matchConstraints"]["resourceRules"], group="", resource="pods",
                                operation="CREATE"):
                continue
            for binding in self.bindings("ValidatingAdmissionPolicyBinding", policy["metadata"]["name"]):
                if not self._binding_matches(binding, namespace, "", "pods", "CREATE"):
                    continue
                activation = {"object": pod, "request": request, "oldObject": None}
                if not self._conditions(spec.get("matchConditions") or [], self._variables(policy, activation)):
                    continue
                for validation in spec.get("validations") or []:
                    variables = self._variables(policy, activation)
                    try:
                        passed = variables.evaluate(validation["expression"]) is True
                    except CelError:
                        passed = spec.get("failurePolicy") != "Fail"
                    if passed:
                        continue
                    try:
                        message = str(self._variables(policy, activation).evaluate(
                            validation.get("messageExpression") or "''")) or validation.get("message", "")
                    except CelError:
                        message = validation.get("message", "")
                    actions = binding["spec"].get("validationActions") or []
                    where = f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding " \
                            f"'{binding['metadata']['name']}'"
                    if "Warn" in actions:
                        outcome.warnings.append(f"Validation failed for {where}: {message}")
                    if "Deny" in actions and outcome.allowed:
                        outcome.allowed, outcome.denied_by = False, f"policy {policy['metadata']['name']}"
                        outcome.message = f"{where} denied request: {message}"

    def _validating_webhooks(self, pod: dict[str, Any], request: dict[str, Any], namespace: str,
                             outcome: Outcome) -> None:
        for entry in self._webhook_entries("ValidatingWebhookConfiguration"):
            if not self._entry_matches(entry, pod, request, namespace) or self.webhook is None:
                continue
            mode = entry["clientConfig"].get("service", {}).get("path", entry["clientConfig"].get("url", ""))
            path_mode = mode.rsplit("/", 1)[-1] if mode.count("/") > 1 else None
            verdict = self._call(VALIDATE, path_mode, pod, namespace, outcome)
            if verdict is None:
                continue
            outcome.warnings += list(verdict.warnings)
            if not verdict.allowed and outcome.allowed:
                outcome.allowed, outcome.denied_by, outcome.message = False, "webhook", verdict.message or ""

    # a create ------------------------------------------------------------------------------------------------

    def create(self, pod: dict[str, Any], namespace: str) -> Outcome:
        """``pod`` created in ``namespace``: the outcome as the API server would answer it."""
        pod = typed(defaulted(copy.deepcopy(pod)))
        pod["metadata"]["namespace"] = namespace
        pod.setdefault("spec", {}).setdefault("containers", [])
        request = {"operation": "CREATE", "namespace": namespace, "name": pod["metadata"].get("name", ""),
                   "kind": {"group": "", "version": "v1", "kind": "Pod"},
                   "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "",
                   "dryRun": False}
        outcome = Outcome(allowed=True, pod=pod)
        invoked: set[tuple[str, str]] = set()
        ran: set[str] = set()
        after_webhooks: dict[str, Any] | None = None
        for second in (False, True):
            refused = self._priority(pod)
            if refused is not None:
                return Outcome(allowed=False, pod=pod, warnings=outcome.warnings, denied_by="Priority",
                               message=refused, webhook_calls=outcome.webhook_calls, applied=outcome.applied)
            self._toleration_seconds(pod)
            pod = typed(pod)
            pod, applied = self._mutating_policies(pod, request, namespace, invoked=invoked, second=second,
                                                   outcome=outcome)
            if not second or pod != after_webhooks:
                pod, changed = self._mutating_webhooks(pod, request, namespace, ran=ran, second=second,
                                                       outcome=outcome)
            else:
                changed = False
            after_webhooks = pod
            if second or not (applied or changed):
                break
        outcome.pod = pod
        self._validating_policies(pod, request, namespace, outcome)
        self._validating_webhooks(pod, request, namespace, outcome)
        return outcome


def in_process(context: Context) -> Webhook:
    """The webhook as the server runs it in ``context`` (the rules, and the cluster's view)."""
    def call(endpoint: str, mode: str | None, request: AdmissionRequest) -> Verdict | None:
        return decide(request, ctx=context, endpoint=endpoint, path_mode=mode)
    return call
