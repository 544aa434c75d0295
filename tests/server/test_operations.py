"""Operations: metrics over all workers, readiness, rules hot reload and a soak with reload and rotation."""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from certs import issue_to_files
from tests.conftest import RULES_FILE, Server, start_server, stop_server
from tests.support.builders import ConfigMapDir
from tests.support.metrics import metric, settled
from tests.support.reviews import admission_review

BARE = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "bare-", "namespace": "ml-team"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}








def with_mode(mode: str) -> str:
    document = yaml.safe_load(RULES_FILE.read_text())
    document["modes"]["default"] = mode
    return yaml.safe_dump(document)


def test_metrics_count_every_worker(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    server = start_server(tmp_path, extra_env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)})
    try:
        # several connections, so both workers get some (SO_REUSEPORT picks by port hash: with 6, all landed on one
        # worker in about 3% of runs; with 12, about 1 in 2000)
        sessions = [requests.Session() for _ in range(12)]
        for index in range(60):
            review = admission_review(BARE)
            answer = sessions[index % 12].post(server.url + "/validate", json=review, verify=server.ca, timeout=10)
            assert answer.status_code == 200
        sessions[0].post(server.url + "/validate", data=b"{", headers={"Content-Type": "application/json"},
                         verify=server.ca, timeout=10)
        # Each worker adds its queued counts within batching.INTERVAL (and at once when it serves /metrics).
        text = settled(server, lambda t: metric(t, "ai_admission_requests_total", endpoint="validate") >= 60)
        assert metric(text, "ai_admission_requests_total", endpoint="validate", verdict="denied",
                      workload="batch") == 60
        assert metric(text, "ai_admission_denials_total", reason="gpu-model-missing", mode="deny") == 60
        assert metric(text, "ai_admission_bad_requests_total", status="400") == 1
        assert metric(text, "ai_admission_request_duration_seconds_count", endpoint="validate") == 60
        assert metric(text, "ai_admission_rules_generation") == 1
        cert = (tmp_path / "tls" / "tls.crt").read_bytes()
        from cryptography import x509
        expiry = x509.load_pem_x509_certificate(cert).not_valid_after_utc.timestamp()
        assert metric(text, "ai_admission_certificate_expiry_timestamp_seconds") == pytest.approx(expiry, abs=1)
        writers = {f.stem.rpartition("_")[2] for f in metrics_dir.glob("counter_*.db")}
        assert writers == {str(pid) for pid in server.worker_pids()}, "both workers counted requests"
        scrapes = [requests.get(server.url + "/metrics", verify=server.ca, timeout=10).text for _ in range(6)]
        assert {metric(t, "ai_admission_denials_total", reason="gpu-model-missing") for t in scrapes} == {60}
    finally:
        stop_server(server)


def test_hot_reload_and_soak_with_rotation(tmp_path: Path) -> None:
    """Thousands of requests while the rules change twice (once to a broken file) and the certificate rotates."""
    config = ConfigMapDir(tmp_path / "rules", with_mode("deny"))
    server = start_server(tmp_path, rules=config.root, extra_env={"AI_ADMISSION_RULES_CHECK_SECONDS": "0.3"})
    failures: list[str] = []
    verdicts: list[tuple[float, bool]] = []
    stop = threading.Event()

    def hammer() -> None:
        session = requests.Session()
        while not stop.is_set():
            review = admission_review(BARE)
            try:
                answer = session.post(server.url + "/validate", json=review, verify=server.ca, timeout=10)
                body = answer.json()
                if answer.status_code != 200 or body["response"]["uid"] != review["request"]["uid"]:
                    failures.append(answer.text)
                verdicts.append((time.monotonic(), body["response"]["allowed"]))
            except (requests.RequestException, ValueError, KeyError) as exc:
                failures.append(repr(exc))

    def all_allowed_since(moment: float) -> bool:
        recent = [allowed for at, allowed in verdicts if at > moment]
        return len(recent) > 20 and all(recent[-20:])

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1)
        assert verdicts and not any(allowed for _, allowed in verdicts[-10:]), "deny mode denies the bare pod"

        changed = time.monotonic()
        config.update(with_mode("warn"))
        deadline = time.monotonic() + 15
        while not all_allowed_since(changed):
            assert time.monotonic() < deadline, "warn mode not picked up"
            time.sleep(0.2)

        config.update("version: 1\nclasses: not-a-map\n")
        issue_to_files(tmp_path / "tls", names=["localhost", "127.0.0.1"], renew_before=dt.timedelta(days=400))
        time.sleep(3)
        assert all_allowed_since(time.monotonic() - 1.5), "the last good rules (warn) stay in force"
        stop.set()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(verdicts) > 1000
        text = server.get("/metrics").text
        assert metric(text, "ai_admission_rules_reload_errors_total") >= 2  # each worker rejected it
        assert metric(text, "ai_admission_rules_generation") == 2
        ready = server.get("/readyz").json()
        assert ready["rulesReloadError"].endswith("rules.yaml: (top level): 'defaultClass' is a required property")
        log = server.log.read_text()
        assert '"msg": "rules reloaded"' in log and '"msg": "rules rejected, keeping the previous rules"' in log
        assert "Worker exiting" not in log and "Traceback" not in log
    finally:
        stop.set()
        stop_server(server)


