"""Starting and stopping the servers the tests run (gunicorn, the Deployment's container), so that a busy machine
does not fail a test and nothing started outlives it.

On a loaded 2-core machine a booting gunicorn accepts a connection and answers its TLS handshake late: a poll that
retries only a refused connection fails on the first read timeout, and leaves the server it started running. So:

- `wait_until_answering` polls with a generous per-attempt timeout and retries every transient error (refused,
  reset, TLS handshake or read timed out) until the process answers or the overall deadline passes; it raises at
  once where the process has exited;
- `start_session` starts a process in a session of its own, and `stop` stops the whole session: the master
  first, gently (gunicorn stops its workers), then every process left in it, for good; `stop_all` (at the end of
  the test session, and at exit) stops whatever was started and is still there;
- `stopped_on_failure` stops what was started when starting it fails, whatever the failure.

tests/server/test_process_support.py holds each of these to a server that answers late and one that never does.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, Sequence

import requests

ATTEMPT_SECONDS = 5.0  # one poll: a TLS handshake answered this late on a loaded machine is still an answer
START_SECONDS = 120.0  # the whole wait: a cold start with mypyc modules and two workers on a busy machine


_STARTED: list[subprocess.Popen[bytes]] = []  # every process started here, for `stop_all`


class NotAnswering(RuntimeError):
    """The process exited, or did not answer in time; the message ends with its log."""


def start_session(argv: Sequence[str], *, log: Path, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """``argv`` in a session (and process group) of its own, its output in ``log``."""
    process = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    _STARTED.append(process)
    return process


def wait_until_answering(process: subprocess.Popen[bytes], url: str, *, verify: str | bool, log: Path,
                         timeout: float = START_SECONDS, attempt: float = ATTEMPT_SECONDS) -> requests.Response:
    """The first answer of ``url`` (any HTTP status: the server is up and speaking), retrying every transient
    error; `NotAnswering` once ``process`` has exited or ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        if process.poll() is not None:
            raise NotAnswering(f"the process exited with {process.returncode}:\n{_text(log)}")
        try:
            return requests.get(url, verify=verify, timeout=min(attempt, max(deadline - time.monotonic(), 0.1)))
        except requests.RequestException as exc:  # refused, reset, handshake or read timed out: all transient here
            last = exc
        if time.monotonic() >= deadline:
            raise NotAnswering(f"{url} did not answer within {timeout:g} s (last: {last}):\n{_text(log)}")
        time.sleep(0.1)


def stop(process: subprocess.Popen[bytes], *, grace: float = 15.0) -> None:
    """Stop ``process`` and everything in its session: SIGTERM to it (a gunicorn master stops its workers), then
    SIGKILL to whatever of the session is left. Safe to call twice, and on a process already gone."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # workers orphaned by a master that died first


def stop_all() -> None:
    """Stop every process `start_session` started that is still running (the test session's end, and exit)."""
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            stop(process, grace=5.0)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)


atexit.register(stop_all)


@contextlib.contextmanager
def stopped_on_failure(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """The body waits for ``process``; whatever it raises (a failed wait, an interrupt), the process is stopped."""
    try:
        yield process
    except BaseException:
        stop(process)
        raise


def _text(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else "(no log)"
