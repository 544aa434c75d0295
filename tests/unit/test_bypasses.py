"""No way around the rule: every path to a GPU that is not an accelerator request is a finding, through a pod, a
controller's template, ``check`` and the mutation, with GPU infrastructure's namespaces exempt.

The pods of each path are fixtures (tests/fixtures/pods/bypass-*.yaml, which the server and the backstop policy are
also held to); here: the templates, the exemptions, the per-class choices, the values the NVIDIA toolkit reads, the
void mutation, and containers added to a running pod. The GPU operator's DaemonSet follows
NVIDIA/gpu-operator assets/state-device-plugin/0500_daemonset.yaml (privileged, hostPaths of the kubelet's
device-plugin directory and the driver root, NVIDIA_VISIBLE_DEVICES=all, the NRI annotation, runtimeClassName).
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.builders import CLI
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.core.admission import decide, judge_object, judge_pod, mutate_verdict
from webhook.core.bypasses.paths import visible_devices_problem
from webhook.core.review import parse_review
from webhook.core.rules import Rules, compile_rules
from webhook.generate.cel.paths import denied_paths


def device_plugin_daemonset(namespace: str) -> dict[str, Any]:
    """The GPU operator's device plugin, as the operator renders it (NRI mode and runtime class both shown)."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}}, "template": {
                "metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"},
                             "annotations": {"nvidia.cdi.k8s.io/container.nvidia-device-plugin":
                                             "management.nvidia.com/gpu=all"}},
                "spec": {"serviceAccountName": "nvidia-device-plugin", "runtimeClassName": "nvidia",
                         "priorityClassName": "system-node-critical",
                         "containers": [{"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                                         "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                                                 {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"}],
                                         "securityContext": {"privileged": True},
                                         "volumeMounts": [{"name": "device-plugin",
                                                           "mountPath": "/var/lib/kubelet/device-plugins"},
                                                          {"name": "driver-install-dir", "mountPath": "/driver-root"}]}],
                         "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                                     {"name": "driver-install-dir", "hostPath": {"path": "/run/nvidia/driver",
                                                                                 "type": "DirectoryOrCreate"}}]}}}}


def codes(verdict: Any) -> list[str]:
    return [f.code for f in verdict.findings]


def test_gpu_infrastructure_may_use_every_path_in_its_namespace_and_nowhere_else(rules: Rules) -> None:
    exempt = judge_object(device_plugin_daemonset("gpu-operator"), ctx=as_context(rules), mode="deny", namespace="gpu-operator")
    assert exempt is not None and exempt[0].allowed and codes(exempt[0]) == []
    elsewhere = judge_object(device_plugin_daemonset("ml-team"), ctx=as_context(rules), mode="deny", namespace="ml-team")
    assert elsewhere is not None and not elsewhere[0].allowed
    assert codes(elsewhere[0]) == ["gpu-visible-devices-env", "gpu-runtime-class", "gpu-cdi-annotation",
                                   "gpu-host-device", "gpu-host-device", "privileged-sees-gpus"]
    assert 'DaemonSet "ml-team/nvidia-device-plugin-daemonset" spec.template' in (elsewhere[0].message or "")


def test_a_service_account_the_rules_name_is_exempt_in_its_namespace_only(rules: Rules) -> None:
    document = copy.deepcopy(dict(rules.raw))
    document["bypasses"]["exempt"]["serviceAccounts"] = [{"namespace": "monitoring", "name": "nvidia-device-plugin"}]
    with_account = compile_rules(document)
    assert judge_object(device_plugin_daemonset("monitoring"), ctx=as_context(with_account), mode="deny",
                        namespace="monitoring")[0].allowed  # type: ignore[index]
    assert not judge_object(device_plugin_daemonset("ml-team"), ctx=as_context(with_account), mode="deny",
                            namespace="ml-team")[0].allowed  # type: ignore[index]


