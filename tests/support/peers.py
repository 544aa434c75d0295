"""The peers ai-admission stands in front of, run for real: Kueue's, JobSet's and LeaderWorkerSet's controller
managers, out of cluster against a test's control plane, with their admission webhooks registered by URL under the
names a real install gives them.

A machine that has a peer keeps it as it keeps the Kubernetes binaries (tests/support/control_plane.py): in
``$KUBEBUILDER_ASSETS/peers/<peer>/`` or envtest's ``/usr/local/kubebuilder/peers/<peer>/``, its manager binary
(``manager``) and its install manifest (``install.yaml``: what ``kubectl kustomize config/default`` of its source
renders, so its CRDs and its webhook configurations as a release names them). None of it is in the repository or
built by it; a test that needs a peer the machine lacks skips with one line saying which.

What a peer needs out of cluster, found by running them (docs/contributors/testing.md): leader election off, its
internal certificate management off (it would look for its Secret and patch its webhook configurations in the
cluster), health, metrics and webhook servers on loopback with a serving certificate of our CA; Kueue also a
``kueue-system`` namespace and, with its certificate management off, the metrics certificate at a fixed path
(``/etc/kueue/metrics/certs``: it stops at start without it, metrics on or off). Its webhook configurations are
registered only once its webhook server answers (their ``failurePolicy`` is ``Fail``), and removed before it stops.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from certs import ensure_dev_certs
from tests.support.control_plane import ENVTEST_DEFAULT, ControlPlane

PEERS = ("kueue", "jobset", "lws")
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# the integrations Kueue's shipped configuration turns on (config/components/manager/controller_manager_config.yaml)
KUEUE_FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/raycluster", "jobset.x-k8s.io/jobset",
                    "kubeflow.org/paddlejob", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
                    "kubeflow.org/jaxjob", "workload.codeflare.dev/appwrapper")
CONFIG_API = {"kueue": "config.kueue.x-k8s.io/v1beta1", "jobset": "config.jobset.x-k8s.io/v1alpha1",
              "lws": "config.lws.x-k8s.io/v1alpha1"}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class PeerInstall:
    name: str
    manager: Path
    manifest: Path

    def documents(self) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.manifest.read_text()) if isinstance(d, dict)]

    def crds(self) -> list[dict[str, Any]]:
        return [d for d in self.documents() if d.get("kind") == "CustomResourceDefinition"]

    def webhooks(self, url: str, ca: bytes) -> list[dict[str, Any]]:
        """The peer's webhook configurations as its install names them, each ``clientConfig.service`` turned
        into ``url`` + the path it named, with ``ca`` as the bundle."""
        found = []
        bundle = base64.b64encode(ca).decode()
        for document in self.documents():
            if document.get("kind") not in WEBHOOK_KINDS:
                continue
            document["metadata"] = {"name": document["metadata"]["name"],
                                    "labels": dict(document["metadata"].get("labels") or {})}
            for hook in document.get("webhooks") or []:
                service = (hook.get("clientConfig") or {}).get("service") or {}
                hook["clientConfig"] = {"url": f"{url}{service.get('path', '/')}", "caBundle": bundle}
            found.append(document)
        return found


def _places() -> list[Path]:
    places = [Path(os.environ["KUBEBUILDER_ASSETS"]) / "peers"] if os.environ.get("KUBEBUILDER_ASSETS") else []
    return [*places, ENVTEST_DEFAULT.parent / "peers"]


def find_peer(name: str) -> PeerInstall | None:
    for place in _places():
        manager, manifest = place / name / "manager", place / name / "install.yaml"
        if os.access(manager, os.X_OK) and manifest.is_file():
            return PeerInstall(name, manager, manifest)
    return None


def unavailable(names: Iterable[str]) -> str | None:
    """One line naming the peers the machine lacks (None: it has them all)."""
    missing = [n for n in names if find_peer(n) is None]
    if not missing:
        return None
    where = " or ".join(str(p) for p in _places())
    return f"no {', '.join(missing)} peer (its manager and install.yaml under {where}/<peer>/)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str, context: ssl.SSLContext | None = None) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as answer:  # noqa: S310 - loopback only
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


class Peer:
    """One peer's manager against ``plane``: `start` installs its CRDs, starts it, waits for it and registers its
    webhooks; `stop` removes them and ends it."""

    def __init__(self, install: PeerInstall, plane: ControlPlane, workdir: Path, *,
                 feature_gates: dict[str, bool] | None = None) -> None:
        self.install = install
        self.plane = plane
        self.workdir = workdir
        self.feature_gates = dict(feature_gates or {})
        self.webhook_port, self.health_port, self.metrics_port = _free_port(), _free_port(), _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.registered: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return self.install.name

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def config(self, certs: Path) -> dict[str, Any]:
        config: dict[str, Any] = {
            "apiVersion": CONFIG_API[self.name], "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False}}
        if self.name == "jobset":
            config["metrics"]["certDir"] = str(certs)
        if self.name == "kueue":
            config.update(namespace="kueue-system", clientConnection={"qps": 50, "burst": 100},
                          featureGates={"VisibilityOnDemand": False, **self.feature_gates},
                          integrations={"frameworks": list(KUEUE_FRAMEWORKS)})
        return config

    def start(self, timeout: float = 90) -> Peer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = ensure_dev_certs(self.workdir / "certs")
        config = self.workdir / f"{self.name}-config.yaml"
        config.write_text(yaml.safe_dump(self.config(certs)))
        if self.name == "kueue":
            KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                shutil.copy(certs / name, KUEUE_METRICS_CERTS / name)
            self.plane.kubectl("create", "namespace", "kueue-system")
        crds = yaml.safe_dump_all(self.install.crds())
        done = self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)
        assert done.returncode == 0, done.stderr
        self._established([c["metadata"]["name"] for c in self.install.crds()], timeout)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.install.manager), f"--config={config}", f"--kubeconfig={self.plane.kubeconfig}",
                 "--zap-log-level=2"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} manager exited ({self.process.returncode}): "
                                   f"{self.log.read_text()[-2000:]}")
            # its readiness, and its webhook server answering TLS with our CA (LWS's /readyz is a plain ping)
            if _status(f"http://127.0.0.1:{self.health_port}/readyz") == 200 and \
                    _status(f"https://127.0.0.1:{self.webhook_port}/", context) is not None:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} manager not ready in {timeout:.0f} s: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.registered = self.install.webhooks(f"https://127.0.0.1:{self.webhook_port}",
                                                (certs / "ca.crt").read_bytes())
        done = self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                                  input=yaml.safe_dump_all(self.registered))
        assert done.returncode == 0, done.stderr
        return self

    def _established(self, names: list[str], timeout: float) -> None:
        """Until every CRD of ``names`` is Established (kubectl wait fails on one whose status is not there yet)."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.plane.kubectl("get", "crd", *names, "-o", "json")
            found = json.loads(done.stdout) if done.returncode == 0 else {}
            items = found.get("items", [found] if found else [])  # one name: the object itself
            if len(items) == len(names) and all(
                    any(c.get("type") == "Established" and c.get("status") == "True"
                        for c in (item.get("status") or {}).get("conditions") or []) for item in items):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}'s CRDs not established in {timeout:.0f} s: {done.stderr}")
            time.sleep(0.2)

    def stop(self) -> None:
        for document in self.registered:  # first: their failurePolicy is Fail
            self.plane.kubectl("delete", document["kind"], document["metadata"]["name"], "--ignore-not-found",
                               "--wait=false")
        self.registered = []
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
