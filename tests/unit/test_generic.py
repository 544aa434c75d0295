"""The generic reader: a custom resource with no table entry becomes the pods it will make, from the shapes in it
(pod specs, container objects, GPU count fields), each with the scheduling fields nearest to it.

The objects follow their projects' published API types field for field: sgl-project/ome's ClusterServingRuntime
(engineConfig.leader.runner), NVIDIA's NIMService (image and resources in spec), Tekton's TaskRun (steps with
computeResources, spec.podTemplate), BentoML Yatai's runners (requests.custom), Kaiwo's gpus field.
"""

from __future__ import annotations

from typing import Any

from tests.support.contexts import as_context
from webhook.core.admission import judge_object
from webhook.core.rules import Rules
from webhook.core.workloads.generic import CONTAINER_READER, COUNT_READER, POD_SPEC_READER, generic_templates, gpu_mentions
from webhook.core.workloads.kinds import templates_of

GPU8 = {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi"}, "requests": {"nvidia.com/gpu": "8", "memory": "512Gi"}}


def serving_runtime() -> dict[str, Any]:
    """A ClusterServingRuntime whose leader and worker each hold one container object, `runner`."""
    return {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
            "metadata": {"name": "srt-deepseek", "annotations": {"ai-admission.io/gpu-model": "h100-80g"}},
            "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     "engineConfig": {
                         "leader": {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
                                    "annotations": {"ai-admission.io/gpu-memory": "70Gi"},
                                    "runner": {"name": "ome-container", "image": "docker.io/lmsysorg/sglang:v0.4.6",
                                               "args": ["--tp", "8"], "resources": GPU8}},
                         "worker": {"size": 1, "runner": {"name": "ome-container", "image": "sglang:v0.4.6",
                                                          "resources": GPU8}}},
                     "routerConfig": {"runner": {"name": "router", "image": "router:1",
                                                 "resources": {"limits": {"cpu": "2"}}}}}}


def test_single_container_objects_become_pods_with_the_nearest_scheduling_fields(rules: Rules) -> None:
    templates = {t.path: t for t in generic_templates(serving_runtime(), as_context(rules))}
    assert sorted(templates) == ["spec.engineConfig.leader.runner", "spec.engineConfig.worker.runner"]
    leader = templates["spec.engineConfig.leader.runner"]
    assert leader.reader == CONTAINER_READER
    spec = leader.pod["spec"]
    assert [c["name"] for c in spec["containers"]] == ["ome-container"]
    assert spec["containers"][0]["resources"] == GPU8 and spec["containers"][0]["args"] == ["--tp", "8"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}  # the leader's own
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"                             # from spec, further up
    assert leader.pod["metadata"]["annotations"] == {"ai-admission.io/gpu-model": "h100-80g",
                                                     "ai-admission.io/gpu-memory": "70Gi"}
    assert leader.pod["metadata"]["ownerReferences"][0]["kind"] == "ClusterServingRuntime"
    assert "nodeSelector" not in templates["spec.engineConfig.worker.runner"].pod["spec"]


def test_the_verdict_names_each_container_object(rules: Rules) -> None:
    judged = judge_object(serving_runtime(), ctx=as_context(rules), mode="deny")
    assert judged is not None
    verdict, results = judged
    assert {r.path: r.verdict.allowed for r in results} == {"spec.engineConfig.leader.runner": True,
                                                            "spec.engineConfig.worker.runner": False}
    assert not verdict.allowed
    assert ('ClusterServingRuntime "srt-deepseek" spec.engineConfig.worker.runner' in (verdict.message or "")
            and "does not say how much GPU memory" in (verdict.message or ""))
    assert all(r.reader == CONTAINER_READER for r in results)


def test_image_and_resources_in_spec_are_the_container(rules: Rules) -> None:
    service = {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
               "metadata": {"name": "llama3-8b", "namespace": "nim"},
               "spec": {"image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1.3.3"},
                        "resources": {"limits": {"nvidia.com/gpu": 2}},
                        "nodeSelector": {"karpenter.k8s.aws/instance-family": "g5"},
                        "annotations": {"ai-admission.io/gpu-memory": "20Gi"}, "replicas": 1}}
    (template,) = generic_templates(service, as_context(rules))
    assert template.path == "spec" and template.reader == CONTAINER_READER
    (container,) = template.pod["spec"]["containers"]
    assert container["image"] == "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3" and container["name"] == "spec"
    judged = judge_object(service, ctx=as_context(rules), mode="deny")
    assert judged is not None and judged[0].allowed  # g5: A10G, 20Gi of 24Gi


