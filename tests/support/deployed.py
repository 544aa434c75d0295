"""The webhook as `kubectl apply -k manifests/` deploys it, run here without a cluster.

The Deployment is taken from what kustomize renders (the base or an overlay), its container exactly: the image's
ENTRYPOINT, CMD and ENV from the Dockerfile's final stage, overridden by the container's command, args and env as
the kubelet does; its volumes laid out as the kubelet lays them out (a directory of keys, each a link into a
``..data`` version that an update swaps atomically); its named ports and its probes. What a test machine must
stand in for, and only that, is translated, each in one place below:

- the image's paths: ``/opt/ai-admission`` is this checkout's virtualenv (the image installs the same package
  there), and the working directory is an empty one (the image's is ``/``: no rules or certificates beside it);
- the mount paths: each volumeMount is a directory of the test's, and an env value that names a mount path names
  that directory instead (``/tmp``, an emptyDir, is ``TMPDIR``);
- the pod's network: the container port is a free loopback port (a pod has its own port space), and an env value
  ``host:containerPort`` says the free port;
- the downward API: ``fieldRef`` env (``metadata.namespace``: the Deployment's namespace as rendered);
- the API server: ``KUBERNETES_SERVICE_HOST``/``PORT`` as the kubelet sets them, pointing at the in-process
  stand-in (`tests.support.kubeapi`), and ``KUBECONFIG`` for the service-account token mount that a test cannot
  put at ``/var/run/secrets`` (the client tries the in-cluster configuration first, then that file).

Nothing else of the test process reaches the server's environment.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from certs import ensure_dev_certs
from tests.support import processes
from tests.support.control_plane import free_port
from tests.support.kubelet import KeyDir

ROOT = Path(__file__).resolve().parent.parent.parent
DOCKERFILE = ROOT / "Dockerfile"
IMAGE_PREFIX = "/opt/ai-admission"          # where the Dockerfile installs the package
IMAGE_BASE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"  # python:3.11-slim's PATH
PROBE_TIMEOUT_DEFAULT = 1                   # seconds, the kubelet's default timeoutSeconds


# -- the image ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Image:
    """The final stage of the Dockerfile: what a container of it starts with before the pod spec is applied."""

    env: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    workdir: str = "/"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        lines.append((word.upper(), rest.strip()))
    return lines


def _expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), ""), value)


def image(dockerfile: Path = DOCKERFILE) -> Image:
    """ENV, ENTRYPOINT, CMD and WORKDIR of the Dockerfile's last stage (exec form only, as this one writes them)."""
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions(dockerfile.read_text()):
        if instruction[0] == "FROM":
            stages.append([])
        elif stages:
            stages[-1].append(instruction)
    assert stages, f"{dockerfile}: no FROM"
    env = {"PATH": IMAGE_BASE_PATH}
    entrypoint: list[str] = []
    cmd: list[str] = []
    workdir = "/"
    for word, rest in stages[-1]:
        if word == "ENV":
            for token in shlex.split(rest):
                key, sep, value = token.partition("=")
                assert sep, f"ENV {rest!r}: only the KEY=VALUE form is read"
                env[key] = _expand(value, env)
        elif word in ("ENTRYPOINT", "CMD"):
            parsed = json.loads(rest)
            assert isinstance(parsed, list), f"{word} {rest!r}: only the exec form is read"
            if word == "ENTRYPOINT":
                entrypoint, cmd = parsed, []  # a new ENTRYPOINT resets CMD
            else:
                cmd = parsed
        elif word == "WORKDIR":
            workdir = rest
    return Image(env=env, entrypoint=entrypoint, cmd=cmd, workdir=workdir)


# -- the Deployment's container ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    path: str
    port: str | int
    scheme: str
    timeout: float
    period: float
    failure_threshold: int
    initial_delay: float


def _probe(spec: dict[str, Any] | None) -> Probe | None:
    if not spec:
        return None
    get = spec["httpGet"]
    return Probe(path=get.get("path", "/"), port=get["port"], scheme=get.get("scheme", "HTTP"),
                 timeout=float(spec.get("timeoutSeconds", PROBE_TIMEOUT_DEFAULT)),
                 period=float(spec.get("periodSeconds", 10)), failure_threshold=int(spec.get("failureThreshold", 3)),
                 initial_delay=float(spec.get("initialDelaySeconds", 0)))


@dataclass(frozen=True)
class Container:
    """The webhook container of a rendered Deployment, with the volumes its mounts name."""

    name: str
    command: list[str] | None
    args: list[str] | None
    env: list[dict[str, Any]]
    ports: dict[str, int]
    mounts: dict[str, dict[str, Any]]      # mountPath -> the pod's volume
    readiness: Probe | None
    liveness: Probe | None
    fields: dict[str, str]                  # the pod's own fields the downward API gives (metadata.namespace, ...)

    def port(self, port: str | int) -> int:
        return self.ports[port] if isinstance(port, str) else int(port)


def deployment_container(objects: list[dict[str, Any]], name: str = "ai-admission") -> Container:
    """The only container of the Deployment ``name`` among rendered ``objects``."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return Container(
        name=container["name"], command=container.get("command"), args=container.get("args"),
        env=list(container.get("env", [])),
        ports={p["name"]: int(p["containerPort"]) for p in container.get("ports", []) if p.get("name")},
        mounts={m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])},
        readiness=_probe(container.get("readinessProbe")), liveness=_probe(container.get("livenessProbe")),
        fields={"metadata.namespace": deployment["metadata"].get("namespace", "default"),
                "metadata.name": f"{name}-0"})


def argv(container: Container, base: Image) -> list[str]:
    """The kubelet's rule: command replaces ENTRYPOINT (and drops CMD), args replace CMD."""
    if container.command is not None:
        return [*container.command, *(container.args or [])]
    return [*base.entrypoint, *(container.args if container.args is not None else base.cmd)]


