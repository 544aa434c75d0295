"""Builders shared by the tests: GPU pods as controllers create them, rules with a change merged in, the rendered
manifests, the CLI, and a rules directory laid out as a mounted ConfigMap."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT, RULES_FILE
from tests.support.contexts import as_context
from tests.support.kubelet import KeyDir
from webhook.config.rules_file import load_rules
from webhook.core.admission import mutate_verdict
from webhook.core.rules import Rules, compile_rules
from webhook.generate.webhooks import priority_classes


def gpu_pod(*, gpus: int = 1, model: str = "a100-80g", memory: str | None = None, limit: str | None = "64Gi",
            annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            env: dict[str, str] | None = None, workload: str | None = "training") -> dict[str, Any]:
    """A pod as a controller creates it, asking for ``gpus`` cards of ``model`` (by nodeSelector)."""
    notes = dict(annotations or {})
    if workload:
        notes["ai-admission.io/workload-type"] = workload
    if memory:
        notes["ai-admission.io/gpu-memory"] = memory
    limits: dict[str, Any] = {"nvidia.com/gpu": str(gpus), "cpu": "8"}
    if limit:
        limits["memory"] = limit
    container: dict[str, Any] = {"name": "main", "image": "registry.example.com/ml/job:1",
                                 "resources": {"limits": limits, "requests": dict(limits)}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "job-", "namespace": "ml-team", "labels": dict(labels or {}),
                         "annotations": notes},
            "spec": {"nodeSelector": {"gpu-type": model}, "containers": [container]}}


def shm_size(pod: dict[str, Any], rules: Rules) -> str:
    volumes = patched(pod, rules)["/spec/volumes"]["value"]
    assert [v["name"] for v in volumes] == ["ai-admission-shm"]
    return volumes[0]["emptyDir"]["sizeLimit"]


def rules_with(change: dict[str, Any]) -> Rules:
    """The default rules with ``change`` merged in (nested mappings merged key by key)."""
    document = yaml.safe_load(RULES_FILE.read_text())

    def merge(into: dict[str, Any], what: dict[str, Any]) -> None:
        for key, value in what.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = copy.deepcopy(value)

    merge(document, change)
    return compile_rules(document, source="test rules")


SHM = {"classes": {"training": {"mutate": {"shm": {"perGpu": "8Gi", "max": "20Gi", "withoutMemoryLimit": "3Gi"}}}}}


NCCL = {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "ib0"}


# the course's cluster: its A100 nodes (labelled gpu-type) have InfiniBand that every pod sees as ib0, so its rules
# name the pool's fabric and the interface (the shipped rules name neither: "{interface}" is the pod's own)
INFINIBAND = {"fabrics": {"byNodeLabel": [{"key": "gpu-type", "values": ["a100-80g"], "fabric": "infiniband"}],
                          "env": {"infiniband": {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "ib0"}}}}




class ConfigMapDir(KeyDir):
    """The rules ConfigMap as the kubelet mounts it: rules.yaml -> ..data/rules.yaml, ..data -> version."""

    def __init__(self, root: Path, text: str) -> None:
        super().__init__(root, {"rules.yaml": text.encode()})

    def update(self, keys: dict[str, bytes] | str) -> None:  # type: ignore[override]
        super().update({"rules.yaml": keys.encode()} if isinstance(keys, str) else keys)


SHIPPED = {pc["metadata"]["name"]: pc for pc in priority_classes(load_rules(RULES_FILE))}


def priority_class(name: str, **changes: Any) -> dict[str, Any]:
    """The PriorityClass as `kubectl apply -k manifests/` installs it, with ``changes``."""
    return {**SHIPPED[name], **changes}


def broken(change: Any) -> dict[str, Any]:
    document = copy.deepcopy(DEFAULT)
    change(document)
    return document


MANIFESTS = ROOT / "tests" / "manifests"


def objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def run_check(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "check", *args], cwd=ROOT, capture_output=True, text=True, input=stdin, timeout=60)


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def patched(pod: dict[str, Any], rules: Rules) -> dict[str, dict[str, Any]]:
    """/mutate's operations by path (each path appears once in these pods)."""
    ops = mutate_verdict(pod, ctx=as_context(rules), mode="deny").patch
    return {op["path"]: dict(op) for op in ops}


DEFAULT = yaml.safe_load(RULES_FILE.read_text())


CLI = str(Path(sys.executable).with_name("ai-admission"))


def render(path: str) -> list[dict[str, Any]]:
    done = subprocess.run(["kubectl", "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]
