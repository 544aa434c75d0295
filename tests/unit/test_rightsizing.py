"""GPUs asked beyond the need (`webhook.core.rightsizing`): the count a whole model's need takes, said at admission
with the capacity denial's count; what is left quiet (a need stated per GPU, data-parallel training, a stated
parallelism, a multi-node job); the smaller card or MIG slice of the cluster that holds the need of one GPU; and the
profile record, which holds a single pod's need on the GPUs it takes.

The pods follow the serving manifests as their projects publish them (vLLM's and SGLang's arguments, TGI's
``--num-shard``); the clusters are tests/support/clusters.py's, labelled as the providers label them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.builders import rules_with, run_check
from tests.support.clusters import A100, a100_cluster, gke_cluster, node, with_nodes
from tests.support.contexts import as_context
from tests.support.reviews import apply_verdict
from webhook.cli import audit as audit_cli
from webhook.cluster.audit import Audit, judge, report_results
from webhook.core import names
from webhook.core.admission import Verdict, judge_pod, mutate_verdict
from webhook.core.admission import judge as judge_object
from webhook.core.findings import Finding
from webhook.core.profile import build_profile
from webhook.core.review import MAX_WARNING_CHARS
from webhook.core.rightsizing.findings import rightsizing_findings
from webhook.core.rightsizing.smaller import largest_smaller, smaller_devices
from webhook.core.rules import Rules, RulesError, compile_rules
from webhook.core.workloads.parallelism import parallel_size

H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def server(params: str = "7B", precision: str = "bf16", gpus: int = 8, *, args: list[str] | None = None,
           env: dict[str, str] | None = None, notes: dict[str, str] | None = None,
           selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A vLLM server pod of a Deployment, as kubernetes/examples (AI/vllm-deployment) publishes its container, with
    its model's size by annotation; ``args`` replace its ``--tensor-parallel-size=1``."""
    amounts = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    notes = {names.MODEL_PARAMS: params, names.MODEL_PRECISION: precision, **(notes or {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "vllm-5f7d9c8b64-", "namespace": "serving",
                         "labels": {"app": "vllm", "pod-template-hash": "5f7d9c8b64"}, "annotations": notes,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-5f7d9c8b64",
                                              "uid": "5e2a1c00-0000-4000-8000-000000000301", "controller": True}]},
            "spec": {"nodeSelector": dict(selector or H100),
                     "containers": [{"name": "inference-server", "image": "vllm/vllm-openai:v0.11.0",
                                     "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
                                     "args": ["--model=$(MODEL_ID)", *(args if args is not None else
                                                                       ["--tensor-parallel-size=1"]),
                                              "--host=0.0.0.0", "--port=8080"],
                                     "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                                     "resources": {"limits": dict(amounts), "requests": dict(amounts)}}]}}


def judged(pod: dict[str, Any], rules: Rules, mode: str = "deny") -> Verdict:
    return judge_pod(copy.deepcopy(pod), ctx=as_context(rules), mode=mode, subject='pod "serving/vllm-5f7d9c8b64-*"')


def codes(verdict: Verdict) -> list[str]:
    return [f.code for f in verdict.findings if f.code.startswith(("gpu-over", "gpu-fits"))]


def record(pod: dict[str, Any], rules: Rules) -> dict[str, Any]:
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    mutated = apply_verdict(pod, verdict)
    return dict(json.loads(mutated["metadata"]["annotations"][names.PROFILE]))


# -- gpu-over-provisioned ------------------------------------------------------------------------------------------

def test_a_7b_server_on_eight_h100s_is_told_that_one_holds_it(rules: Rules) -> None:
    verdict = judged(server("7B", "bf16", 8), rules)
    assert verdict.allowed and codes(verdict) == ["gpu-over-provisioned"]
    assert list(verdict.warnings) == [
        "needs 15.6Gi of GPU memory, which 1 h100-80g holds (one node, one NVLink domain): 7 of its 8 GPUs would "
        "sit idle. Ask for 1 GPU, or, if it uses them all, say so: --tensor-parallel-size 8 or annotation "
        "ai-admission.io/parallelism: data"]
    assert record(server("7B", "bf16", 8), rules) | {"reason": "-"} == {
        "class": "inference", "gpuMemoryPerGpu": "15.6Gi", "gpus": {"nvidia.com/gpu": 8}, "gpusNeeded": 1,
        "model": "h100-80g", "multiNode": False, "preemptible": False, "reason": "-"}


def test_a_70b_fp16_server_on_four_h100s_is_told_two(rules: Rules) -> None:
    verdict = judged(server("70B", "fp16", 4), rules)
    assert verdict.allowed and codes(verdict) == ["gpu-over-provisioned"]
    (warning,) = verdict.warnings
    assert warning.startswith("needs 156.5Gi of GPU memory, which 2 h100-80g hold (one node, one NVLink domain): "
                              "2 of its 4 GPUs would sit idle. Ask for 2 GPUs,")
    # the record holds the need on the 2 GPUs it takes, not spread over the 4 asked for as if sharded four ways
    assert (record(server("70B", "fp16", 4), rules)["gpuMemoryPerGpu"],
            record(server("70B", "fp16", 4), rules)["gpusNeeded"]) == ("78.2Gi", 2)


def test_the_count_is_the_capacity_denials(rules: Rules) -> None:
    """One count for both: what the denial of a pod with too few GPUs suggests is what a pod with too many is
    told, for the same model (the next power of two of the cards that hold it, within a node)."""
    denied = judged(server("70B", "fp16", 1), rules)
    assert not denied.allowed and "ask for at least 2 GPUs (one node, one NVLink domain)" in (denied.message or "")
    for params, told in (("7B", 1), ("70B", 2), ("120B", 4), ("180B", None), ("405B", None)):  # on 8 H100s
        verdict = judged(server(params, "fp16", 8), rules)
        assert codes(verdict) == (["gpu-over-provisioned"] if told else []), params
        if told:
            assert f"Ask for {told} GPU" in verdict.warnings[0], params
    assert "more than the 8 one h100-80g node holds" in (judged(server("405B", "fp16", 8), rules).message or "")
    assert [parallel_size(n, 8) for n in (1, 2, 3, 5, 7, 9)] == [1, 2, 4, 8, 8, 16]


def test_a_pcie_model_is_told_one_node(rules: Rules) -> None:
    (warning,) = judged(server("7B", "bf16", 4, selector={"nvidia.com/gpu.product": "NVIDIA-L40S"}), rules).warnings
    assert "which 1 l40s-48g holds (on one node): 3 of its 4 GPUs would sit idle" in warning


@pytest.mark.parametrize("why, pod", [
    ("an exact fit", server("70B", "fp16", 2)),
    ("a fit of 2.5 cards on 3", server("100B", "fp16", 3)),
    ("vLLM's --tensor-parallel-size 4", server("70B", "fp16", 4, args=["--tensor-parallel-size", "4"])),
    ("vLLM's -tp 8", server("7B", "bf16", 8, args=["-tp", "8"])),
    ("vLLM's --pipeline-parallel-size 2", server("70B", "fp16", 4, args=["--pipeline-parallel-size=2"])),
    ("vLLM's --data-parallel-size 8", server("7B", "bf16", 8, args=["--data-parallel-size", "8"])),
    ("SGLang's --tp-size", server("7B", "bf16", 8, args=["--tp-size", "8"])),
    ("SGLang's --dp-size", server("7B", "bf16", 8, args=["--dp-size", "8"])),
    ("TGI's --num-shard", server("7B", "bf16", 2, args=["--num-shard=2"])),
    ("TGI's NUM_SHARD", server("7B", "bf16", 2, args=[], env={"NUM_SHARD": "2"})),
    ("KServe's PIPELINE_PARALLEL_SIZE", server("70B", "fp16", 4, args=[], env={"PIPELINE_PARALLEL_SIZE": "2"})),
    ("our annotation", server("7B", "bf16", 8, notes={names.PARALLELISM: "data"})),
    ("a need stated per GPU", server("7B", "bf16", 8, notes={names.GPU_MEMORY: "10Gi"})),
    ("data-parallel training", server("7B", "bf16", 8, notes={names.WORKLOAD_TYPE: "training"})),
    ("an hpo trial", server("7B", "bf16", 8, notes={names.WORKLOAD_TYPE: "hpo"})),
    ("a multi-node job", server("70B", "fp16", 8, env={"LWS_GROUP_SIZE": "2"})),
    ("a multi-node hint", server("7B", "bf16", 8, notes={names.MULTI_NODE: "true"})),
])
def test_what_takes_every_gpu_on_purpose_is_left_quiet(why: str, pod: dict[str, Any], rules: Rules) -> None:
    verdict = judged(pod, rules)
    assert verdict.allowed and codes(verdict) == [], (why, verdict.warnings)
    profile = build_profile(copy.deepcopy(pod), as_context(rules))
    assert profile.gpus_needed == profile.gpu_count and profile.gpus_beyond_need == 0, why


def inference_service(worker: dict[str, Any]) -> dict[str, Any]:
    """A multi-node KServe InferenceService shaped as kserve/website's multi-node guide shows it (huggingface
    model format, a PVC storageUri, ``workerSpec`` with its parallel sizes), its head asking 8 H100s for a 7B model."""
    gpus = {"nvidia.com/gpu": "8", "memory": "64Gi"}
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "llama-7b", "namespace": "serving",
                         "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment",
                                         names.MODEL_PARAMS: "7B", names.MODEL_PRECISION: "bf16"}},
            "spec": {"predictor": {"nodeSelector": dict(H100),
                                   "model": {"modelFormat": {"name": "huggingface"},
                                             "storageUri": "pvc://llama-7b-pvc/hf/7b_instruction_tuned",
                                             "resources": {"limits": dict(gpus), "requests": dict(gpus)}},
                                   "workerSpec": worker}}}


