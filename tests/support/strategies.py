"""hypothesis strategies: realistic pods as controllers create them, for the property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

names = st.sampled_from(["main", "worker", "sidecar", "proxy", "loader", "init", "metrics"])


gpu_resources = st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb", "gpu.intel.com/i915",
                                  "aliyun.com/gpu-mem", "example.com/gpu", "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
                                  "deviceclass.resource.kubernetes.io/fpga.example.com"])


memory = st.sampled_from(["512Mi", "8Gi", "64Gi", "512Gi"])


env_names = st.sampled_from(["WORLD_SIZE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "RANK", "MASTER_ADDR", "TUNE_X",
                             "NVIDIA_VISIBLE_DEVICES", "AMD_VISIBLE_DEVICES"])


@st.composite
def env_var(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(env_names)
    if draw(st.booleans()):
        return {"name": name, "value": draw(st.sampled_from(["0", "1", "2", "4", "eth0", "ib0", "all", "void", "none",
                                                             "", "0,void", "VOID", "$(GPUS)", " , "]))}
    return {"name": name, "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}


@st.composite
def container(draw: st.DrawFn, name: str, *, init: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"name": name, "image": "registry.example.com/img:1"}
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if draw(st.booleans()):
        count = str(draw(st.integers(1, 8)))
        limits[draw(gpu_resources)] = count
    if draw(st.booleans()):
        limits["memory"] = draw(memory)
        if draw(st.booleans()):
            requests["memory"] = limits["memory"]
    if limits or requests:
        result["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    env = draw(st.lists(env_var(), max_size=4, unique_by=lambda e: e["name"]))
    if env:
        result["env"] = env
    if draw(st.integers(0, 4)) == 0:
        result["volumeMounts"] = [{"name": "user-shm", "mountPath": "/dev/shm"}]
    elif draw(st.integers(0, 9)) == 0:
        result["volumeMounts"] = [{"name": "host-dev", "mountPath": draw(st.sampled_from([
            "/var/run/nvidia-container-devices/all", "/host/dev"]))}]
    if draw(st.integers(0, 9)) == 0:
        result["securityContext"] = {"privileged": True}
    if init and draw(st.booleans()):
        result["restartPolicy"] = "Always"
    return result


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    app_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    init_names = draw(st.lists(names.filter(lambda n: n not in app_names), max_size=2, unique=True))
    spec: dict[str, Any] = {"containers": [draw(container(n)) for n in app_names]}
    if init_names:
        spec["initContainers"] = [draw(container(n, init=True)) for n in init_names]
    mounted = {m.get("name") for c in [*spec["containers"], *spec.get("initContainers", [])]
               for m in c.get("volumeMounts", [])}
    volumes = []
    if "user-shm" in mounted:
        volumes.append({"name": "user-shm", "emptyDir": {"medium": "Memory"}})
    if "host-dev" in mounted:
        volumes.append({"name": "host-dev", "hostPath": {"path": draw(st.sampled_from(["/dev/null", "/dev", "/dev/nvidia0",
                                                                                       "/var/log"]))}})
    if volumes:
        spec["volumes"] = volumes
    if draw(st.integers(0, 9)) == 0:
        spec["runtimeClassName"] = draw(st.sampled_from(["nvidia", "nvidia-cdi", "kata"]))
    if draw(st.booleans()):
        spec["priority"] = 0
        spec["preemptionPolicy"] = "PreemptLowerPriority"
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["default-scheduler", "my-scheduler"]))
    if draw(st.booleans()):
        spec["priorityClassName"] = draw(st.sampled_from(["ai-batch", "ai-training", "ai-inference", "custom"]))
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(st.sampled_from([
            {"operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "ai-admission.io/pool", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
        ]), max_size=3, unique_by=str))
    if draw(st.booleans()):
        spec["nodeSelector"] = {draw(st.sampled_from(["gpu-type", "nvidia.com/gpu.product", "zone"])):
                                draw(st.sampled_from(["a100-80g", "NVIDIA-H100-80GB-HBM3", "l4-24g", "a"]))}
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                              "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "x"}}}]
    if draw(st.booleans()):
        spec["activeDeadlineSeconds"] = draw(st.integers(1, 10**6))
    labels = draw(st.dictionaries(st.sampled_from([
        "app", "training.kubeflow.org/job-name", "training.kubeflow.org/replica-type", "katib.kubeflow.org/trial",
        "spark-role", "serving.kserve.io/inferenceservice", "ray.io/cluster", "job-name", "ai-admission.io/workload-type",
    ]), st.sampled_from(["x", "worker", "master", "tune-1", "executor"]), max_size=3))
    annotations = draw(st.dictionaries(st.sampled_from([
        "ai-admission.io/workload-type", "ai-admission.io/gpu-model", "ai-admission.io/gpu-memory",
        "ai-admission.io/multi-node", "scheduling.k8s.io/group-name", "nvidia.cdi.k8s.io/container.main",
        "gpu-fraction", "gpu-memory",
    ]), st.sampled_from(["training", "inference", "hpo", "batch", "h100", "l4", "10Gi", "true", "g", "0.5", "2000"]),
        max_size=3))
    metadata: dict[str, Any] = {"generateName": "gen-", "namespace": "ml"}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    owner = draw(st.sampled_from([None, ("kubeflow.org/v1", "PyTorchJob"), ("apps/v1", "ReplicaSet"),
                                  ("batch/v1", "Job"), ("kubeflow.org/v1beta1", "Trial"),
                                  ("batch.volcano.sh/v1alpha1", "Job"), ("apps/v1", "StatefulSet")]))
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "owner",
                                        "uid": "0f0f0f0f-0000-4000-8000-000000000000", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
