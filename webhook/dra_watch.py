"""The cluster's ResourceClaimTemplates and ResourceClaims kept in memory, for pods that take GPUs through them.

A pod names its claims by template or claim name; what those ask for is in other objects, and the request path
makes no API call. So each worker keeps them as an informer does, one daemon thread per kind: list every
namespace's objects, watch from the list's resourceVersion, and list again when the watch ends (every
``resync`` seconds, which heals any event missed) or fails (a resourceVersion too old, a broken connection:
after a short pause). Only what the analysis reads is kept (`slim`). Until the first list has arrived, or for
a template created a moment before its pod, a claim is simply not known: the pod is admitted as if it took
none, and the template was judged at its own admission.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .cluster import api_client, enabled
from .dra import CLAIM, TEMPLATE, ClaimIndex

log = logging.getLogger("ai_admission")
WATCH_ENV = "AI_ADMISSION_WATCH_CLAIMS"          # "true", "false" or "auto" (in a cluster: on)
RESYNC_ENV = "AI_ADMISSION_CLAIMS_RESYNC_SECONDS"
RETRY_SECONDS = 5.0
GONE = 410  # the watch's resourceVersion is older than the API server keeps: list again at once


class Gone(Exception):
    status = GONE

# kind -> the typed client's list call for every namespace (ResourceV1Api)
_LISTS = {TEMPLATE: "list_resource_claim_template_for_all_namespaces",
          CLAIM: "list_resource_claim_for_all_namespaces"}


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The parts of a claim or template that ai-admission reads: names, annotations and spec (no status)."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "annotations", "resourceVersion") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept,
            "spec": obj.get("spec") or {}}


@dataclass
class KindState:
    synced: bool = False
    objects: int = 0
    resource_version: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"synced": self.synced, "objects": self.objects, "resourceVersion": self.resource_version,
                "error": self.error}


Lister = Callable[[str], tuple[list[dict[str, Any]], str]]
Watcher = Callable[[str, str, float], Iterator[dict[str, Any]]]


def _api_calls() -> tuple[Lister, Watcher]:
    """List and watch through the kubernetes client, as plain JSON (the analysis reads the API's own dicts)."""
    from kubernetes import client, watch

    api = client.ResourceV1Api(api_client())

    def lister(kind: str) -> tuple[list[dict[str, Any]], str]:
        answer = getattr(api, _LISTS[kind])(_preload_content=False, _request_timeout=30)
        body = json.loads(answer.data)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion") or ""

    def watcher(kind: str, resource_version: str, seconds: float) -> Iterator[dict[str, Any]]:
        stream = watch.Watch().stream(getattr(api, _LISTS[kind]), resource_version=resource_version,
                                      timeout_seconds=max(1, int(seconds)), allow_watch_bookmarks=True,
                                      deserialize=False, _request_timeout=(10, seconds + 30))
        yield from stream

    return lister, watcher


class ClaimWatch:
    """List + watch of ResourceClaimTemplates and ResourceClaims into ``index``, one daemon thread per kind."""

    def __init__(self, index: ClaimIndex | None = None, *, resync: float = 300.0,
                 calls: Callable[[], tuple[Lister, Watcher]] = _api_calls) -> None:
        self.index = index or ClaimIndex()
        self.resync = resync
        self._calls = calls
        self._stop = threading.Event()
        self.states = {kind: KindState() for kind in _LISTS}
        self._threads = [threading.Thread(target=self._run, args=(kind,), name=f"watch-{kind}", daemon=True)
                         for kind in _LISTS]

    def start(self) -> ClaimWatch:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def status(self) -> dict[str, Any]:
        return {kind: state.as_dict() for kind, state in self.states.items()}

    def _run(self, kind: str) -> None:
        try:
            lister, watcher = self._calls()
        except Exception as exc:  # noqa: BLE001 - no configuration: say so in /readyz, serve without claims
            self._failed(kind, exc)
            return
        while not self._stop.is_set():
            try:
                self._sync(kind, lister, watcher)
            except Exception as exc:  # noqa: BLE001 - an API hiccup: keep what is known, list again shortly
                if getattr(exc, "status", None) == GONE:  # the client raises ApiException(status=410) for it
                    continue
                self._failed(kind, exc)
                self._stop.wait(min(RETRY_SECONDS, self.resync))

    def _failed(self, kind: str, exc: Exception) -> None:
        state = self.states[kind]
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if message != state.error:
            log.warning(json.dumps({"msg": "claim watch failed", "kind": kind, "error": message}))
        state.error = message

    def _sync(self, kind: str, lister: Lister, watcher: Watcher) -> None:
        """One list, then the watch from it until it ends (after ``resync`` seconds at the latest)."""
        state = self.states[kind]
        items, version = lister(kind)
        self.index.replace(kind, [slim(item) for item in items])
        state.synced, state.objects, state.resource_version, state.error = True, len(items), version, None
        ends = time.monotonic() + self.resync
        for event in watcher(kind, version, self.resync):
            if self._stop.is_set():
                return
            kind_of_event, obj = event.get("type"), event.get("object") or {}
            if kind_of_event == "ERROR":
                if obj.get("code") == GONE:
                    raise Gone(obj.get("message", ""))
                raise RuntimeError(f"watch error: {obj.get('code')} {obj.get('message', '')}")
            if kind_of_event in ("ADDED", "MODIFIED"):
                self.index.put(kind, slim(obj))
            elif kind_of_event == "DELETED":
                self.index.remove(kind, obj)
            state.objects = len(self.index.objects[kind])
            state.resource_version = (obj.get("metadata") or {}).get("resourceVersion") or state.resource_version
            if time.monotonic() > ends:
                return


def watch_from_environment(index: ClaimIndex | None = None) -> ClaimWatch | None:
    """Started when ``AI_ADMISSION_WATCH_CLAIMS`` is true, or "auto" (default) inside a cluster."""
    if not enabled(WATCH_ENV):
        return None
    return ClaimWatch(index, resync=float(os.environ.get(RESYNC_ENV, "300"))).start()
