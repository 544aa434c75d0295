"""With Kueue chosen as the scheduler backend, a real API server runs the mutating webhooks in the order Kueue needs:
ai-admission's configuration ("ai-admission-<route>") sorts before Kueue's ("kueue-mutating-webhook-configuration"),
so Kueue's webhook, which is not reinvoked, sees the queue label and the suspension on the owner it is sent.

Kueue's webhook is played by a recorder here: an HTTPS server, registered under Kueue's configuration name for the
same resources Kueue's manager registers (batch/v1 jobs, apps/v1 deployments, kubeflow.org/v1 pytorchjobs, at
CREATE; failurePolicy Fail, reinvocationPolicy Never, as Kueue's config/components/webhook/manifests.yaml has
them), that allows everything and keeps what it was sent. The owners are created with server-side dry run (the
whole admission chain, nothing stored). The server also watches the control plane's Kueue queues (their CRDs as
Kueue publishes them, read in place from ../shared/backend-crds; the module skips where that is absent), so a Job
naming a LocalQueue that does not exist is denied with the ones that do.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from certs import issue_to_files
from tests.conftest import RULES_FILE, Server, start_server, stop_server
from tests.support import backend_crds, owners
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.crds import crds
from tests.support.e2e_install import install, route_labels, uninstall
from webhook.config.rules_file import load_rules

pytestmark = [pytest.mark.e2e]

ROUTE = "kueue"
KUEUE_CONFIGURATION = "kueue-mutating-webhook-configuration"


class Recorder:
    """An admission webhook that allows every request and keeps the objects it was sent."""

    def __init__(self, tls: Path) -> None:
        issue_to_files(tls, names=["localhost", "127.0.0.1"])
        self.seen: list[dict[str, Any]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                recorder.seen.append(review["request"]["object"])
                body = json.dumps({"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                                   "response": {"uid": review["request"]["uid"], "allowed": True}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.ca = (tls / "ca.crt").read_bytes()
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.httpd.server_address[1]}"

    def configuration(self) -> dict[str, Any]:
        import base64

        def entry(name: str, group: str, version: str, resource: str) -> dict[str, Any]:
            return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "failurePolicy": "Fail", "reinvocationPolicy": "Never", "timeoutSeconds": 10,
                    "clientConfig": {"url": f"{self.url}/mutate-{resource}",
                                     "caBundle": base64.b64encode(self.ca).decode()},
                    "namespaceSelector": {"matchLabels": route_labels(ROUTE)},
                    "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE"],
                               "resources": [resource], "scope": "Namespaced"}]}

        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": KUEUE_CONFIGURATION},
                "webhooks": [entry("mjob.kb.io", "batch", "v1", "jobs"),
                             entry("mdeployment.kb.io", "apps", "v1", "deployments"),
                             entry("mpytorchjob.kb.io", "kubeflow.org", "v1", "pytorchjobs")]}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _apply(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def kueue_cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[ControlPlane, Server, Recorder]]:
    tmp = tmp_path_factory.mktemp("kueue-e2e")
    rules_file = tmp / "rules.yaml"
    rules_file.write_text(RULES_FILE.read_text().replace("\nscheduler:\n  backend: default\n",
                                                         "\nscheduler:\n  backend: kueue\n", 1))
    rules = load_rules(rules_file)
    if not backend_crds.PUBLISHED.is_dir():
        pytest.skip(f"{backend_crds.PUBLISHED} is absent: Kueue's published CRDs are read from there")
    _apply(control_plane, [*backend_crds.published(*backend_crds.KUEUE_PUBLISHED),
                           *crds([owners.course_pytorchjob()])])
    deadline = time.monotonic() + 30
    while control_plane.kubectl("get", "localqueues", "-A").returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    server = start_server(tmp, rules=rules_file, extra_env={"KUBECONFIG": str(control_plane.kubeconfig),
                                                            "AI_ADMISSION_WATCH_QUEUES": "true"})
    recorder = Recorder(tmp / "recorder-tls")
    try:
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=ROUTE)
        _apply(control_plane, [recorder.configuration()])
        yield control_plane, server, recorder
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", f"mutatingwebhookconfiguration/{KUEUE_CONFIGURATION}")
        uninstall(control_plane, ROUTE)
        recorder.stop()
        stop_server(server)


def _dry_run(plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> tuple[int, dict[str, Any] | None, str]:
    """Create ``obj`` in ``namespace`` with server-side dry run (kubectl refuses an object whose own namespace differs
    from ``-n``, so the fixture's is replaced)."""
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    done = plane.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj))
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else None), done.stderr


def _seen(recorder: Recorder, kind: str, name: str, seconds: float = 30) -> dict[str, Any]:
    """What Kueue's webhook was sent for the owner (it may take a moment for its configuration to be in force)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = [o for o in recorder.seen if o.get("kind") == kind and o["metadata"].get("name") == name]
        if found:
            return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"Kueue's webhook was not sent {kind} {name}")


def test_kueues_webhook_sees_the_queue_label_and_the_suspension(kueue_cluster: Any) -> None:
    plane, _, recorder = kueue_cluster
    namespace = plane.create_namespace(namespace_name("kueue-order"), route_labels(ROUTE))
    deadline = time.monotonic() + 30
    while True:  # until the recorder's configuration is in the API server's admission chain
        code, created, stderr = _dry_run(plane, namespace, owners.batch_job())
        assert code == 0, stderr
        if any(o.get("kind") == "Job" for o in recorder.seen) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    sent = _seen(recorder, "Job", "embed-corpus")
    assert sent["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "batch"
    assert sent["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "ai-batch"
    assert sent["spec"]["suspend"] is True
    assert created is not None and created["spec"]["suspend"] is True

    code, created, stderr = _dry_run(plane, namespace, owners.inference_deployment())
    assert code == 0, stderr
    sent = _seen(recorder, "Deployment", "vllm-llama-70b")
    assert sent["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "inference"

    code, created, stderr = _dry_run(plane, namespace, owners.course_pytorchjob())
    assert code == 0, stderr
    sent = _seen(recorder, "PyTorchJob", "resnet-train")
    assert sent["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"


def test_a_job_naming_a_queue_that_does_not_exist_is_denied(kueue_cluster: Any) -> None:
    plane, _, _ = kueue_cluster
    namespace = plane.create_namespace(namespace_name("kueue-queues"), route_labels(ROUTE))
    _apply(plane, [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "e2e-gpu"},
                    "spec": {"namespaceSelector": {}, "resourceGroups": [{
                        "coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "t4", "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}},
                   {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                    "metadata": {"name": "batch", "namespace": namespace}, "spec": {"clusterQueue": "e2e-gpu"}}])
    job = owners.batch_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "nightly"}
    deadline = time.monotonic() + 30
    while True:  # until the server's queue watch has seen them
        code, _, stderr = _dry_run(plane, namespace, job)
        if code != 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert code != 0
    assert f'kueue LocalQueue "nightly" does not exist in namespace "{namespace}"' in stderr
    assert "name one of: batch" in stderr
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "batch"}
    code, _, stderr = _dry_run(plane, namespace, job)
    assert code == 0, stderr
