"""The server's writer of the nodes' facts, against the API stand-in: it creates the native policies' parameter
where the cluster serves its kind (empty before any node is known), updates it only when the facts changed, never
with facts not known yet, and only from one replica (the Lease's holder; another takes over once the holder stops
renewing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.kubeapi import FakeKubeAPI
from webhook.cluster import client as kube
from webhook.cluster.cluster_facts import FactsWriter
from webhook.core.context import Context
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import NAME, PLURAL, facts_data, param

HOME = "ai-admission"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def writer(api: FakeKubeAPI, tmp_path: Path, rules: Rules | Context, identity: str, clock: Clock) -> FactsWriter:
    """A replica's writer (its own lock directory: one writer among its workers)."""
    lock_dir = tmp_path / identity
    lock_dir.mkdir(parents=True)
    config = api.kubeconfig(lock_dir / "kubeconfig")
    return FactsWriter(lambda: as_context(rules), namespace=HOME, lock_dir=str(lock_dir), identity=identity, clock=clock,
                       client=lambda: kube.client(str(config)))


def written(api: FakeKubeAPI) -> dict[str, Any] | None:
    return api.objects.get((PLURAL, HOME, NAME))


@pytest.fixture
def in_force(rules: Rules) -> Rules:
    return with_nodes(gke_cluster(), rules)


def test_nothing_is_written_where_the_native_set_is_not_installed(tmp_path: Path, in_force: Rules) -> None:
    """And the API server is asked again only a minute later, not at every poll; then the kind served, created."""
    clock = Clock()
    with FakeKubeAPI() as api:
        api.unserved.add(PLURAL)
        facts = writer(api, tmp_path, in_force, "a", clock)
        assert facts.poll() == "no parameter kind"
        assert not any(key[0] in (PLURAL, "leases") for key in api.objects)
        asked = len(api.requests)
        clock.now += 30
        assert facts.poll() == "no parameter kind" and len(api.requests) == asked
        api.unserved.clear()
        clock.now += 31
        assert facts.poll() == "created" and written(api)["data"] == facts_data(as_context(in_force))  # type: ignore[index]


def test_created_empty_before_the_node_watch_has_synced_and_never_emptied(tmp_path: Path, rules: Rules,
                                                                           in_force: Rules) -> None:
    """The policies need their parameter to run at all; facts not known yet never replace known ones (a restart)."""
    with FakeKubeAPI() as api:
        assert writer(api, tmp_path / "first", rules, "a", Clock()).poll() == "created"
        assert written(api)["data"] == {}  # type: ignore[index]
        api.store(PLURAL, param(HOME, facts_data(as_context(in_force))), HOME)
        assert writer(api, tmp_path / "second", rules, "b", Clock()).poll() == "no facts yet"
        assert written(api)["data"] == facts_data(as_context(in_force))  # type: ignore[index]


def test_the_facts_written_once_then_left_alone(tmp_path: Path, in_force: Rules) -> None:
    with FakeKubeAPI() as api:
        api.add(PLURAL, param(HOME), HOME)
        first = writer(api, tmp_path, in_force, "a", Clock())
        assert first.poll() == "written"
        stored = written(api)
        assert stored is not None and stored["data"] == facts_data(as_context(in_force))
        assert stored["metadata"]["labels"] == param(HOME)["metadata"]["labels"]  # the rest of the object as it was
        assert first.poll() == "unchanged"
        assert [m for m, path in api.requests if path.endswith(f"/{PLURAL}/{NAME}")].count("PUT") == 1


def test_one_replica_writes_and_another_takes_over_when_it_stops(tmp_path: Path, in_force: Rules,
                                                                  rules: Rules) -> None:
    clock = Clock()
    with FakeKubeAPI() as api:
        api.add(PLURAL, param(HOME), HOME)
        first, second = (writer(api, tmp_path, in_force, name, clock) for name in ("a", "b"))
        assert first.poll() == "written"
        assert second.poll() == "another replica writes"
        lease = api.objects[("leases", HOME, NAME)]
        assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 15
        clock.now += 10
        assert first.poll() == "unchanged"  # renewed
        clock.now += 10
        assert second.poll() == "another replica writes"
        clock.now += 16  # a's last renewal is past its duration
        assert second.poll() == "unchanged"
        assert api.objects[("leases", HOME, NAME)]["spec"]["holderIdentity"] == "b"
        assert api.objects[("leases", HOME, NAME)]["spec"]["leaseTransitions"] == 1
        assert first.poll() == "another replica writes"


def test_a_replica_whose_lease_write_loses_the_race_does_not_write(tmp_path: Path, in_force: Rules,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas read the Lease free at once: the API server takes one write (the resourceVersion), the other
    gets 409 and writes no facts."""
    with FakeKubeAPI() as api:
        api.add(PLURAL, param(HOME), HOME)
        api.add("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": NAME, "namespace": HOME}, "spec": {}})
        original = kube.get

        def read_before_the_other_writes(api_client: Any, path: str, **query: Any) -> Any:
            found = original(api_client, path, **query)
            if path.endswith(f"/leases/{NAME}"):  # replica a takes the Lease just after b has read it
                api.store("leases", {**found, "spec": {"holderIdentity": "a"}}, HOME)
            return found

        monkeypatch.setattr(kube, "get", read_before_the_other_writes)
        assert writer(api, tmp_path, in_force, "b", Clock()).poll() == "another replica writes"
        assert written(api)["data"] == {}  # type: ignore[index]
