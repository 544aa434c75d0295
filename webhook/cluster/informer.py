"""The one list + watch loop: every background watch of the cluster (Nodes, DRA claims and claim templates,
PriorityClasses, PolicyReports) is an `Informer` over one collection, with the same backoff, status and metrics.

An informer lists the collection, hands the objects to its `Store`, then watches from the list's resourceVersion
and hands over each event, re-watching from the last version seen until ``resync`` seconds have passed, when it
lists again (which heals any event missed). A watch that ends with ``410 Gone`` (the version is older than the
API server keeps) lists again at once and is no error; any other failure (the network, a 403, no configuration)
keeps what is known, is recorded in the status (and told to the `Observer`, the server's metrics), and is retried
after a backoff that doubles from 1 s up to 30 s (never longer than ``resync``). One daemon thread per informer;
the request path only reads the store.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol, Self

from . import client as kube

log = logging.getLogger("ai_admission")
GONE = 410
NOT_FOUND = 404
BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
WATCH_SECONDS = 300  # one watch request at most this long (the API server ends it; the informer re-watches)

Lister = Callable[[str], "tuple[list[dict[str, Any]], str]"]             # path -> (items, resourceVersion)
Watcher = Callable[[str, str, float], "Iterator[dict[str, Any]]"]         # path, version, seconds -> events


@dataclass(frozen=True)
class Api:
    """The two calls an informer makes. Tests script them; `api_calls` makes them through the one client."""

    list: Lister
    watch: Watcher


def api_calls(kubeconfig: str | None = None, *, query: Mapping[str, str] | None = None) -> Api:
    """List and watch through `webhook.cluster.client`, as plain JSON (``query``: e.g. a labelSelector)."""
    api = kube.client(kubeconfig)
    extra = dict(query or {})

    def lister(path: str) -> tuple[list[dict[str, Any]], str]:
        return kube.list_items(api, path, **extra)

    def watcher(path: str, version: str, seconds: float) -> Iterator[dict[str, Any]]:
        return kube.watch(api, path, resource_version=version, timeout_seconds=max(1, int(seconds)), query=extra)

    return Api(lister, watcher)


class Store(Protocol):
    """Where an informer puts what it sees (a list replaces everything; events change one object)."""

    def replace(self, objects: list[dict[str, Any]]) -> None: ...

    def put(self, obj: dict[str, Any]) -> None: ...

    def remove(self, obj: dict[str, Any]) -> None: ...

    def __len__(self) -> int: ...


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ObjectStore:
    """The objects as last seen, by (namespace, name), each reduced by ``slim`` (what the reader needs)."""

    def __init__(self, slim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._slim = slim or (lambda obj: obj)
        self._on_change = on_change

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {object_key(obj): self._slim(obj) for obj in objects}
        self._changed()

    def put(self, obj: dict[str, Any]) -> None:
        self.objects[object_key(obj)] = self._slim(obj)
        self._changed()

    def remove(self, obj: dict[str, Any]) -> None:
        self.objects.pop(object_key(obj), None)
        self._changed()

    def __len__(self) -> int:
        return len(self.objects)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


class Observer(Protocol):
    """Told of every sync and failure of every informer (the server's metrics implement it)."""

    def synced(self, name: str, status: WatchStatus) -> None: ...

    def failed(self, name: str, status: WatchStatus) -> None: ...


@dataclass
class WatchStatus:
    """What `/readyz` shows of one informer."""

    synced: bool = False
    objects: int = 0
    resource_version: str | None = None
    error: str | None = None
    synced_at: float | None = None
    errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"synced": self.synced, "objects": self.objects, "resourceVersion": self.resource_version,
                "error": self.error, "syncedAt": self.synced_at}


class Gone(Exception):
    """The watch's resourceVersion is too old: list again, at once."""

    status = GONE


class WatchError(Exception):
    """The API server ended a watch with an ERROR event other than 410."""


@dataclass
class Informer:
    """List + watch of the collection at ``path`` into ``store``; see the module docstring."""

    name: str
    path: str
    store: Store
    api: Callable[[], Api]
    resync: float = 300.0
    observer: Observer | None = None
    status: WatchStatus = field(default_factory=WatchStatus)
    # the collection at older versions, tried in order where ``path`` answers 404 (a peer that serves an older
    # API); at each resync ``path`` is tried first again, so an upgraded peer is followed
    alternatives: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self._preferred = self.path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        calls: Api | None = None
        backoff = BACKOFF_START
        while not self._stop.is_set():
            try:
                calls = calls or self.api()
                self.sync(calls)
                backoff = BACKOFF_START
            except Exception as exc:  # noqa: BLE001 - the API, the network, configuration: keep what is known
                if getattr(exc, "status", None) == GONE:
                    continue
                self._failed(exc)
                self._stop.wait(min(backoff, self.resync))
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _list(self, calls: Api) -> tuple[list[dict[str, Any]], str]:
        """The list at the first of the paths the server serves (``path`` then the ``alternatives``); the watch
        follows it."""
        paths = (self._preferred, *self.alternatives)
        for index, path in enumerate(paths):
            try:
                found = calls.list(path)
            except Exception as exc:  # noqa: BLE001 - only a 404 with another path left is tried further
                if getattr(exc, "status", None) == NOT_FOUND and index + 1 < len(paths):
                    continue
                raise
            self.path = path
            return found
        raise AssertionError("unreachable: the last path's failure is raised")

    def sync(self, calls: Api) -> None:
        """One list, then watches from it until the resync is due (or the informer is stopped)."""
        items, version = self._list(calls)
        self.store.replace(items)
        status = self.status
        status.synced, status.objects, status.resource_version, status.error = True, len(self.store), version, None
        status.synced_at = time.time()
        if self.observer is not None:
            self.observer.synced(self.name, status)
        deadline = time.monotonic() + self.resync
        while not self._stop.is_set() and time.monotonic() < deadline:
            seconds = max(1.0, min(deadline - time.monotonic(), WATCH_SECONDS))
            started = time.monotonic()
            version = self._watch(calls, version, seconds, deadline)
            if time.monotonic() - started < 0.05:
                self._stop.wait(0.05)  # a watch the server ended at once: do not spin

    def _watch(self, calls: Api, version: str, seconds: float, deadline: float) -> str:
        for event in calls.watch(self.path, version, seconds):
            if self._stop.is_set():
                return version
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == GONE:
                    raise Gone(obj.get("message", ""))
                raise WatchError(f"watch {self.path}: {obj.get('code')} {obj.get('message', '')}".rstrip())
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            self.status.resource_version = version
            if kind in ("ADDED", "MODIFIED"):
                self.store.put(obj)
            elif kind == "DELETED":
                self.store.remove(obj)
            self.status.objects = len(self.store)
            if time.monotonic() > deadline:
                break
        return version

    def _failed(self, exc: BaseException) -> None:
        status = self.status
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if message != status.error:
            log.warning(json.dumps({"msg": "watch failed, what is known stays", "watch": self.name,
                                    "error": message}))
        status.error = message
        status.errors += 1
        if self.observer is not None:
            self.observer.failed(self.name, status)


class InformerGroup:
    """Several informers that feed one index (the DRA claims and classes, the backend's queue kinds): started,
    stopped and reported together, each under its kind's name in the status."""

    informers: dict[str, Informer]

    def start(self) -> Self:
        for informer in self.informers.values():
            informer.start()
        return self

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def status(self) -> dict[str, Any]:
        return {kind: informer.status.as_dict() for kind, informer in self.informers.items()}
