"""The test session starts the real webhook (gunicorn, TLS, the shipped config) once and talks HTTPS to it.

An internal error is a bug: the server admits the pod unchecked and says so in a warning, which a test that
asserts only ``allowed`` would pass. So every server started here is watched, and a test fails when a response
it received carries that warning, or a server's ``ai_admission_internal_errors_total`` grew while it ran
(`_no_internal_errors` below; a test that wants one says so with ``@pytest.mark.internal_errors``).

End-to-end tests (marker ``e2e``) also get a real etcd + kube-apiserver, started once per session and stopped at
its end (``control_plane``), the webhook installed into it as a cluster installs it (``webhook_installed``), and
a fresh namespace per test (``namespace``): tests stay apart by namespace, so no cluster state is torn down.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

import pytest
import requests

from certs import ensure_dev_certs
from tests.support import processes
from tests.support.control_plane import ControlPlane, MissingBinaries, find_binaries, free_port, namespace_name
from tests.support.e2e_install import install
from webhook.config.rules_file import load_rules
from webhook.core.rules import Rules
from webhook.server.app import INTERNAL_ERROR_WARNING

ROOT = Path(__file__).resolve().parent.parent
RULES_FILE = ROOT / "rules" / "default.yaml"


_INTERNAL_ERRORS_METRIC = re.compile(r"^ai_admission_internal_errors_total (\S+)$", re.MULTILINE)


@dataclass
class Server:
    """A running webhook: its base URL, the CA to verify it with, and the gunicorn master process.

    It collects evidence of internal errors for the guard that fails the test (`_no_internal_errors`):
    responses that carried the internal-error warning, and growth of the server's internal-error count.
    """

    url: str
    ca: str
    process: subprocess.Popen[bytes]
    log: Path
    problems: list[str] = field(default_factory=list)
    errors_seen: float = 0.0  # ai_admission_internal_errors_total when last read
    used: bool = False  # talked to since the count was last read

    def post(self, path: str, body: Any = None, *, data: bytes | None = None,
             headers: dict[str, str] | None = None, timeout: float = 10) -> requests.Response:
        # verify= on each call: REQUESTS_CA_BUNDLE would override a Session's verify.
        self.used = True
        if data is None:
            answer = requests.post(self.url + path, json=body, headers=headers, verify=self.ca, timeout=timeout)
        else:
            answer = requests.post(self.url + path, data=data, headers=headers, verify=self.ca, timeout=timeout)
        if answer.status_code == 200 and INTERNAL_ERROR_WARNING.encode() in answer.content:
            response = answer.json().get("response") or {}
            if any(INTERNAL_ERROR_WARNING in w for w in response.get("warnings") or []):
                self.problems.append(f"the response to uid {response.get('uid')} carried the internal-error warning")
        return answer

    def get(self, path: str) -> requests.Response:
        self.used = True
        return requests.get(self.url + path, verify=self.ca, timeout=10)

    def internal_error_count(self) -> float:
        """``ai_admission_internal_errors_total`` summed over the workers (counted at once, not batched)."""
        text = requests.get(self.url + "/metrics", verify=self.ca, timeout=10).text
        match = _INTERNAL_ERRORS_METRIC.search(text)
        return float(match.group(1)) if match else 0.0

    def collect(self) -> None:
        """Read the internal-error count if the server was used since the last read and still runs."""
        if not self.used or self.process.poll() is not None:
            return
        self.used = False
        try:
            count = self.internal_error_count()
        except requests.RequestException:
            return  # a server a test broke on purpose; that test says what it expects of it
        if count > self.errors_seen:
            self.problems.append(f"ai_admission_internal_errors_total grew from {self.errors_seen:g} to {count:g}")
        self.errors_seen = count

    def take_problems(self) -> list[str]:
        self.collect()
        found, self.problems = self.problems, []
        return found


    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        """POST a review, check the envelope, and return ``response``."""
        answer = self.post(path, review)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["apiVersion"] == review["apiVersion"]
        assert body["kind"] == "AdmissionReview"
        assert body["response"]["uid"] == review["request"]["uid"]
        return body["response"]

    def worker_pids(self) -> set[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return {int(pid) for pid in children}


# Every server started in this test session and not yet checked after being stopped (see `_no_internal_errors`).
SERVERS: list[Server] = []


def start_server(tmp: Path, *, rules: Path = RULES_FILE, extra_env: dict[str, str] | None = None) -> Server:
    """The shipped server (gunicorn, its config, TLS) on a free port, once it answers; stopped, with every worker,
    if it does not (`tests.support.processes`)."""
    tls = ensure_dev_certs(tmp / "tls")
    port = free_port()
    log = tmp / "gunicorn.log"
    env = {**os.environ, "PORT": str(port), "AI_ADMISSION_TLS_DIR": str(tls), "AI_ADMISSION_RULES": str(rules),
           # stopped at once: a test of draining on SIGTERM asks for it
           "AI_ADMISSION_CHECK_PRIORITY_CLASSES": "false", "AI_ADMISSION_NODE_CATALOG": "false",
           "AI_ADMISSION_DRAIN_SECONDS": "0", **(extra_env or {})}
    gunicorn = Path(sys.executable).with_name("gunicorn")
    process = processes.start_session([str(gunicorn), "-c", "python:webhook.server.gunicorn_conf"], log=log, env=env,
                                      cwd=ROOT)
    server = Server(url=f"https://127.0.0.1:{port}", ca=str(tls / "ca.crt"), process=process, log=log)
    with processes.stopped_on_failure(process):
        answer = processes.wait_until_answering(process, f"{server.url}/healthz", verify=server.ca, log=log)
        assert answer.status_code == 200, answer.text
    SERVERS.append(server)
    return server


def stop_server(server: Server) -> None:
    """Stop ``server`` and its workers; its internal-error count is read first, so the guard still sees it."""
    server.collect()
    processes.stop(server.process)


def eventually(check: Callable[[], Any], seconds: float = 30, step: float = 0.1) -> Any:
    """``check()``'s first truthy answer, asked every ``step`` seconds; the test fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(step)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("webhook"))
    yield running
    stop_server(running)


