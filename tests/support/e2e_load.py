"""Pods created at concurrency through the real API server, each outcome judged: what a fault test and the
end-to-end benchmark send.

Pods are created with ``dryRun=All`` (the whole admission chain runs, both webhooks are called, nothing is
written to etcd), straight over HTTPS with a keep-alive session per thread, as a controller's client does:
kubectl would cost a process per pod.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import requests

from tests.support.control_plane import ControlPlane

PROFILE_ANNOTATION = "ai-admission.io/profile"
DENIED = "denied the request"


@dataclass(frozen=True)
class Outcome:
    at: float  # time.monotonic() when the answer came
    expected: str  # "mutated" or "denied"
    status: int
    seconds: float
    detail: str = ""

    @property
    def as_expected(self) -> bool:
        return not self.detail


def judge(expected: str, status: int, body: dict[str, Any]) -> str:
    """What is wrong with an answer ("" when it is the expected one; "any": any admission answer will do)."""
    if expected == "any":
        return "" if status in (201, 400, 403) else f"HTTP {status}: {body.get('message')}"
    if expected == "mutated":
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if status != 201:
            return f"HTTP {status}: {body.get('message')}"
        return "" if PROFILE_ANNOTATION in annotations else "admitted unmutated"
    if status == 201:
        return "admitted (not denied)"
    return "" if DENIED in str(body.get("message")) else f"HTTP {status}: {body.get('message')}"


def create_pod(session: requests.Session, plane: ControlPlane, namespace: str, pod: dict[str, Any], *,
               dry_run: bool = True) -> tuple[int, dict[str, Any]]:
    """POST one pod; (HTTP status, the answer's JSON)."""
    answer = session.post(f"{plane.url}/api/v1/namespaces/{namespace}/pods",
                          params={"dryRun": "All"} if dry_run else None, json=pod,
                          verify=str(plane.ca), timeout=30)  # verify= per call: REQUESTS_CA_BUNDLE wins otherwise
    return answer.status_code, answer.json()


@dataclass
class PodLoad:
    """``threads`` threads creating the pods of ``plan`` in turn (each entry: a pod and its expected outcome)
    until stopped; every outcome is kept."""

    plane: ControlPlane
    namespace: str
    plan: list[tuple[dict[str, Any], str]]
    threads: int = 8
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def _run(self, offset: int) -> None:
        session = requests.Session()
        session.headers.update(self.plane.auth_headers())
        index = offset
        while not self._stop.is_set():
            pod, expected = self.plan[index % len(self.plan)]
            index += 1
            started = time.monotonic()
            try:
                status, body = create_pod(session, self.plane, self.namespace, pod)
                detail = judge(expected, status, body)
            except (requests.RequestException, ValueError) as exc:
                status, detail = 0, f"{type(exc).__name__}: {exc}"
            now = time.monotonic()
            self.outcomes.append(Outcome(at=now, expected=expected, status=status, seconds=now - started,
                                         detail=detail))

    def start(self) -> PodLoad:
        self._workers = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.threads)]
        for worker in self._workers:
            worker.start()
        return self

    def stop(self) -> list[Outcome]:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=60)
        return self.outcomes

    def wait_for(self, count: int, *, seconds: float = 60) -> None:
        """Until ``count`` more outcomes have come in."""
        target = len(self.outcomes) + count
        deadline = time.monotonic() + seconds
        while len(self.outcomes) < target and time.monotonic() < deadline:
            time.sleep(0.02)

    def failures(self, since: float = 0.0, where: Callable[[Outcome], bool] = lambda o: True) -> list[Outcome]:
        return [o for o in self.outcomes if o.at >= since and not o.as_expected and where(o)]
