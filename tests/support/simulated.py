"""A simulated GPU cluster in a real control plane, for the tests that watch the real kube-scheduler act on what
ai-admission writes (tests/e2e/test_placement.py, tests/e2e/test_gang.py): Node objects registered as their
kubelets and the node lifecycle controller would leave them, a stand-in for the kubelets' part in preemption,
and the pods' creation and binding seen through the API server.

No kubelet runs: a bound pod stays Pending, which is all the scheduling tests need.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.conftest import Server, eventually
from tests.support.apiserver import warnings
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.e2e_install import route_labels

# The simulated nodes carry a taint of their own, tolerated only by the simulated clusters' pods: pods other tests left
# Pending elsewhere in the session's API server never land on them.
E2E_TAINT = {"key": "e2e.ai-admission.io/placement", "value": "true", "effect": "NoSchedule"}
E2E_TOLERATION = {"key": "e2e.ai-admission.io/placement", "operator": "Exists", "effect": "NoSchedule"}


@dataclass
class SimulatedCluster:
    """The simulated nodes of ``plane`` and the server watching them, registered for ``route``'s namespaces."""

    name: str
    plane: ControlPlane
    server: Server
    nodes: list[dict[str, Any]]
    route: str
    namespaces: list[str] = field(default_factory=list)

    def api(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        answer = requests.request(method, f"{self.plane.url}{path}", data=None if body is None else json.dumps(body),
                                  headers={**self.plane.auth_headers(), "Content-Type": content_type},
                                  verify=str(self.plane.ca), timeout=30)
        assert answer.status_code < 300 or (method == "DELETE" and answer.status_code == 404), answer.text
        return answer.json() if answer.content else None

    def namespace(self, hint: str) -> str:
        name = self.plane.create_namespace(namespace_name(f"{self.name}-{hint}"), route_labels(self.route))
        self.namespaces.append(name)
        return name

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        return self.api("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]

    def node_of(self, name: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["metadata"]["name"] == name)


def create_node(cluster: SimulatedCluster, node: dict[str, Any]) -> None:
    """Register ``node`` as its kubelet would, Ready; then do what the node lifecycle controller does for a Ready
    node: the API server's TaintNodesByCondition admission taints every new Node not-ready, and that controller
    (not run here: with no kubelet heartbeat it would mark the nodes unreachable) lifts the taint."""
    body = copy.deepcopy(node)
    taints = [*body["spec"].get("taints", []), E2E_TAINT]
    body["spec"]["taints"] = taints
    status = body.pop("status")
    name = node["metadata"]["name"]
    created = cluster.api("POST", "/api/v1/nodes", body)
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in created["spec"]["taints"]
    cluster.api("PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                content_type="application/merge-patch+json")
    cluster.api("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints}},
                content_type="application/merge-patch+json")


class Kubelets:
    """What the kubelets would do for this test: a pod the scheduler deletes (a preemption victim, graceful) is
    confirmed gone, so the scheduler sees its GPUs free."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self._cluster = cluster
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for namespace in list(self._cluster.namespaces):
                try:
                    for pod in self._cluster.pods(namespace):
                        if pod["metadata"].get("deletionTimestamp"):
                            self._cluster.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/"
                                                        f"{pod['metadata']['name']}?gracePeriodSeconds=0")
                except (AssertionError, requests.RequestException):
                    continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def create(cluster: SimulatedCluster, namespace: str, pod: dict[str, Any]) -> list[str]:
    """Create ``pod`` (a real POST, as a controller makes it); the warnings the API server passed on."""
    done = cluster.plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    assert done.returncode == 0, done.stderr
    return warnings(done.stderr)


def bound(cluster: SimulatedCluster, namespace: str, names: list[str], seconds: float = 60) -> dict[str, str]:
    """pod name -> node, once every pod of ``names`` is bound."""
    def all_bound() -> dict[str, str] | None:
        found = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in cluster.pods(namespace)}
        return found if all(found.get(name) for name in names) else None

    result: dict[str, str] = eventually(all_bound, seconds=seconds, step=0.2)
    return {name: result[name] for name in names}


def domain(cluster: SimulatedCluster, node: str, key: str) -> str:
    return cluster.node_of(node)["metadata"]["labels"][key]