@pytest.fixture(scope="session")
def rules() -> Rules:
    return load_rules(RULES_FILE)


@pytest.fixture(scope="session")
def known(rules: Rules) -> str:
    """The NVIDIA models a message lists: the first eight of the catalog, and how many more."""
    nvidia = [m.name for m in rules.catalog.values() if m.vendor == "nvidia"]
    return ", ".join(nvidia[:8]) + f" and {len(nvidia) - 8} more"


@pytest.fixture(scope="session")
def base() -> list[dict[str, Any]]:
    """manifests/base as kustomize renders it (the installed objects)."""
    from tests.support.builders import render

    return render("manifests/base")


@pytest.fixture(autouse=True)
def _no_internal_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test when any webhook it talked to had an internal error (unless marked ``internal_errors``)."""
    for server in SERVERS:  # what an earlier test (or a session fixture's set-up) caused is not this test's
        server.take_problems()
    yield
    problems = []
    through_api_server = request.node.get_closest_marker("e2e") is not None
    for server in list(SERVERS):
        server.used = server.used or through_api_server  # the API server called it: read its count
        problems += [f"{server.url}: {p}" for p in server.take_problems()]
        if server.process.poll() is not None:
            SERVERS.remove(server)
    if problems and request.node.get_closest_marker("internal_errors") is None:
        pytest.fail("internal error in the webhook (a bug; its traceback is in the server log):\n"
                    + "\n".join(problems), pytrace=False)


FOLDER_MARKERS = {"unit": "unit", "server": "server", "e2e": "e2e", "packaging": "packaging"}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Whatever a test or fixture started and did not stop (it failed half-way, or was interrupted) is stopped
    here: no server outlives the run."""
    processes.stop_all()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What the offline comparison of the native set with the webhooks counted (tests/unit/test_native_parity.py)."""
    module = sys.modules.get("tests.unit.test_native_parity")
    lines = getattr(module, "REPORT", None) if module is not None else None
    if lines:
        terminalreporter.section("native parity")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked by the folder it is in (tests/unit, tests/server, tests/e2e, tests/packaging), so that
    ``-m unit`` (or ``pytest tests/unit``) selects the fast in-process tests (mutation testing runs those) and no
    test has to remember a line of its own. A test in tests/unit must not start a server or reach an API server:
    the fixtures that do refuse to (`_in_its_folder`)."""
    for item in items:
        parts = Path(str(item.path)).relative_to(ROOT / "tests").parts
        marker = FOLDER_MARKERS.get(parts[0]) if len(parts) > 1 else None
        if marker:
            item.add_marker(getattr(pytest.mark, marker))


