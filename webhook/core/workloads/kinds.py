"""The kinds ai-admission reads, one table entry each: where their pod templates sit, what their controllers add to
the pods they create, and how many pods make one job.

Each entry follows the kind's published API and its controller's code (the sources are named beside each entry).
What is common is data (`webhook.core.workloads.templates.Site`); a kind whose pod spec is assembled from its own fields (KServe's
model specs, Dynamo's services, the vLLM production stack's runtime, Spark's driver and executor, Argo's
templates, a Kubeflow TrainJob) has one small builder here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from .. import podview
from ..context import Context
from .generic import generic_templates, readable
from .parallelism import World
from .templates import (
    BUILT,
    POD_SPEC,
    Element,
    Kind,
    Owner,
    Resolver,
    Site,
    Template,
    dig,
    from_sites,
    pod_from,
    with_env,
)

APPS = "apps/v1"
BATCH = "batch/v1"
JOB_LABELS = {"batch.kubernetes.io/job-name": "{name}", "job-name": "{name}"}


def _int(value: Any, default: int) -> int:
    """An integer field as written (a number, or digits in a string), else ``default``."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return default


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _replicas(element: Element) -> tuple[int, str]:
    count = _int(element.get("replicas"), 1)
    return count, f"{element.key} {count}"


# -- workloads and Jobs ---------------------------------------------------------------------------------------------

def _workload(kind: str, owner_kind: str) -> Kind:
    return Kind("apps", kind, kind.lower() + "s", (Site("spec", Owner(APPS, owner_kind)),))


def _job_pods(element: Element) -> tuple[int, str]:
    """An Indexed Job's pods run as one job (torchrun across the completions); a plain Job's do not."""
    if element.get("completionMode") == "Indexed":
        count = _int(element.get("parallelism"), 1)
        return count, f"Indexed, parallelism {count}"
    return 1, ""


# -- Kubeflow training-operator (kubeflow/training-operator pkg/controller.v1/*; labels from
#    pkg/apis/kubeflow.org/v1/common_types.go: job-name, replica-type, operator-name) --------------------------------

def _kubeflow(kind: str, field: str) -> Kind:
    site = Site(f"spec.{field}.*", Owner("{apiVersion}", kind),
                labels={"training.kubeflow.org/job-name": "{name}", "training.kubeflow.org/replica-type": "{key_lower}",
                        "training.kubeflow.org/operator-name": f"{kind.lower()}-controller"},
                pods=_replicas)
    return Kind("kubeflow.org", kind, kind.lower() + "s", (site,))


# -- JobSet (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go; one Job per replica, `parallelism` pods
#    each) and Kubeflow Trainer runtimes, whose template is a JobSet (kubeflow/trainer
#    pkg/apis/trainer/v1alpha1/trainingruntime_types.go) -------------------------------------------------------------

def _jobset_pods(element: Element) -> tuple[int, str]:
    jobs = _int(element.get("replicas"), 1)
    parallelism = _int(element.get("template.spec.parallelism"), 1)
    name = element.value.get("name", element.index)
    return jobs * parallelism, f"replicatedJob {name}: {jobs} jobs x parallelism {parallelism}"


def _jobset_site(path: str) -> Site:
    return Site(path, Owner(BATCH, "Job", "{name}-{item_name}-0"), template="template.spec.template",
                labels={"jobset.sigs.k8s.io/jobset-name": "{name}", "jobset.sigs.k8s.io/replicatedjob-name": "{item_name}",
                        "batch.kubernetes.io/job-name": "{name}-{item_name}-0", "job-name": "{name}-{item_name}-0"},
                pods=_jobset_pods, group="{name}-{item_name}")