def gpu_job_template(**container: Any) -> dict[str, Any]:
    """A PyTorchJob whose worker asks for an A100 and states its memory, with ``container`` fields added."""
    worker = {"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
              "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "512Gi"},
                            "requests": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "512Gi"}}, **container}
    template = {"metadata": {"annotations": {"ai-admission.io/gpu-memory": "40Gi"}},
                "spec": {"nodeSelector": {"gpu-type": "a100-80g"}, "containers": [worker]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ft", "namespace": "ml-team"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}}}


def test_a_controllers_template_is_judged_like_its_pods(rules: Rules) -> None:
    fine = judge_object(gpu_job_template(), ctx=as_context(rules), mode="deny", namespace="ml-team")
    assert fine is not None and fine[0].allowed
    privileged = judge_object(gpu_job_template(securityContext={"privileged": True}), ctx=as_context(rules), mode="deny",
                              namespace="ml-team")
    assert privileged is not None and not privileged[0].allowed
    assert [c for c in codes(privileged[0]) if c != "training-not-guaranteed"] == ["gpu-privileged"]
    env = judge_object(gpu_job_template(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1,2,3"}]), ctx=as_context(rules),
                       mode="deny", namespace="ml-team")
    assert env is not None and not env[0].allowed
    assert ('container "pytorch" sets NVIDIA_VISIBLE_DEVICES=0,1,2,3' in (env[0].message or "")
            and "spec.pytorchReplicaSpecs.Worker.template" in (env[0].message or ""))


def test_a_class_may_choose_another_action(rules: Rules) -> None:
    document = copy.deepcopy(dict(rules.raw))
    document["classes"]["training"]["bypasses"] = {"privilegedWithGpu": "warn"}
    lenient = compile_rules(document)
    judged = judge_object(gpu_job_template(securityContext={"privileged": True}), ctx=as_context(lenient), mode="deny",
                          namespace="ml-team")
    assert judged is not None and judged[0].allowed
    assert any("is privileged, so it sees every GPU of its node" in w for w in judged[0].warnings)
    # the backstop cannot classify: a path a class only warns of is left to the webhook
    assert "gpu-privileged" not in denied_paths(lenient)
    assert "gpu-privileged" in denied_paths(rules)


@pytest.mark.parametrize(("value", "hands_out"), [
    ("all", True), ("0,1", True), ("GPU-8f3c2a1e-9b7d-4c6e-a5f4-3d2c1b0a9e8f", True), ("nvidia.com/gpu=all", True),
    ("VOID", True),        # only the lower-case words are special (toolkit internal/config/image/devices.go)
    ("$(GPUS)", True),     # expands another variable: cannot be checked
    ("void", False), ("none", False), ("", False), (" , ", False),
    ("0,void", False),     # void wins over devices in a list
    ("all,none", False),   # and none over devices
])
def test_the_values_the_toolkit_reads_as_devices(value: str, hands_out: bool) -> None:
    entry = {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}
    assert (visible_devices_problem(entry, any_value=False) is not None) is hands_out
    assert visible_devices_problem({"name": "AMD_VISIBLE_DEVICES", "value": "none"}, any_value=True) is not None


def sidecar_pod(**sidecar: Any) -> dict[str, Any]:
    """An inference pod on one L4 with a logging sidecar (``sidecar`` fields added to it)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-0", "namespace": "serving",
                                                           "labels": {"app": "vllm"},
                                                           "annotations": {"ai-admission.io/gpu-memory": "16Gi",
                                                                           "ai-admission.io/workload-type": "inference"}},
            "spec": {"nodeSelector": {"gpu-type": "l4-24g"}, "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.8.4",
                 "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "32Gi"},
                               "requests": {"nvidia.com/gpu": "1", "memory": "32Gi"}}},
                {"name": "logs", "image": "fluent/fluent-bit:3.1", "resources": {"limits": {"memory": "64Mi"}},
                 **sidecar}]}}


def mutated(pod: dict[str, Any], rules: Rules, namespace: str = "serving") -> dict[str, Any]:
    return apply_verdict(pod, mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny", namespace=namespace))


def test_containers_that_ask_for_no_gpu_are_set_to_void(rules: Rules) -> None:
    pod = mutated(sidecar_pod(envFrom=[{"configMapRef": {"name": "logging"}}]), rules)
    gpu, logs = pod["spec"]["containers"]
    assert not any(e["name"] == "NVIDIA_VISIBLE_DEVICES" for e in gpu.get("env", []))  # the device plugin's to set
    assert logs["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]  # env wins over envFrom and the image
    kept = mutated(sidecar_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]), rules)
    assert kept["spec"]["containers"][1]["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    exempt = mutated(sidecar_pod(), rules, namespace="gpu-operator")
    assert "env" not in exempt["spec"]["containers"][1]
    document = copy.deepcopy(dict(rules.raw))
    document["classes"]["inference"]["bypasses"] = {"voidVisibleDevices": False}
    off = mutated(sidecar_pod(), compile_rules(document))
    assert "env" not in off["spec"]["containers"][1]


def test_in_warn_mode_a_bypass_is_a_warning(rules: Rules) -> None:
    pod = sidecar_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    verdict = judge_pod(pod, ctx=as_context(rules), mode="warn", subject="pod", namespace="serving")
    assert verdict.allowed
    assert any(w.startswith('ai-admission (warn mode) would deny: container "logs" sets NVIDIA_VISIBLE_DEVICES=all')
               for w in verdict.warnings)


def ephemeral_review(pod: dict[str, Any], debugger: dict[str, Any]) -> Any:
    after = copy.deepcopy(pod)
    after["spec"]["ephemeralContainers"] = [debugger]
    return parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0c8e5c3a-1f2b-4c5d-8e9f-0a1b2c3d4e5f", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "ephemeralcontainers",
        "namespace": "serving", "name": "vllm-0", "operation": "UPDATE", "object": after, "oldObject": pod,
        "userInfo": {"username": "dev"}}})


def test_a_container_added_to_a_running_pod_is_voided_and_judged(rules: Rules) -> None:
    debugger = {"name": "debugger", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["bash"],
                "targetContainerName": "vllm"}
    review = ephemeral_review(sidecar_pod(), debugger)
    patched = decide(review, ctx=as_context(rules), endpoint="mutate")
    assert patched is not None and list(patched.patch) == [
        {"op": "add", "path": "/spec/ephemeralContainers/0/env", "value": [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                                             "value": "void"}]}]
    assert decide(review, ctx=as_context(rules), endpoint="validate") is None  # nothing to say of it
    grabbing = ephemeral_review(sidecar_pod(), {**debugger, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
    denied = decide(grabbing, ctx=as_context(rules), endpoint="validate")
    assert denied is not None and not denied.allowed and codes(denied) == ["gpu-visible-devices-env"]
    assert 'ephemeral container "debugger" sets NVIDIA_VISIBLE_DEVICES=all' in (denied.message or "")


def test_an_ephemeral_container_with_env_of_its_own_gets_the_variable_appended(rules: Rules) -> None:
    """Written through the same `Editor` as a pod's containers: appended to a list that exists, and only to the
    container just added (one already there is the pod's, voided or not at its creation)."""
    pod = sidecar_pod()
    pod["spec"]["ephemeralContainers"] = [{"name": "earlier", "image": "busybox:1.36"}]
    debugger = {"name": "debugger", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "env": [{"name": "TERM", "value": "xterm"}]}
    after = copy.deepcopy(pod)
    after["spec"]["ephemeralContainers"].append(debugger)
    review = parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "5b0f2a51-3c1e-4a7b-9d2c-6e8f0a1b2c3d", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "ephemeralcontainers",
        "namespace": "serving", "name": "vllm-0", "operation": "UPDATE", "object": after, "oldObject": pod}})
    patched = decide(review, ctx=as_context(rules), endpoint="mutate")
    assert patched is not None and list(patched.patch) == [
        {"op": "add", "path": "/spec/ephemeralContainers/1/env/-", "value": {"name": "NVIDIA_VISIBLE_DEVICES",
                                                                             "value": "void"}}]
    assert decide(ephemeral_review(sidecar_pod(), debugger), ctx=as_context(rules), endpoint="mutate", path_mode=None) is not None


def test_check_reports_the_paths_of_files(tmp_path: Path) -> None:
    (tmp_path / "ds.yaml").write_text(yaml.safe_dump(device_plugin_daemonset("ml-team")))
    done = subprocess.run([CLI, "check", "-f", str(tmp_path / "ds.yaml"), "-o", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    (result,) = json.loads(done.stdout)["results"]
    assert result["denials"] == ["gpu-visible-devices-env", "gpu-runtime-class", "gpu-cdi-annotation",
                                 "gpu-host-device", "gpu-host-device"]
    (tmp_path / "ds.yaml").write_text(yaml.safe_dump(device_plugin_daemonset("gpu-operator")))
    exempt = subprocess.run([CLI, "check", "-f", str(tmp_path / "ds.yaml")], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert exempt.returncode == 0, exempt.stdout


def test_audit_and_policy_reports_name_the_path(rules: Rules) -> None:
    """What `ai-admission audit` and the PolicyReports say of objects listed from a cluster (the same judgement)."""
    from webhook.cluster.audit import judge, report_results

    grabbing = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "grabber", "namespace": "ml-team", "uid": "u1"},
                "spec": {"containers": [{"name": "c", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                                         "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]},
                "status": {"phase": "Running"}}
    report = judge([grabbing, device_plugin_daemonset("gpu-operator")], context=as_context(rules))
    entries = report_results(report.results, "deny")
    assert [(e["resources"][0]["kind"], e["rule"], e["result"]) for e in entries] == [
        ("Pod", "gpu-visible-devices-env", "fail")]


def test_the_gpu_operators_operands_pass_in_its_namespace_only() -> None:
    path = ROOT / "tests" / "manifests" / "gpu-operator-operands.yaml"
    done = subprocess.run([CLI, "check", "-f", str(path), "-o", "json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout
    assert {(r["name"], r["verdict"]) for r in json.loads(done.stdout)["results"]} == {
        ("nvidia-dcgm-exporter", "ALLOW"), ("nvidia-device-plugin-daemonset", "ALLOW")}
    elsewhere = subprocess.run([CLI, "check", "-f", "-", "-o", "json"], cwd=ROOT, capture_output=True, text=True,
                               timeout=60, input=path.read_text().replace("namespace: gpu-operator", "namespace: ml-team"))
    results = {r["name"]: r for r in json.loads(elsewhere.stdout)["results"]}
    assert results["nvidia-dcgm-exporter"]["verdict"] == "DENY"
    assert results["nvidia-dcgm-exporter"]["denials"] == ["gpu-runtime-class", "gpu-host-device"]
    assert "privileged-sees-gpus" in results["nvidia-dcgm-exporter"]["reasons"]
    assert results["nvidia-device-plugin-daemonset"]["denials"] == [
        "gpu-visible-devices-env", "gpu-runtime-class", "gpu-host-device", "gpu-host-device", "gpu-host-device"]
