"""What one worker runs besides its request handlers, started in one place: the rules file, the cluster's view,
and the background services that keep both current.

A request is judged in a context (`webhook.core.context.Context`): the rules file beside the cluster's view. The
view's indexed parts are worked out from what the node watch, the DRA watch's DeviceClasses and the queue watch
know (`webhook.core.view.observe`), each once per change of its watch (a rules reload works out all three again),
and handed over in one assignment, so requests in flight keep the view they started with; `Services.context` adds
the PriorityClasses', the claims' and the Workload API's latest for each request. The background services
are the rules file watch (`webhook.server.reload`), the watches of PriorityClasses, Nodes and DRA objects
(`webhook.cluster`), and the PolicyReport writer; each is switched by the settings, and each watch is counted by
the same metrics (`webhook.server.metrics.WatchMetrics`). An app built around given rules (`Services.fixed`, for
tests) runs none of them unless given.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from webhook.cluster.claims import ClaimWatch
from webhook.cluster.cluster_facts import FactsWriter
from webhook.cluster.nodes import NodeWatch
from webhook.cluster.pod_groups import PodGroupController, PodGroupWatch
from webhook.cluster.priority_classes import PriorityClassWatch
from webhook.cluster.queues import QueueWatch
from webhook.cluster.reports import ReportWriter
from webhook.config.rules_file import default_rules_path
from webhook.config.settings import Settings
from webhook.core.context import Context
from webhook.core.podgroups.support import NOT_KNOWN, PodGroupSupport
from webhook.core.rules import PriorityClassSpec, Rules
from webhook.core.view.claims import ClaimIndex
from webhook.core.view.cluster_view import CLUSTER, NOTHING_KNOWN, Objects
from webhook.core.view.node_catalog import node_catalog
from webhook.core.view.node_facts import UNDISCOVERED, DiscoveredCatalog
from webhook.core.view.observe import classes_seen, queues_seen
from webhook.core.view.priority_state import UNCHECKED, PriorityClassState

from .metrics import WatchMetrics, instruments
from .reload import RulesWatch, load_at_start


def priority_classes(rules: Rules) -> list[PriorityClassSpec]:
    """The PriorityClasses the rules set on pods."""
    return [spec for p in rules.classes.values() for spec in p.priority_classes]


@dataclass
class Services:
    """The rules file (``rules``), the cluster's view and the services of one worker; `stop` ends them all."""

    rules: Rules
    rules_watch: RulesWatch | None = None
    priority_class_watch: PriorityClassWatch | None = None
    node_watch: NodeWatch | None = None
    claim_watch: ClaimWatch | None = None
    queue_watch: QueueWatch | None = None
    report_writer: ReportWriter | None = None
    facts_writer: FactsWriter | None = None
    pod_group_watch: PodGroupWatch | None = None
    pod_group_controller: PodGroupController | None = None

    def __post_init__(self) -> None:
        # Every field first, callbacks last: wiring a watch may call back at once (the node watch's catalog is
        # worked out as it is wired), and a callback reads every field of the object. A field set after the first
        # callback made every worker die at start whenever the node watch ran.
        self._lock = threading.Lock()
        self._nodes = UNDISCOVERED                     # what the node watch knows, as it knows it
        self._device_classes: tuple[Objects, ...] = ()  # the DeviceClasses the DRA watch knows
        self._queues: Objects | None = None             # the backend's queue objects the queue watch knows
        self._cluster = NOTHING_KNOWN                   # the view's indexed parts, worked out from the three
        self.attach(node_watch=self.node_watch, claim_watch=self.claim_watch, queue_watch=self.queue_watch)

    def attach(self, *, node_watch: NodeWatch | None = None, claim_watch: ClaimWatch | None = None,
               queue_watch: QueueWatch | None = None) -> None:
        """Wire the watches that feed the cluster's view: each one's callback set, and what each already knows
        taken in at once (a watch may have been started before it was attached)."""
        if node_watch is not None:
            self.node_watch = node_watch
            node_watch.on_change = self.set_discovered
            self.set_discovered(node_watch.catalog)
        if claim_watch is not None:
            self.claim_watch = claim_watch
            claim_watch.device_classes.on_change = self.set_device_classes
            if claim_watch.device_classes.objects:
                self.set_device_classes(list(claim_watch.device_classes.objects.values()))
        if queue_watch is not None:
            self.queue_watch = queue_watch
            queue_watch.on_change = self.set_queues
            if queue_watch.listed:
                self.set_queues(queue_watch.objects())

    def _observe(self, *, nodes: bool = False, classes: bool = False, queues: bool = False) -> None:
        """The parts of the view whose input changed, worked out again against the rules (the queues count GPUs by
        the accelerators in force, so a change of classes works them out too), handed over in one assignment."""
        with self._lock:
            rules, cluster = self.rules, self._cluster
            if nodes:
                cluster = replace(cluster, nodes=node_catalog(rules, self._nodes))
            if classes:
                cluster = replace(cluster, gpu_classes=classes_seen(rules, self._device_classes))
            if classes or queues:
                cluster = replace(cluster, queues=queues_seen(rules, self._queues, cluster.gpu_classes))
            self._cluster = cluster

    @classmethod
    def fixed(cls, rules: Rules, *, priority_class_watch: PriorityClassWatch | None = None,
              node_watch: NodeWatch | None = None, claim_watch: ClaimWatch | None = None,
              queue_watch: QueueWatch | None = None) -> Services:
        """Around given rules, with only the watches given (already built by the caller): for tests."""
        return cls(rules, priority_class_watch=priority_class_watch, node_watch=node_watch, claim_watch=claim_watch,
                   queue_watch=queue_watch)

    # what the watches hand over

    def set_rules(self, rules: Rules) -> None:
        """A reloaded rules file: the view worked out again against it."""
        with self._lock:
            self.rules = rules
        self._observe(nodes=True, classes=True, queues=True)
        if self.priority_class_watch is not None:
            self.priority_class_watch.refresh()

    def set_discovered(self, discovered: DiscoveredCatalog) -> None:
        """A changed node catalog."""
        self._nodes = discovered
        self._observe(nodes=True)
        _count_catalog(discovered)

    def set_queues(self, objects: list[dict[str, Any]]) -> None:
        """The scheduler backend's queues changed (the checks of a workload's queue read them)."""
        self._queues = Objects(tuple(objects), CLUSTER)
        self._observe(queues=True)

    def set_device_classes(self, objects: list[dict[str, Any]]) -> None:
        """The cluster's DeviceClasses changed."""
        self._device_classes = (Objects(tuple(objects), CLUSTER),) if objects else ()
        self._observe(classes=True)

    # what the request path reads

    @property
    def context(self) -> Context:
        """What a request is judged by: the rules file and the cluster's view, with the PriorityClasses', claims'
        and Workload API's latest (each kept by its own watch)."""
        groups = self.pod_group_watch
        return Context(self.rules, replace(self._cluster, priority_classes=self.priority_classes, claims=self.claim_index,
                                           pod_groups=groups.support if groups is not None else NOT_KNOWN,
                                           jobs=groups.job if groups is not None else None))

    @property
    def priority_classes(self) -> PriorityClassState:
        return self.priority_class_watch.state if self.priority_class_watch else UNCHECKED

    @property
    def claim_index(self) -> ClaimIndex | None:
        return self.claim_watch.index if self.claim_watch else None

    def stop(self) -> None:
        for service in (self.rules_watch, self.priority_class_watch, self.node_watch, self.claim_watch,
                        self.queue_watch, self.report_writer, self.facts_writer, self.pod_group_watch,
                        self.pod_group_controller):
            if service is not None:
                service.stop()