def _runtime_pods(element: Element) -> tuple[int, str]:
    """The trainer's node Job runs `mlPolicy.numNodes` pods; the other jobs (initializers, launcher) their own."""
    name = str(element.value.get("name", element.index))
    step = dig(element.value, "template.metadata.labels")
    trainer = name == "node" or (isinstance(step, dict) and step.get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer")
    if trainer:
        nodes = _int(dig(element.obj, "spec.mlPolicy.numNodes"), 1)
        return nodes, f"mlPolicy.numNodes {nodes}"
    return _jobset_pods(element)


def _runtime(kind: str, scope: str) -> Kind:
    site = Site("spec.template.spec.replicatedJobs[]", Owner(BATCH, "Job", "{name}-{item_name}-0"),
                template="template.spec.template",
                labels={"jobset.sigs.k8s.io/jobset-name": "{name}", "jobset.sigs.k8s.io/replicatedjob-name": "{item_name}"},
                pods=_runtime_pods, group="{name}-{item_name}")
    return Kind("trainer.kubeflow.org", kind, kind.lower() + "s", (site,), scope=scope)


# -- Kubeflow Trainer TrainJob: the node pods come from the runtime; the TrainJob gives image, env, resources and the
#    node count (trainer.{image,command,args,env,resourcesPerNode,numNodes}); kubeflow/trainer
#    pkg/apis/trainer/v1alpha1/trainjob_types.go ---------------------------------------------------------------------

def _train_job(obj: Mapping[str, Any], ctx: Context, resolve: Resolver | None) -> list[Template]:
    spec = podview.as_dict(obj.get("spec"))
    trainer = podview.as_dict(spec.get("trainer"))
    runtime_ref = podview.as_dict(spec.get("runtimeRef"))
    namespace = str(podview.metadata(obj).get("namespace") or "")
    runtime = None
    if resolve is not None and runtime_ref.get("name"):
        runtime = resolve(str(runtime_ref.get("kind") or "ClusterTrainingRuntime"), str(runtime_ref["name"]), namespace)
    base: dict[str, Any] = {"metadata": {}, "spec": {"containers": [{"name": "node"}]}}
    nodes = 1
    if runtime is not None:
        for job in podview.as_list(dig(runtime, "spec.template.spec.replicatedJobs")):
            if podview.as_dict(job).get("name") == "node":
                base = podview.as_dict(dig(job, "template.spec.template")) or base
        nodes = _int(dig(runtime, "spec.mlPolicy.numNodes"), 1)
    spec_part = dict(podview.as_dict(base.get("spec")))
    containers = [dict(c) for c in podview.containers({"spec": spec_part})] or [{"name": "node"}]
    node = next((c for c in containers if c.get("name") == "node"), containers[0])
    for key in ("image", "command", "args"):
        if key in trainer:
            node[key] = trainer[key]
    if "env" in trainer:
        node["env"] = [*podview.as_list(node.get("env")), *podview.as_list(trainer["env"])]
    if "resourcesPerNode" in trainer:
        node["resources"] = trainer["resourcesPerNode"]
    spec_part["containers"] = containers
    meta = podview.as_dict(base.get("metadata"))
    notes = {**podview.string_map(meta.get("annotations")), **podview.string_map(spec.get("annotations")),
             **podview.annotation_map(obj)}
    labels = {**podview.string_map(meta.get("labels")), **podview.string_map(spec.get("labels"))}
    template = {"metadata": {"labels": labels, "annotations": notes}, "spec": spec_part}
    nodes = _int(trainer.get("numNodes"), nodes)
    fields = {"name": str(podview.metadata(obj).get("name", ""))}
    pod = pod_from(obj, template, owner=Owner(BATCH, "Job", "{name}-node-0"), fields=fields,
                   labels={"jobset.sigs.k8s.io/jobset-name": "{name}", "jobset.sigs.k8s.io/replicatedjob-name": "node"},
                   env={"PET_NNODES": str(nodes)} if nodes > 1 else None)
    world = World(nodes, "TrainJob " + ("trainer.numNodes" if "numNodes" in trainer else "runtime mlPolicy.numNodes")
                  + f" {nodes}") if nodes > 1 else None
    why = () if runtime is not None or not runtime_ref.get("name") else (
        f'runtime {runtime_ref.get("kind") or "ClusterTrainingRuntime"} "{runtime_ref["name"]}" is not known here: '
        f"judged from the TrainJob's own fields (the runtime is judged on its own)",)
    return [Template("spec.trainer", pod, template, world=world, notes=why, form=BUILT, replicas=nodes)]


# -- KServe InferenceService (kserve/kserve pkg/apis/serving/v1beta1/predictor.go, component.go): a component's pod
#    fields are inlined in it; its model server is `model` or a framework field, each an inlined container that the
#    controller names kserve-container; `workerSpec` adds the worker pods of a multi-node predictor ----------------------

_FRAMEWORKS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
               "lightgbm", "paddle")
_COMPONENT_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "volumes", "initContainers",
                         "serviceAccountName", "schedulerName", "runtimeClassName", "imagePullSecrets",
                         "securityContext", "topologySpreadConstraints", "resourceClaims", "hostIPC", "hostNetwork")
_CONTAINER_FIELDS = ("image", "env", "resources", "args", "command", "volumeMounts", "ports", "envFrom")


def _component(element: Element) -> dict[str, Any] | None:
    component = element.value
    containers = [dict(c) for c in podview.as_list(component.get("containers")) if isinstance(c, dict)]
    for framework in _FRAMEWORKS:
        server = podview.as_dict(component.get(framework))
        if server:
            container = {k: server[k] for k in _CONTAINER_FIELDS if k in server}
            containers.insert(0, {"name": "kserve-container", **container})
            break
    if not containers:
        return None
    degrees = _isvc_degrees(component)
    if degrees:
        containers = [with_env(c, degrees, overwrite=True) if c.get("name") == "kserve-container" else c
                      for c in containers]
    spec = {k: component[k] for k in _COMPONENT_POD_FIELDS if k in component}
    spec["containers"] = containers
    notes = {**podview.annotation_map(element.obj), **podview.string_map(component.get("annotations"))}
    return {"metadata": {"labels": podview.string_map(component.get("labels")), "annotations": notes}, "spec": spec}


def _isvc_degrees(component: Mapping[str, Any]) -> dict[str, str]:
    """The parallel degrees a multi-node predictor's ``workerSpec`` states, as the env its controller writes on the
    head's kserve-container (``TENSOR_PARALLEL_SIZE``, ``PIPELINE_PARALLEL_SIZE``: predictor.go, overwriting any
    value of the same name), so the head is read as stating its parallelism; only the degrees the spec sets."""
    worker = component.get("workerSpec")
    if not isinstance(worker, dict):
        return {}
    fields = (("TENSOR_PARALLEL_SIZE", "tensorParallelSize"), ("PIPELINE_PARALLEL_SIZE", "pipelineParallelSize"))
    degrees = {env: _int(worker.get(field), 0) for env, field in fields}
    return {env: str(degree) for env, degree in degrees.items() if degree > 0}


