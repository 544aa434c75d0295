"""What already runs: ``ai-admission audit`` and the server's PolicyReports, against the real API server.

The objects are created in a namespace labelled ``ai-admission.io/mode=audit``, so the session's webhook admits
them (as a namespace looks before it is switched to deny) and they exist to be judged.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, RULES_FILE, eventually, start_server, stop_server
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.e2e_install import BARE_POD, PROFILED_POD
from tests.support.fixtures import FIXTURES, load_pod_case
from webhook import cli
from webhook.cluster.reports import NAME

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("webhook_installed")]

CRD = ROOT / "manifests" / "components" / "policy-report-crd" / "policyreports.yaml"
PLAIN_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
             "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm"},
              "spec": {"selector": {"matchLabels": {"app": "llm"}},
                       "template": {"metadata": {"labels": {"app": "llm"}}, "spec": BARE_POD["spec"]}}}


def apply(plane: ControlPlane, namespace: str, *objects: dict[str, Any]) -> list[dict[str, Any]]:
    done = plane.kubectl("create", "-n", namespace, "-o", "json", "-f", "-",
                         input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    assert done.returncode == 0, done.stderr
    decoder, text, found = json.JSONDecoder(), done.stdout.strip(), []
    while text:  # kubectl prints one JSON document per object created
        obj, end = decoder.raw_decode(text)
        found.append(obj)
        text = text[end:].strip()
    return found


def audited_namespace(plane: ControlPlane, hint: str) -> str:
    """A namespace in audit mode holding a bare GPU pod, a profiled one, a plain one, a Deployment with a bare
    template, and a pod of that Deployment (judged through its template, so not on its own)."""
    namespace = plane.create_namespace(namespace_name(hint), {"ai-admission.io/mode": "audit"})
    (deployment,) = apply(plane, namespace, DEPLOYMENT)
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": deployment["metadata"]["uid"],
             "controller": True}
    owned = {**BARE_POD, "metadata": {"name": "llm-abc12", "labels": {"app": "llm"}, "ownerReferences": [owner]}}
    apply(plane, namespace, BARE_POD, PROFILED_POD, PLAIN_POD, owned)
    return namespace


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    assert not captured.err, captured.err  # nothing it could not list
    return code, captured.out


def test_audit_lists_what_would_be_denied(control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = audited_namespace(control_plane, "audit")
    kubeconfig = str(control_plane.kubeconfig)
    code, out = run_cli(capsys, "audit", "--kubeconfig", kubeconfig, "-n", namespace, "-o", "json")
    assert code == 1, out  # something would be denied
    report = json.loads(out)
    (summary,) = report["namespaces"]
    assert (summary["namespace"], summary["mode"], summary["judged"], summary["denied"]) == (namespace, "audit", 4, 2)
    reasons = {r["code"]: r for r in summary["reasons"]}
    assert reasons["gpu-model-missing"]["severity"] == "deny"
    assert sorted(reasons["gpu-model-missing"]["objects"]) == ["Deployment llm spec.template", "Pod bare-gpu"]
    judged = {(r["kind"], r["name"]): r["severity"] for r in report["results"]}
    assert judged == {("Deployment", "llm"): "deny", ("Pod", "bare-gpu"): "deny", ("Pod", "train"): "pass",
                      ("Pod", "web"): "pass"}  # llm-abc12 is the Deployment's: judged as its template

    code, text = run_cli(capsys, "audit", "--kubeconfig", kubeconfig, "-n", namespace)
    assert code == 1
    assert f"namespace {namespace} (mode audit): 4 judged, 2 would be denied" in text
    assert "DENY  gpu-model-missing (2): Deployment llm spec.template; Pod bare-gpu" in text

    code, every = run_cli(capsys, "audit", "--kubeconfig", kubeconfig, "-A", "-o", "json")
    assert namespace in {ns["namespace"] for ns in json.loads(every)["namespaces"]}

    clean = control_plane.create_namespace(namespace_name("audit-clean"), {"ai-admission.io/mode": "audit"})
    apply(control_plane, clean, PROFILED_POD)
    code, text = run_cli(capsys, "audit", "--kubeconfig", kubeconfig, "-n", clean)
    assert code == 0 and "1 judged in 1 namespaces: 0 would be denied" in text


def test_audit_without_a_cluster_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}))
    code = cli.main(["audit", "--kubeconfig", str(config), "-n", "x"])
    assert code == 2
    assert capsys.readouterr().err.startswith("ai-admission audit: ")


def policy_report(plane: ControlPlane, namespace: str) -> dict[str, Any] | None:
    done = plane.kubectl("get", "policyreports.wgpolicyk8s.io", NAME, "-n", namespace, "-o", "json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_server_writes_policy_reports_once_the_crd_exists(control_plane: ControlPlane, tmp_path: Path) -> None:
    document = yaml.safe_load(RULES_FILE.read_text())
    document["policyReports"] = {"enabled": True, "intervalSeconds": 1}
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(document))
    namespace = audited_namespace(control_plane, "reports")
    server = start_server(tmp_path, rules=rules, extra_env={"KUBECONFIG": str(control_plane.kubeconfig),
                                                            "AI_ADMISSION_REPORTS_CHECK_SECONDS": "0.3"})
    try:
        absent = "the PolicyReport CRD is not installed"
        eventually(lambda: absent in server.log.read_text())
        time.sleep(1.5)  # more refreshes: the missing CRD is still said once
        assert server.log.read_text().count(absent) == 1

        done = control_plane.kubectl("apply", "-f", str(CRD))
        assert done.returncode == 0, done.stderr
        control_plane.kubectl("wait", "--for=condition=established", "crd/policyreports.wgpolicyk8s.io")
        report = eventually(lambda: policy_report(control_plane, namespace))
        # a result per finding (the bare pod and template lack memory too: a warning each); web is no GPU pod
        assert report["summary"] == {"pass": 1, "fail": 4, "warn": 2, "error": 0, "skip": 0}
        failed = {(r["resources"][0]["name"], r["rule"]) for r in report["results"] if r["result"] == "fail"}
        assert failed == {("bare-gpu", "gpu-model-missing"), ("bare-gpu", "gpu-memory-missing"),
                          ("llm", "gpu-model-missing"), ("llm", "gpu-memory-missing")}
        (passed,) = [r for r in report["results"] if r["result"] == "pass"]
        assert passed["resources"][0]["name"] == "train" and passed["properties"]["class"] == "training"
        assert all(r["source"] == "ai-admission" and r["timestamp"]["seconds"] > 0 for r in report["results"])
        log = server.log.read_text()
        assert log.count("this worker writes the PolicyReports") == 1, "exactly one of the two workers writes"

        assert control_plane.kubectl("delete", "pod", "bare-gpu", "-n", namespace, "--wait=false").returncode == 0
        eventually(lambda: (policy_report(control_plane, namespace) or {}).get("summary", {}).get("fail") == 2)
    finally:
        stop_server(server)


def test_audit_reads_the_config_maps_a_container_takes_env_from(control_plane: ControlPlane,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A Job whose container asks for no GPU but takes NVIDIA_VISIBLE_DEVICES=all from a ConfigMap: audit lists the
    ConfigMaps too (Secrets it does not read) and says so."""
    namespace = control_plane.create_namespace(namespace_name("audit-env-from"), {"ai-admission.io/mode": "audit"})
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpu-env"},
              "data": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sees-gpus"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "registry.k8s.io/busybox", "command": ["/bin/sh", "-c", "env"],
               "envFrom": [{"configMapRef": {"name": "gpu-env"}}]}]}}}}
    apply(control_plane, namespace, config, job)
    code, out = run_cli(capsys, "audit", "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "-o", "json")
    assert code == 1, out
    (result,) = json.loads(out)["results"]
    assert (result["kind"], result["name"], result["severity"]) == ("Job", "sees-gpus", "deny")
    assert result["denials"] == ["gpu-visible-devices-env"]
    assert '(from ConfigMap "gpu-env", by envFrom)' in result["message"]


def test_audit_sums_the_gpus_asked_beyond_the_need(control_plane: ControlPlane,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """What runs in a cluster: a vLLM server Deployment of 3 replicas, each asking for 8 H100s for a 7B bf16 model
    (one holds it), and a 70B server on 4 that says it shards over them: audit prints 21 GPUs beyond the need."""
    namespace = control_plane.create_namespace(namespace_name("audit-beyond"), {"ai-admission.io/mode": "audit"})
    server = load_pod_case(FIXTURES / "pods" / "vllm-7b-eight-h100.yaml").pod
    sharded = load_pod_case(FIXTURES / "pods" / "vllm-deployment.yaml").pod

    def deployment(name: str, replicas: int, pod: dict[str, Any]) -> dict[str, Any]:
        labels = {"app": name}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels, "annotations": pod["metadata"]["annotations"]},
                                      "spec": pod["spec"]}}}

    apply(control_plane, namespace, deployment("mistral-7b", 3, server), deployment("llama-70b", 1, sharded))
    code, text = run_cli(capsys, "audit", "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace)
    assert code == 0, text
    assert (f"namespace {namespace} (mode audit): 2 judged, 0 would be denied, 1 warned; 21 GPUs asked beyond the "
            f"need (inference 21)") in text
    assert "WARN  gpu-over-provisioned (1): Deployment mistral-7b spec.template" in text
    code, out = run_cli(capsys, "audit", "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, "-o", "json")
    report = json.loads(out)
    assert report["gpusBeyondNeed"] == {"total": 21, "byClass": {"inference": 21}}
    needs = {r["name"]: (r["gpus"], r["gpusNeeded"], r["replicas"]) for r in report["results"]}
    assert needs == {"mistral-7b": (8, 1, 3), "llama-70b": (4, 4, 1)}
