"""Prometheus metrics, counted across every gunicorn worker (prometheus-client's multiprocess mode).

gunicorn's master points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before it forks (see
gunicorn_conf.on_starting); each worker's values live in memory-mapped files there, and ``/metrics`` in any
worker aggregates them all. Without that variable (tests, the CLI) the process's own registry is used. The
metrics are created at a worker's first use (`instruments`), not when this module is imported.
"""

from __future__ import annotations

import bisect
import collections
import functools
import os
import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from . import batching

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # set by the gunicorn master; read by prometheus-client itself


class Instruments:
    """Every metric of the server, created when a worker first needs them (`instruments`), never at import: an
    unlabelled gauge writes a value file into the multiprocess directory when it is created, and the gunicorn
    master, which imports parts of the server, must not have any."""

    def __init__(self) -> None:
        self.requests = Counter("ai_admission_requests", "Admission requests answered",
                                ["endpoint", "operation", "kind", "verdict", "workload"])
        self.denials = Counter("ai_admission_denials",
                               "Deny findings by reason code (whatever the mode made of them)", ["reason", "mode"])
        self.bad_requests = Counter("ai_admission_bad_requests", "Requests answered with a 4xx", ["status"])
        self.errors = Counter("ai_admission_internal_errors", "Requests admitted unchecked after an internal error")
        # What rightsizing would give back: GPUs an admitted pod asks for that its memory need does not take (its
        # creation at /validate, not a dry run). Per class and GPU model, both bounded by the rules and the nodes.
        self.gpus_beyond_need = Counter("ai_admission_gpus_beyond_need",
                                        "GPUs admitted pods ask for beyond their memory need, at their creation",
                                        ["workload", "model"])
        # Up to the webhook timeout (5 s): a quantile can only be read up to the highest finite bucket, and the
        # alert on latency near the timeout must be able to see it.
        self.latency = Histogram("ai_admission_request_duration_seconds",
                                 "Time from request body to response, per endpoint", ["endpoint"],
                                 buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
                                          2.5, 5.0))
        # What the webhook changes: JSON Patch operations per /mutate answer (0: the pod is left as it is). Every
        # operation changes what the scheduler or the runtime does, or is the profile record.
        self.patch_operations = Histogram("ai_admission_patch_operations", "JSON Patch operations per /mutate answer",
                                          buckets=(0, 1, 2, 4, 6, 8, 10, 12, 16, 24, 32, 64))
        self.rules_generation = Gauge("ai_admission_rules_generation", "Rules loads since start (1 = initial load)",
                                      multiprocess_mode="max")
        self.rules_reload_errors = Counter("ai_admission_rules_reload_errors",
                                           "Rejected rules files (the last good rules stay)")
        self.rules_reload_failing = Gauge("ai_admission_rules_reload_failing",
                                          "1 while the rules file on disk is rejected and older rules are in force",
                                          multiprocess_mode="livemax")
        self.rules_loaded_at = Gauge("ai_admission_rules_loaded_timestamp_seconds",
                                     "When the rules in force were loaded", multiprocess_mode="max")
        self.cert_expiry = Gauge("ai_admission_certificate_expiry_timestamp_seconds",
                                 "notAfter of the serving certificate in use", multiprocess_mode="min")
        # The PriorityClass watch: every worker watches, so counts are the workers' largest and times the latest.
        # A missing class is not set on pods, so alerting on it is what gets it re-applied.
        self.priority_classes_missing = Gauge("ai_admission_priority_classes_missing",
                                              "PriorityClasses the rules set that the cluster does not have",
                                              multiprocess_mode="livemax")
        self.priority_classes_checked_at = Gauge("ai_admission_priority_classes_checked_timestamp_seconds",
                                                 "When the PriorityClasses were last listed successfully",
                                                 multiprocess_mode="max")
        self.priority_class_check_errors = Counter(
            "ai_admission_priority_class_check_errors",
            "Failed attempts to list or watch PriorityClasses (the last answer stays in force)")
        # The node GPU catalog: each worker watches, so the workers' largest counts, the latest sync.
        self.catalog_nodes = Gauge("ai_admission_catalog_gpu_nodes", "Nodes that publish a GPU product",
                                   multiprocess_mode="livemax")
        self.catalog_models = Gauge("ai_admission_catalog_models", "GPU products the nodes publish",
                                    multiprocess_mode="livemax")
        self.catalog_model_nodes = Gauge("ai_admission_catalog_model_nodes",
                                         "Nodes per GPU product (as the nodes name it)", ["product"],
                                         multiprocess_mode="livemax")
        self.catalog_synced_at = Gauge("ai_admission_catalog_synced_timestamp_seconds",
                                       "When the node catalog last took in the nodes (list or watch event)",
                                       multiprocess_mode="max")
        self.catalog_watch_errors = Counter("ai_admission_catalog_watch_errors",
                                            "Failed node lists or watches (the last catalog stays; retried with "
                                            "backoff)")
        # The default scheduler's gang (webhook.cluster.pod_groups)
        self.pod_groups_served = Gauge("ai_admission_pod_groups_served",
                                       "1 where the cluster serves the Workload API's PodGroups (and no queueing "
                                       "backend is chosen): training jobs are scheduled as gangs",
                                       multiprocess_mode="max")
        self.pod_group_controller = Gauge("ai_admission_pod_group_controller_in_service",
                                          "1 while the PodGroup controller's Lease is renewed (pods of the training "
                                          "kinds are then named into their job's group); 0: they are scheduled alone",
                                          multiprocess_mode="max")
        self.pod_groups_made = Counter("ai_admission_pod_groups_made",
                                       "PodGroups the group controller created for the jobs of the training kinds")
        self.pod_groups_recounted = Counter("ai_admission_pod_groups_recounted",
                                            "Gangs made again with the pods that came: a job's pods stopped "
                                            "arriving short of the count its templates said (they would have "
                                            "waited forever)")
        # Every watch of the cluster (webhook.cluster.informer), by its name.
        self.watch_objects = Gauge("ai_admission_watch_objects", "Objects a watch holds", ["watch"],
                                   multiprocess_mode="livemax")
        self.watch_synced_at = Gauge("ai_admission_watch_synced_timestamp_seconds",
                                     "When a watch last listed its collection", ["watch"], multiprocess_mode="max")
        self.watch_errors = Counter("ai_admission_watch_errors", "Failed lists or watches, by watch", ["watch"])