def _isvc_worker(element: Element) -> dict[str, Any] | None:
    worker = podview.as_dict(element.value.get("workerSpec"))
    containers = [dict(c) for c in podview.as_list(worker.get("containers")) if isinstance(c, dict)]
    if not containers:
        return None
    spec = {k: worker[k] for k in _COMPONENT_POD_FIELDS if k in worker}
    spec["containers"] = containers
    return {"metadata": {"annotations": podview.annotation_map(element.obj)}, "spec": spec}


def _isvc_world(element: Element) -> tuple[int, str]:
    """Ray nodes of a multi-node predictor: tensor x pipeline GPUs over the worker's GPUs (KServe's own count,
    pkg/controller/v1beta1/inferenceservice/components/predictor.go)."""
    worker = podview.as_dict(element.value.get("workerSpec"))
    if not worker:
        return 1, ""
    tensor = _int(worker.get("tensorParallelSize"), 1)
    pipeline = _int(worker.get("pipelineParallelSize"), 1)
    gpus = 0
    for container in podview.as_list(worker.get("containers")):
        requests, limits = podview.resources(podview.as_dict(container))
        gpus += _int(requests.get("nvidia.com/gpu", limits.get("nvidia.com/gpu")), 0)
    nodes = max(1, math.ceil(tensor * pipeline / gpus)) if gpus else max(pipeline, 1)
    return nodes, f"workerSpec tensor {tensor} x pipeline {pipeline} over {gpus or '?'} GPUs a node: {nodes} nodes"


def _isvc_sites() -> tuple[Site, ...]:
    labels = {"serving.kserve.io/inferenceservice": "{name}", "component": "{key}", "app.kubernetes.io/component": "{key}"}
    owner = Owner(APPS, "ReplicaSet", "{name}-{key}")
    sites = [Site(f"spec.{component}", owner, form=BUILT, build=_component, labels={**labels, "component": component,
                                                                                   "app.kubernetes.io/component": component})
             for component in ("predictor", "transformer", "explainer")]
    head = Site("spec.predictor", owner, form=BUILT, build=_component, group="{name}-predictor",
                labels={**labels, "component": "predictor", "app.kubernetes.io/component": "predictor"})
    worker = Site("spec.predictor", Owner(APPS, "ReplicaSet", "{name}-predictor-worker"), form=BUILT, build=_isvc_worker,
                  group="{name}-predictor", pods=_isvc_world,
                  labels={"serving.kserve.io/inferenceservice": "{name}", "component": "predictor",
                          "app": "isvc.{name}-predictor-worker"})
    return (head, *sites[1:], worker)


# -- KServe LLMInferenceService (kserve/kserve pkg/apis/serving/v1alpha1/llm_inference_service_types.go):
#    `template` and `worker` are bare pod specs; with `worker` the controller makes a LeaderWorkerSet of
#    `parallelism` size (data / dataLocal, else pipeline), else a Deployment; `prefill` is a second such workload ------

