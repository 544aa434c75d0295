"""Manifests generated from the rules and the code, so what is installed cannot drift from what runs.

``ai-admission manifests priorityclasses`` writes the PriorityClasses the rules set on pods;
``ai-admission manifests webhooks`` writes the webhook configurations, whose resource rules come from the
template extractors, whose paths are the app's, and whose ``matchConditions`` (which pods are sent at all) come
from the rules (`webhook.generate.match_conditions`). Tests fail when the committed files differ.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import yaml

from webhook.core.dra.claims import GROUP as DRA_GROUP
from webhook.core.names import MODE_LABEL
from webhook.core.podgroups.support import GROUP as POD_GROUP_API
from webhook.core.podgroups.support import MANAGED_BY, MANAGED_BY_LABEL
from webhook.core.podgroups.support import RESOURCE as POD_GROUP_RESOURCE
from webhook.core.podgroups.support import VERSIONS as POD_GROUP_VERSIONS
from webhook.core.rules import PriorityClassSpec, Rules
from webhook.core.workloads.kinds import KINDS

from .match_conditions import match_conditions

NAME = "ai-admission"
EXCLUDED_NAMESPACES = ["kube-system", "kube-node-lease", "ai-admission"]
TIMEOUT_SECONDS = 5


def priority_classes(rules: Rules) -> list[dict[str, Any]]:
    result = []
    for policy in rules.classes.values():
        for spec in policy.priority_classes:  # its own, and the one of the other answer to "can it be preempted?"
            result.append(_priority_class(policy.name, spec))
    return sorted(result, key=lambda pc: -pc["value"])


def _priority_class(workload: str, spec: PriorityClassSpec) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": spec.name, "labels": {"app.kubernetes.io/part-of": NAME,
                                                    "ai-admission.io/workload-type": workload}},
        "value": spec.value, "preemptionPolicy": spec.preemption_policy, "globalDefault": False,
        "description": spec.description or f"ai-admission: {workload} pods",
    }


def _client_config(path: str) -> dict[str, Any]:
    # caBundle is injected by `ai-admission certs patch` (or cert-manager's cainjector in that overlay)
    return {"service": {"name": NAME, "namespace": NAME, "path": path, "port": 443}}


def excluded_namespaces() -> dict[str, Any]:
    """The immutable name label: a namespace cannot opt itself out by relabelling."""
    return {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}


def _namespace_selector(mode: str | None) -> dict[str, Any]:
    expressions: list[dict[str, Any]] = [excluded_namespaces()]
    if mode is None:
        expressions.append({"key": MODE_LABEL, "operator": "NotIn", "values": ["warn", "audit"]})
    else:
        expressions.append({"key": MODE_LABEL, "operator": "In", "values": [mode]})
    return {"matchExpressions": expressions}


def _template_rules(rules: Rules, *, table_only: bool = False) -> list[dict[str, Any]]:
    """One rule per API group and scope, for every kind whose templates ai-admission judges (webhook.core.workloads.kinds) and
    every custom resource the rules have it read by shape (``genericKinds``; not with ``table_only``)."""
    by_group: dict[tuple[str, str], list[str]] = defaultdict(list)
    listed: list[tuple[str, str, str]] = [(k.group, k.scope, k.resource) for k in KINDS.values()]
    if not table_only:
        listed += [(k.group, k.scope, k.resource) for k in rules.generic_kinds]
    for group, scope, resource in listed:
        resources = by_group[(group, scope)]
        if resource not in resources:
            resources.append(resource)
    return [{"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
             "resources": sorted(resources), "scope": scope} for (group, scope), resources in sorted(by_group.items())]


POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
            "scope": "Namespaced"}
# a container added to a running pod (kubectl debug): its paths to a GPU judged, NVIDIA_VISIBLE_DEVICES=void set
EPHEMERAL_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                  "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"}
# DRA claims and claim templates: v1 only, requests sent as v1beta1/v1beta2 arrive converted (matchPolicy Equivalent)
CLAIM_RULE = {"apiGroups": [DRA_GROUP], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
              "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"}


def _common() -> dict[str, Any]:
    return {"sideEffects": "None", "admissionReviewVersions": ["v1", "v1beta1"], "timeoutSeconds": TIMEOUT_SECONDS,
            "matchPolicy": "Equivalent"}


def _only_when(conditions: list[dict[str, str]]) -> dict[str, Any]:
    return {"matchConditions": conditions} if conditions else {}


MUTATING_WEBHOOK = "mutate.ai-admission.io"
# (mode, path, name) of the validating entries: deny (no mode label), warn and audit namespaces
VALIDATING_WEBHOOKS = ((None, "/validate", "validate.ai-admission.io"),
                       ("warn", "/validate/warn", "validate-warn.ai-admission.io"),
                       ("audit", "/validate/audit", "validate-audit.ai-admission.io"))
POD_GROUP_WEBHOOK = "podgroups.ai-admission.io"
WEBHOOK_NAMES = (MUTATING_WEBHOOK, *(name for _, _, name in VALIDATING_WEBHOOKS), POD_GROUP_WEBHOOK)
# the Workload API's PodGroups at their CREATE, in every version that serves them (one not served matches nothing)
POD_GROUP_RULE = {"apiGroups": [POD_GROUP_API], "apiVersions": list(POD_GROUP_VERSIONS), "operations": ["CREATE"],
                  "resources": [POD_GROUP_RESOURCE], "scope": "Namespaced"}
# only the Job controller's: a PodGroup of ai-admission's own is made whole, a user's is the user's
JOB_CONTROLLER_GROUP = ("has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
                        "o.kind == 'Job' && o.apiVersion == 'batch/v1' && has(o.controller) && o.controller) && "
                        "!(has(object.metadata.labels) && "
                        f"object.metadata.labels[?'{MANAGED_BY_LABEL}'].orValue('') == '{MANAGED_BY}')")


def _pod_group_webhook(rules: Rules) -> list[dict[str, Any]]:
    """The entry that gives the Job controller's PodGroup what the Job's template says, at its CREATE (every field
    of its spec is immutable after); none where no class has a group or a queueing backend places the pods."""
    if rules.scheduler.active or not any(c.mutate.pod_group for c in rules.classes.values()):
        return []
    return [{"name": POD_GROUP_WEBHOOK, "clientConfig": _client_config("/mutate"), "rules": [POD_GROUP_RULE],
             "failurePolicy": "Ignore", "reinvocationPolicy": "Never",
             "namespaceSelector": {"matchExpressions": [excluded_namespaces()]},
             "matchConditions": [{"name": "of-the-job-controller", "expression": JOB_CONTROLLER_GROUP}], **_common()}]


def webhook_configurations(rules: Rules) -> list[dict[str, Any]]:
    """failurePolicy Ignore on both: a webhook outage must not stop every pod in the cluster (docs/admins/backstop.md).

    Both send only the pods ``rules`` may concern (`webhook.generate.match_conditions`): a pod of class none gets neither
    a patch nor a finding, so it need not cost a call to either webhook.
    """
    owners = rules.scheduler.active  # a queueing scheduler reads the owner at its CREATE: /mutate writes it there
    owner_rules = [{**rule, "operations": ["CREATE"]} for rule in _template_rules(rules, table_only=True)] \
        if owners else []
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [{"name": MUTATING_WEBHOOK, "clientConfig": _client_config("/mutate"),
                      "rules": [POD_RULE, *([EPHEMERAL_RULE] if rules.bypasses.enabled else []), *owner_rules],
                      "failurePolicy": "Ignore", "reinvocationPolicy": "IfNeeded",
                      "namespaceSelector": {"matchExpressions": [excluded_namespaces()]},
                      **_only_when(match_conditions(rules, pods_only=not owners)), **_common()},
                     *_pod_group_webhook(rules)],
    }
    validating_conditions = match_conditions(rules, pods_only=False)
    entries = []
    for mode, path, name in VALIDATING_WEBHOOKS:
        entries.append({"name": name, "clientConfig": _client_config(path),
                        "rules": [POD_RULE, *([EPHEMERAL_RULE] if rules.bypasses.enabled else []),
                                  *_template_rules(rules), CLAIM_RULE], "failurePolicy": "Ignore",
                        "namespaceSelector": _namespace_selector(mode), **_only_when(validating_conditions),
                        **_common()})
    validating = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                  "metadata": {"name": NAME}, "webhooks": entries}
    return [mutating, validating]


class _PlainDumper(yaml.SafeDumper):
    """No YAML anchors: shared lists are written out, as a person would read and diff them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _multi_line_as_block(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """A string of several lines (a CEL condition, one clause a line; a PromQL expression) as a literal block, as
    a person writes it."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|" if "\n" in text else None)


_PlainDumper.add_representer(str, _multi_line_as_block)
# the library's predicates are strings that say their precision (webhook.generate.cel.precision): written as strings
_PlainDumper.add_multi_representer(str, _multi_line_as_block)


def render(objects: list[dict[str, Any]], command: str) -> str:
    header = f"# Generated by `ai-admission manifests {command}`; do not edit (a test compares).\n"
    return header + yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False, width=120)
