"""PolicyReports written by the server, so tools that read ``wgpolicyk8s.io/v1alpha2`` (Policy Reporter, Kyverno's
UI, ...) show what ai-admission would deny in what already runs.

Off unless the rules say ``policyReports: {enabled: true}``. One report per namespace, named ``ai-admission``,
refreshed every ``intervalSeconds`` from `webhook.cluster.audit`, written only when its results changed (a result keeps
the timestamp of when it was first found). The CRD is not ours: when the cluster does not serve it, one log line
says so and nothing is written.

Which worker writes: every gunicorn worker runs this thread, and the one that holds the server's lock file
(`webhook.cluster.worker_lock`) writes. Replicas of the Deployment each have one writer; as they compute the same
results, the second finds nothing to change.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from webhook.core.context import Context
from webhook.core.documents import Result
from webhook.core.rules import Rules

from . import client as kube
from .audit import audit, report_results, report_summary
from .background import Poller, ProblemLog
from .informer import Api, Informer, ObjectStore, Observer, api_calls
from .worker_lock import WorkerLock

log = logging.getLogger("ai_admission")
GROUP, VERSION, PLURAL = "wgpolicyk8s.io", "v1alpha2", "policyreports"
NAME = "ai-admission"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ai-admission"}
SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
LOCK_FILE = "ai-admission-policy-reports.lock"


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    interval: float = 300.0


def settings(rules: Rules) -> Settings:
    spec = rules.raw.get("policyReports") or {}
    return Settings(enabled=bool(spec.get("enabled", False)), interval=float(spec.get("intervalSeconds", 300)))


def _key(entry: dict[str, Any]) -> str:
    """What identifies a result across refreshes (fields the API server might prune are left out)."""
    resource = (entry.get("resources") or [{}])[0]
    return json.dumps([entry.get("rule"), entry.get("result"), entry.get("message"), resource.get("uid"),
                       resource.get("kind"), resource.get("name"), entry.get("properties")], sort_keys=True)


def _timestamped(results: list[dict[str, Any]], old: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    found = {_key(entry): entry.get("timestamp") for entry in old}
    stamp = {"seconds": int(now), "nanos": 0}
    return [{**entry, "timestamp": found.get(_key(entry)) or stamp} for entry in results]


def write_reports(api: Any, context: Context, *, now: float | None = None,
                  known: ObjectStore | None = None) -> dict[str, str]:
    """Bring every namespace's report up to date; namespace -> "created", "updated" or "unchanged".

    ``known``: our reports as a watch keeps them (listed here when None); what is written is put there too.
    """
    now = time.time() if now is None else now
    rules = context.rules
    found = audit(api, context=context, namespace=None)
    by_namespace: dict[str, list[Result]] = defaultdict(list)
    for result in found.report.results:
        by_namespace[result.namespace].append(result)
    if known is None:
        existing, _ = kube.list_items(api, f"/apis/{GROUP}/{VERSION}/{PLURAL}", labelSelector=SELECTOR)
    else:
        existing = list(known.objects.values())
    old_reports = {o["metadata"]["namespace"]: o for o in existing if o["metadata"].get("name") == NAME}
    outcome = {}
    for namespace in sorted(set(by_namespace) | set(old_reports)):
        results = report_results(by_namespace.get(namespace, []), found.modes.get(namespace, rules.default_mode))
        old = old_reports.get(namespace)
        if old is None and not results:
            continue
        old_results = (old or {}).get("results") or []
        if old is not None and sorted(map(_key, old_results)) == sorted(map(_key, results)):
            outcome[namespace] = "unchanged"
            continue
        results = _timestamped(results, old_results, now)
        metadata: dict[str, Any] = {"name": NAME, "namespace": namespace, "labels": dict(MANAGED_BY)}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PolicyReport", "metadata": metadata,
                "summary": report_summary(results), "results": results}
        path = kube.collection(GROUP, VERSION, PLURAL, namespace)
        if old is None:
            written = kube.request(api, "POST", path, body=body)
            outcome[namespace] = "created"
        else:
            metadata["resourceVersion"] = old["metadata"]["resourceVersion"]
            written = kube.request(api, "PUT", f"{path}/{NAME}", body=body)
            outcome[namespace] = "updated"
        if known is not None and isinstance(written, dict):
            known.put(written)  # the next refresh updates from this version, whether or not the watch saw it
    return outcome


class ReportWriter(Poller):
    """Checks every ``interval`` seconds whether reports are on, whether this worker writes them, and whether a
    refresh is due (the rules' ``intervalSeconds``); rules reloaded with the switch flipped take effect here."""

    def __init__(self, context: Callable[[], Context], *, interval: float = 10.0, lock_dir: str | None = None,
                 client: Callable[[], Any] = kube.client, watch: Callable[[], Api] | None = None,
                 observer: Observer | None = None) -> None:
        super().__init__(name="policy-reports", interval=interval, immediately=True)
        self._context = context
        self._lock = WorkerLock(LOCK_FILE, "the PolicyReports", lock_dir)
        self._client = client
        self._api: Any = None
        self._watch_api = watch or (lambda: api_calls(query={"labelSelector": SELECTOR}))
        self._observer = observer
        self.reports: Informer | None = None  # our reports, watched once this worker writes them
        self._known = ObjectStore()
        self._last_run = float("-inf")
        self._problem = ProblemLog("PolicyReports")
        self.last_outcome: dict[str, str] | None = None

    def stop(self) -> None:
        super().stop()
        if self.reports is not None:
            self.reports.stop()

    def poll(self) -> str:
        context = self._context()
        current = settings(context.rules)
        if not current.enabled:
            return "off"
        if not self._lock.held():
            return "another worker writes"
        if time.monotonic() - self._last_run < current.interval:
            return "not due"
        self._last_run = time.monotonic()
        try:
            if self._api is None:
                self._api = self._client()
            if kube.get(self._api, f"/apis/{GROUP}/{VERSION}") is None:
                self._problem(f"the cluster does not serve {GROUP}/{VERSION} (the PolicyReport CRD is not "
                              f"installed: see manifests/components/policy-report-crd)")
                return "no CRD"
            if self.reports is None:
                self.reports = Informer("policyreports", f"/apis/{GROUP}/{VERSION}/{PLURAL}", self._known,
                                        self._watch_api, resync=current.interval, observer=self._observer).start()
            synced = self.reports.status.synced
            self.last_outcome = write_reports(self._api, context, known=self._known if synced else None)
        except Exception as exc:  # noqa: BLE001 - the API or a bug: logged, retried at the next refresh
            self._problem(f"{type(exc).__name__}: {exc}")
            return "failed"
        if self._problem.last:
            self._problem(None)
        changed = {ns: what for ns, what in self.last_outcome.items() if what != "unchanged"}
        if changed:
            log.info(json.dumps({"msg": "PolicyReports refreshed", "namespaces": changed}))
        return "written"