def _llm_size(element: Element) -> tuple[int, str]:
    if not podview.as_dict(element.value.get("worker")):
        return 1, ""
    parallelism = podview.as_dict(element.value.get("parallelism"))
    data = _int(parallelism.get("data"), 0)
    local = _int(parallelism.get("dataLocal"), 0)
    if data or local:
        size = max(1, data // max(local, 1))
        return size, f"parallelism data {data} / dataLocal {max(local, 1)}"
    pipeline = _int(parallelism.get("pipeline"), 1)
    return pipeline, f"parallelism pipeline {pipeline}"


def _llm_workers(element: Element) -> tuple[int, str]:
    size, text = _llm_size(element)
    leader = 1 if podview.as_dict(element.value.get("template")) else 0
    return max(size - leader, 0), f"{text}: " + (_plural(size - leader, "worker") if leader else _plural(size, "pod"))


def _llm_sites(prefix: str, role: str) -> tuple[Site, ...]:
    labels = {"app.kubernetes.io/part-of": "llminferenceservice", "app.kubernetes.io/name": "{name}",
              "kserve.io/component": "workload", "llm-d.ai/role": role}
    group = "{name}" + ("-prefill" if prefix != "spec" else "")
    leader = Site(prefix, Owner(APPS, "StatefulSet", "{name}-kserve-mn"), template="template", form=POD_SPEC,
                  labels=labels, group=group,
                  pods=lambda e: (1, "leader 1") if podview.as_dict(e.value.get("worker")) else (0, ""))
    worker = Site(prefix, Owner(APPS, "StatefulSet", "{name}-kserve-mn"), template="worker", form=POD_SPEC,
                  labels={**labels, "app.kubernetes.io/component": "llminferenceservice-workload-worker"},
                  env={"LWS_GROUP_SIZE": "{world}"}, group=group, pods=_llm_workers)
    return leader, worker


# -- LeaderWorkerSet (kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go,
#    pkg/utils/pod/pod_utils.go: LWS_LEADER_ADDRESS, LWS_GROUP_SIZE on every container) -------------------------------

def _lws_leader_pods(element: Element) -> tuple[int, str]:
    return (1, "leader 1") if podview.as_dict(element.value.get("leaderTemplate")) else (0, "")


def _lws_worker_pods(element: Element) -> tuple[int, str]:
    size = _int(element.value.get("size"), 1)
    leader = 1 if podview.as_dict(element.value.get("leaderTemplate")) else 0
    return size - leader, f"size {size}: " + (_plural(size - leader, "worker") if leader else _plural(size, "pod"))


def _lws_sites() -> tuple[Site, ...]:
    labels = {"leaderworkerset.sigs.k8s.io/name": "{name}"}
    env = {"LWS_GROUP_SIZE": "{world}", "LWS_LEADER_ADDRESS": "{name}-0.{name}"}
    return (Site("spec.leaderWorkerTemplate", Owner(APPS, "StatefulSet"), template="leaderTemplate",
                 labels={**labels, "leaderworkerset.sigs.k8s.io/worker-index": "0"}, env=env, pods=_lws_leader_pods),
            Site("spec.leaderWorkerTemplate", Owner(APPS, "StatefulSet", "{name}-0"), template="workerTemplate",
                 labels=labels, env=env, pods=_lws_worker_pods))


# -- Volcano Job (volcano-sh/volcano pkg/controllers/job/job_controller_util.go; plugins under
#    pkg/controllers/job/plugins: pytorch MASTER_ADDR/WORLD_SIZE, tensorflow TF_CONFIG, mpi MPI_HOST, svc
#    VC_<TASK>_HOSTS/VC_<TASK>_NUM, env VC_TASK_INDEX) -------------------------------------------------------------------

_VOLCANO_PLUGIN_ENV: dict[str, dict[str, str]] = {
    "pytorch": {"MASTER_ADDR": "{name}-master-0.{name}", "WORLD_SIZE": "{world}"},
    "tensorflow": {"TF_CONFIG": "{}"}, "mpi": {"MPI_HOST": "{name}-worker-0.{name}"},
    "svc": {"VC_{task}_HOSTS": "", "VC_{task}_NUM": ""}, "env": {"VC_TASK_INDEX": "0"},
}


def _volcano_job(obj: Mapping[str, Any], ctx: Context, resolve: Resolver | None) -> list[Template]:
    spec = podview.as_dict(obj.get("spec"))
    plugins = set(podview.as_dict(spec.get("plugins")))
    if "mpi" in plugins or "pytorch" in plugins:
        plugins.add("svc")
    env: dict[str, str] = {}
    for plugin in sorted(plugins):
        for key, value in _VOLCANO_PLUGIN_ENV.get(plugin, {}).items():
            if "{task}" in key:
                for task in podview.as_list(spec.get("tasks")):
                    task_name = str(podview.as_dict(task).get("name", "")).upper().replace("-", "_")
                    replicas = str(_int(podview.as_dict(task).get("replicas"), 1))
                    env[key.replace("{task}", task_name)] = replicas if key.endswith("_NUM") else value
            else:
                env[key] = value
    return from_sites(Kind("batch.volcano.sh", "Job", "jobs", (replace(_VOLCANO_TASKS, env=env),)), obj, ctx)


_VOLCANO_TASKS = Site("spec.tasks[]", Owner("{apiVersion}", "Job"),
                      labels={"volcano.sh/job-name": "{name}", "volcano.sh/task-spec": "{item_name}"},
                      pods=lambda e: (_int(e.value.get("replicas"), 1),
                                      f"task {e.value.get('name', e.index)} {_int(e.value.get('replicas'), 1)}"))


# -- KubeRay (ray-project/kuberay ray-operator/controllers/ray/common/pod.go: labels ray.io/cluster, node-type,
#    group; RayService clusters ray.io/serve); RayService's cluster is spec.rayClusterConfig, RayJob's
#    spec.rayClusterSpec ------------------------------------------------------------------------------------------------

def _ray_group_pods(element: Element) -> tuple[int, str]:
    count = (_int(element.value.get("replicas"), _int(element.value.get("minReplicas"), 1))
             * _int(element.value.get("numOfHosts"), 1))
    return count, f"worker group {element.value.get('groupName', element.index)} {count}"


def _ray_sites(prefix: str, serve: bool, group_pods: bool) -> tuple[Site, ...]:
    owner = Owner("ray.io/v1", "RayCluster")
    extra = {"ray.io/serve": "true"} if serve else {}
    head = Site(f"{prefix}.headGroupSpec", owner, labels={"ray.io/cluster": "{name}", "ray.io/node-type": "head",
                                                          "ray.io/group": "headgroup", **extra},
                pods=(lambda e: (1, "head 1")) if group_pods else None)
    workers = Site(f"{prefix}.workerGroupSpecs[]", owner,
                   labels={"ray.io/cluster": "{name}", "ray.io/node-type": "worker", "ray.io/group": "{item_name}", **extra},
                   pods=_ray_group_pods if group_pods else None)
    return head, workers


def _ray_job(obj: Mapping[str, Any], ctx: Context, resolve: Resolver | None) -> list[Template]:
    """A RayJob: its cluster's pods; one whose entrypoint runs Ray Train is a training job (its workers one world)."""
    pattern = ctx.rules.ray_train_pattern
    said = [str(dig(obj, "spec.entrypoint") or ""), *podview.labels(obj).values()]
    training = pattern is not None and any(pattern.search(text) for text in said)
    kind = Kind("ray.io", "RayJob", "rayjobs", _ray_sites("spec.rayClusterSpec", False, training))
    templates = from_sites(kind, obj, ctx)
    if not training:
        return templates
    note = ("the RayJob's entrypoint runs Ray Train, so its pods are judged as training; their pods are classified "
            "so only if the pod templates carry annotation ai-admission.io/workload-type: training")
    for template in templates:
        notes = podview.metadata(template.pod).setdefault("annotations", {})
        if "ai-admission.io/workload-type" not in notes:
            notes["ai-admission.io/workload-type"] = "training"
            template.notes = (*template.notes, note)
    return templates


# -- NVIDIA Dynamo DynamoGraphDeployment (ai-dynamo/dynamo deploy/operator/api/v1alpha1: services.<name> with
#    resources.limits.gpu (turned into <gpuType or nvidia.com/gpu> on container "main",
#    internal/controller_common/resource.go), extraPodSpec (+ mainContainer), multinode.nodeCount; v1beta1:
#    components[] with a podTemplate) -------------------------------------------------------------------------------------

def _dynamo_resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for part in ("requests", "limits"):
        item = podview.as_dict(resources.get(part))
        values: dict[str, Any] = {k: item[k] for k in ("cpu", "memory") if item.get(k)}
        if item.get("gpu"):
            values[str(item.get("gpuType") or "nvidia.com/gpu")] = str(item["gpu"])
        values.update(podview.as_dict(item.get("custom")))
        if values:
            result[part] = values
    return result


def _dynamo_service(element: Element) -> dict[str, Any] | None:
    service = element.value
    extra = dict(podview.as_dict(service.get("extraPodSpec")))
    main = dict(podview.as_dict(extra.pop("mainContainer", None)))
    main["name"] = "main"
    resources = _dynamo_resources(podview.as_dict(service.get("resources")))
    if resources:
        main["resources"] = resources
    env = [*podview.as_list(dig(element.obj, "spec.envs")), *podview.as_list(service.get("envs"))]
    if env:
        main["env"] = [*env, *podview.as_list(main.get("env"))]
    nodes = _int(dig(service, "multinode.nodeCount"), 1)
    if nodes > 1:
        main["env"] = [*podview.as_list(main.get("env")), {"name": "LWS_GROUP_SIZE", "value": str(nodes)}]
    spec = {**extra, "containers": [main, *podview.as_list(extra.get("containers"))]}
    meta = podview.as_dict(service.get("extraPodMetadata"))
    labels = {**podview.string_map(service.get("labels")), **podview.string_map(meta.get("labels"))}
    notes = {**podview.annotation_map(element.obj), **podview.string_map(service.get("annotations")),
             **podview.string_map(meta.get("annotations"))}
    return {"metadata": {"labels": labels, "annotations": notes}, "spec": spec}


def _dynamo_pods(element: Element) -> tuple[int, str]:
    nodes = _int(dig(element.value, "multinode.nodeCount"), 1)
    return nodes, f"{element.key or element.value.get('name', element.index)} multinode.nodeCount {nodes}"


def _dynamo_sites() -> tuple[Site, ...]:
    labels = {"nvidia.com/dynamo-graph-deployment-name": "{name}", "nvidia.com/dynamo-component": "{key}"}
    return (Site("spec.services.*", Owner(APPS, "ReplicaSet", "{name}-{key_lower}"), form=BUILT, build=_dynamo_service,
                 labels=labels, pods=_dynamo_pods, group="{name}-{key}"),
            Site("spec.components[]", Owner(APPS, "ReplicaSet", "{name}-{item_name}"), template="podTemplate",
                 labels={**labels, "nvidia.com/dynamo-component": "{item_name}"},
                 env={"LWS_GROUP_SIZE": "{world}"}, pods=_dynamo_pods, group="{name}-{item_name}"))


# -- vLLM production stack VLLMRuntime (vllm-project/production-stack operator/api/v1alpha1/vllmruntime_types.go;
#    operator/internal/controller/vllmruntime_controller.go makes a Deployment: container "vllm", resources from
#    deploymentConfig.resources {cpu, memory, gpu, gpuType}, labels app + the runtime's own labels) -----------------------

def _vllm_runtime(element: Element) -> dict[str, Any] | None:
    spec = element.value
    config = podview.as_dict(spec.get("deploymentConfig"))
    resources = podview.as_dict(config.get("resources"))
    amounts: dict[str, Any] = {k: resources[k] for k in ("cpu", "memory") if resources.get(k)}
    gpu = resources.get("gpu")
    if gpu:
        amounts[str(resources.get("gpuType") or "nvidia.com/gpu")] = str(gpu)
    args = [str(dig(spec, "model.modelURL") or "")]
    tensor = _int(dig(spec, "vllmConfig.tensorParallelSize"), 0)
    if tensor:
        args += ["--tensor-parallel-size", str(tensor)]
    container: dict[str, Any] = {"name": "vllm", "args": args,
                                 "env": [e for e in podview.as_list(dig(spec, "vllmConfig.env")) if isinstance(e, dict)]}
    if amounts:
        container["resources"] = {"requests": amounts, "limits": amounts}
    pod_spec: dict[str, Any] = {"containers": [container]}
    terms = podview.as_list(config.get("nodeSelectorTerms"))
    if terms:
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    if podview.as_list(config.get("toleration")):
        pod_spec["tolerations"] = config["toleration"]
    labels = {"app": element.name, **podview.labels(element.obj)}
    return {"metadata": {"labels": labels, "annotations": {**podview.annotation_map(element.obj),
                                                          **podview.string_map(config.get("podAnnotations"))}},
            "spec": pod_spec}


# -- Spark operator SparkApplication (kubeflow/spark-operator api/v1beta2/sparkapplication_types.go: driver and
#    executor with cores, memory, gpu {name, quantity}, labels, nodeSelector, ...; the operator's pod webhook sets the
#    GPU limit, internal/webhook/sparkpod_defaulter.go; labels spark-role, sparkoperator.k8s.io/app-name) --------------

def _spark_pod(element: Element) -> dict[str, Any] | None:
    role = element.value
    base = podview.as_dict(role.get("template"))
    spec = dict(podview.as_dict(base.get("spec")))
    container: dict[str, Any] = {"name": "spark-kubernetes-driver" if element.path.endswith("driver")
                                 else "spark-kubernetes-executor"}
    containers = [dict(c) for c in podview.containers({"spec": spec})]
    if containers:
        container = {**containers[0], **container}
    limits: dict[str, Any] = {}
    if role.get("memory"):
        limits["memory"] = role["memory"]
    if role.get("cores"):
        limits["cpu"] = role.get("coreLimit") or role["cores"]
    gpu = podview.as_dict(role.get("gpu"))
    if gpu.get("name") and _int(gpu.get("quantity"), 0) > 0:
        limits[str(gpu["name"])] = str(gpu["quantity"])
    if limits:
        container["resources"] = {"limits": limits}
    if role.get("env"):
        container["env"] = role["env"]
    spec["containers"] = [container, *containers[1:]]
    app = podview.as_dict(element.obj.get("spec"))
    for key in ("nodeSelector", "tolerations", "affinity", "schedulerName", "priorityClassName", "initContainers"):
        value = role.get(key) if role.get(key) is not None else (app.get(key) if key == "nodeSelector" else None)
        if value is not None:
            spec[key] = value
    labels = {**podview.string_map(dig(base, "metadata.labels")), **podview.string_map(role.get("labels"))}
    notes = {**podview.string_map(dig(base, "metadata.annotations")), **podview.string_map(role.get("annotations"))}
    return {"metadata": {"labels": labels, "annotations": notes}, "spec": spec}


def _spark_sites(prefix: str) -> tuple[Site, ...]:
    labels = {"sparkoperator.k8s.io/app-name": "{name}", "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    return (Site(f"{prefix}.driver", Owner("sparkoperator.k8s.io/v1beta2", "SparkApplication"), form=BUILT,
                 build=_spark_pod, labels={**labels, "spark-role": "driver"}),
            Site(f"{prefix}.executor", Owner("v1", "Pod", "{name}-driver"), form=BUILT, build=_spark_pod,
                 labels={**labels, "spark-role": "executor"}))


