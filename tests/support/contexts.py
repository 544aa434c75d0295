"""What a test judges a pod in: the rules alone (offline, as ``check`` without ``--cluster``) or a context with
what a cluster's watches would know (its nodes: `tests.support.clusters.with_nodes`; its queues, DeviceClasses,
PriorityClasses, claims: here)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

from webhook.core.context import Context
from webhook.core.dra.rules import GpuDeviceClass
from webhook.core.rules import Rules
from webhook.core.view.cluster_view import Objects
from webhook.core.view.gpu_classes import gpu_classes
from webhook.core.view.node_facts import DiscoveredCatalog
from webhook.core.view.observe import observe, queues_seen


def as_context(given: Rules | Context, **known: Any) -> Context:
    """``given`` itself where it is a context, else the rules with nothing known of the cluster; ``known``: parts
    of the cluster's view a test sets (``priority_classes``, ``pod_groups``, ``claims``, ...)."""
    context = given if isinstance(given, Context) else Context(given)
    return replace(context, cluster=replace(context.cluster, **known)) if known else context


def with_discovered(rules: Rules, discovered: DiscoveredCatalog) -> Context:
    """The context while the node watch knows ``discovered``."""
    return Context(rules, observe(rules, nodes=discovered))


def with_queues(given: Rules | Context, objects: Iterable[Mapping[str, Any]], *, source: str) -> Context:
    """The context while the scheduler backend's queues among ``objects`` are known (read from ``source``)."""
    context = as_context(given)
    queues = queues_seen(context.rules, Objects(tuple(objects), source), context.cluster.gpu_classes)
    return replace(context, cluster=replace(context.cluster, queues=queues))


def with_device_classes(given: Rules | Context, classes: Iterable[GpuDeviceClass]) -> Context:
    """The context while these GPU DeviceClasses are known (beside the rules' own)."""
    context = as_context(given)
    found = gpu_classes(context.rules, [classes], context.cluster.gpu_classes)
    return replace(context, cluster=replace(context.cluster, gpu_classes=found))
