"""Pod templates of controllers and AI CRDs, each turned into the pod its controller will create.

A Deployment or PyTorchJob is never seen by a pod webhook at ``kubectl apply --dry-run=server`` time, so its
templates are judged here. Like Kyverno's autogen, each template becomes the pod it will produce (the owner
kind and labels the controller adds, the env a framework plugin injects), and that pod goes through the one
policy path: no second copy of the policy for templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from . import podview

PodTemplate = Mapping[str, Any]


@dataclass
class Template:
    """One pod template: where it sits in the object, and the pod it stands for."""

    path: str
    pod: dict[str, Any]
    template: PodTemplate


@dataclass
class _Owner:
    api_version: str
    kind: str
    name: str


def _pod(obj: Mapping[str, Any], template: PodTemplate, *, owner: _Owner, labels: Mapping[str, str] | None = None,
         annotations: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The pod a controller makes from ``template``: its metadata plus what the controller adds."""
    meta = podview.metadata(obj)
    template_meta = podview.as_dict(template.get("metadata"))
    pod_labels = {**podview.string_map(template_meta.get("labels")), **(labels or {})}
    pod_annotations = {**(annotations or {}), **podview.string_map(template_meta.get("annotations"))}
    spec = dict(podview.as_dict(template.get("spec")))
    if env:
        spec["containers"] = [_with_env(c, env) for c in podview.containers({"spec": spec})]
    metadata: dict[str, Any] = {"generateName": f"{meta.get('name', '')}-", "labels": pod_labels,
                                "annotations": pod_annotations,
                                "ownerReferences": [{"apiVersion": owner.api_version, "kind": owner.kind,
                                                     "name": owner.name, "uid": "", "controller": True}]}
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _with_env(container: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    present = set(podview.container_env(container))
    added = [{"name": k, "value": v} for k, v in env.items() if k not in present]
    return {**container, "env": [*podview.as_list(container.get("env")), *added]} if added else dict(container)


def _name(obj: Mapping[str, Any]) -> str:
    return str(podview.metadata(obj).get("name", ""))


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    return podview.as_dict(obj.get("spec"))


def _workload(obj: Mapping[str, Any], owner_kind: str, owner_api: str = "apps/v1") -> Iterator[Template]:
    template = podview.as_dict(_spec(obj).get("template"))
    if template:
        owner = _Owner(owner_api, owner_kind, _name(obj))
        yield Template("spec.template", _pod(obj, template, owner=owner), template)


def _job(obj: Mapping[str, Any], template: PodTemplate, path: str, job_name: str) -> Template:
    labels = {"batch.kubernetes.io/job-name": job_name, "job-name": job_name}
    return Template(path, _pod(obj, template, owner=_Owner("batch/v1", "Job", job_name), labels=labels), template)


def _batch_job(obj: Mapping[str, Any]) -> Iterator[Template]:
    template = podview.as_dict(_spec(obj).get("template"))
    if template:
        yield _job(obj, template, "spec.template", _name(obj))


def _cron_job(obj: Mapping[str, Any]) -> Iterator[Template]:
    job_spec = podview.as_dict(podview.as_dict(_spec(obj).get("jobTemplate")).get("spec"))
    template = podview.as_dict(job_spec.get("template"))
    if template:
        yield _job(obj, template, "spec.jobTemplate.spec.template", _name(obj))


def _kubeflow(field: str, kind: str) -> Callable[[Mapping[str, Any]], Iterator[Template]]:
    """Kubeflow training-operator jobs: every ``<field>.<Role>.template``."""

    def extract(obj: Mapping[str, Any]) -> Iterator[Template]:
        owner = _Owner(str(obj.get("apiVersion", "kubeflow.org/v1")), kind, _name(obj))
        replica_specs = podview.as_dict(_spec(obj).get(field))
        for role, replica_spec in replica_specs.items():
            template = podview.as_dict(podview.as_dict(replica_spec).get("template"))
            if not template:
                continue
            labels = {"training.kubeflow.org/job-name": _name(obj), "training.kubeflow.org/replica-type": str(role).lower(),
                      "training.kubeflow.org/operator-name": f"{kind.lower()}-controller"}
            yield Template(f"spec.{field}.{role}.template", _pod(obj, template, owner=owner, labels=labels), template)

    return extract


def _train_job(obj: Mapping[str, Any]) -> Iterator[Template]:
    """Kubeflow Trainer v2: the node pods come from the runtime; the TrainJob gives image, env and resources."""
    spec = _spec(obj)
    trainer = podview.as_dict(spec.get("trainer"))
    container: dict[str, Any] = {"name": "node"}
    for key in ("image", "command", "args", "env"):
        if key in trainer:
            container[key] = trainer[key]
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    notes = {**podview.string_map(spec.get("annotations")), **podview.annotation_map(obj)}
    num_nodes = trainer.get("numNodes")
    if isinstance(num_nodes, int) and num_nodes > 1:
        notes.setdefault("ai-admission.io/multi-node", "true")
    template = {"metadata": {"labels": podview.string_map(spec.get("labels")), "annotations": notes},
                "spec": {"containers": [container]}}
    labels = {"jobset.sigs.k8s.io/jobset-name": _name(obj)}
    yield Template("spec.trainer", _pod(obj, template, owner=_Owner("batch/v1", "Job", _name(obj)), labels=labels),
                   template)


def _jobset(obj: Mapping[str, Any]) -> Iterator[Template]:
    for index, replicated in enumerate(podview.as_list(_spec(obj).get("replicatedJobs"))):
        replicated = podview.as_dict(replicated)
        job_spec = podview.as_dict(podview.as_dict(replicated.get("template")).get("spec"))
        template = podview.as_dict(job_spec.get("template"))
        if not template:
            continue
        job_name = f"{_name(obj)}-{replicated.get('name', index)}"
        labels = {"jobset.sigs.k8s.io/jobset-name": _name(obj),
                  "jobset.sigs.k8s.io/replicatedjob-name": str(replicated.get("name", "")),
                  "batch.kubernetes.io/job-name": job_name, "job-name": job_name}
        owner = _Owner("batch/v1", "Job", job_name)
        yield Template(f"spec.replicatedJobs[{index}].template.spec.template",
                       _pod(obj, template, owner=owner, labels=labels), template)


_PREDICTOR_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "volumes", "initContainers",
                         "serviceAccountName", "schedulerName", "runtimeClassName", "imagePullSecrets",
                         "securityContext", "topologySpreadConstraints", "resourceClaims")


