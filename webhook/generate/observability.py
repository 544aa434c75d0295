"""What operators look at, generated from the code: the Grafana dashboard, the alerts and the ServiceMonitor.

Written as data here so the expressions sit next to one another and a test can check every metric they name
against what a running server (and a real kube-apiserver) exposes. ``ai-admission manifests dashboard``,
``prometheusrule`` and ``servicemonitor`` print them; the committed copies in manifests/components/prometheus are
compared by a test, as the PriorityClasses and webhook configurations are.
"""

from __future__ import annotations

import json
from typing import Any

from .webhooks import NAME, TIMEOUT_SECONDS, WEBHOOK_NAMES  # our entries as the API server's metrics name them

_DOMAIN = ".ai-admission.io"
assert all(name.endswith(_DOMAIN) for name in WEBHOOK_NAMES)
# A PromQL regex matching exactly those names, written for a PromQL string (a regex backslash is doubled there).
WEBHOOKS = "(" + "|".join(name.removesuffix(_DOMAIN) for name in WEBHOOK_NAMES) + ")" + _DOMAIN.replace(".", "\\\\.")
RATE = "$__rate_interval"  # Grafana's choice of range for rate(): at least four scrapes
CERT_WARN_DAYS = 14
CERT_CRITICAL_DAYS = 3
# Half the webhook timeout: the slowest requests are then one hiccup away from timing out, and a request that
# times out is admitted unchecked (failurePolicy Ignore).
SLOW_SECONDS = TIMEOUT_SECONDS / 2
CATALOG_STALE_SECONDS = 900  # three resyncs of the node watch (webhook.core.view.node_facts)


# -- the dashboard ---------------------------------------------------------------------------------------------

