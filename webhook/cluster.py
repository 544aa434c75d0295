"""Facts about the cluster that policy depends on, refreshed in the background, never on the request path.

A pod naming a PriorityClass that does not exist is refused by the API server ("no PriorityClass with name ...
was found"), so one missing class would block every pod of its workload class. A daemon thread per worker
lists PriorityClasses at start and every ``interval`` seconds; mutation reads the last answer from memory and
does not set a class that is missing (the pod is admitted without it, with a warning).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .polling import Poller

log = logging.getLogger("ai_admission")
CHECK_ENV = "AI_ADMISSION_CHECK_PRIORITY_CLASSES"  # "true", "false" or "auto" (in a cluster: on)
INTERVAL_ENV = "AI_ADMISSION_CLUSTER_CHECK_SECONDS"


@dataclass(frozen=True)
class ClusterFacts:
    """The last known state; ``checked`` False means nothing is known yet (assume every class exists)."""

    missing_priority_classes: frozenset[str] = frozenset()
    checked: bool = False
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "missingPriorityClasses": sorted(self.missing_priority_classes),
                "error": self.error}


UNKNOWN = ClusterFacts()


def api_client() -> Any:
    """A kubernetes ``ApiClient``: the pod's service account in a cluster, else ``$KUBECONFIG``."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        # $KUBECONFIG as it is now: the client reads it once, when it is first imported
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
    return client.ApiClient(configuration)


def list_priority_classes() -> set[str]:
    from kubernetes import client

    with api_client() as api:
        items = client.SchedulingV1Api(api).list_priority_class().items
        return {item.metadata.name for item in items if item.metadata and item.metadata.name}


def enabled(variable: str) -> bool:
    """A background check switched by ``variable``: "true", "false", or "auto" (default: on inside a cluster)."""
    setting = os.environ.get(variable, "auto").lower()
    return setting == "true" or (setting == "auto" and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


class PriorityClassWatch(Poller):
    """Polls the cluster's PriorityClasses against the names the rules set (first poll at start)."""

    def __init__(self, wanted: Callable[[], Iterable[str]], *, interval: float = 60.0,
                 lister: Callable[[], set[str]] = list_priority_classes) -> None:
        super().__init__(name="priorityclass-watch", interval=interval, immediately=True)
        self._wanted = wanted
        self._lister = lister
        self.facts = UNKNOWN

    def poll(self) -> ClusterFacts:
        from . import metrics  # not at import: the admission core imports this module, the CLI too

        wanted = set(self._wanted())
        try:
            existing = self._lister()
        except Exception as exc:  # noqa: BLE001 - an API hiccup keeps the last answer; it must not kill the thread
            facts = ClusterFacts(self.facts.missing_priority_classes, self.facts.checked, f"{type(exc).__name__}: {exc}")
            metrics.PRIORITY_CLASS_CHECK_ERRORS.inc()
        else:
            facts = ClusterFacts(frozenset(wanted - existing), True, None)
            metrics.PRIORITY_CLASSES_MISSING.set(len(facts.missing_priority_classes))
            metrics.PRIORITY_CLASSES_CHECKED_AT.set(time.time())
        if facts.missing_priority_classes != self.facts.missing_priority_classes or facts.error != self.facts.error:
            log.warning(json.dumps({"msg": "priority classes checked", **facts.as_dict()}))
        self.facts = facts
        return facts


def watch_from_environment(wanted: Callable[[], Iterable[str]]) -> PriorityClassWatch | None:
    """Started when ``AI_ADMISSION_CHECK_PRIORITY_CLASSES`` is true, or "auto" (default) inside a cluster."""
    if not enabled(CHECK_ENV):
        return None
    return PriorityClassWatch(wanted, interval=float(os.environ.get(INTERVAL_ENV, "60"))).start()
