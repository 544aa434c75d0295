"""A worker's `Services` is whole before it calls anything: wiring a watch calls back at once (the node watch's
catalog is merged as it is wired), so every field a callback reads exists first, whatever the watches already
know and in whichever order they are given. The shipped Deployment runs the node watch; a field set after the
first callback made every worker die at start."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.support.nodes import gfd_node
from webhook.cluster.claims import ClaimWatch
from webhook.cluster.informer import Api
from webhook.cluster.nodes import NodeWatch
from webhook.cluster.queues import QueueWatch
from webhook.core.context import Context
from webhook.core.rules import Rules
from webhook.server.services import Services

from .test_backends import backend_rules, kueue_queues

H100 = "NVIDIA-H100-80GB-HBM3"
DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
                         "extendedResourceName": "example.com/gpu"}}


def knows_the_nodes(context: Context) -> bool:
    """The context a request is judged in knows what the node watch saw (the H100 node below)."""
    return context.nodes is not None and context.nodes.present == {"h100-80g": "1 node x 8 GPUs"}


def no_api() -> Api:
    raise AssertionError("a watch that is never started calls no API")


def node_watch(rules: Rules, *nodes: dict[str, Any]) -> NodeWatch:
    """A node watch that already knows ``nodes`` (as after its first list), not started."""
    watch = NodeWatch(lambda: rules, api=no_api)
    if nodes:
        watch.store.replace(list(nodes))
    return watch


def queue_watch(rules: Rules, objects: list[dict[str, Any]] | None) -> QueueWatch:
    watch = QueueWatch(rules.scheduler.backend.queue_kinds, api=no_api)
    if objects is not None:
        for kind, store in watch.stores.items():
            store.replace([o for o in objects if o["kind"] == kind])
    return watch


def claim_watch(*classes: dict[str, Any]) -> ClaimWatch:
    watch = ClaimWatch(api=no_api)
    if classes:
        watch.device_classes.replace(list(classes))
    return watch


@pytest.fixture(scope="module")
def kueue() -> Rules:
    return backend_rules("kueue", nodes=False)


def test_a_node_watch_that_knows_nothing_yet_is_wired_without_error(rules: Rules) -> None:
    services = Services.fixed(rules, node_watch=node_watch(rules))
    assert services.context.nodes is None and services.context.catalog == rules.catalog
    assert services.node_watch is not None and services.node_watch.on_change == services.set_discovered


def test_what_every_watch_already_knows_is_in_force_once_built(kueue: Rules) -> None:
    """Every order of giving the watches, each already fed: the rules in force carry all three at once."""
    watches = {"node_watch": lambda: node_watch(kueue, gfd_node("h100-0", H100)),
               "queue_watch": lambda: queue_watch(kueue, kueue_queues()),
               "claim_watch": lambda: claim_watch(DEVICE_CLASS)}
    orders = list(itertools.permutations(watches))
    assert len(orders) == 6
    for order in orders:
        services = Services(kueue, **{name: watches[name]() for name in order})
        assert knows_the_nodes(services.context), order
        assert services.context.cluster.queues is not None and services.context.cluster.queues.names("ml-team") == ["batch", "training"]
        assert services.context.accelerators.is_accelerator("example.com/gpu"), order


def test_a_queue_watch_that_has_not_listed_every_kind_merges_nothing(kueue: Rules) -> None:
    """Kueue's LocalQueues without its ClusterQueues would make every queue look missing: nothing until both."""
    watch = queue_watch(kueue, None)
    watch.stores["LocalQueue"].replace(kueue_queues()[:2])
    services = Services.fixed(kueue, queue_watch=watch)
    assert services.context.cluster.queues is None
    watch.stores["ClusterQueue"].replace(kueue_queues()[2:])
    assert services.context.cluster.queues is None
    watch.stores["ResourceFlavor"].replace([])  # listed, and none there
    assert services.context.cluster.queues is None
    watch.stores["WorkloadPriorityClass"].replace([])  # every kind is in
    assert services.context.cluster.queues is not None


def test_a_watch_attached_later_is_merged_and_heard_from(rules: Rules) -> None:
    services = Services(rules)
    watch = node_watch(rules)
    services.attach(node_watch=watch)
    assert not knows_the_nodes(services.context)
    watch.store.replace([gfd_node("h100-0", H100)])
    assert knows_the_nodes(services.context)


def test_a_rules_reload_keeps_what_the_watches_gave(kueue: Rules) -> None:
    services = Services.fixed(kueue, node_watch=node_watch(kueue, gfd_node("h100-0", H100)),
                              queue_watch=queue_watch(kueue, kueue_queues()))
    services.set_rules(kueue)
    assert services.context.cluster.queues is not None
    assert knows_the_nodes(services.context)


def test_each_watch_is_paced_by_its_own_setting(tmp_path: Any) -> None:
    """The queue watch had the claim watch's resync: a setting named for one watch paced two."""
    from tests.conftest import RULES_FILE
    from webhook.config.settings import Settings
    from webhook.server.services import start_services

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES_FILE.read_text().replace("\nscheduler:\n  backend: default\n",
                                                         "\nscheduler:\n  backend: kueue\n", 1))
    settings = Settings.from_environ({
        "AI_ADMISSION_RULES": str(rules_file), "AI_ADMISSION_WATCH_CLAIMS": "true",
        "AI_ADMISSION_WATCH_QUEUES": "true", "AI_ADMISSION_CLAIMS_RESYNC_SECONDS": "111",
        "AI_ADMISSION_QUEUES_RESYNC_SECONDS": "222", "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "false",
        "AI_ADMISSION_NODE_CATALOG": "false", "KUBECONFIG": str(tmp_path / "absent")})
    services, error = start_services(settings)
    try:
        assert error is None and services.claim_watch is not None and services.queue_watch is not None
        assert {i.resync for i in services.claim_watch.informers.values()} == {111.0}
        assert {i.resync for i in services.queue_watch.informers.values()} == {222.0}
    finally:
        services.stop()