def test_a_kserve_head_states_the_tensor_parallelism_of_its_worker_spec(rules: Rules) -> None:
    """KServe's controller writes ``workerSpec.tensorParallelSize`` on the head's kserve-container as
    ``TENSOR_PARALLEL_SIZE`` (and the runtime hands it to vLLM): a head of 8 GPUs at tensor parallelism 8 uses them
    all on purpose. With no degree in its ``workerSpec`` the head states nothing, and is told the count."""
    def head(worker: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        found = judge_object(inference_service(worker), ctx=as_context(rules), mode="deny", group="serving.kserve.io",
                      kind="InferenceService")
        assert found is not None
        (template,) = [t for t in found[1] if t.path == "spec.predictor" and any(
            c["name"] == "kserve-container" for c in t.pod["spec"]["containers"])]
        return codes(template.verdict), template.pod

    quiet, pod = head({"tensorParallelSize": 8, "pipelineParallelSize": 1})
    assert quiet == [], quiet
    (server_container,) = [c for c in pod["spec"]["containers"] if c["name"] == "kserve-container"]
    assert {"name": "TENSOR_PARALLEL_SIZE", "value": "8"} in server_container["env"]
    told, _ = head({"pipelineParallelSize": 1})
    assert told == ["gpu-over-provisioned"], told


def test_a_degree_of_one_spreads_nothing(rules: Rules) -> None:
    """``--tensor-parallel-size=1`` (the published example's) on 8 GPUs uses one: it does not say otherwise."""
    for args in (["--tensor-parallel-size=1"], ["--tensor-parallel-size", "1", "--data-parallel-size", "1"], []):
        assert codes(judged(server("7B", "bf16", 8, args=args), rules)) == ["gpu-over-provisioned"], args


def test_the_parallelism_annotation_must_name_kinds_of_parallelism(rules: Rules) -> None:
    for value in ("tensor", "tensor, pipeline", "DATA", "expert"):
        assert codes(judged(server(notes={names.PARALLELISM: value}), rules)) == [], value
    verdict = judged(server(notes={names.PARALLELISM: "lots"}), rules)
    assert not verdict.allowed and verdict.reason_codes[0] == "invalid-annotation"
    assert 'annotation ai-admission.io/parallelism: "lots" is not one or more of tensor, pipeline, data, expert' \
        in (verdict.message or "")


def test_the_rules_make_it_a_denial_for_a_class_and_the_namespace_mode_applies() -> None:
    strict = rules_with({"classes": {"inference": {"rightsizing": {"overProvisioned": "deny"}}}})
    denied = judged(server(), strict)
    assert not denied.allowed and denied.reason_codes == ["gpu-over-provisioned"]
    assert "- needs 15.6Gi of GPU memory, which 1 h100-80g holds" in (denied.message or "")
    warned = judged(server(), strict, mode="warn")
    assert warned.allowed and warned.warnings[0].startswith("ai-admission (warn mode) would deny: needs 15.6Gi")
    # batch keeps the default (a warning), and a class may turn it off, written as YAML reads a bare off
    assert judged(server(notes={names.WORKLOAD_TYPE: "batch"}), strict).allowed
    quiet = compile_rules({**rules_with({}).raw, "rightsizing": {"overProvisioned": False}})
    assert codes(judged(server(), quiet)) == []


def test_a_bad_action_stops_the_rules() -> None:
    with pytest.raises(RulesError, match=r"rightsizing.overProvisioned: 'loud' is not one of"):
        rules_with({"rightsizing": {"overProvisioned": "loud"}})
    with pytest.raises(RulesError, match=r"classes.training.rightsizing.smallerCard: 'deny' is not one of"):
        rules_with({"classes": {"training": {"rightsizing": {"smallerCard": "deny"}}}})


def test_a_denied_vendor_or_an_unknown_model_is_told_nothing_of_its_size(rules: Rules) -> None:
    amd = server()
    resources = amd["spec"]["containers"][0]["resources"]
    for part in resources.values():
        part["amd.com/gpu"] = part.pop("nvidia.com/gpu")
    assert codes(judged(amd, rules)) == []
    assert codes(judged(server(selector={"gpu-type": "z9000"}), rules)) == []


# -- the record ----------------------------------------------------------------------------------------------------

def test_the_record_says_what_the_need_takes(rules: Rules) -> None:
    assert record(server("70B", "fp16", 4, args=["--tensor-parallel-size", "4"]), rules)["gpusNeeded"] == 4
    assert record(server("70B", "fp16", 4, args=["--tensor-parallel-size", "4"]), rules)["gpuMemoryPerGpu"] == "39.1Gi"
    assert record(server("70B", "fp16", 1), rules)["gpusNeeded"] == 2  # denied: what it would take
    assert record(server(notes={names.GPU_MEMORY: "10Gi"}), rules)["gpusNeeded"] == 8
    bare = server()
    del bare["metadata"]["annotations"]
    assert record(bare, rules)["gpusNeeded"] is None  # no need stated, no count


# -- a smaller card, a MIG slice -------------------------------------------------------------------------------------

def mig_a100(name: str) -> dict[str, Any]:
    """An A100 node in MIG mixed mode, as GPU feature discovery labels it and the device plugin offers its slices."""
    return node(name, A100, gpus=8, memory_mib=81920, extra={"nvidia.com/mig-1g.10gb": "56", "nvidia.com/gpu": "0"},
                labels={"gpu-type": "a100-80g", "nvidia.com/mig.strategy": "mixed",
                        "nvidia.com/mig-1g.10gb.count": "56", "nvidia.com/mig-1g.10gb.memory": "9728"})


def test_a_need_one_l4_holds_is_told_so_with_the_label_the_pod_selects_by(rules: Rules) -> None:
    cluster = with_nodes(gke_cluster(), rules)  # H100 and L4 nodes
    verdict = judged(server(notes={names.GPU_MEMORY: "10Gi"}, gpus=1), cluster)
    assert codes(verdict) == ["gpu-fits-smaller-model"]
    (warning,) = verdict.warnings
    assert warning == ('the 10Gi each GPU needs fits one l4-24g card (22.5Gi), which this cluster has (4 nodes x 4 GPUs): '
                       'select it (nodeSelector "cloud.google.com/gke-accelerator: nvidia-l4") rather than h100-80g, '
                       'unless the work needs the larger card\'s speed')
    # a whole model's need, held by one of its cards: told both what it takes and the smaller card that holds it
    assert codes(judged(server("7B", "bf16", 8), cluster)) == ["gpu-over-provisioned", "gpu-fits-smaller-model"]
    assert "the 15.6Gi the model needs fits one l4-24g" in judged(server("7B", "bf16", 1), cluster).warnings[0]


def test_nothing_smaller_is_named_that_does_not_hold_it_or_that_no_node_has(rules: Rules) -> None:
    cluster = with_nodes(gke_cluster(), rules)
    assert codes(judged(server(notes={names.GPU_MEMORY: "40Gi"}, gpus=1), cluster)) == []  # more than an L4 holds
    assert codes(judged(server(notes={names.GPU_MEMORY: "10Gi"}, gpus=1), rules)) == []  # no node watch: no word
    assert codes(judged(server("70B", "fp16", 2), cluster)) == []  # needs two cards: not one smaller card
    # training chooses its card for its speed (the class's rule), and a model split on purpose is not one card's
    assert codes(judged(server(notes={names.GPU_MEMORY: "10Gi", names.WORKLOAD_TYPE: "training"}), cluster)) == []
    assert codes(judged(server("7B", "bf16", 2, args=["-tp", "2"]), cluster)) == []
    # the A100 80GB and the H100 report 81920 and 81559 MiB: neither is a smaller card of the other
    a100 = with_nodes(a100_cluster(), rules)
    assert [d.model.name for d in smaller_devices(as_context(a100), a100.catalog["a100-80g"], a100.catalog["a100-80g"].memory)] \
        == ["l4-24g"]
    assert codes(judged(server(notes={names.GPU_MEMORY: "60Gi"}, gpus=1, selector={"gpu-type": "a100-80g"}), a100)) \
        == []


def test_a_mig_slice_a_node_offers_is_named(rules: Rules) -> None:
    cluster = with_nodes([*gke_cluster(), mig_a100("a100-mig-1")], rules)
    assert cluster.nodes is not None and set(cluster.nodes.mig_slices) == {"1g.10gb"}
    verdict = judged(server(notes={names.GPU_MEMORY: "6Gi"}, gpus=1), cluster)
    assert codes(verdict) == ["gpu-fits-smaller-model", "gpu-fits-mig-slice"]
    assert verdict.warnings[1] == ("the 6Gi each GPU needs fits a MIG 1g.10gb slice (9.3Gi), which a100-80g nodes of "
                                   "this cluster offer: ask for the slice (nvidia.com/mig-1g.10gb) rather than a whole "
                                   "h100-80g")
    assert codes(judged(server(notes={names.GPU_MEMORY: "12Gi"}, gpus=1), cluster)) == ["gpu-fits-smaller-model"]
    # the largest smaller device of a card: what the facts tell the native policy
    assert largest_smaller(as_context(cluster), cluster.catalog["h100-80g"]) == cluster.catalog["l4-24g"].memory
    assert largest_smaller(as_context(cluster), cluster.catalog["l4-24g"]) == 10 * 10**9


def test_a_class_may_turn_the_smaller_card_off() -> None:
    rules = rules_with({"classes": {"inference": {"rightsizing": {"smallerCard": "off"}}}})
    cluster = with_nodes(gke_cluster(), rules)
    assert codes(judged(server(notes={names.GPU_MEMORY: "10Gi"}, gpus=1), cluster)) == []


def test_every_message_fits_a_warning_whole(rules: Rules) -> None:
    """The API server cuts a warning past 256 characters: the longest names and counts still fit."""
    cluster = with_nodes([*gke_cluster(), mig_a100("a100-mig-1")], rules)
    found: list[Finding] = []
    for pod in (server("1.5T", "fp32", 16, selector={"gpu-type": "rtx-pro-6000-96g"}),
                server("405B", "int4", 16), server(notes={names.GPU_MEMORY: "1536Mi"}, gpus=16)):
        found += rightsizing_findings(build_profile(pod, as_context(cluster)), as_context(cluster))
    assert {f.code for f in found} == {"gpu-over-provisioned", "gpu-fits-smaller-model", "gpu-fits-mig-slice"}
    assert all(len(f.message) <= MAX_WARNING_CHARS for f in found), [len(f.message) for f in found]


# -- check, audit, PolicyReports -------------------------------------------------------------------------------------

def deployment(name: str, replicas: int, pod: dict[str, Any], namespace: str = "serving") -> dict[str, Any]:
    """A Deployment whose template is ``pod`` (its metadata's labels and annotations, its spec)."""
    meta = pod["metadata"]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": meta["labels"]},
                     "template": {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
                                  "spec": copy.deepcopy(pod["spec"])}}}