SERVER_FIXTURES = {"server": ("server", "e2e"), "control_plane": ("e2e",), "webhook_installed": ("e2e",)}


@pytest.fixture(autouse=True)
def _in_its_folder(request: pytest.FixtureRequest) -> None:
    """A test that talks to a server or an API server lives in the folder that says so (its marker comes from
    there): a test in tests/unit that asks for the session's server fails, with where to move it."""
    where = Path(str(request.node.path)).relative_to(ROOT / "tests").parts[0]
    for fixture, folders in SERVER_FIXTURES.items():
        if fixture in request.fixturenames and where not in folders:
            pytest.fail(f"{request.node.nodeid} uses the {fixture} fixture: move it to tests/{folders[0]}",
                        pytrace=False)


@functools.cache
def e2e_unavailable() -> str | None:
    """Why the end-to-end tests cannot run here (one line), or None when they can."""
    try:
        find_binaries()
    except MissingBinaries as exc:
        return str(exc)
    if shutil.which("kubectl") is None:
        return "no kubectl on PATH: the end-to-end tests drive the API server with it"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Fold the e2e skips into one summary line: pytest reports a skip raised by a fixture at each test's own
    line, which lists the same reason once per test function."""
    report = yield
    reason = e2e_unavailable() if report.skipped and item.get_closest_marker("e2e") else None
    if reason and isinstance(report.longrepr, tuple) and reason in report.longrepr[2]:
        # no line number: pytest prints the file alone, as it does for a module-level skip
        report.longrepr = (__file__, None, report.longrepr[2])  # type: ignore[assignment]
    return report


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the whole session; skipped with one line where the binaries are missing.

    A missing binary is a machine that was not prepared (``make e2e-deps``), so the e2e tests skip; a control
    plane that is there but does not start is an error, with the tail of its logs.
    """
    reason = e2e_unavailable()
    if reason:
        pytest.skip(reason)
    with ControlPlane(find_binaries(), tmp_path_factory.mktemp("control-plane")) as plane:
        gpu_cluster_objects(plane)
        yield plane


def gpu_cluster_objects(plane: ControlPlane) -> None:
    """What every GPU cluster has before ai-admission is installed: the RuntimeClasses the GPU operator creates
    (the API server's RuntimeClass admission refuses a pod naming one that does not exist, before any webhook)."""
    classes = sorted(load_rules(RULES_FILE).bypasses.runtime_classes)
    assert classes
    done = plane.kubectl("apply", "-f", "-", input="\n---\n".join(
        f"apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {{name: {name}}}\nhandler: {name}\n"
        for name in classes))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def webhook_installed(control_plane: ControlPlane, server: Server, rules: Rules) -> ControlPlane:
    """The session's server registered for every namespace without a route label (see tests.support.e2e_install)."""
    install(control_plane, url=server.url, ca=Path(server.ca), rules=rules)
    return control_plane


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A fresh namespace named after the test."""
    return control_plane.create_namespace(namespace_name(request.node.name))
