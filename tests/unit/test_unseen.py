"""Kinds nobody wrote a table entry for: every GPU spec of them is judged by the generic reader, with the verdict a
platform engineer would give.

tests/manifests/unseen holds manifests written here that follow, field for field, the published manifests of
projects the kinds table does not know (LLM-serving operators with single container objects or image and resources
in spec, Knative, Argo Rollouts, OpenKruise, Tekton, AppWrapper, Seldon, KubeVirt, Run:ai, Kaiwo, KAITO, KubeAI),
of other accelerator vendors and sharers (Intel, Alibaba gpushare, KAI-Scheduler, HAMi's vendors, AWS vGPU,
time-slicing), of DRA device classes with extended resources, core v1 PodTemplates, and traps that only look like
GPU specs (quotas, a CRD's schema, a model's RAM, TPUs). Each names the manifest it follows. The oracle,
tests/fixtures/unseen-expected.yaml, was written from the manifests themselves, not from ai-admission's output;
where ai-admission's policy differs it says so in the entry.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.support.builders import CLI
from tests.support.contexts import as_context
from webhook.cli.check import read_documents
from webhook.core.documents import Report, Result, check
from webhook.core.rules import Rules

UNSEEN = ROOT / "tests" / "manifests" / "unseen"
ORACLE: dict[str, dict[str, Any]] = yaml.safe_load((ROOT / "tests" / "fixtures" / "unseen-expected.yaml").read_text())
MISSING = {"model": "gpu-model-missing", "memory": "gpu-memory-missing"}


def report(filename: str, rules: Rules) -> Report:
    return check(list(read_documents([str(UNSEEN / filename)])), context=as_context(rules))


def judged(found: Report, kind: str, name: str, where: str) -> list[Result]:
    """The GPU results for the spec at ``where`` (a container path inside a judged pod spec matches it too)."""
    return [r for r in found.results if r.kind == kind and r.name == name and r.verdict.profile is not None
            and r.verdict.profile.gpu_count > 0
            and (r.path is None or where.startswith(r.path) or r.path.startswith(where))]


def test_the_oracle_lists_every_file() -> None:
    assert sorted(ORACLE) == sorted(p.name for p in UNSEEN.glob("*.yaml"))


SPECS = [(f, spec) for f, entry in sorted(ORACLE.items()) for spec in entry.get("gpu_specs") or []]


@pytest.mark.parametrize("filename,spec", SPECS, ids=[f"{f}:{s['name']}:{s['where']}" for f, s in SPECS])
def test_each_gpu_spec_gets_the_verdict_it_calls_for(filename: str, spec: dict[str, Any], rules: Rules) -> None:
    found = report(filename, rules)
    results = judged(found, spec["kind"], spec["name"], spec["where"])
    if spec.get("read") is False:
        assert not results, f"{spec['name']} is judged now: move it out of read: false"
        (document,) = [d for d in found.skipped if d.obj.get("kind") == spec["kind"]
                       and d.obj["metadata"]["name"] == spec["name"]]
        assert bool(found.unread_paths(document)) is spec["mentions"], found.unread_paths(document)
        return
    assert results, f"{spec['kind']} {spec['name']} {spec['where']} is not judged"
    (result,) = results[:1]
    denials = {f.code for f in result.verdict.findings if f.severity == "deny"}
    assert ("DENY" if not result.verdict.allowed else "ALLOW") == spec["verdict"], result.verdict.message
    assert {what for what, code in MISSING.items() if code in denials} == set(spec["missing"]), result.verdict.message
    assert set(spec.get("reasons") or []) <= denials
    assert result.verdict.profile is not None
    if isinstance(spec["gpus"], int) and not str(spec.get("resource", "")).startswith("DRA"):
        assert result.verdict.profile.gpu_count == max(spec["gpus"], 1)


TRAPS = [(f, trap) for f, entry in sorted(ORACLE.items())
         for trap in [*(entry.get("no_gpu") or []), *(entry.get("other_accelerators") or [])]]


@pytest.mark.parametrize("filename,trap", TRAPS, ids=[f"{f}:{t['kind']}:{t['name']}" for f, t in TRAPS])
def test_what_only_looks_like_a_gpu_spec_is_not_judged_as_one(filename: str, trap: dict[str, Any],
                                                              rules: Rules) -> None:
    """Each trap is matched and checked: a result of it that is no GPU spec, or no result at all (skipped: nothing
    to judge). A trap matching nothing would pass with any input, so that is asserted too."""
    found = report(filename, rules)
    where = trap.get("where")
    container = re.fullmatch(r"spec\.(initContainers|containers)\[([0-9]+)\]", where or "")
    checked = 0
    for result in found.results:
        if result.kind != trap["kind"] or result.name != trap["name"]:
            continue
        if result.kind in ("ResourceClaimTemplate", "ResourceClaim"):
            checked += 1
            continue  # a claim is judged at its own admission (its pod with it)
        profile = result.verdict.profile
        if container is not None and result.path is None:  # one container of a GPU pod: it holds no accelerator
            assert profile is not None
            assert (container.group(1), int(container.group(2))) not in profile.accelerator_containers
            checked += 1
            continue
        if where is not None and result.path != where:
            continue
        assert profile is None or profile.gpu_count == 0, f"{trap['kind']} {trap['name']} judged as a GPU spec"
        assert not {f.code for f in result.verdict.findings} & set(MISSING.values())
        checked += 1
    if not checked:  # not judged at all: the object was read (skipped, or judged at its GPU paths only)
        read = {(str(d.obj.get("kind")), str((d.obj.get("metadata") or {}).get("name"))) for d in found.skipped}
        read |= {(r.kind, r.name) for r in found.results}
        assert (trap["kind"], trap["name"]) in read, f"the trap {trap['kind']} {trap['name']} matched nothing"
        assert where is None or all(r.path != where for r in found.results if r.name == trap["name"])


def test_the_check_says_which_reader_judged_each_object_and_what_it_did_not_read() -> None:
    done = subprocess.run([CLI, "check", "-f", str(UNSEEN), "-o", "json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    payload = json.loads(done.stdout)
    readers = {(r["kind"], r["template"]): r["reader"] for r in payload["results"]}
    assert readers[("ClusterServingRuntime", "spec.engineConfig.leader.runner")] == "generic: container object"
    assert readers[("NIMService", "spec")] == "generic: container object"
    assert readers[("Rollout", "spec.template.spec")] == "generic: pod spec"
    assert readers[("KaiwoJob", "spec.gpus")] == "generic: GPU count field"
    assert readers[("PodTemplate", "template")] == "kinds table"
    assert readers[("Pod", None)] == "pod"
    unread = {s["kind"]: s["gpuFieldsNotRead"] for s in payload["skipped"] if s["gpuFieldsNotRead"]}
    assert unread["Model"] == ["spec.resourceProfile"] and "VirtualMachineInstance" not in unread
    assert readers[("VirtualMachineInstance", "spec")] == readers[("VirtualMachine", "spec.template")] == "kinds table"
    text = subprocess.run([CLI, "check", "-f", str(UNSEEN / "ome-clusterservingruntime-pd.yaml"),
                           "-f", str(UNSEEN / "kubeai-model.yaml")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60).stdout
    assert "spec.engineConfig.leader.runner  class=batch" in text and "reader=generic: container object" in text
    assert ("SKIP  Model priority-chat-model  speaks of GPUs at spec.resourceProfile, in fields of its own: not "
            "judged here") in text


def test_no_built_in_kind_is_read_by_shape(rules: Rules, tmp_path: Path) -> None:
    """LimitRange and ResourceQuota name GPUs in maps that look like a container's resources; a CRD's schema holds
    `resources` too. Kubernetes' own kinds that make pods are table entries, so the others are never read by shape."""
    found = report("trap-quota-limitrange.yaml", rules)
    assert found.results == [] and {d.obj["kind"] for d in found.skipped} == {"LimitRange", "ResourceQuota"}
    assert report("trap-crd-nimservice-schema.yaml", rules).results == []