def test_check_shows_the_gpus_the_need_takes(tmp_path: Path) -> None:
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump_all([deployment("mistral-7b", 3, server("7B", "bf16", 8)),
                                        deployment("llama-70b", 1, server("70B", "fp16", 4, args=["-tp", "4"]))]))
    done = run_check("-f", str(path))
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    choose = "; set annotation ai-admission.io/workload-type to choose another class"
    assert lines[0].startswith(f"WARN  Deployment serving/mistral-7b spec.template  class=inference (owner ReplicaSet/"
                               f"mistral-7b{choose})  gpus=8 needed=1  reasons=gpu-over-provisioned")
    assert (f"Deployment serving/llama-70b spec.template  class=inference (owner ReplicaSet/llama-70b{choose})  gpus=4 "
            f"needed=4") in done.stdout
    assert lines[-1] == ("2 checked: 1 allowed, 1 allowed with warnings, 0 denied; 21 GPUs asked beyond the need")
    results = json.loads(run_check("-f", str(path), "-o", "json").stdout)["results"]
    assert [(r["name"], r["gpus"], r["gpusNeeded"], r["replicas"], r["gpusBeyondNeed"]) for r in results] == [
        ("mistral-7b", 8, 1, 3, 21), ("llama-70b", 4, 4, 1, 0)]