# -- Argo Workflows (argoproj/argo-workflows workflow/controller/workflowpod.go: a pod per container, script or
#    containerSet template, the template's container named "main", workflow-level nodeSelector, tolerations,
#    affinity and podMetadata inherited unless the template sets its own; label workflows.argoproj.io/workflow) -------

def _argo_pod(element: Element) -> dict[str, Any] | None:
    template = element.value
    containers: list[dict[str, Any]] = []
    for key in ("container", "script"):
        main = podview.as_dict(template.get(key))
        if main:
            containers.append({**{k: v for k, v in main.items() if k != "source"}, "name": "main"})
    containers += [dict(c) for c in podview.as_list(dig(template, "containerSet.containers")) if isinstance(c, dict)]
    if not containers:
        return None
    containers += [dict(c) for c in podview.as_list(template.get("sidecars")) if isinstance(c, dict)]
    workflow = podview.as_dict(dig(element.obj, "spec.workflowSpec") or dig(element.obj, "spec"))
    spec: dict[str, Any] = {"containers": containers}
    for key in ("nodeSelector", "tolerations", "affinity", "schedulerName", "priorityClassName"):
        value = template.get(key) if template.get(key) is not None else workflow.get(key)
        if value is not None:
            spec[key] = value
    if podview.as_list(template.get("initContainers")):
        spec["initContainers"] = template["initContainers"]
    pod_meta = podview.as_dict(workflow.get("podMetadata"))
    meta = podview.as_dict(template.get("metadata"))
    labels = {**podview.string_map(pod_meta.get("labels")), **podview.string_map(meta.get("labels"))}
    notes = {**podview.string_map(pod_meta.get("annotations")), **podview.string_map(meta.get("annotations"))}
    return {"metadata": {"labels": labels, "annotations": notes}, "spec": spec}


