"""Every setting of the server, read once from the environment into one frozen object that is passed in.

The table below is the one table of the ``AI_ADMISSION_*`` variables and the only code that reads them (the
gunicorn master sets the two internal ones for its workers, and ``ai-admission serve`` the rules file and the
TLS directory for the server it starts); `Settings.from_environ` reads them all at once and says which one is wrong, and
the documentation's table of variables is generated from `VARIABLES` (a test fails when it drifts). Nothing
deeper in the code reads ``os.environ``: the app factory, the background services and the gunicorn
configuration get a `Settings`, and tests build their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Mapping

AUTO = ("true", "false", "auto")
DEFAULT_TLS_DIR = "certs/dev"


class SettingsError(ValueError):
    """A variable that cannot be used; the message names it and what it must be."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, default (as text, as a user would write it), meaning, and whether
    it is set by the server itself rather than by an operator."""

    name: str
    default: str
    meaning: str
    field: str
    kind: str = "text"  # text, int, seconds, switch (true, false or auto: on inside a cluster)
    internal: bool = False


VARIABLES: tuple[Variable, ...] = (
    Variable("PORT", "8443", "port to listen on (with the default bind address)", "port", "int"),
    Variable("AI_ADMISSION_BIND", "127.0.0.1:$PORT", "listen address (`0.0.0.0:8443` in the image)", "bind"),
    Variable("AI_ADMISSION_TLS_DIR", "certs/dev", "directory with `tls.crt` and `tls.key`", "tls_dir"),
    Variable("AI_ADMISSION_RULES", "rules/default.yaml, else the packaged copy",
             "rules file, or a directory holding `rules.yaml` (a mounted ConfigMap)", "rules"),
    Variable("WEB_CONCURRENCY", "2", "gunicorn workers", "workers", "int"),
    Variable("AI_ADMISSION_THREADS", "4", "threads per worker", "threads", "int"),
    Variable("AI_ADMISSION_RULES_CHECK_SECONDS", "2", "how often workers look for a changed rules file",
             "rules_check_seconds", "seconds"),
    Variable("AI_ADMISSION_CHECK_PRIORITY_CLASSES", "auto",
             "watch the cluster's PriorityClasses against the ones the rules set", "check_priority_classes",
             "switch"),
    Variable("AI_ADMISSION_CLUSTER_CHECK_SECONDS", "60", "how often the PriorityClasses are listed afresh",
             "cluster_check_seconds", "seconds"),
    Variable("AI_ADMISSION_NODE_CATALOG", "auto",
             "watch the Nodes and merge their GPU facts, topology, taints and fabric into the rules",
             "node_catalog", "switch"),
    Variable("AI_ADMISSION_NODE_RESYNC_SECONDS", "300", "how often the node watch lists the Nodes afresh",
             "node_resync_seconds", "seconds"),
    Variable("AI_ADMISSION_WATCH_CLAIMS", "auto",
             "keep the cluster's DRA claims, claim templates and device classes from a watch, for pods that take "
             "GPUs through them or through a class's extended resource",
             "watch_claims", "switch"),
    Variable("AI_ADMISSION_CLAIMS_RESYNC_SECONDS", "300", "how often the claim watch lists everything again",
             "claims_resync_seconds", "seconds"),
    Variable("AI_ADMISSION_WATCH_QUEUES", "auto",
             "keep the scheduler backend's queues from a watch (when the rules choose a backend), for the checks "
             "that a workload's queue exists and can hold it", "watch_queues", "switch"),
    Variable("AI_ADMISSION_QUEUES_RESYNC_SECONDS", "300", "how often the queue watch lists the backend's queues again",
             "queues_resync_seconds", "seconds"),
    Variable("AI_ADMISSION_CLUSTER_FACTS", "auto",
             "write what the node watch learns (topology, spread keys, GPU taints) to the native policies' parameter, "
             "the ClusterFacts object ai-admission-cluster-facts, where the cluster serves its kind (one writer: a "
             "Lease among replicas)",
             "cluster_facts", "switch"),
    Variable("AI_ADMISSION_FACTS_CHECK_SECONDS", "5", "how often the writer of the nodes' facts looks for a change",
             "facts_check_seconds", "seconds"),
    Variable("AI_ADMISSION_POD_GROUPS", "auto",
             "on the default scheduler, where the cluster serves the Workload API (scheduling.k8s.io PodGroups): "
             "discover it, watch the Jobs whose PodGroups the Job controller makes, and make the PodGroups of the other "
             "training kinds' jobs (one maker: a Lease among replicas)", "pod_groups", "switch"),
    Variable("AI_ADMISSION_POD_GROUPS_CHECK_SECONDS", "5",
             "how often the group controller's Lease is renewed and read, and the maker looks for a pod whose group "
             "is missing (a pod event wakes it at once)", "pod_groups_check_seconds", "seconds"),
    Variable("AI_ADMISSION_NAMESPACE", "ai-admission",
             "the namespace the server runs in (the Deployment sets it from the pod's own), where the nodes' facts "
             "and their Lease are", "namespace"),
    Variable("AI_ADMISSION_IO_TIMEOUT", "10", "seconds a connection may block a read or write", "io_timeout",
             "seconds"),
    Variable("AI_ADMISSION_REPORTS_CHECK_SECONDS", "10",
             "how often workers look whether PolicyReports are on and due", "reports_check_seconds", "seconds"),
    Variable("AI_ADMISSION_LOG_LEVEL", "INFO", "`WARNING` silences the per-admission lines", "log_level"),
    Variable("AI_ADMISSION_DECISION_CACHE", "512",
             "verdicts remembered per worker for pods that differ only in name, uid or managedFields (0: off)",
             "decision_cache", "int"),
    Variable("AI_ADMISSION_DRAIN_SECONDS", "5",
             "after SIGTERM, how long the server keeps serving with `/readyz` failing before it stops",
             "drain_seconds", "seconds"),
    Variable("AI_ADMISSION_DRAIN_FLAG", "(set by the gunicorn master)",
             "file whose existence tells the workers that the server is draining", "drain_flag", internal=True),
    Variable("AI_ADMISSION_LAST_GOOD_RULES", "(set by the gunicorn master)",
             "where the last rules that passed every check are kept for workers started later", "last_good_rules",
             internal=True),
    Variable("PROMETHEUS_MULTIPROC_DIR", "(set by the gunicorn master)",
             "the workers' shared metrics files (prometheus-client's multiprocess mode)", "metrics_dir",
             internal=True),
    Variable("KUBERNETES_SERVICE_HOST", "(set by the kubelet)",
             "present inside a cluster: `auto` switches are on", "kubernetes_service_host", internal=True),
)


@dataclass(frozen=True)
class Settings:
    """What the server runs with. Build it with `from_environ` (or directly, in tests)."""

    port: int = 8443
    bind: str = ""
    tls_dir: str | None = None  # gunicorn: DEFAULT_TLS_DIR when unset
    rules: str | None = None
    workers: int = 2
    threads: int = 4
    rules_check_seconds: float = 2.0
    check_priority_classes: str = "auto"
    cluster_check_seconds: float = 60.0
    node_catalog: str = "auto"
    node_resync_seconds: float = 300.0
    watch_claims: str = "auto"
    watch_queues: str = "auto"
    claims_resync_seconds: float = 300.0
    queues_resync_seconds: float = 300.0
    cluster_facts: str = "auto"
    facts_check_seconds: float = 5.0
    pod_groups: str = "auto"
    pod_groups_check_seconds: float = 5.0
    namespace: str = "ai-admission"
    io_timeout: float = 10.0
    reports_check_seconds: float = 10.0
    log_level: str = "INFO"
    decision_cache: int = 512
    drain_seconds: float = 5.0
    drain_flag: str | None = None
    last_good_rules: str | None = None
    metrics_dir: str | None = None
    kubernetes_service_host: str | None = None

    @property
    def bind_address(self) -> str:
        return self.bind or f"127.0.0.1:{self.port}"

    @property
    def tls_directory(self) -> str:
        return self.tls_dir or DEFAULT_TLS_DIR

    @property
    def in_cluster(self) -> bool:
        return bool(self.kubernetes_service_host)

    def switched_on(self, value: str) -> bool:
        """A background service's switch: ``true``, ``false``, or ``auto`` (on inside a cluster)."""
        return value == "true" or (value == "auto" and self.in_cluster)

    @property
    def priority_class_watch(self) -> bool:
        return self.switched_on(self.check_priority_classes)

    @property
    def node_watch(self) -> bool:
        return self.switched_on(self.node_catalog)

    @property
    def facts_writer(self) -> bool:
        """With no node watch the object is still created (the policies need it to run), and stays empty."""
        return self.switched_on(self.cluster_facts)

    @property
    def pod_group_watch(self) -> bool:
        return self.switched_on(self.pod_groups)

    @property
    def claim_watch(self) -> bool:
        return self.switched_on(self.watch_claims)

    @property
    def queue_watch(self) -> bool:
        return self.switched_on(self.watch_queues)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings in ``environ`` (default: the process environment); unset variables take their defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for variable in VARIABLES:
            raw = env.get(variable.name)
            if raw is None or raw == "":
                continue
            values[variable.field] = _parse(variable, raw)
        return cls(**values)  # type: ignore[arg-type]


def _parse(variable: Variable, raw: str) -> object:
    text = raw.strip()
    if variable.kind == "int":
        if not text.isdigit():
            raise SettingsError(f"{variable.name}={raw!r}: must be a whole number (default {variable.default})")
        return int(text)
    if variable.kind == "seconds":
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:
            raise SettingsError(f"{variable.name}={raw!r}: must be a number of seconds (default {variable.default})")
        return seconds
    if variable.kind == "switch":
        if text.lower() not in AUTO:
            raise SettingsError(f"{variable.name}={raw!r}: must be true, false or auto (default {variable.default})")
        return text.lower()
    return text


_FIELDS = frozenset(f.name for f in fields(Settings))
assert all(v.field in _FIELDS for v in VARIABLES), "a variable names no field of Settings"