@functools.lru_cache(maxsize=1)
def instruments() -> Instruments:
    return Instruments()


class WatchMetrics:
    """The informers' observer (`webhook.cluster.informer.Observer`): every watch's syncs and failures counted."""

    def synced(self, name: str, status: Any) -> None:
        metrics = instruments()
        metrics.watch_objects.labels(name).set(status.objects)
        metrics.watch_synced_at.labels(name).set(status.synced_at or time.time())
        if name == "priorityclasses":
            metrics.priority_classes_checked_at.set(status.synced_at or time.time())

    def failed(self, name: str, status: Any) -> None:
        metrics = instruments()
        metrics.watch_errors.labels(name).inc()
        if name == "nodes":
            metrics.catalog_watch_errors.inc()
        elif name == "priorityclasses":
            metrics.priority_class_check_errors.inc()


def render() -> tuple[bytes, str]:
    """The exposition text and its content type, aggregated over workers when running multiprocess.

    This worker's queued counts are added first; other workers' reach the files within `batching.INTERVAL`.
    """
    instruments()  # a worker that never counted anything still shows every metric
    _queue.flush()
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def _bounded(value: str, known: frozenset[str]) -> str:
    """Label values that come from the request are clamped to known ones: a client must not be able to create
    unbounded metric series by sending made-up kinds or operations."""
    return value if value in known else "other"


@functools.lru_cache(maxsize=2048)
def _request_series(endpoint: str, operation: str, kind: str, verdict: str, workload: str) -> Counter:
    return instruments().requests.labels(endpoint, operation, kind, verdict, workload)


@functools.lru_cache(maxsize=512)
def _denial_series(reason: str, mode: str) -> Counter:
    return instruments().denials.labels(reason, mode)


@functools.lru_cache(maxsize=16)
def _latency_series(endpoint: str) -> Histogram:
    return instruments().latency.labels(endpoint)


# One answered review: the labels of its request series, its denial reasons with the mode, its duration, the
# operations of its patch (None: not a /mutate answer), and the GPUs an admitted pod asks for beyond its need, with
# its class and model (None: none, or not a pod's creation).
Beyond = tuple[str, str, int]
Record = tuple[tuple[str, str, str, str, str], tuple[str, ...], str, float, int | None, Beyond | None]


def _add(records: list[Record]) -> None:
    """Add queued records to the shared series: one increment per series, not per request."""
    requests: collections.Counter[tuple[str, str, str, str, str]] = collections.Counter()
    denials: collections.Counter[tuple[str, str]] = collections.Counter()
    durations: dict[str, list[float]] = collections.defaultdict(list)
    operations: list[float] = []
    beyond: collections.Counter[tuple[str, str]] = collections.Counter()
    for series, reasons, mode, seconds, patch_ops, idle in records:
        requests[series] += 1
        for reason in reasons:
            denials[reason, mode] += 1
        durations[series[0]].append(seconds)
        if patch_ops is not None:
            operations.append(patch_ops)
        if idle is not None:
            beyond[idle[0], idle[1]] += idle[2]
    # the request counts last: a scrape (from another worker, mid-way through this) that sees a request counted
    # also sees its duration and its denial reasons
    for endpoint, values in durations.items():
        _observe_all(_latency_series(endpoint), values)
    if operations:
        _observe_all(instruments().patch_operations, operations)
    for (reason, mode), count in denials.items():
        _denial_series(reason, mode).inc(count)
    for (workload, model), gpus in beyond.items():
        instruments().gpus_beyond_need.labels(workload, model).inc(gpus)
    for series, count in requests.items():
        _request_series(*series).inc(count)


def _observe_all(histogram: Histogram, values: list[float]) -> None:
    """``observe`` each value, with one increment per bucket (prometheus-client has no bulk observe; this
    uses the child's bucket list, and falls back to ``observe`` if a release ever changes it)."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1  # the first bound >= value; the last bound is +Inf
    for bucket, count in zip(buckets, counts, strict=True):
        if count:
            bucket.inc(count)
    total.inc(sum(values))


_queue: batching.Queue[Record] = batching.Queue(_add)


def count_request(*, endpoint: str, operation: str, kind: str, verdict: str, workload: str,
                  denial_reasons: list[str], mode: str | None, seconds: float, kinds: frozenset[str],
                  patch_ops: int | None = None, beyond_need: Beyond | None = None) -> None:
    """Everything counted for one answered review; queued, and added to the series by `webhook.server.batching`."""
    _queue.put(((endpoint, _bounded(operation, OPERATIONS), _bounded(kind, kinds), verdict, workload),
                tuple(denial_reasons), mode or "-", seconds, patch_ops, beyond_need))
