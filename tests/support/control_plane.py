"""A real etcd + kube-apiserver (and, for the placement tests, a kube-scheduler) for end-to-end tests, the way
controller-runtime's envtest runs one.

No kubelet: pods are stored and stay Pending (or, with the scheduler, are bound to the simulated Node objects a
test creates), which is all an admission webhook needs to be observed through the real admission chain (built-in
plugins, webhook calls, reinvocation, dry-run, warnings) and its placement through the real scheduler. A test that
needs a controller (a Job's or a ReplicaSet's pods) starts the real kube-controller-manager
(`ControlPlane.start_controller_manager`). The binaries are found in this order, each one on its own:

1. ``$KUBEBUILDER_ASSETS`` (the envtest convention, so a developer's setup-envtest directory just works);
2. envtest's default directory, ``/usr/local/kubebuilder/bin``, so a machine that keeps them there needs no
   variable set;
3. ``PATH`` (Debian's ``etcd-server`` puts etcd in /usr/bin).

``python -m tests.support.control_plane --prepare`` says what the tests will use (``make e2e-deps``);
``--serve`` starts a control plane and prints its kubeconfig until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import itertools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs import create_ca, create_serving

ROOT = Path(__file__).resolve().parent.parent.parent
APISERVER = "kube-apiserver"
ETCD = "etcd"
SCHEDULER = "kube-scheduler"
CONTROLLER_MANAGER = "kube-controller-manager"
ENVTEST_DEFAULT = Path("/usr/local/kubebuilder/bin")
MISSING_HINT = "run `make e2e-deps` or set KUBEBUILDER_ASSETS"
START_TIMEOUT = 60.0


def free_port() -> int:
    """A loopback port free right now (envtest does the same; the tiny race has not mattered there either)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_names = itertools.count(1)


def namespace_name(hint: str) -> str:
    """A fresh DNS-label name saying which test made it: envtest's way of keeping tests apart without teardown."""
    slug = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-")[:40].strip("-") or "ns"
    return f"e2e-{slug}-{os.getpid() % 10000}-{next(_names)}"


# -- finding the binaries -------------------------------------------------------------------------------------

def _in_assets(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and os.access(Path(assets, name), os.X_OK):
        return Path(assets, name)
    return None


def _in_envtest_default(name: str) -> Path | None:
    path = ENVTEST_DEFAULT / name
    return path if os.access(path, os.X_OK) else None


def _on_path(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    etcd: Path
    scheduler: Path | None = None  # only the placement tests need one
    controller_manager: Path | None = None  # only the tests of controllers' pods need one


class MissingBinaries(RuntimeError):
    """What cannot be found, as one line a test skip can show."""


def find_binary(name: str) -> Path | None:
    return _in_assets(name) or _in_envtest_default(name) or _on_path(name)


def find_binaries() -> Binaries:
    apiserver, etcd = find_binary(APISERVER), find_binary(ETCD)
    missing = [name for name, path in ((APISERVER, apiserver), (ETCD, etcd)) if path is None]
    if missing or apiserver is None or etcd is None:
        raise MissingBinaries(f"no {'/'.join(missing)}: {MISSING_HINT}")
    return Binaries(apiserver=apiserver, etcd=etcd, scheduler=find_binary(SCHEDULER),
                    controller_manager=find_binary(CONTROLLER_MANAGER))


# -- processes -----------------------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGKILL the child when the test process dies, even by SIGKILL, where no atexit handler runs.

    SIGKILL, not SIGTERM: both children would get it at once, and a kube-apiserver whose etcd is gone hangs in
    its graceful shutdown for good (it ignores a second SIGTERM). Its data is a throwaway directory anyway.
    Linux sends it when the thread that started the child exits, so start control planes from the main thread
    (pytest's fixtures are).
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _without_proxies(env: dict[str, str]) -> dict[str, str]:
    """The API server would send webhook calls through an HTTPS_PROXY; the webhook is on loopback."""
    return {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text[-lines:])


class ControlPlaneError(RuntimeError):
    pass


@dataclass
class Component:
    """A running kube-scheduler or kube-controller-manager (`ControlPlane.start_scheduler`,
    `ControlPlane.start_controller_manager`)."""

    process: Any

    def stop(self) -> None:
        self.process.stop()

    def log(self) -> str:
        return _tail(self.process.log, 60)


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, grace: float = 10.0) -> None:
        """Terminate, then kill: a kube-apiserver that cannot finish its graceful shutdown ignores more SIGTERMs."""
        if self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=grace)


def _spawn(name: str, argv: Sequence[str], log: Path) -> _Process:
    with log.open("wb") as out:
        popen = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=_without_proxies(dict(os.environ)), preexec_fn=_die_with_parent)
    return _Process(name, popen, log)


