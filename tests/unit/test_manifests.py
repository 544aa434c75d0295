"""manifests/: renders with kustomize, every object is schema-valid, and it agrees with the code it deploys."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT, RULES_FILE
from tests.support.builders import CLI, find, render
from tests.support.reviews import K8S_VERSION
from webhook.core.rules import Rules
from webhook.core.workloads.kinds import KINDS
from webhook.generate.webhooks import POD_GROUP_RULE, POD_GROUP_WEBHOOK
from webhook.server.draining import GRACEFUL_SECONDS

OVERLAYS = ["manifests", "manifests/base", "manifests/overlays/cert-manager", "manifests/overlays/prometheus",
            "manifests/overlays/policy-reports", "manifests/overlays/backstop", "manifests/overlays/native"]


FOREIGN_GROUPS = {"cert-manager.io/v1", "monitoring.coreos.com/v1"}


pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) is not installed")






@pytest.mark.parametrize("path", OVERLAYS)
def test_every_rendered_object_is_valid(path: str) -> None:
    objects = render(path)
    assert objects
    for obj in objects:
        if obj["apiVersion"] in FOREIGN_GROUPS:
            assert obj["spec"] and obj["metadata"]["namespace"] == "ai-admission", obj["metadata"]
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path}: {obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("command,path", [("priorityclasses", "base/priorityclasses.yaml"),
                                          ("webhooks", "base/webhooks.yaml"),
                                          ("policy", "components/backstop/policy.yaml"),
                                          ("tolerations", "components/backstop-tolerations/tolerations.yaml"),
                                          ("native", "components/native/native.yaml"),
                                          ("native-webhooks", "components/native/webhooks.yaml")])
def test_generated_manifests_are_current(command: str, path: str) -> None:
    done = subprocess.run([CLI, "manifests", command], cwd=ROOT, capture_output=True, text=True, timeout=60)
    committed = (ROOT / "manifests" / path).read_text()
    assert done.stdout == committed, f"stale: run make generated (ai-admission manifests {command} > manifests/{path})"


def test_priority_classes_match_the_rules(base: list[dict[str, Any]], rules: Rules) -> None:
    classes = {o["metadata"]["name"]: o for o in base if o["kind"] == "PriorityClass"}
    for policy in rules.classes.values():
        assert policy.priority_class is not None
        installed = classes[policy.priority_class.name]
        assert installed["value"] == policy.priority_class.value
        assert installed["preemptionPolicy"] == policy.priority_class.preemption_policy
    values = {name: classes[f"ai-{name}"]["value"] for name in ("inference", "training", "hpo", "batch")}
    # inference and training at the same value: the default scheduler preempts only strictly lower priorities, so
    # neither can take one pod of a running multi-node job of the other; both preempt hpo and batch
    assert values["inference"] == values["training"] > values["hpo"] > values["batch"]
    assert classes["ai-training"]["preemptionPolicy"] == classes["ai-inference"]["preemptionPolicy"] == \
        classes["ai-hpo"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert classes["ai-batch"]["preemptionPolicy"] == "Never"


def test_webhook_settings(base: list[dict[str, Any]]) -> None:
    mutating = find(base, "MutatingWebhookConfiguration")["webhooks"]
    validating = find(base, "ValidatingWebhookConfiguration")["webhooks"]
    # the Job controller's PodGroups at their CREATE (the default scheduler's gang): an entry of their own
    (groups,) = [w for w in mutating if w["name"] == POD_GROUP_WEBHOOK]
    mutating = [w for w in mutating if w is not groups]
    assert groups["rules"] == [POD_GROUP_RULE] and groups["reinvocationPolicy"] == "Never"
    assert [c["name"] for c in groups["matchConditions"]] == ["of-the-job-controller"]
    for webhook in [*mutating, *validating, groups]:
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1", "v1beta1"]
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["matchPolicy"] == "Equivalent"
        assert 1 <= webhook["timeoutSeconds"] <= 10
        excluded = webhook["namespaceSelector"]["matchExpressions"][0]
        assert excluded == {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                            "values": ["kube-system", "kube-node-lease", "ai-admission"]}
        (condition,) = webhook["matchConditions"]  # only pods the rules may concern are sent (test_match_conditions)
        assert condition["name"] == ("of-the-job-controller" if webhook is groups else "may-concern-ai-admission")
    assert mutating[0]["reinvocationPolicy"] == "IfNeeded"
    for webhook in validating:  # controllers and CRDs are always sent to the validating entries
        assert webhook["matchConditions"][0]["expression"].startswith("request.resource.resource != 'pods'\n|| ")
    assert [w["clientConfig"]["service"]["path"] for w in validating] == ["/validate", "/validate/warn", "/validate/audit"]
    modes = [w["namespaceSelector"]["matchExpressions"][1] for w in validating]
    assert modes == [{"key": "ai-admission.io/mode", "operator": "NotIn", "values": ["warn", "audit"]},
                     {"key": "ai-admission.io/mode", "operator": "In", "values": ["warn"]},
                     {"key": "ai-admission.io/mode", "operator": "In", "values": ["audit"]}]


def test_validating_rules_cover_every_template_kind(base: list[dict[str, Any]], rules: Rules) -> None:
    for webhook in find(base, "ValidatingWebhookConfiguration")["webhooks"]:
        covered = {(g, r) for rule in webhook["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
        assert ("", "pods") in covered
        assert {(k.group, k.resource) for k in [*KINDS.values(), *rules.generic_kinds]} <= covered
        claims = [rule for rule in webhook["rules"] if rule["apiGroups"] == ["resource.k8s.io"]]
        assert claims == [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                           "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"}]


def test_deployment_is_highly_available_and_hardened(base: list[dict[str, Any]]) -> None:
    deployment = find(base, "Deployment", "ai-admission")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert deployment["spec"]["replicas"] >= 2
    assert spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] > 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["AI_ADMISSION_BIND"] == "0.0.0.0:8443"
    # the server writes the native policies' parameter in its own namespace (the binding's paramRef names it)
    assert env["AI_ADMISSION_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # draining after SIGTERM, then gunicorn's graceful_timeout, both within the grace period (webhook.draining)
    assert spec["terminationGracePeriodSeconds"] > float(env["AI_ADMISSION_DRAIN_SECONDS"]) + 1 + GRACEFUL_SECONDS
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[env["AI_ADMISSION_TLS_DIR"]] == "tls" and mounts[env["AI_ADMISSION_RULES"]] == "rules"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["rules"]["configMap"]["name"] == find(base, "ConfigMap")["metadata"]["name"]
    assert find(base, "ConfigMap")["data"]["rules.yaml"] == (ROOT / "rules" / "default.yaml").read_text()
    pdb = find(base, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_cert_manager_overlay_replaces_the_cert_job() -> None:
    objects = render("manifests/overlays/cert-manager")
    kinds = {o["kind"] for o in objects}
    assert "Job" not in kinds and "CronJob" not in kinds
    serving = find(objects, "Certificate", "ai-admission-serving")
    assert serving["spec"]["secretName"] == "ai-admission-tls"
    assert "ai-admission.ai-admission.svc" in serving["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = find(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "ai-admission/ai-admission-serving"


def test_rbac_is_least_privilege(base: list[dict[str, Any]]) -> None:
    roles = {(o["kind"], o["metadata"]["name"]): o["rules"] for o in base if o["kind"] in ("Role", "ClusterRole")}
    assert roles[("ClusterRole", "ai-admission-read-priorityclasses")] == [
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]}]
    assert roles[("ClusterRole", "ai-admission-read-nodes")] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}]
    assert roles[("ClusterRole", "ai-admission-watch-resourceclaims")] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates", "resourceclaims", "deviceclasses"],
         "verbs": ["list", "watch"]}]
    # the queues of every scheduler backend the rules know, list and watch only (read while one is chosen)
    queue_kinds = [q for b in yaml.safe_load(RULES_FILE.read_text())["scheduler"]["backends"].values()
                   for q in b.get("queueKinds", [])]
    granted = {(g, r) for rule in roles[("ClusterRole", "ai-admission-read-queues")] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert {(q["group"], q["resource"]) for q in queue_kinds} == granted and queue_kinds
    assert all(rule["verbs"] == ["list", "watch"] for rule in roles[("ClusterRole", "ai-admission-read-queues")])
    bound = {(o["roleRef"]["name"], s["name"]) for o in base if o["kind"] == "ClusterRoleBinding"
             for s in o["subjects"]}
    assert {("ai-admission-watch-resourceclaims", "ai-admission"), ("ai-admission-read-nodes", "ai-admission"),
            ("ai-admission-read-queues", "ai-admission")} <= bound
    for name, rules in roles.items():
        for rule in rules:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            assert not {"deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"])
            # one delete: a gang of ai-admission's whose pods stopped short of its count is made again (its fields
            # are immutable), so that they do not wait forever (webhook.cluster.pod_groups)
            assert "delete" not in rule["verbs"] or (name, rule["apiGroups"], rule["resources"]) == (
                ("ClusterRole", "ai-admission-pod-groups"), ["scheduling.k8s.io"], ["podgroups"]), (name, rule)
    webhook_rule = roles[("ClusterRole", "ai-admission-certs")][0]
    assert webhook_rule["resourceNames"] == ["ai-admission"] and webhook_rule["verbs"] == ["get", "patch"]


def test_prometheus_overlay_adds_monitoring_to_the_base(base: list[dict[str, Any]]) -> None:
    objects = render("manifests/overlays/prometheus")
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {(o["kind"], o["metadata"]["name"]) for o in base}
    assert added == {("ServiceMonitor", "ai-admission"), ("PrometheusRule", "ai-admission"),
                     ("ConfigMap", "ai-admission-dashboard")}
    dashboard = find(objects, "ConfigMap", "ai-admission-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["ai-admission.json"])["uid"] == "ai-admission"
    monitor = find(objects, "ServiceMonitor")
    service = find(objects, "Service", "ai-admission")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] and endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == "ai-admission.ai-admission.svc"


def test_backstop_overlay_adds_the_policy_and_its_bindings(base: list[dict[str, Any]]) -> None:
    objects = render("manifests/overlays/backstop")
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {(o["kind"], o["metadata"]["name"]) for o in base}
    name = "ai-admission-gpu-model-and-memory"
    # two policies (pods; the kinds' templates), each with its bindings; the audit ones: the shipped rules put the
    # GPU operator's namespaces in audit mode
    for policy in (name, f"{name}-templates"):
        assert {("ValidatingAdmissionPolicy", policy), ("ValidatingAdmissionPolicyBinding", f"{policy}-deny"),
                ("ValidatingAdmissionPolicyBinding", f"{policy}-warn-label"),
                ("ValidatingAdmissionPolicyBinding", f"{policy}-audit"),
                ("ValidatingAdmissionPolicyBinding", f"{policy}-audit-label")} <= added
    assert len(added) == 10
    audit = find(objects, "ValidatingAdmissionPolicyBinding", f"{name}-audit")
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["gpu-operator", "nvidia-gpu-operator"]} \
        in audit["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]


def test_native_overlay_adds_one_mutating_policy_and_the_backstop(base: list[dict[str, Any]], rules: Rules) -> None:
    """One MutatingAdmissionPolicy for every class and for every pod's GPU tolerations: one policy per pod."""
    objects = render("manifests/overlays/native")
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {(o["kind"], o["metadata"]["name"]) for o in base}
    assert {name for kind, name in added if kind == "MutatingAdmissionPolicy"} == {"ai-admission-native"}
    assert {name for kind, name in added if kind == "MutatingAdmissionPolicyBinding"} == {"ai-admission-native"}
    assert ("ValidatingAdmissionPolicy", "ai-admission-gpu-model-and-memory") in added


def test_policy_reports_overlay_may_read_what_it_judges_and_write_only_reports(base: list[dict[str, Any]],
                                                                               rules: Rules) -> None:
    objects = render("manifests/overlays/policy-reports")
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {(o["kind"], o["metadata"]["name"]) for o in base}
    assert added == {("CustomResourceDefinition", "policyreports.wgpolicyk8s.io"),
                     ("ClusterRole", "ai-admission-policy-reports"), ("ClusterRoleBinding", "ai-admission-policy-reports")}
    crd = find(objects, "CustomResourceDefinition")
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha2"]
    granted = find(objects, "ClusterRole", "ai-admission-policy-reports")["rules"]
    readable = {(g, r) for rule in granted if rule["verbs"] == ["list"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {(k.group, k.resource) for k in [*KINDS.values(), *rules.generic_kinds]} | {("", "pods"), ("", "configmaps")} <= readable
    (writes,) = [rule for rule in granted if rule["verbs"] != ["list"]]
    assert writes == {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports"], "verbs": ["list", "watch", "create", "update"]}
    binding = find(objects, "ClusterRoleBinding", "ai-admission-policy-reports")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ai-admission", "namespace": "ai-admission"}]