def _inference_service(obj: Mapping[str, Any]) -> Iterator[Template]:
    """KServe: the predictor's pod fields are inlined in ``spec.predictor``; its container is ``containers`` or
    the ``model`` spec (which KServe turns into ``kserve-container``)."""
    predictor = podview.as_dict(_spec(obj).get("predictor"))
    if not predictor:
        return
    containers = [dict(c) for c in podview.as_list(predictor.get("containers")) if isinstance(c, dict)]
    path = "spec.predictor"
    model = podview.as_dict(predictor.get("model"))
    if model:
        container = {k: model[k] for k in ("image", "env", "resources", "args", "command") if k in model}
        containers.insert(0, {"name": "kserve-container", **container})
        path = "spec.predictor.model"
    spec = {k: predictor[k] for k in _PREDICTOR_POD_FIELDS if k in predictor}
    spec["containers"] = containers
    template = {"metadata": {"labels": podview.string_map(predictor.get("labels")),
                             "annotations": {**podview.annotation_map(obj),
                                             **podview.string_map(predictor.get("annotations"))}},
                "spec": spec}
    labels = {"serving.kserve.io/inferenceservice": _name(obj), "component": "predictor",
              "app.kubernetes.io/component": "predictor"}
    owner = _Owner("apps/v1", "ReplicaSet", f"{_name(obj)}-predictor")
    yield Template(path, _pod(obj, template, owner=owner, labels=labels), template)


_VOLCANO_PLUGIN_ENV = {"pytorch": {"MASTER_ADDR": "", "WORLD_SIZE": ""}, "tensorflow": {"TF_CONFIG": ""},
                       "mpi": {"MPI_HOST": ""}}


def _volcano_job(obj: Mapping[str, Any]) -> Iterator[Template]:
    """Volcano: each task's template; the pytorch/tensorflow/mpi plugins inject their env into every pod."""
    spec = _spec(obj)
    env: dict[str, str] = {}
    for plugin in podview.as_dict(spec.get("plugins")):
        env.update(_VOLCANO_PLUGIN_ENV.get(plugin, {}))
    owner = _Owner(str(obj.get("apiVersion", "batch.volcano.sh/v1alpha1")), "Job", _name(obj))
    for index, task in enumerate(podview.as_list(spec.get("tasks"))):
        task = podview.as_dict(task)
        template = podview.as_dict(task.get("template"))
        if not template:
            continue
        labels = {"volcano.sh/job-name": _name(obj), "volcano.sh/task-spec": str(task.get("name", index))}
        yield Template(f"spec.tasks[{index}].template", _pod(obj, template, owner=owner, labels=labels, env=env),
                       template)