# -- certificates and identity -------------------------------------------------------------------------------

def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


@dataclass(frozen=True)
class _Credentials:
    ca: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    tokens: Path
    token: str


def _credentials(folder: Path) -> _Credentials:
    """A CA, a serving certificate for the loopback names, a service-account key pair and an admin token.

    The admin is a static token in the group ``system:masters``: RBAC lets that group do everything, with no
    client certificate to make and no RBAC objects to create before the first request.
    """
    folder.mkdir(parents=True, exist_ok=True)
    ca = create_ca("ai-admission e2e control plane CA")
    serving = create_serving(ca, ["localhost", "127.0.0.1", "kubernetes", "kubernetes.default.svc"])
    sa_key = ec.generate_private_key(ec.SECP256R1())
    token = secrets.token_hex(24)
    return _Credentials(
        ca=_write(folder / "ca.crt", ca.cert_pem(), 0o644),
        serving_cert=_write(folder / "apiserver.crt", serving.cert_pem(), 0o644),
        serving_key=_write(folder / "apiserver.key", serving.key_pem()),
        sa_key=_write(folder / "sa.key", sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())),
        sa_pub=_write(folder / "sa.pub", sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644),
        tokens=_write(folder / "tokens.csv", f"{token},admin,admin-uid,system:masters\n".encode()),
        token=token,
    )


# -- the control plane ---------------------------------------------------------------------------------------

