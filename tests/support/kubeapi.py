"""A small stand-in for the Kubernetes API server, for the code that talks to one (no cluster runs here).

It speaks the real REST paths and JSON the kubernetes client uses, for the few resources ai-admission touches
(Secrets, PriorityClasses, Nodes, DRA claims, PolicyReports, webhook configurations, ConfigMaps, Leases): lists
(with a resourceVersion), gets, creates (409 for a name taken), replaces (409 for a stale resourceVersion, the API
server's optimistic concurrency), patches, deletes, and watches (``?watch=true``: the events since the
given resourceVersion, streamed as JSON lines until ``timeoutSeconds``, as the API server does; ``410 Gone`` for
a version older than it keeps). Objects live in memory and every request is recorded, so tests exercise the real
client end to end. A list or watch with a ``labelSelector`` of ``key=value`` pairs (or a bare ``key``: the label is
there) is filtered by it. ``discovery`` answers the API's discovery documents (``/apis/<group>``, ``/apis/<group>/
<version>``) a test gives; ``dropped`` removes, from what is created, the fields the API server drops for a
feature gate that is off; a ``dryRun=All`` create answers what would be stored and stores nothing.

`outage` takes it away for a while as a restarting API server goes away: the port refuses connections and every
open connection (a watch in particular) is cut; it comes back on the same port with the same objects.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import jsonpatch
import yaml

_COLLECTION = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>v[^/]+))(?:/namespaces/(?P<ns>[^/]+))?"
                         r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?$")
Key = tuple[str, str, str]  # (plural, namespace, name)


class FakeKubeAPI:
    def __init__(self, *, keep_events: int = 1000) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []   # (method, path without the query)
        self.queries: list[tuple[str, str]] = []    # (method, path with the query)
        self.version = 0
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, plural, type, object)
        self._keep = keep_events
        self._changed = threading.Condition()
        self.fail: dict[str, int] = {}  # plural -> status to answer its next list with (once)
        self.unserved: set[str] = set()  # plurals answered 404, as for a kind whose CRD is not installed
        self.unserved_versions: set[str] = set()  # "group/version"s answered 404, as for an older peer's CRDs
        self.discovery: dict[str, dict[str, Any]] = {}  # a discovery path -> its document
        self.dropped: dict[str, list[tuple[str, ...]]] = {}  # plural -> paths dropped from what is created
        api = self

        self._connections: set[socket.socket] = set()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # a watch is streamed in chunks, as the API server streams it

            def setup(self) -> None:
                super().setup()
                with api._changed:
                    api._connections.add(self.request)

            def finish(self) -> None:
                with api._changed:
                    api._connections.discard(self.request)
                with contextlib.suppress(OSError):
                    super().finish()

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length", 0))
                return json.loads(self.rfile.read(length)) if length else None

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                                  "code": code, "message": message})

            def _handle(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                api.requests.append((self.command, url.path))
                api.queries.append((self.command, self.path))
                if self.command == "GET" and url.path in api.discovery:
                    return self._send(200, api.discovery[url.path])
                match = _COLLECTION.match(url.path)
                if not match:
                    return self._status(404, "NotFound", "unknown path")
                plural, namespace, name = match["plural"], match["ns"] or "", match["name"] or ""
                if plural in api.unserved or f"{match['group']}/{match['version']}" in api.unserved_versions:
                    self._body()  # read, so that the connection's next request starts where it should
                    return self._status(404, "NotFound", "the server could not find the requested resource")
                if self.command == "GET" and not name:
                    failing = api.fail.pop(plural, None)
                    if failing:
                        return self._status(failing, "InternalError", "failing on purpose")
                    if query.get("watch") == "true":
                        return self._watch(plural, namespace, query)
                    with api._changed:
                        items = [copy.deepcopy(o) for (p, ns, _), o in sorted(api.objects.items())
                                 if p == plural and (not namespace or ns == namespace)]
                        items = [o for o in items if _selected(o, query.get("labelSelector"))]
                        version = str(api.version)
                    return self._send(200, {"kind": "List", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": version}, "items": items})
                key = (plural, namespace, name)
                if self.command == "GET":
                    found = api.objects.get(key)
                    if found is None:
                        return self._status(404, "NotFound", f"{plural} {name!r} not found")
                    return self._send(200, found)
                if self.command in ("POST", "PUT"):
                    body = self._body()
                    given = str((body.get("metadata") or {}).get("resourceVersion") or "")
                    with api._changed:  # the API server's optimistic concurrency
                        there = api.objects.get((plural, namespace or str(body["metadata"].get("namespace") or ""),
                                                 str(body["metadata"]["name"])))
                    if self.command == "POST" and there is not None:
                        return self._status(409, "AlreadyExists", f"{plural} {body['metadata']['name']!r} exists")
                    if self.command == "PUT" and there is not None and given and \
                            given != there["metadata"]["resourceVersion"]:
                        return self._status(409, "Conflict", "the object has been modified")
                    for path in api.dropped.get(plural, ()) if self.command == "POST" else ():
                        parent = body
                        for part in path[:-1]:
                            parent = parent.get(part) if isinstance(parent, dict) else None
                        if isinstance(parent, dict):
                            parent.pop(path[-1], None)
                    if query.get("dryRun") == "All":
                        return self._send(201, body)
                    stored = api.store(plural, body, namespace, created=self.command == "POST")
                    return self._send(201 if self.command == "POST" else 200, stored)
                if self.command == "PATCH":
                    if key not in api.objects:
                        return self._status(404, "NotFound", f"{plural} {name!r} not found")
                    patched = jsonpatch.apply_patch(api.objects[key], self._body())
                    return self._send(200, api.store(plural, patched, namespace))
                if self.command == "DELETE":
                    gone = api.delete(plural, name, namespace)
                    if gone is None:
                        return self._status(404, "NotFound", f"{plural} {name!r} not found")
                    return self._send(200, gone)
                return self._status(405, "MethodNotAllowed", self.command)

            def _watch(self, plural: str, namespace: str, query: dict[str, str]) -> None:
                since = int(query.get("resourceVersion") or 0)
                deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
                with api._changed:
                    oldest = api.events[0][0] if api.events else api.version + 1
                    if since and since + 1 < oldest and since < api.version:
                        gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                            "message": f"too old resource version: {since}"}}
                        events = [gone]
                    else:
                        events = []
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self._stream(events, since, deadline, plural, namespace, query)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:  # the client went away, or an outage cut the connection
                    self.close_connection = True

            def _stream(self, events: list[dict[str, Any]], since: int, deadline: float, plural: str,
                        namespace: str, query: dict[str, str]) -> None:
                for event in events:
                    self._line(event)
                if events:
                    return
                while time.monotonic() < deadline:
                    with api._changed:
                        fresh = [(v, t, o) for v, p, t, o in api.events if v > since and p == plural
                                 and (not namespace or (o.get("metadata") or {}).get("namespace") == namespace)
                                 and _selected(o, query.get("labelSelector"))]
                        if not fresh:
                            api._changed.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                            continue
                    for version, kind, obj in fresh:
                        self._line({"type": kind, "object": obj})
                        since = version

            def _line(self, event: dict[str, Any]) -> None:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self._handler = Handler
        self.server = self._listen(0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _listen(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), self._handler)
        server.daemon_threads = True
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # what the handler does, also for tests to change the cluster under a watch

    def store(self, plural: str, obj: dict[str, Any], namespace: str = "", *, created: bool | None = None
              ) -> dict[str, Any]:
        """Create or replace ``obj`` (a new resourceVersion, an ADDED or MODIFIED event)."""
        with self._changed:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            namespace = namespace or str(meta.get("namespace") or "")
            if namespace:
                meta["namespace"] = namespace
            key = (plural, namespace, str(meta["name"]))
            kind = "MODIFIED" if key in self.objects and not created else "ADDED"
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            self.objects[key] = obj
            self._event(plural, kind, obj)
            return copy.deepcopy(obj)

    def add(self, plural: str, obj: dict[str, Any], namespace: str = "") -> dict[str, Any]:
        return self.store(plural, obj, namespace)

    def delete(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._changed:
            gone = self.objects.pop((plural, namespace, name), None)
            if gone is not None:
                self.version += 1
                gone = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(self.version)}}
                self._event(plural, "DELETED", gone)
            return gone

    def _event(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((self.version, plural, kind, copy.deepcopy(obj)))
        del self.events[:-self._keep]
        self._changed.notify_all()

    def expire_events(self) -> None:
        """Forget every event so far: a watch from an older version gets ``410 Gone`` (and must list again)."""
        with self._changed:
            self.events.clear()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    def __enter__(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close()

    def _close(self) -> None:
        """Stop listening and cut every open connection (a streaming watch would otherwise go on)."""
        self.server.shutdown()
        self.server.server_close()
        with self._changed:
            connections, self._connections = list(self._connections), set()
            self._changed.notify_all()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """Gone for the body of the ``with``: connections refused, watches cut; then back on the same port."""
        port = self.server.server_address[1]
        self._close()
        try:
            yield
        finally:
            self.server = self._listen(port)
            self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            self.thread.start()


def _selected(obj: dict[str, Any], selector: str | None) -> bool:
    """``key=value`` and ``key`` (the label is there) terms, comma-separated (all ai-admission uses)."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        key, equals, value = term.partition("=")
        if key.strip() not in labels if not equals else labels.get(key.strip()) != value.strip():
            return False
    return True