def test_a_steps_compute_resources_and_the_runs_pod_template(rules: Rules) -> None:
    run = {"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": "eval"},
           "spec": {"podTemplate": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}},
                    "taskSpec": {"steps": [
                        {"name": "fetch", "image": "alpine", "computeResources": {"limits": {"cpu": "1"}}},
                        {"name": "eval", "image": "eval:1", "computeResources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
    (template,) = generic_templates(run, as_context(rules))
    assert template.path == "spec.taskSpec.steps[1]"
    assert template.pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert template.pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_amounts_under_an_operators_own_level_are_read(rules: Rules) -> None:
    deployment = {"apiVersion": "serving.yatai.ai/v1alpha3", "kind": "BentoDeployment", "metadata": {"name": "s"},
                  "spec": {"runners": [{"name": "r", "resources": {"requests": {"cpu": "1", "custom": {
                      "nvidia.com/gpu": "1"}}}}]}}
    (template,) = generic_templates(deployment, as_context(rules))
    assert template.pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "nvidia.com/gpu": "1"}


def test_a_gpu_count_field_is_read_only_where_there_is_no_container(rules: Rules) -> None:
    job = {"apiVersion": "kaiwo.silogen.ai/v1alpha1", "kind": "KaiwoJob", "metadata": {"name": "dpo"},
           "spec": {"gpus": 4, "gpuVendor": "amd", "entrypoint": "python dpo.py"}}
    (template,) = generic_templates(job, as_context(rules))
    assert template.reader == COUNT_READER and template.path == "spec.gpus"
    assert template.pod["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "4"}
    half = {"apiVersion": "run.ai/v1alpha1", "kind": "InferenceWorkload", "metadata": {"name": "t"},
            "spec": {"gpu": {"value": "0.5"}, "image": {"value": "triton"}}}
    (share,) = generic_templates(half, as_context(rules))
    assert share.pod["metadata"]["annotations"] == {"gpu-fraction": "0.5"}  # a share of one GPU, as KAI/Run:ai say it
    with_container = {**serving_runtime(), "spec": {**serving_runtime()["spec"], "gpus": 2}}
    assert all(t.reader == CONTAINER_READER for t in generic_templates(with_container, as_context(rules)))


def test_pod_specs_keep_their_templates_metadata(rules: Rules) -> None:
    rollout = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "coder"},
               "spec": {"template": {"metadata": {"labels": {"app": "coder"},
                                                  "annotations": {"ai-admission.io/gpu-memory": "16Gi"}},
                                     "spec": {"containers": [{"name": "vllm", "image": "vllm",
                                                              "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    (template,) = generic_templates(rollout, as_context(rules))
    assert template.reader == POD_SPEC_READER and template.path == "spec.template.spec"
    assert template.pod["metadata"]["labels"] == {"app": "coder"}
    assert template.pod["metadata"]["annotations"]["ai-admission.io/gpu-memory"] == "16Gi"


def test_a_table_kind_is_never_read_generically(rules: Rules) -> None:
    """A Job with a stray container-like map beside its template: the table's site alone is read."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"extra": {"image": "x", "resources": GPU8},
                    "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    found = templates_of(job, ctx=as_context(rules))
    assert found is not None and [t.path for t in found] == ["spec.template"] and not found[0].generic


def test_fields_of_its_own_that_speak_of_gpus_are_named(rules: Rules) -> None:
    model = {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": {"name": "m", "labels": {"gpu": "yes"}},
             "spec": {"resourceProfile": "nvidia-gpu-l4:1", "nodeSelector": {"gpu": "true"}, "minReplicas": 1}}
    assert generic_templates(model, as_context(rules)) == []
    assert gpu_mentions(model, as_context(rules)) == ["spec.resourceProfile"]  # not the label maps
    workspace = {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace", "metadata": {"name": "w"},
                 "resource": {"instanceType": "g5.12xlarge"}}
    assert gpu_mentions(workspace, as_context(rules)) == ["resource.instanceType"]  # an instance type the rules know