def _argo(kind: str, resource: str, prefix: str, scope: str = "Namespaced") -> Kind:
    site = Site(f"{prefix}.templates[]", Owner("argoproj.io/v1alpha1", "Workflow"), form=BUILT, build=_argo_pod,
                labels={"workflows.argoproj.io/workflow": "{name}", "workflows.argoproj.io/completed": "false"})
    return Kind("argoproj.io", kind, resource, (site,), scope=scope)


# -- Katib Experiment (kubeflow/katib pkg/apis/controller/experiments/v1beta1/experiment_types.go): the trial
#    template's trialSpec is an object of another kind (a Job, PyTorchJob, TrainJob, ...), created once per trial;
#    Katib's pod webhook labels the trial pods katib.kubeflow.org/experiment and /trial ---------------------------------

def _experiment(obj: Mapping[str, Any], ctx: Context, resolve: Resolver | None) -> list[Template]:
    trial = podview.as_dict(dig(obj, "spec.trialTemplate.trialSpec"))
    name = str(podview.metadata(obj).get("name", ""))
    if not trial:
        return []
    inner = {**trial, "metadata": {**podview.metadata(trial), "name": f"{name}-trial",
                                   "namespace": podview.metadata(obj).get("namespace")}}
    found = pod_templates(inner, ctx=ctx, resolve=resolve) or []
    for template in found:
        template.path = f"spec.trialTemplate.trialSpec.{template.path}"
        labels = podview.metadata(template.pod).setdefault("labels", {})
        labels.setdefault("katib.kubeflow.org/experiment", name)
        labels.setdefault("katib.kubeflow.org/trial", f"{name}-trial")
    return found


