"""Nothing is lost under graceful faults while pods are created at concurrency through a real API server.

Eight threads create pods (``dryRun=All``: the whole admission chain, nothing stored) while the server's rules
change (once to a broken file), its certificate rotates, a worker is SIGTERMed, the master is SIGHUPed (every
worker replaced) and finally the master is SIGTERMed (a rolling update): every profiled pod must come back
mutated and every bare GPU pod denied. Under ``failurePolicy: Ignore`` a call that fails is a pod admitted
unchecked, so any reset connection or timed-out call shows up here as a pod with the wrong outcome.

Before the master owned the listening sockets (webhook.server.listeners), every SIGHUP or worker SIGTERM under this
load lost about one pod (connections queued on the stopping worker's own socket were reset). Faults are a few
seconds apart: a new worker needs a moment to boot on this busy machine, and faults that stop workers before
they have booted keep a slot without a server (calls wait, then time out after the webhook's 5 s).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from certs import issue_to_files
from tests.conftest import RULES_FILE, Server, start_server, stop_server
from tests.support.builders import ConfigMapDir
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.e2e_install import BARE_POD, PROFILED_POD, install, route_labels, uninstall
from tests.support.e2e_load import PodLoad
from webhook.core.rules import Rules

pytestmark = [pytest.mark.e2e]

DRAIN_SECONDS = 4
BOOT_SECONDS = 2.0  # after the old workers are gone, time for the new ones to import the app and load the rules


def _replaced(server: Server, stopped: set[int], count: int, *, seconds: float = 20) -> None:
    """Wait until the workers ``stopped`` are gone and ``count`` workers run, then for them to boot.

    ``stopped`` and ``count`` are read before the signal is sent: read after, they may already hold a worker the
    master started in their place (a SIGHUP spawns the new workers before it stops the old), which never stops.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = server.worker_pids()
        if not now & stopped and len(now) == count:
            time.sleep(BOOT_SECONDS)
            return
        time.sleep(0.05)
    raise AssertionError(f"workers {stopped} not replaced within {seconds} s: {server.worker_pids()}")


def _summary(load: PodLoad) -> str:
    counts = Counter((o.expected, o.detail[:80]) for o in load.failures())
    return f"{len(load.outcomes)} pods, wrong outcomes: {dict(counts)}"


def test_graceful_faults_lose_no_pod(control_plane: ControlPlane, rules: Rules, tmp_path: Path) -> None:
    config = ConfigMapDir(tmp_path / "rules", RULES_FILE.read_text())
    server = start_server(tmp_path, rules=config.root, extra_env={
        "AI_ADMISSION_RULES_CHECK_SECONDS": "0.3", "AI_ADMISSION_DRAIN_SECONDS": str(DRAIN_SECONDS)})
    try:
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route="faults")
        namespace = control_plane.create_namespace(namespace_name("faults"), route_labels("faults"))
        load = PodLoad(control_plane, namespace, [(PROFILED_POD, "mutated"), (BARE_POD, "denied")]).start()
        try:
            load.wait_for(200)
            # rules: a valid change (one more model alias), then a file that does not pass the schema
            config.update(RULES_FILE.read_text().replace("aliases: [l4]", "aliases: [l4, nvidia-l4]"))
            load.wait_for(200)
            config.update("version: 1\nclasses: not-a-map\n")
            issue_to_files(tmp_path / "tls", names=["localhost", "127.0.0.1"], renew_before=dt.timedelta(days=400))
            load.wait_for(200)
            workers = server.worker_pids()
            worker = min(workers)
            os.kill(worker, signal.SIGTERM)  # one worker, gracefully: the master starts another in its place
            _replaced(server, {worker}, len(workers))
            load.wait_for(200)
            workers = server.worker_pids()
            os.kill(server.process.pid, signal.SIGHUP)  # every worker replaced gracefully
            _replaced(server, workers, len(workers))
            load.wait_for(200)
            # the workers started after the file broke run the last good rules and say why
            assert all(server.get("/readyz").json()["rulesReloadError"].endswith(
                "(top level): 'defaultClass' is a required property") for _ in range(8))
            assert not load.failures(), _summary(load)

            # a rolling update: SIGTERM, and the API server still routes here for a while
            stopping = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            readiness = []
            while time.monotonic() - stopping < DRAIN_SECONDS - 1:
                readiness.append(requests.get(server.url + "/readyz", verify=server.ca, timeout=5))
                time.sleep(0.2)
            during_drain = [o for o in load.outcomes if o.at > stopping + 0.1]
        finally:
            load.stop()
        assert len(during_drain) > 50 and not load.failures(), _summary(load)
        assert {(r.status_code, r.json()["status"]) for r in readiness} == {(503, "draining")}
        server.process.wait(timeout=DRAIN_SECONDS + 15)
        log = server.log.read_text()
        assert log.count('"msg": "rules reloaded"') >= 2 and '"msg": "rules rejected' in log
        assert "Handling signal: hup" in log and '"msg": "draining: /readyz fails, still serving"' in log
        print(_summary(load))
    finally:
        uninstall(control_plane, "faults")
        stop_server(server)