class ControlPlane:
    """etcd and kube-apiserver on free loopback ports, with a fresh data directory under ``workdir``.

    Use as a context manager (or ``start``/``stop``); the processes are also stopped at interpreter exit and,
    through PR_SET_PDEATHSIG, when the interpreter is killed.
    """

    def __init__(self, binaries: Binaries, workdir: Path, *, feature_gates: Mapping[str, bool] | None = None) -> None:
        self.binaries = binaries
        self.workdir = workdir
        # the same gates on the API server and on each component started for it, as a cluster sets them
        self.feature_gates = dict(feature_gates or {})
        self.kubeconfig = workdir / "kubeconfig"
        self.url = ""
        self.started_in = 0.0  # seconds from starting etcd to /readyz answering ok
        self._processes: list[_Process] = []
        self._creds: _Credentials | None = None

    # lifecycle

    def start(self, timeout: float = START_TIMEOUT) -> "ControlPlane":
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        creds = self._creds = _credentials(self.workdir / "pki")
        atexit.register(self.stop)
        try:
            etcd_url = self._start_etcd(deadline=began + timeout)
            port = free_port()
            self.url = f"https://127.0.0.1:{port}"
            self._processes.append(_spawn(APISERVER, [
                str(self.binaries.apiserver),
                "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--etcd-servers={etcd_url}",
                f"--client-ca-file={creds.ca}", f"--tls-cert-file={creds.serving_cert}",
                f"--tls-private-key-file={creds.serving_key}", f"--token-auth-file={creds.tokens}",
                f"--service-account-key-file={creds.sa_pub}", f"--service-account-signing-key-file={creds.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/12",
                # a loopback advertise address makes the endpoint reconciler log errors forever
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
                # no controller manager runs to create the service accounts this plugin insists on
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true", "--runtime-config=api/all=true", "--profiling=false",
                *self._gates(),
            ], self.workdir / "kube-apiserver.log"))
            self._wait_ready(deadline=began + timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        self._write_kubeconfig()
        return self

    def stop(self) -> None:
        """Stop the API server first (it would log etcd errors), then etcd. Safe to call twice."""
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        atexit.unregister(self.stop)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_etcd(self, *, deadline: float) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        process = _spawn(ETCD, [
            str(self.binaries.etcd), "--data-dir", str(self.workdir / "etcd"), "--name", "default",
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"default={peer_url}", "--logger", "zap", "--log-outputs", "stderr",
        ], self.workdir / "etcd.log")
        self._processes.append(process)
        self._poll(lambda: requests.get(f"{client_url}/health", timeout=2).json().get("health") == "true",
                   deadline=deadline, what="etcd /health")
        return client_url

    def _wait_ready(self, *, deadline: float) -> None:
        """``/readyz``, then the OpenAPI documents: /readyz answers ok before the OpenAPI controller has built them,
        and ``kubectl apply`` validates against them (on a busy machine the first apply met a 503)."""
        def answers(path: str) -> bool:
            answer = requests.get(f"{self.url}{path}", headers=self.auth_headers(), verify=str(self.ca), timeout=5)
            return answer.status_code == 200

        self._poll(lambda: answers("/readyz"), deadline=deadline, what="kube-apiserver /readyz")
        self._poll(lambda: answers("/openapi/v2"), deadline=deadline, what="kube-apiserver /openapi/v2")
        self._poll(lambda: answers("/openapi/v3"), deadline=deadline, what="kube-apiserver /openapi/v3")

    def _poll(self, check: Any, *, deadline: float, what: str) -> None:
        """Call ``check`` until it is true; on a dead process or the deadline, raise with the logs' tails."""
        last: object = None
        while True:
            for process in self._processes:
                if process.popen.poll() is not None:
                    raise ControlPlaneError(f"{process.name} exited with {process.popen.returncode} while waiting"
                                            f" for {what}\n{self._logs()}")
            try:
                if check():
                    return
            except (requests.RequestException, ValueError) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{what} not ok in time (last error: {last})\n{self._logs()}")
            time.sleep(0.1)

    def _logs(self) -> str:
        return "\n".join(f"--- last lines of {p.log}:\n{_tail(p.log)}" for p in self._processes)

    # access

    @property
    def ca(self) -> Path:
        assert self._creds is not None, "not started"
        return self._creds.ca

    def auth_headers(self) -> dict[str, str]:
        """The admin's bearer token, for talking to the API server over HTTPS directly."""
        assert self._creds is not None, "not started"
        return {"Authorization": f"Bearer {self._creds.token}"}

    def _write_kubeconfig(self) -> None:
        assert self._creds is not None
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "admin", "user": {"token": self._creds.token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
        }))
        self.kubeconfig.chmod(0o600)

    def _gates(self) -> list[str]:
        if not self.feature_gates:
            return []
        return ["--feature-gates=" + ",".join(f"{gate}={str(on).lower()}" for gate, on in sorted(self.feature_gates.items()))]

    def start_scheduler(self, binary: Path, *, timeout: float = START_TIMEOUT) -> Component:
        """A kube-scheduler for this control plane (default configuration, no leader election, no serving port):
        it binds pods to the Node objects tests create, and preempts as a cluster's scheduler does."""
        return self._start_component(SCHEDULER, [str(binary), f"--kubeconfig={self.kubeconfig}", "--leader-elect=false",
                                                 "--secure-port=0", "--v=2", *self._gates()],
                                     "Starting Kubernetes Scheduler",
                                     timeout=timeout)

    def start_controller_manager(self, binary: Path, *, controllers: Sequence[str] = (
            "job-controller", "replicaset-controller", "deployment-controller", "garbage-collector-controller"),
            timeout: float = START_TIMEOUT) -> Component:
        """A kube-controller-manager running only ``controllers`` (no leader election, no serving port): Jobs and
        ReplicaSets create their pods through the API server, so through the webhook, as in a cluster."""
        assert self._creds is not None, "not started"
        return self._start_component(CONTROLLER_MANAGER, [
            str(binary), f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--secure-port=0",
            f"--controllers={','.join(controllers)}", "--use-service-account-credentials=false",
            f"--service-account-private-key-file={self._creds.sa_key}", f"--root-ca-file={self._creds.ca}",
            "--v=2", *self._gates()], "Started controller", timeout=timeout)

    def _start_component(self, name: str, argv: list[str], started: str, *, timeout: float) -> Component:
        """Spawn a component; back once its log says ``started`` (else once it has stayed alive a few seconds)."""
        log = self.workdir / f"{name}-{len(self._processes)}-{next(_names)}.log"
        process = _spawn(name, argv, log)
        component = Component(process)
        settled = time.monotonic() + 5
        deadline = time.monotonic() + timeout
        while started not in _tail(log, 400) and time.monotonic() < settled:
            if process.popen.poll() is not None or time.monotonic() > deadline:
                component.stop()
                raise ControlPlaneError(f"{name} exited at start\n--- {log}:\n{_tail(log)}")
            time.sleep(0.1)
        return component

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The real kubectl against this control plane; never raises on a non-zero exit (tests read stderr)."""
        env = {**_without_proxies(dict(os.environ)), "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=input, env=env,
                              capture_output=True, text=True, timeout=timeout)

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this control plane, built from the same kubeconfig as kubectl."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create namespace ``name`` with ``labels`` (set at creation: webhooks select on them at once)."""
        from kubernetes import client

        with self.api_client() as api:
            client.CoreV1Api(api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels or None)))
        return name