# -- KubeVirt (kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/schema.go; pkg/virt-controller/services/
#    template.go): a VirtualMachineInstance runs in one virt-launcher pod, whose compute container asks for each
#    device of spec.domain.devices.gpus and .hostDevices by its deviceName (one each; the resource NVIDIA's KubeVirt
#    device plugin names after the card or vGPU type: rules accelerators.deviceResources); the pod gets the VMI's
#    nodeSelector, affinity, tolerations, priority class and scheduler, and its labels and annotations (all but
#    kubectl's). A VirtualMachine makes a VMI of the same name from spec.template. -------------------------------------

_VMI_POD_FIELDS = ("nodeSelector", "affinity", "tolerations", "priorityClassName", "schedulerName",
                   "topologySpreadConstraints")
_VMI_DEVICE_LISTS = ("gpus", "hostDevices")


def _launcher(spec: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The virt-launcher pod of a VMI ``spec`` with ``meta`` (labels, annotations); None without devices."""
    devices = podview.as_dict(dig(spec, "domain.devices"))
    counts: dict[str, int] = {}
    for field in _VMI_DEVICE_LISTS:
        for device in podview.as_list(devices.get(field)):
            name = podview.as_dict(device).get("deviceName")
            if isinstance(name, str) and name:
                counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None
    limits = {name: str(count) for name, count in counts.items()}
    requests: dict[str, Any] = dict(limits)
    memory = dig(spec, "domain.resources.requests.memory") or dig(spec, "domain.memory.guest")
    if isinstance(memory, (str, int)) and not isinstance(memory, bool):
        requests["memory"] = memory  # the guest's memory; the pod adds KubeVirt's overhead
    pod_spec = {k: spec[k] for k in _VMI_POD_FIELDS if k in spec}
    pod_spec["containers"] = [{"name": "compute", "resources": {"limits": limits, "requests": requests}}]
    return {"metadata": {"labels": podview.string_map(meta.get("labels")),
                         "annotations": podview.string_map(meta.get("annotations"))}, "spec": pod_spec}


def _vmi_launcher(element: Element) -> dict[str, Any] | None:
    """A VirtualMachineInstance (the site is its ``spec``)."""
    return _launcher(element.value, podview.metadata(element.obj))


def _vm_launcher(element: Element) -> dict[str, Any] | None:
    """A VirtualMachine (the site is its ``spec.template``: the VMI's metadata and spec)."""
    return _launcher(podview.as_dict(element.value.get("spec")), podview.as_dict(element.value.get("metadata")))


_LAUNCHER_LABELS = {"kubevirt.io": "virt-launcher", "kubevirt.io/domain": "{name}", "vm.kubevirt.io/name": "{name}"}


def _expanded(group: str, kind: str, resource: str, expand: Any, sites: tuple[Site, ...] = ()) -> Kind:
    """A kind whose templates ``expand`` finds; ``sites``, where it has fixed ones, say where they are (read by
    `webhook.generate.backstop`, which cannot run code)."""
    return Kind(group, kind, resource, sites, expand=expand)


_TABLE: tuple[Kind, ...] = (
    # core v1: a ReplicationController's pods (the replication manager, pkg/controller/replication); a PodTemplate
    # is read by whoever names it (cluster-autoscaler's ProvisioningRequest podSets, queueing systems), so its
    # pods have no known owner
    Kind("", "ReplicationController", "replicationcontrollers", (Site("spec", Owner("v1", "ReplicationController")),)),
    Kind("", "PodTemplate", "podtemplates", (Site("template", None, template=""),)),
    _workload("Deployment", "ReplicaSet"),
    _workload("ReplicaSet", "ReplicaSet"),
    _workload("StatefulSet", "StatefulSet"),
    _workload("DaemonSet", "DaemonSet"),
    Kind("batch", "Job", "jobs", (Site("spec", Owner(BATCH, "Job"), labels=JOB_LABELS, pods=_job_pods,
                                       describe="completions"),)),
    Kind("batch", "CronJob", "cronjobs", (Site("spec.jobTemplate.spec", Owner(BATCH, "Job"), labels=JOB_LABELS,
                                               pods=_job_pods),)),
    _kubeflow("PyTorchJob", "pytorchReplicaSpecs"),
    _kubeflow("TFJob", "tfReplicaSpecs"),
    _kubeflow("MPIJob", "mpiReplicaSpecs"),
    _kubeflow("XGBoostJob", "xgbReplicaSpecs"),
    _kubeflow("PaddleJob", "paddleReplicaSpecs"),
    _kubeflow("JAXJob", "jaxReplicaSpecs"),
    _expanded("kubeflow.org", "Experiment", "experiments", _experiment),
    _expanded("trainer.kubeflow.org", "TrainJob", "trainjobs", _train_job),
    _runtime("TrainingRuntime", "Namespaced"),
    _runtime("ClusterTrainingRuntime", "Cluster"),
    Kind("jobset.x-k8s.io", "JobSet", "jobsets", (_jobset_site("spec.replicatedJobs[]"),)),
    Kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", _lws_sites()),
    Kind("serving.kserve.io", "InferenceService", "inferenceservices", _isvc_sites()),
    Kind("serving.kserve.io", "LLMInferenceService", "llminferenceservices",
         (*_llm_sites("spec", "both"), *_llm_sites("spec.prefill", "prefill"))),
    _expanded("batch.volcano.sh", "Job", "jobs", _volcano_job, (_VOLCANO_TASKS,)),
    Kind("ray.io", "RayCluster", "rayclusters", _ray_sites("spec", False, False)),
    Kind("ray.io", "RayService", "rayservices", _ray_sites("spec.rayClusterConfig", True, False)),
    _expanded("ray.io", "RayJob", "rayjobs", _ray_job, _ray_sites("spec.rayClusterSpec", False, False)),
    Kind("nvidia.com", "DynamoGraphDeployment", "dynamographdeployments", _dynamo_sites()),
    Kind("production-stack.vllm.ai", "VLLMRuntime", "vllmruntimes",
         (Site("spec", Owner(APPS, "ReplicaSet", "{name}"), form=BUILT, build=_vllm_runtime),)),
    Kind("sparkoperator.k8s.io", "SparkApplication", "sparkapplications", _spark_sites("spec")),
    Kind("sparkoperator.k8s.io", "ScheduledSparkApplication", "scheduledsparkapplications",
         _spark_sites("spec.template")),
    _argo("Workflow", "workflows", "spec"),
    _argo("WorkflowTemplate", "workflowtemplates", "spec"),
    _argo("ClusterWorkflowTemplate", "clusterworkflowtemplates", "spec", scope="Cluster"),
    _argo("CronWorkflow", "cronworkflows", "spec.workflowSpec"),
    Kind("kubevirt.io", "VirtualMachineInstance", "virtualmachineinstances",
         (Site("spec", Owner("kubevirt.io/v1", "VirtualMachineInstance"), form=BUILT, build=_vmi_launcher,
               labels=_LAUNCHER_LABELS),)),
    Kind("kubevirt.io", "VirtualMachine", "virtualmachines",
         (Site("spec.template", Owner("kubevirt.io/v1", "VirtualMachineInstance"), form=BUILT, build=_vm_launcher,
               labels=_LAUNCHER_LABELS),)),
)

# (API group, kind) -> Kind. The API group is what the webhook's rules match on.
KINDS: dict[tuple[str, str], Kind] = {(k.group, k.kind): k for k in _TABLE}
assert len(KINDS) == len(_TABLE), "a kind is listed twice"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def templates_of(obj: Mapping[str, Any], *, ctx: Context, group: str | None = None, kind: str | None = None,
                 resolve: Resolver | None = None) -> list[Template] | None:
    """The templates of ``obj`` as the pods they make, or None when its kind is not one ai-admission knows."""
    group = group if group is not None else group_of(str(obj.get("apiVersion", "")))
    kind = kind if kind is not None else str(obj.get("kind", ""))
    entry = KINDS.get((group, kind))
    if entry is None:
        return None
    if entry.expand is not None:
        return entry.expand(obj, ctx, resolve)
    return from_sites(entry, obj, ctx)


def pod_templates(obj: Mapping[str, Any], *, ctx: Context, group: str | None = None, kind: str | None = None,
                  resolve: Resolver | None = None, generic: bool = True) -> list[Template] | None:
    """The templates of ``obj`` by the one reader that reads it: the kinds table's for a kind it knows (`templates_of`),
    else, for a custom resource (``generic``), the generic reader's by shape (`generic_templates`); None where
    neither finds a template to judge. The choice between the two readers is made here, and only here."""
    found = templates_of(obj, ctx=ctx, group=group, kind=kind, resolve=resolve)
    if found is not None:
        return found
    if generic and readable(group if group is not None else group_of(str(obj.get("apiVersion", "")))):
        return generic_templates(obj, ctx) or None
    return None
