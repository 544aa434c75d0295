"""A small stand-in for the Kubernetes API server, for the commands that talk to one (no cluster runs here).

It speaks the real REST paths and JSON the kubernetes client uses, for the few resources ai-admission touches
(Secrets, PriorityClasses, webhook configurations), stores objects in memory and records every request, so
tests exercise the real client end to end.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

_COLLECTION = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/?]+))?")


class FakeKubeAPI:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.version = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
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

            def _handle(self) -> None:
                api.requests.append((self.command, self.path))
                match = _COLLECTION.match(self.path)
                if not match:
                    return self._send(404, {"kind": "Status", "code": 404, "message": "unknown path"})
                key = (match["plural"], match["ns"] or "", match["name"] or "")
                with threading.Lock():
                    if self.command == "GET" and not match["name"]:
                        items = [o for (p, ns, _), o in api.objects.items() if p == key[0] and ns == key[1]]
                        return self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})
                    if self.command == "GET":
                        found = api.objects.get(key)
                        if found is None:
                            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                    "reason": "NotFound", "code": 404, "message": "not found"})
                        return self._send(200, found)
                    if self.command in ("POST", "PUT"):
                        body = self._body()
                        name = body["metadata"]["name"]
                        api.version += 1
                        body["metadata"]["resourceVersion"] = str(api.version)
                        api.objects[(key[0], key[1], name)] = body
                        return self._send(201 if self.command == "POST" else 200, body)
                    if self.command == "PATCH":
                        patched = jsonpatch.apply_patch(api.objects[key], self._body())
                        api.objects[key] = patched
                        return self._send(200, patched)
                return self._send(405, {"kind": "Status", "code": 405})

            do_GET = do_POST = do_PUT = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, plural: str, obj: dict[str, Any], namespace: str = "") -> None:
        self.objects[(plural, namespace, obj["metadata"]["name"])] = obj

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    def __enter__(self) -> "FakeKubeAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