@contextlib.contextmanager
def running(plane: ControlPlane, name: str) -> Iterator[Component]:
    """``name`` (kube-scheduler or kube-controller-manager) started for ``plane`` for the body of the ``with``; the
    test skips with one line where its binary is not found."""
    import pytest

    binary = find_binary(name)
    if binary is None:
        pytest.skip(f"no {name}: these tests need one ($KUBEBUILDER_ASSETS, {ENVTEST_DEFAULT} or PATH)")
    start = plane.start_scheduler if name == SCHEDULER else plane.start_controller_manager
    component = start(binary)
    try:
        yield component
    finally:
        component.stop()


# -- command line --------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.control_plane",
                                     description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--prepare", action="store_true",
                        help="say which binaries the end-to-end tests will use")
    action.add_argument("--serve", action="store_true", help="start a control plane, print its kubeconfig, wait")
    options = parser.parse_args(argv)
    try:
        binaries = find_binaries()
    except MissingBinaries as exc:  # the tests skip with the same line; not an error on a machine without them
        print(f"end-to-end tests will skip: {exc}", file=sys.stderr)
        return 0 if options.prepare else 1
    print(f"kube-apiserver: {binaries.apiserver}\netcd: {binaries.etcd}\nkube-scheduler: "
          f"{binaries.scheduler or 'none (the placement tests will skip)'}\nkube-controller-manager: "
          f"{binaries.controller_manager or 'none (the tests of controllers will skip)'}")
    if shutil.which("kubectl") is None:
        print("note: no kubectl on PATH; the end-to-end tests that use it will skip", file=sys.stderr)
    if options.serve:
        with ControlPlane(binaries, Path(tempfile.mkdtemp(prefix="ai-admission-e2e-"))) as plane:
            print(f"ready in {plane.started_in:.1f} s\nexport KUBECONFIG={plane.kubeconfig}\n(Ctrl-C stops it)",
                  flush=True)
            for signum in (signal.SIGINT, signal.SIGTERM):  # also when started in the background (SIGINT ignored)
                signal.signal(signum, lambda *_: sys.exit(0))
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
