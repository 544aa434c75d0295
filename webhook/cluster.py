"""Facts about the cluster that policy depends on, refreshed in the background, never on the request path.

A pod naming a PriorityClass that does not exist is refused by the API server ("no PriorityClass with name ...
was found"), so one missing class would block every pod of its workload class. And mutation writes the class's
``value`` and ``preemptionPolicy`` into the pod beside its name (see `webhook.mutate.set_priority`), which is
only right while the class in the cluster has the values the rules give it. A daemon thread per worker lists
PriorityClasses at start and every ``interval`` seconds; mutation reads the last answer from memory, does not set
a class that is missing (the pod is admitted without it, with a warning), and for a class whose values differ
from the rules leaves the two fields to the API server (with a warning).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .polling import Poller
from .rules import PriorityClassSpec

log = logging.getLogger("ai_admission")
CHECK_ENV = "AI_ADMISSION_CHECK_PRIORITY_CLASSES"  # "true", "false" or "auto" (in a cluster: on)
INTERVAL_ENV = "AI_ADMISSION_CLUSTER_CHECK_SECONDS"


@dataclass(frozen=True)
class InstalledPriorityClass:
    """What the Priority admission plugin resolves a class name to."""

    value: int
    preemption_policy: str = "PreemptLowerPriority"  # the API server's default when a class names none


@dataclass(frozen=True)
class ClusterFacts:
    """The last known state; ``checked`` False means nothing is known yet (assume every class is as the rules say).

    ``differing_priority_classes`` maps a class name to what the cluster has, in words, when its value or
    preemptionPolicy is not the rules'.
    """

    missing_priority_classes: frozenset[str] = frozenset()
    checked: bool = False
    error: str | None = None
    differing_priority_classes: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "missingPriorityClasses": sorted(self.missing_priority_classes),
                "differingPriorityClasses": dict(sorted(self.differing_priority_classes.items())),
                "error": self.error}


UNKNOWN = ClusterFacts()


def describe_difference(wanted: PriorityClassSpec, installed: InstalledPriorityClass) -> str | None:
    """How the installed class differs from the rules' (None when it does not)."""
    if (installed.value, installed.preemption_policy) == (wanted.value, wanted.preemption_policy):
        return None
    return (f"value {installed.value}, preemptionPolicy {installed.preemption_policy} in the cluster; "
            f"the rules say value {wanted.value}, preemptionPolicy {wanted.preemption_policy}")


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


def list_priority_classes() -> dict[str, InstalledPriorityClass]:
    from kubernetes import client

    with api_client() as api:
        items = client.SchedulingV1Api(api).list_priority_class().items
        return {item.metadata.name: InstalledPriorityClass(
                    value=int(item.value or 0), preemption_policy=item.preemption_policy or "PreemptLowerPriority")
                for item in items if item.metadata and item.metadata.name}


def enabled(variable: str) -> bool:
    """A background check switched by ``variable``: "true", "false", or "auto" (default: on inside a cluster)."""
    setting = os.environ.get(variable, "auto").lower()
    return setting == "true" or (setting == "auto" and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


class PriorityClassWatch(Poller):
    """Polls the cluster's PriorityClasses against the ones the rules set (first poll at start)."""

    def __init__(self, wanted: Callable[[], Iterable[PriorityClassSpec]], *, interval: float = 60.0,
                 lister: Callable[[], Mapping[str, InstalledPriorityClass]] = list_priority_classes) -> None:
        super().__init__(name="priorityclass-watch", interval=interval, immediately=True)
        self._wanted = wanted
        self._lister = lister
        self.facts = UNKNOWN

    def poll(self) -> ClusterFacts:
        from . import metrics  # not at import: the admission core imports this module, the CLI too

        wanted = {spec.name: spec for spec in self._wanted()}
        try:
            existing = self._lister()
        except Exception as exc:  # noqa: BLE001 - an API hiccup keeps the last answer; it must not kill the thread
            facts = ClusterFacts(self.facts.missing_priority_classes, self.facts.checked,
                                 f"{type(exc).__name__}: {exc}", self.facts.differing_priority_classes)
            metrics.PRIORITY_CLASS_CHECK_ERRORS.inc()
        else:
            differing = {name: text for name, spec in wanted.items() if name in existing
                         for text in [describe_difference(spec, existing[name])] if text}
            facts = ClusterFacts(frozenset(wanted.keys() - existing.keys()), True, None, differing)
            metrics.PRIORITY_CLASSES_MISSING.set(len(facts.missing_priority_classes))
            metrics.PRIORITY_CLASSES_CHECKED_AT.set(time.time())
        if (facts.missing_priority_classes, facts.differing_priority_classes, facts.error) != (
                self.facts.missing_priority_classes, self.facts.differing_priority_classes, self.facts.error):
            log.warning(json.dumps({"msg": "priority classes checked", **facts.as_dict()}))
        self.facts = facts
        return facts


def watch_from_environment(wanted: Callable[[], Iterable[PriorityClassSpec]]) -> PriorityClassWatch | None:
    """Started when ``AI_ADMISSION_CHECK_PRIORITY_CLASSES`` is true, or "auto" (default) inside a cluster."""
    if not enabled(CHECK_ENV):
        return None
    return PriorityClassWatch(wanted, interval=float(os.environ.get(INTERVAL_ENV, "60"))).start()