class _Layout:
    """Panels placed left to right in rows of 24 columns, with ids in order."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.height = 0

    def _id(self) -> int:
        return len(self.panels) + 1

    def row(self, title: str) -> None:
        self.y += self.height
        self.x, self.height = 0, 1
        self.panels.append({"type": "row", "id": self._id(), "title": title, "collapsed": False, "panels": [],
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})

    def panel(self, kind: str, title: str, description: str, targets: list[tuple[str, str]], *, width: int = 12,
              height: int = 8, unit: str = "short", extra: dict[str, Any] | None = None) -> None:
        if self.x + width > 24:
            self.y += self.height
            self.x, self.height = 0, 0
        if self.height == 1:  # just below a row header
            self.y += 1
            self.height = 0
        self.panels.append({
            "type": kind, "id": self._id(), "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": height, "w": width, "x": self.x, "y": self.y},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
                        for i, (expr, legend) in enumerate(targets)],
            "fieldConfig": {"defaults": {"unit": unit, **(extra or {})}, "overrides": []},
        })
        self.x += width
        self.height = max(self.height, height)


def _quantiles(metric: str, by: str, legend: str) -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}[{RATE}])))", f"p{round(q * 100)} {legend}")
            for q in (0.5, 0.9, 0.99)]


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard (JSON model, schema 39): admissions, latency, errors, rules, certificate, cluster."""
    layout = _Layout()
    layout.row("Admissions")
    layout.panel("timeseries", "Admissions by verdict",
                 "Reviews answered per second (pods and pod templates), by what the webhook answered.",
                 [(f"sum by (verdict) (rate(ai_admission_requests_total{{endpoint=\"validate\"}}[{RATE}]))",
                   "{{verdict}}")], unit="reqps")
    layout.panel("timeseries", "Admissions by workload class",
                 "Validated reviews per second by the class ai-admission gave the pod (none: no accelerator).",
                 [(f"sum by (workload) (rate(ai_admission_requests_total{{endpoint=\"validate\"}}[{RATE}]))",
                   "{{workload}}")], unit="reqps")
    layout.panel("timeseries", "Deny findings by reason and mode",
                 "What would be or was denied, by finding code; in warn and audit mode the pod was admitted.",
                 [(f"sum by (reason, mode) (rate(ai_admission_denials_total[{RATE}]))", "{{reason}} ({{mode}})")],
                 unit="reqps")
    layout.panel("timeseries", "Mutations and bad requests",
                 "Pods mutated per second, and requests answered with a 4xx (malformed reviews: a client bug).",
                 [(f"sum(rate(ai_admission_requests_total{{endpoint=\"mutate\"}}[{RATE}]))", "mutated"),
                  (f"sum by (status) (rate(ai_admission_bad_requests_total[{RATE}]))", "HTTP {{status}}")],
                 unit="reqps")
    layout.panel("timeseries", "GPUs asked beyond the need, per hour",
                 "GPUs that pods admitted in the hour before ask for and their memory need does not take "
                 "(gpu-over-provisioned), by class and model: idle for the life of each pod unless it is resized. "
                 "`ai-admission audit` sums them over what runs.",
                 [("sum by (workload, model) (increase(ai_admission_gpus_beyond_need_total[1h]))",
                   "{{workload}} {{model}}")], width=24)
    layout.row("Latency")
    layout.panel("timeseries", "Webhook latency (server)",
                 "From request body to response, per endpoint, inside the server.",
                 _quantiles("ai_admission_request_duration_seconds_bucket", "endpoint", "{{endpoint}}"), unit="s")
    layout.panel("timeseries", "Webhook latency (as the API server sees it)",
                 f"Including the network and TLS; the API server gives up after {TIMEOUT_SECONDS} s and admits the "
                 f"pod unchecked.",
                 [(f"histogram_quantile(0.99, sum by (le, name) (rate("
                   f"apiserver_admission_webhook_admission_duration_seconds_bucket{{name=~\"{WEBHOOKS}\"}}[{RATE}])))",
                   "p99 {{name}}")], unit="s")
    layout.row("Errors")
    layout.panel("timeseries", "Internal errors",
                 "Pods admitted unchecked because of a bug in ai-admission (should stay 0; the log has the "
                 "traceback).",
                 [(f"sum(increase(ai_admission_internal_errors_total[{RATE}]))", "internal errors")])
    layout.panel("timeseries", "Calls the API server could not complete",
                 "Failed calls to our webhooks, failing open (failurePolicy Ignore: pods admitted unchecked) or "
                 "closed (Fail).",
                 [(f"sum by (name) (rate(apiserver_admission_webhook_fail_open_count{{name=~\"{WEBHOOKS}\"}}[{RATE}]))",
                   "fail open {{name}}"),
                  (f"sum by (name) (rate(apiserver_admission_webhook_rejection_count{{name=~\"{WEBHOOKS}\","
                   f"error_type=\"calling_webhook_error\"}}[{RATE}]))", "failed closed {{name}}")], unit="reqps")
    layout.row("Rules and certificate")
    layout.panel("stat", "Rules loads", "Rules loaded since start (1 = the initial load), per the newest worker.",
                 [("max(ai_admission_rules_generation)", "generation")], width=6, height=5)
    layout.panel("stat", "Rules file rejected",
                 "1 while the rules file on disk is rejected and the previous rules stay in force (/readyz says "
                 "why).",
                 [("max(ai_admission_rules_reload_failing)", "failing")], width=6, height=5,
                 extra={"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                                      {"color": "red", "value": 1}]}})
    layout.panel("timeseries", "Rejected rules files",
                 "Rules files that did not pass the schema (the last good rules stayed in force).",
                 [(f"sum(increase(ai_admission_rules_reload_errors_total[{RATE}]))", "rejected")], width=6, height=5)
    layout.panel("stat", "Certificate expires in",
                 "Time until the serving certificate in use expires (renewed 30 days before).",
                 [("min(ai_admission_certificate_expiry_timestamp_seconds) - time()", "expires in")], width=6,
                 height=5, unit="s",
                 extra={"thresholds": {"mode": "absolute", "steps": [
                     {"color": "red", "value": None}, {"color": "orange", "value": CERT_CRITICAL_DAYS * 86400},
                     {"color": "green", "value": CERT_WARN_DAYS * 86400}]}})
    layout.row("Cluster facts")
    layout.panel("stat", "Missing PriorityClasses",
                 "PriorityClasses the rules set that the cluster lacks: pods of those classes get none.",
                 [("max(ai_admission_priority_classes_missing)", "missing")], width=6, height=5,
                 extra={"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                                      {"color": "red", "value": 1}]}})
    layout.panel("stat", "PriorityClasses last checked", "Time since the PriorityClasses were last listed.",
                 [("time() - max(ai_admission_priority_classes_checked_timestamp_seconds)", "ago")], width=6,
                 height=5, unit="s")
    layout.panel("timeseries", "PriorityClass check errors", "Failed attempts to list PriorityClasses.",
                 [(f"sum(increase(ai_admission_priority_class_check_errors_total[{RATE}]))", "errors")],
                 width=12, height=5)
    layout.panel("stat", "GPU nodes", "Nodes that publish a GPU product (GPU feature discovery, AMD's labeller).",
                 [("max(ai_admission_catalog_gpu_nodes)", "GPU nodes"), ("max(ai_admission_catalog_models)", "models")],
                 width=6, height=5)
    layout.panel("stat", "Node catalog last synced",
                 "Time since the node watch last took in the nodes (a fresh list every resync, and every change).",
                 [("time() - max(ai_admission_catalog_synced_timestamp_seconds > 0)", "ago")], width=6, height=5,
                 unit="s")
    layout.panel("timeseries", "Nodes per GPU product", "As the nodes name the product; the catalog merges these in.",
                 [("max by (product) (ai_admission_catalog_model_nodes)", "{{product}}"),
                  (f"sum(increase(ai_admission_catalog_watch_errors_total[{RATE}]))", "watch errors")],
                 width=12, height=5)
    layout.row("Gang on the default scheduler (Workload API)")
    layout.panel("stat", "PodGroup controller",
                 "Served: the cluster serves PodGroups. In service: the group controller's Lease is renewed, so the "
                 "pods of multi-node training jobs join their job's gang; otherwise they are scheduled one by one "
                 "(docs/admins/gang.md).",
                 [("max(ai_admission_pod_groups_served)", "served"),
                  ("max(ai_admission_pod_group_controller_in_service)", "in service")], width=6, height=5)
    layout.panel("timeseries", "PodGroups made",
                 "Groups the controller created for the training kinds' jobs, and gangs made again with the pods "
                 "that came (a job whose pods stopped short of its count).",
                 [(f"sum(increase(ai_admission_pod_groups_made_total[{RATE}]))", "made"),
                  (f"sum(increase(ai_admission_pod_groups_recounted_total[{RATE}]))", "made again")],
                 width=18, height=5)
    return {
        "title": "ai-admission", "uid": "ai-admission", "description": "GPU admission webhook: verdicts, latency, "
        "errors, rules, certificate and the cluster facts it relies on.",
        "tags": ["ai-admission", "admission-webhook", "gpu"], "editable": True, "schemaVersion": 39,
        "version": 1, "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "timezone": "",
        "templating": {"list": [{"name": "datasource", "label": "Data source", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []}, "links": [], "panels": layout.panels,
    }


# -- alerts ----------------------------------------------------------------------------------------------------

def _alert(name: str, expr: str, *, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def _certificate_alert(name: str, days: int, severity: str, for_: str, advice: str) -> dict[str, Any]:
    return _alert(name, f"min(ai_admission_certificate_expiry_timestamp_seconds) - time() < {days} * 86400",
                  for_=for_, severity=severity,
                  summary=f"The ai-admission serving certificate expires within {days} days",
                  description=f"Expires in {{{{ $value | humanizeDuration }}}}. {advice}")


def alert_rules() -> list[dict[str, Any]]:
    unreachable = (
        f"sum by (name) (\n"
        f"    rate(apiserver_admission_webhook_fail_open_count{{name=~\"{WEBHOOKS}\"}}[5m])\n"
        f"  or\n"
        f"    rate(apiserver_admission_webhook_rejection_count{{name=~\"{WEBHOOKS}\", "
        f"error_type=\"calling_webhook_error\"}}[5m])\n"
        f")\n/\nsum by (name) (rate(apiserver_admission_webhook_request_total{{name=~\"{WEBHOOKS}\"}}[5m]))\n> 0.05")
    return [
        _alert("AiAdmissionWebhookUnreachable", unreachable, for_="5m", severity="critical",
               summary="The API server cannot reach ai-admission webhook {{ $labels.name }}",
               description="{{ $value | humanizePercentage }} of the calls to {{ $labels.name }} failed (connection, "
                           "TLS or timeout). With failurePolicy Ignore those pods were admitted unchecked and "
                           "unmutated; with Fail they were refused. Check the ai-admission pods, the Service and the "
                           "caBundle."),
        _alert("AiAdmissionInternalErrors", "sum(increase(ai_admission_internal_errors_total[10m])) > 0",
               for_="0m", severity="critical",
               summary="ai-admission admitted pods unchecked after an internal error",
               description="{{ $value }} requests in 10 minutes hit a bug in ai-admission and were admitted "
                           "unchecked; the server log has each traceback."),
        _alert("AiAdmissionRulesReloadFailing", "max(ai_admission_rules_reload_failing) > 0", for_="5m",
               severity="warning", summary="ai-admission rejects its rules file; older rules are in force",
               description="The rules ConfigMap holds a file that does not pass the schema; the previous rules "
                           "stay in force until it is fixed. /readyz shows rulesReloadError."),
        _alert("AiAdmissionSlow",
               f"histogram_quantile(0.99, sum by (le) (rate(ai_admission_request_duration_seconds_bucket[5m]))) "
               f"> {SLOW_SECONDS:g}", for_="10m", severity="warning",
               summary=f"ai-admission p99 latency is above {SLOW_SECONDS:g} s",
               description=f"The slowest 1% of reviews take {{{{ $value | humanizeDuration }}}}; the API server "
                           f"waits at most {TIMEOUT_SECONDS} s and then admits the pod unchecked."),
        _alert("AiAdmissionSlowAtApiServer",
               f"histogram_quantile(0.99, sum by (le, name) (rate("
               f"apiserver_admission_webhook_admission_duration_seconds_bucket{{name=~\"{WEBHOOKS}\"}}[5m]))) "
               f"> {SLOW_SECONDS:g}", for_="10m", severity="warning",
               summary=f"Calls to {{{{ $labels.name }}}} take more than {SLOW_SECONDS:g} s at p99",
               description=f"Measured by the API server (network and TLS included); it gives up after "
                           f"{TIMEOUT_SECONDS} s."),
        _certificate_alert("AiAdmissionCertificateExpiring", CERT_WARN_DAYS, "warning", "1h",
                           "It is renewed 30 days before expiry by the ai-admission-cert-renewal CronJob (or "
                           "cert-manager); renewal has not happened."),
        _certificate_alert("AiAdmissionCertificateExpiringSoon", CERT_CRITICAL_DAYS, "critical", "10m",
                           "When it expires the API server cannot call the webhook and every pod is admitted "
                           "unchecked. Renew now: kubectl -n ai-admission create job --from=cronjob/"
                           "ai-admission-cert-renewal renew-now"),
        _alert("AiAdmissionNodeCatalogStale",
               f"time() - max(ai_admission_catalog_synced_timestamp_seconds > 0) > {CATALOG_STALE_SECONDS}",
               for_="5m", severity="warning", summary="ai-admission has not read the cluster's nodes for a while",
               description="The node watch has not listed the Nodes in {{ $value | humanizeDuration }}; the GPU "
                           "catalog in force may be out of date (new models, memory, node sizes). Check the server "
                           "log and its RBAC (list and watch on nodes)."),
        _alert("AiAdmissionPodGroupControllerDown",
               "max(ai_admission_pod_groups_served) > 0 and max(ai_admission_pod_group_controller_in_service) == 0",
               for_="5m", severity="warning",
               summary="Training jobs are not scheduled as gangs: ai-admission's PodGroup controller is not in service",
               description="The cluster serves PodGroups, but no replica renews the ai-admission-pod-groups Lease, so "
                           "the pods of multi-node training jobs are scheduled one by one (each is told so). Check "
                           "the server log and its RBAC (leases, podgroups)."),
        _alert("AiAdmissionPriorityClassMissing", "max(ai_admission_priority_classes_missing) > 0", for_="10m",
               severity="warning", summary="PriorityClasses that ai-admission sets are missing",
               description="{{ $value }} PriorityClasses named in the rules do not exist, so pods of those "
                           "classes get none (/readyz lists them). kubectl apply -k manifests/ restores them."),
    ]


def prometheus_rule() -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": NAME}},
            "spec": {"groups": [{"name": "ai-admission", "rules": alert_rules()}]}}


def service_monitor() -> dict[str, Any]:
    """Scrapes every replica's /metrics over HTTPS, verified with the CA of the serving certificate."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": NAME, "labels": {"app.kubernetes.io/name": NAME}},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                     "endpoints": [{"port": "https", "scheme": "https", "path": "/metrics", "interval": "30s",
                                    "tlsConfig": {"ca": {"secret": {"name": "ai-admission-tls", "key": "ca.crt"}},
                                                  "serverName": f"{NAME}.{NAME}.svc"}}]}}


def render_dashboard() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"