_catalog_products: set[str] = set()


def _count_catalog(catalog: DiscoveredCatalog) -> None:
    if not catalog.known:
        return
    metrics = instruments()
    metrics.catalog_nodes.set(catalog.gpu_nodes)
    metrics.catalog_models.set(len(catalog.models))
    metrics.catalog_synced_at.set(catalog.synced_at or 0)
    for product in _catalog_products | set(catalog.models):
        model = catalog.models.get(product)
        metrics.catalog_model_nodes.labels(product).set(len(model.nodes) if model else 0)
    _catalog_products.update(catalog.models)


def _count_priority_classes(state: PriorityClassState) -> None:
    if state.checked:
        instruments().priority_classes_missing.set(len(state.missing_priority_classes))


def record_certificate_expiry(settings: Settings) -> None:
    """The expiry gauge from the start of each worker: its TLS context is loaded only at its first connection,
    and until then the worker's 0 would be the minimum over workers (and look like an expired certificate)."""
    if settings.tls_dir and Path(settings.tls_dir, "tls.crt").is_file():
        from .tls import record_expiry

        record_expiry(str(Path(settings.tls_dir, "tls.crt")))


def start_services(settings: Settings) -> tuple[Services, str | None]:
    """A worker's services as the settings ask for them, started; and the rules file's error, when it is broken
    and the worker started with the last good rules instead."""
    path = default_rules_path(settings.rules)
    rules, file_error = load_at_start(path, settings.last_good_rules)
    observer = WatchMetrics()
    # The services object exists before any watch that reads it: the watches read the rules and the view through it,
    # and are attached (their callbacks wired) before any is started.
    services = Services(rules)
    if settings.priority_class_watch:
        services.priority_class_watch = PriorityClassWatch(lambda: priority_classes(services.rules),
                                                           resync=settings.cluster_check_seconds, observer=observer,
                                                           on_change=_count_priority_classes)
    node_watch = claim_watch = queue_watch = None
    if settings.node_watch:
        node_watch = NodeWatch(lambda: services.rules, resync=settings.node_resync_seconds, observer=observer)
    if settings.claim_watch:
        claim_watch = ClaimWatch(resync=settings.claims_resync_seconds, observer=observer)
    if settings.queue_watch and rules.scheduler.active and rules.scheduler.backend.queue_kinds:
        queue_watch = QueueWatch(rules.scheduler.backend.queue_kinds, resync=settings.queues_resync_seconds,
                                 observer=observer)
    services.attach(node_watch=node_watch, claim_watch=claim_watch, queue_watch=queue_watch)
    services.rules_watch = RulesWatch(path, services.set_rules, interval=settings.rules_check_seconds,
                                      last_good=settings.last_good_rules)
    services.rules_watch.last_error = file_error
    services.report_writer = ReportWriter(lambda: services.context, interval=settings.reports_check_seconds,
                                          lock_dir=settings.metrics_dir, observer=observer)
    if settings.facts_writer:
        services.facts_writer = FactsWriter(lambda: services.context, namespace=settings.namespace,
                                            interval=settings.facts_check_seconds, lock_dir=settings.metrics_dir)
    if settings.pod_group_watch:
        metrics = instruments()

        def gang_in_service(support: PodGroupSupport) -> None:
            metrics.pod_groups_served.set(1 if support.served else 0)
            metrics.pod_group_controller.set(1 if support.controller else 0)

        services.pod_group_watch = watch = PodGroupWatch(
            namespace=settings.namespace, interval=settings.pod_groups_check_seconds, observer=observer,
            on_change=gang_in_service)
        services.pod_group_controller = PodGroupController(
            lambda: services.context, lambda: watch.support, namespace=settings.namespace,
            interval=settings.pod_groups_check_seconds, lock_dir=settings.metrics_dir,
            observer=observer, on_made=lambda _: metrics.pod_groups_made.inc(),
            on_recount=lambda _: metrics.pod_groups_recounted.inc())
    for service in (services.rules_watch, services.priority_class_watch, node_watch, claim_watch, queue_watch,
                    services.report_writer, services.facts_writer, services.pod_group_watch,
                    services.pod_group_controller):
        if service is not None:
            service.start()
    metrics = instruments()
    metrics.rules_generation.inc()
    metrics.rules_loaded_at.set(time.time())
    record_certificate_expiry(settings)
    return services, file_error