# -- one running pod ---------------------------------------------------------------------------------------------

@dataclass
class Pod:
    """The container started: its port on loopback, its mounted volumes (to rewrite), its log."""

    container: Container
    process: subprocess.Popen[bytes]
    port: int
    ca: str
    volumes: dict[str, KeyDir]              # mountPath -> the directory standing in for it
    log: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def probe(self, probe: Probe | None) -> requests.Response:
        """The probe as the kubelet sends it (HTTPS verified here against the CA, which the kubelet skips)."""
        assert probe is not None, "the Deployment declares no such probe"
        assert self.container.port(probe.port) in self.container.ports.values()
        scheme = probe.scheme.lower()
        return requests.get(f"{scheme}://127.0.0.1:{self.port}{probe.path}", verify=self.ca, timeout=probe.timeout)

    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        answer = requests.post(self.url + path, json=review, verify=self.ca, timeout=10)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["response"]["uid"] == review["request"]["uid"]
        return dict(body["response"])

    def readyz(self) -> dict[str, Any]:
        return dict(requests.get(self.url + "/readyz", verify=self.ca, timeout=5).json())

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        processes.stop(self.process, grace=30)


def _secret_keys(volume: dict[str, Any], tls: Path) -> dict[str, bytes]:
    """The TLS Secret as the certificate Job (or cert-manager) writes it: tls.crt, tls.key, ca.crt."""
    assert volume["secret"]["secretName"] == "ai-admission-tls", volume
    return {name: (tls / name).read_bytes() for name in ("tls.crt", "tls.key", "ca.crt")}


def start(container: Container, tmp: Path, *, kubeconfig: Path, api_port: int, rules: str,
          base: Image | None = None, timeout: float = processes.START_SECONDS) -> Pod:
    """Start ``container`` as the kubelet would, with ``rules`` as the rules ConfigMap's ``rules.yaml``; return
    once the process listens (readiness is the test's to wait for, by the probe)."""
    base = base or image()
    tls = ensure_dev_certs(tmp / "issued")
    volumes: dict[str, KeyDir] = {}
    paths: dict[str, Path] = {}
    for mount_path, volume in container.mounts.items():
        folder = tmp / "volumes" / volume["name"]
        folder.parent.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            assert volume["configMap"]["name"] == "ai-admission-rules", volume
            volumes[mount_path] = KeyDir(folder, {"rules.yaml": rules.encode()})
        elif "secret" in volume:
            volumes[mount_path] = KeyDir(folder, _secret_keys(volume, tls))
        elif "emptyDir" in volume:
            folder.mkdir()
        else:
            raise AssertionError(f"a volume kind this stand-in does not lay out: {volume}")
        paths[mount_path] = folder
    port = free_port()
    environment = _environment(container, base, paths, port, kubeconfig=kubeconfig, api_port=api_port)
    workdir = tmp / "workdir"
    workdir.mkdir()
    log = tmp / "pod.log"
    command = argv(container, base)
    executable = _resolve(command[0], environment["PATH"])
    process = processes.start_session([executable, *command[1:]], log=log, env=environment, cwd=workdir)
    pod = Pod(container=container, process=process, port=port, ca=str(tls / "ca.crt"), volumes=volumes, log=log)
    with processes.stopped_on_failure(process):
        processes.wait_until_answering(process, pod.url + "/healthz", verify=pod.ca, log=log, timeout=timeout)
    return pod


def _environment(container: Container, base: Image, paths: dict[str, Path], port: int, *, kubeconfig: Path,
                 api_port: int) -> dict[str, str]:
    env = dict(base.env)
    for variable in container.env:
        reference = variable.get("valueFrom")
        if reference is not None:  # the downward API, the only reference the Deployment uses
            path = (reference.get("fieldRef") or {}).get("fieldPath")
            assert path in container.fields, f"{variable['name']}: {reference} is not stood in for here"
            env[variable["name"]] = container.fields[path]
            continue
        env[variable["name"]] = _expand(str(variable.get("value", "")), env)
    venv = str(Path(sys.executable).parent.parent)
    translated: dict[str, str] = {}
    for key, value in env.items():
        # the mount paths first, on the value as the container sees it: the checkout that stands in for the image's
        # prefix may itself lie under a mount path (a clone in /tmp, where the pod mounts an emptyDir)
        for mount_path, folder in sorted(paths.items(), key=lambda item: -len(item[0])):
            if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
                value = str(folder) + value[len(mount_path.rstrip("/")):]
                break
        value = value.replace(IMAGE_PREFIX, venv)
        for container_port in container.ports.values():
            value = re.sub(rf"^([0-9.:\[\]a-z-]*):{container_port}$", rf"\g<1>:{port}", value)
        translated[key] = value
    if "/tmp" in paths:
        translated["TMPDIR"] = str(paths["/tmp"])
    translated.update({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api_port),
                       "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port), "HOSTNAME": "ai-admission-0",
                       "KUBECONFIG": str(kubeconfig)})
    return translated


def _resolve(program: str, path: str) -> str:
    if "/" in program:
        return program
    for folder in path.split(os.pathsep):
        candidate = Path(folder, program)
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise AssertionError(f"{program}: not on the container's PATH {path}")