def _ray_groups(obj: Mapping[str, Any], cluster_spec: Mapping[str, Any], prefix: str, cluster: str) -> Iterator[Template]:
    owner = _Owner("ray.io/v1", "RayCluster", cluster)
    head = podview.as_dict(podview.as_dict(cluster_spec.get("headGroupSpec")).get("template"))
    if head:
        labels = {"ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/group": "headgroup"}
        yield Template(f"{prefix}.headGroupSpec.template", _pod(obj, head, owner=owner, labels=labels), head)
    for index, group in enumerate(podview.as_list(cluster_spec.get("workerGroupSpecs"))):
        group = podview.as_dict(group)
        template = podview.as_dict(group.get("template"))
        if template:
            labels = {"ray.io/cluster": cluster, "ray.io/node-type": "worker", "ray.io/group": str(group.get("groupName", ""))}
            yield Template(f"{prefix}.workerGroupSpecs[{index}].template",
                           _pod(obj, template, owner=owner, labels=labels), template)


def _ray_cluster(obj: Mapping[str, Any]) -> Iterator[Template]:
    yield from _ray_groups(obj, _spec(obj), "spec", _name(obj))


def _ray_job(obj: Mapping[str, Any]) -> Iterator[Template]:
    cluster_spec = podview.as_dict(_spec(obj).get("rayClusterSpec"))
    yield from _ray_groups(obj, cluster_spec, "spec.rayClusterSpec", _name(obj))


# (API group, kind) -> extractor. The API group is what the webhook's rules match on.
EXTRACTORS: dict[tuple[str, str], Callable[[Mapping[str, Any]], Iterator[Template]]] = {
    ("apps", "Deployment"): lambda o: _workload(o, "ReplicaSet"),
    ("apps", "ReplicaSet"): lambda o: _workload(o, "ReplicaSet"),
    ("apps", "StatefulSet"): lambda o: _workload(o, "StatefulSet"),
    ("apps", "DaemonSet"): lambda o: _workload(o, "DaemonSet"),
    ("batch", "Job"): _batch_job,
    ("batch", "CronJob"): _cron_job,
    ("kubeflow.org", "PyTorchJob"): _kubeflow("pytorchReplicaSpecs", "PyTorchJob"),
    ("kubeflow.org", "TFJob"): _kubeflow("tfReplicaSpecs", "TFJob"),
    ("kubeflow.org", "MPIJob"): _kubeflow("mpiReplicaSpecs", "MPIJob"),
    ("kubeflow.org", "XGBoostJob"): _kubeflow("xgbReplicaSpecs", "XGBoostJob"),
    ("kubeflow.org", "PaddleJob"): _kubeflow("paddleReplicaSpecs", "PaddleJob"),
    ("kubeflow.org", "JAXJob"): _kubeflow("jaxReplicaSpecs", "JAXJob"),
    ("trainer.kubeflow.org", "TrainJob"): _train_job,
    ("jobset.x-k8s.io", "JobSet"): _jobset,
    ("serving.kserve.io", "InferenceService"): _inference_service,
    ("batch.volcano.sh", "Job"): _volcano_job,
    ("ray.io", "RayCluster"): _ray_cluster,
    ("ray.io", "RayJob"): _ray_job,
}


# (API group, kind) -> the resource name webhook rules match on.
RESOURCES: dict[tuple[str, str], str] = {
    ("apps", "Deployment"): "deployments", ("apps", "ReplicaSet"): "replicasets",
    ("apps", "StatefulSet"): "statefulsets", ("apps", "DaemonSet"): "daemonsets",
    ("batch", "Job"): "jobs", ("batch", "CronJob"): "cronjobs",
    ("kubeflow.org", "PyTorchJob"): "pytorchjobs", ("kubeflow.org", "TFJob"): "tfjobs",
    ("kubeflow.org", "MPIJob"): "mpijobs", ("kubeflow.org", "XGBoostJob"): "xgboostjobs",
    ("kubeflow.org", "PaddleJob"): "paddlejobs", ("kubeflow.org", "JAXJob"): "jaxjobs",
    ("trainer.kubeflow.org", "TrainJob"): "trainjobs", ("jobset.x-k8s.io", "JobSet"): "jobsets",
    ("serving.kserve.io", "InferenceService"): "inferenceservices", ("batch.volcano.sh", "Job"): "jobs",
    ("ray.io", "RayCluster"): "rayclusters", ("ray.io", "RayJob"): "rayjobs",
}
assert RESOURCES.keys() == EXTRACTORS.keys()


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def templates_of(obj: Mapping[str, Any], *, group: str | None = None, kind: str | None = None) -> list[Template] | None:
    """The templates of ``obj``, or None when its kind carries no pod template ai-admission knows."""
    group = group if group is not None else group_of(str(obj.get("apiVersion", "")))
    kind = kind if kind is not None else str(obj.get("kind", ""))
    extract = EXTRACTORS.get((group, kind))
    return list(extract(obj)) if extract else None
