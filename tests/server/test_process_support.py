"""The test support that starts servers (`tests.support.processes`) holds on a busy machine and leaves nothing
behind: a server that accepts a connection but answers its TLS handshake late is waited for, one that never
answers is stopped with every process it started, and a master that died first does not leave its workers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import requests

from certs import ensure_dev_certs
from tests.support import processes
from tests.support.control_plane import free_port

# A stand-in for a booting gunicorn: it listens at once, answers nothing for STALL seconds (connections wait in the
# backlog, their TLS handshakes unanswered), starts a worker process that never exits, then serves /healthz.
SERVER = textwrap.dedent("""
    import http.server, os, socket, ssl, subprocess, sys, time
    port, tls, stall, pidfile = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
    listener = socket.create_server(("127.0.0.1", port), backlog=16)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    open(pidfile, "w").write(str(worker.pid))
    time.sleep(stall)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *args): pass
    server = http.server.HTTPServer(("127.0.0.1", port), Health, bind_and_activate=False)
    server.socket = listener
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls + "/tls.crt", tls + "/tls.key")
    server.socket = context.wrap_socket(listener, server_side=True)
    server.serve_forever()
""")


def launch(tmp_path: Path, stall: float) -> tuple[subprocess.Popen[bytes], str, str, Path]:
    tls = ensure_dev_certs(tmp_path / "tls")
    port = free_port()
    pidfile = tmp_path / "worker.pid"
    process = processes.start_session([sys.executable, "-c", SERVER, str(port), str(tls), str(stall), str(pidfile)],
                                      log=tmp_path / "server.log")
    return process, f"https://127.0.0.1:{port}/healthz", str(tls / "ca.crt"), pidfile


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def worker_pid(pidfile: Path) -> int:
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the stand-in started no worker"
        time.sleep(0.05)
    return int(pidfile.read_text())


def test_a_server_that_answers_its_handshake_late_is_waited_for(tmp_path: Path) -> None:
    process, url, ca, pidfile = launch(tmp_path, stall=3.0)
    try:
        worker_pid(pidfile)
        with pytest.raises(requests.ReadTimeout):  # what a 2 s poll that retried only refusals met, and died of
            requests.get(url, verify=ca, timeout=0.5)
        answer = processes.wait_until_answering(process, url, verify=ca, log=tmp_path / "server.log", attempt=0.5)
        assert answer.status_code == 200 and answer.text == "ok"
    finally:
        processes.stop(process)


def test_a_server_that_never_answers_is_stopped_with_its_workers(tmp_path: Path) -> None:
    process, url, ca, pidfile = launch(tmp_path, stall=3600)
    worker = worker_pid(pidfile)
    with pytest.raises(processes.NotAnswering, match="did not answer within 2 s"):
        with processes.stopped_on_failure(process):
            processes.wait_until_answering(process, url, verify=ca, log=tmp_path / "server.log", timeout=2,
                                           attempt=0.5)
    assert process.poll() is not None
    deadline = time.monotonic() + 5
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker), "a worker outlived the server that started it"


def test_the_workers_of_a_master_that_died_first_are_stopped(tmp_path: Path) -> None:
    process, _, _, pidfile = launch(tmp_path, stall=3600)
    worker = worker_pid(pidfile)
    process.kill()  # the master gone at once, its worker orphaned
    process.wait()
    assert alive(worker)
    processes.stop(process)
    deadline = time.monotonic() + 5
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker)