def listed(rules: Rules) -> list[dict[str, Any]]:
    """What a cluster runs: an over-provisioned server Deployment (2 replicas) and pod in serving, a data-parallel
    training pod and an over-provisioned batch pod in ml-team."""
    pod = server("70B", "fp16", 4, notes={names.WORKLOAD_TYPE: "inference"})
    pod["metadata"] = {**pod["metadata"], "name": "llama-70b-0", "uid": "u-llama"}
    pod["metadata"].pop("ownerReferences")
    batch = server("7B", "bf16", 2, notes={names.WORKLOAD_TYPE: "batch"})
    batch["metadata"] = {**batch["metadata"], "name": "embed-0", "namespace": "ml-team", "uid": "u-embed"}
    batch["metadata"].pop("ownerReferences")
    training = server("7B", "bf16", 8, notes={names.WORKLOAD_TYPE: "training"})
    training["metadata"] = {**training["metadata"], "name": "sft-0", "namespace": "ml-team", "uid": "u-sft"}
    training["metadata"].pop("ownerReferences")
    return [deployment("mistral-7b", 2, server("7B", "bf16", 8)), pod, batch, training]


def test_audit_sums_the_gpus_asked_beyond_the_need_per_namespace_and_class(rules: Rules) -> None:
    found = Audit(report=judge(listed(rules), context=as_context(rules)), namespaces=["ml-team", "serving"],
                  modes={"ml-team": "deny", "serving": "deny"})
    text = audit_cli.render_text(found)
    assert ("namespace serving (mode deny): 2 judged, 0 would be denied, 2 warned; 16 GPUs asked beyond the need "
            "(inference 16)") in text
    assert "namespace ml-team (mode deny): 2 judged, 0 would be denied, 1 warned; 1 GPUs asked beyond the need " \
           "(batch 1)" in text
    assert "  WARN  gpu-over-provisioned (2): Deployment mistral-7b spec.template; Pod llama-70b-0" in text
    assert text.splitlines()[-1] == ("4 judged in 2 namespaces: 0 would be denied in deny mode, 3 admitted with "
                                     "warnings; 17 GPUs asked beyond the need (batch 1, inference 16)")
    payload = json.loads(audit_cli.render_json(found))
    assert payload["gpusBeyondNeed"] == {"total": 17, "byClass": {"batch": 1, "inference": 16}}
    assert [ns["gpusBeyondNeed"]["total"] for ns in payload["namespaces"]] == [1, 16]


def test_policy_reports_carry_the_finding_and_the_counts(rules: Rules) -> None:
    report = judge(listed(rules), context=as_context(rules))
    entries = {(e["resources"][0]["name"], e["rule"]): e for e in report_results(report.results, "deny")}
    told = entries["mistral-7b", "gpu-over-provisioned"]
    assert told["result"] == "warn" and told["message"].startswith("needs 15.6Gi of GPU memory, which 1 h100-80g")
    assert told["properties"] | {"template": "-"} == {"class": "inference", "mode": "deny", "template": "-",
                                                      "gpus": "8", "gpusNeeded": "1", "gpusBeyondNeed": "14"}
    passed = entries["sft-0", "gpu-profile"]
    assert (passed["result"], passed["properties"]["gpusNeeded"], passed["properties"]["gpusBeyondNeed"]) == (
        "pass", "8", "0")