def test_request_fields_cannot_create_metric_series(server: Server) -> None:
    review = admission_review({"metadata": {"name": "x"}}, kind="Kind-" + "x" * 40, operation="EXPLODE")
    assert server.review("/validate", review)["allowed"] is True
    text = settled(server, lambda t: metric(t, "ai_admission_requests_total", operation="other", kind="other") >= 1)
    assert "Kind-xxxx" not in text and "EXPLODE" not in text
    assert metric(text, "ai_admission_requests_total", operation="other", kind="other") >= 1


def admission_lines(server: Server, uid: str, seconds: float = 5) -> list[dict]:
    """The admission log lines for ``uid`` (written in batches, see webhook.logs).

    Only complete lines: a read that meets a worker's write in progress sees the start of it, the last line cut.
    """
    deadline = time.monotonic() + seconds
    while True:
        text = server.log.read_text()
        lines = [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()
                 if line.startswith('{"msg":"admission"') and uid in line]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def test_one_structured_log_line_per_admission_and_never_the_pod(server: Server) -> None:
    denied = admission_review(BARE, dry_run=True)
    assert server.review("/validate", denied)["allowed"] is False
    mutated = admission_review({**BARE, "metadata": {**BARE["metadata"],
                                                     "annotations": {"ai-admission.io/gpu-memory": "20Gi"}}})
    patch_ops = len(json.loads(base64.b64decode(server.review("/mutate", mutated)["patch"])))

    [line] = admission_lines(server, denied["request"]["uid"])
    assert line == {"msg": "admission", "uid": denied["request"]["uid"], "endpoint": "validate",
                    "operation": "CREATE", "kind": "Pod", "namespace": "ml-team", "name": "bare-", "dryRun": True,
                    "class": "batch", "allowed": False, "mode": "deny",
                    "reasons": ["gpu-model-missing", "gpu-memory-missing", "host-memory-request-missing"],
                    "patchOps": 0,
                    "durationMs": line["durationMs"]}
    assert 0 < line["durationMs"] < 1000
    [line] = admission_lines(server, mutated["request"]["uid"])
    assert (line["endpoint"], line["allowed"], line["dryRun"], line["patchOps"]) == ("mutate", True, False, patch_ops)
    assert patch_ops > 3
    log = server.log.read_text()
    assert '"containers"' not in log and "nvidia.com/gpu" not in log, "the pod itself is never logged"


def test_the_server_removes_its_temporary_directories_when_it_exits(tmp_path: Path) -> None:
    """The master makes a metrics directory, a drain-flag directory and a last-good-rules directory under $TMPDIR;
    a stop removes them (before, every start left three behind)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    running = start_server(tmp_path, extra_env={"TMPDIR": str(scratch)})
    made = sorted(p.name.rsplit("-", 1)[0] for p in scratch.iterdir())
    assert made == ["ai-admission-drain", "ai-admission-metrics", "ai-admission-rules"]
    assert running.get("/healthz").status_code == 200
    stop_server(running)
    assert running.process.returncode == 0
    assert list(scratch.iterdir()) == []
