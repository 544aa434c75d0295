"""The nodes' facts written to the native policies' parameter: the ClusterFacts object
``ai-admission-cluster-facts`` that the classes' MutatingAdmissionPolicies read (`webhook.generate.native`), so
that placement and the nodes' GPU taints need no webhook on the pod's path.

What is written is `webhook.core.view.cluster_facts.facts_data` for the server's context (the node watch's view and
the PriorityClasses' state beside the rules), whenever it differs from what is there. The
object is created (empty where no node is known: the policies
then act as the webhook does with no node watch) where the cluster serves its kind, which the native component
installs; where it does not, nothing is written, no Lease is taken, and the kind is asked for again a minute later
(not at every poll). Facts not known yet (the node watch not
synced) never replace facts written before. One writer: among a server's workers, the one holding its lock file
(`worker_lock`); among the Deployment's replicas, the holder of a Lease (`lease`). A problem (no RBAC, the API
server away) is logged once and tried again at the next poll.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Callable

from webhook.core.context import Context
from webhook.core.view.cluster_facts import GROUP, NAME, PLURAL, VERSION, facts_data, param

from . import client as kube
from .background import Poller, ProblemLog
from .lease import Lease
from .worker_lock import WorkerLock

log = logging.getLogger("ai_admission")
LOCK_FILE = "ai-admission-cluster-facts.lock"
UNSERVED_RETRY_SECONDS = 60.0  # a cluster without the native set: asked once a minute, not at every poll


class FactsWriter(Poller):
    """Every ``interval`` seconds: is this worker, and this replica, the writer; then the facts, where they
    changed. ``last_outcome`` says what the last poll did (for tests and the log)."""

    def __init__(self, context: Callable[[], Context], *, namespace: str, interval: float = 5.0,
                 lock_dir: str | None = None, client: Callable[[], Any] = kube.client,
                 identity: str | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__(name="cluster-facts", interval=interval, immediately=True)
        self._context = context
        self._lock = WorkerLock(LOCK_FILE, "the nodes' facts", lock_dir)
        self._client = client
        self._api: Any = None
        self._namespace = namespace
        self.collection = kube.collection(GROUP, VERSION, PLURAL, namespace)
        self.path = f"{self.collection}/{NAME}"
        identity = identity or f"{socket.gethostname()}_{os.getpid()}"  # the pod's name, and which worker
        self._lease = Lease(namespace, NAME, identity, duration=max(3 * interval, 15.0), clock=clock)
        self._problem = ProblemLog("the nodes' facts")
        self._clock = clock
        self._unserved_until = float("-inf")  # the kind was not served: asked again only after a while
        self.last_outcome = "not run"

    def poll(self) -> str:
        self.last_outcome = self._poll()
        return self.last_outcome

    def _poll(self) -> str:
        if not self._lock.held():
            return "another worker writes"
        if self._clock() < self._unserved_until:
            return "no parameter kind"
        data = facts_data(self._context())
        try:
            if self._api is None:
                self._api = self._client()
            current = kube.get(self._api, self.path)
            if current is None:
                return self._create(data)
            if not data:
                return "no facts yet"  # the node watch has not synced: what is there stays
            if not self._lease.held(self._api):
                return "another replica writes"
            if (current.get("data") or {}) == data:
                return "unchanged"
            kube.request(self._api, "PUT", self.path, body={**current, "data": data})
        except kube.KubeError as exc:
            self._problem(str(exc))
            return "failed"
        self._problem(None)
        log.info(json.dumps({"msg": "the nodes' facts written", "keys": len(data)}))
        return "written"

    def _create(self, data: dict[str, str]) -> str:
        try:
            kube.request(self._api, "POST", self.collection, body=param(self._namespace, data))
        except kube.KubeError as exc:
            if exc.status == 404:  # the kind is not served: the native set is not installed (asked again in a minute)
                self._unserved_until = self._clock() + UNSERVED_RETRY_SECONDS
                return "no parameter kind"
            if exc.status == 409:  # another replica created it first
                return "another replica writes"
            raise
        self._problem(None)
        log.info(json.dumps({"msg": "the nodes' facts created", "keys": len(data)}))
        return "created"
