"""What the policy finds about a pod: a machine-readable code, a message for the person, a severity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["deny", "warn"]


@dataclass
class Finding:
    """One problem. ``deny`` findings reject in deny mode; ``warn`` findings are always warnings.

    Codes are stable (metrics, logs and tests key on them); messages are written for the ML engineer who ran
    ``kubectl apply`` and say what to add.
    """

    code: str
    message: str
    severity: Severity = "deny"


def deny(code: str, message: str) -> Finding:
    return Finding(code=code, message=message, severity="deny")


def warn(code: str, message: str) -> Finding:
    return Finding(code=code, message=message, severity="warn")


@dataclass(frozen=True)
class Code:
    """A reason code as documented: its usual severity, what it means, and what the user does about it."""

    code: str
    severity: str  # "deny", "warn", or "deny or warn" where the rules choose
    meaning: str
    fix: str


# Every reason code ai-admission can give, in the order a reader meets them. The reference page
# (docs/reference/reason-codes.md) is generated from this table and a test fails when a code the core gives is not
# here. Codes are stable: metrics (ai_admission_denials_total{reason}), logs, audit annotations and PolicyReports
# key on them.
CODES: tuple[Code, ...] = (
    Code("gpu-model-missing", "deny", "the pod asks for GPUs but says nothing that pins which model",
         "select nodes by a model label (nodeSelector or required node affinity on gpu-type, nvidia.com/gpu.product, "
         "cloud.google.com/gke-accelerator, an instance type) or add annotation ai-admission.io/gpu-model"),
    Code("gpu-memory-missing", "deny", "the pod asks for GPUs but does not say how much GPU memory each needs",
         "add annotation ai-admission.io/gpu-memory (per GPU), or ai-admission.io/model-params with "
         "ai-admission.io/model-precision, or select nodes by nvidia.com/gpu.memory"),
    Code("gpu-model-unknown", "deny", "the model the pod names is neither in the catalog nor on any node",
         "name a model of the catalog (the message lists them, or what the cluster has)"),
    Code("gpu-model-not-in-cluster", "deny or warn",
         "the catalog knows the model but no node of the cluster has it (the pod would stay Pending); a warning "
         "unless the rules' nodeCatalog.modelWithoutNodes is deny",
         "choose a model the cluster has, or add nodes of it"),
    Code("gpu-model-conflict", "deny", "two places name different models (the annotation and the nodeSelector, "
         "a claim and the nodeSelector, two claims)", "keep one of them"),
    Code("gpu-vendor-mismatch", "deny", "the accelerator resource is one vendor's and the model another's "
         "(amd.com/gpu with an NVIDIA model)", "name a model of the vendor the pod asks for"),
    Code("gpu-count-exceeds-node", "deny", "more GPUs in one pod than one node of the model holds",
         "split the work over several pods, or ask for fewer GPUs"),
    Code("gpu-memory-exceeds", "deny", "the memory need does not fit the GPUs the pod (or the whole job) gets",
         "ask for the GPU count the message gives, a model with more memory, or more pods"),
    Code("gpu-memory-sharded", "warn", "the model fits only sharded over every GPU of the job",
         "nothing, if the job shards it (FSDP, ZeRO-3, tensor and pipeline parallelism); else more GPUs"),
    Code("gpu-over-provisioned", "deny or warn", "the pod asks for more GPUs than its whole model's memory need "
         "takes (model-params x precision x the class's memory factor, held by the count the capacity denial gives: "
         "the next power of two, within one node); the rest would sit idle. A warning unless the rules' rightsizing "
         "makes it a denial for the class; a need stated per GPU, a data-parallel class (training, hpo), a stated "
         "parallelism and a multi-node job are never told",
         "ask for the count the message gives, or, if every GPU serves the model, say how: --tensor-parallel-size, "
         "--pipeline-parallel-size, --data-parallel-size (vLLM, SGLang), --num-shard (TGI), or annotation "
         "ai-admission.io/parallelism: tensor, pipeline, data or expert"),
    Code("gpu-fits-smaller-model", "warn", "with the node watch on: the memory need of one GPU fits one card of a "
         "smaller model the cluster's nodes have (of the vendor, with at most three quarters of the memory: the "
         "rules' rightsizing.smallerShare)", "select the model the message names, unless the work needs the larger "
         "card's speed (the rules' rightsizing.smallerCard: off turns it off for a class)"),
    Code("gpu-fits-mig-slice", "warn", "with the node watch on: the memory need of one GPU fits a MIG slice a node "
         "of the cluster offers", "ask for the slice (nvidia.com/mig-<profile>) rather than a whole card"),
    Code("gpu-request-limit-mismatch", "deny", "an accelerator's request and limit differ (devices cannot be "
         "overcommitted)", "set both to the same whole number"),
    Code("invalid-quantity", "deny", "an accelerator amount is not a whole number of devices",
         "write a whole number (\"1\", 8)"),
    Code("invalid-annotation", "deny", "an ai-admission.io/ annotation cannot be understood",
         "write it as the message says (a class name, a quantity, true or false)"),
    Code("priority-class-not-allowed", "deny", "the pod names a PriorityClass its workload class may not take",
         "use one the message lists, or leave priorityClassName empty"),
    Code("preemptible-not-honoured", "warn", "the pod answers \"can it be preempted?\" (annotation "
         "ai-admission.io/preemptible) otherwise than its class, and the rules give the class no PriorityClass for "
         "that answer: it runs at the class's own", "set the class's priorityClassIfPreemptible or "
         "priorityClassIfNotPreemptible in the rules, or drop the annotation"),
    Code("nccl-interface-missing", "warn", "NCCL_SOCKET_IFNAME names no interface the pod will have (no host "
         "network, no attached network of that name), or NCCL_IB_HCA names RDMA devices the pod asks for none of: "
         "NCCL stops at start, or finds no device", "remove the variable, or attach the network / ask for the RDMA "
         "resource that gives what it names"),
    Code("nccl-ib-without-infiniband", "warn", "NCCL_IB_DISABLE=0, but no node of the pod's model offers "
         "InfiniBand or RoCE (with the node watch): NCCL talks TCP sockets", "drop it, or place the pod on nodes "
         "with an RDMA fabric"),
    Code("shm-too-small", "warn", "the user mounts a /dev/shm that is disk-backed, or smaller than the class's need "
         "(DataLoader workers and NCCL fail with a bus error when it fills)", "give it medium: Memory and the "
         "sizeLimit the message names, or drop the volume (ai-admission adds one)"),
    Code("unknown-accelerator", "warn", "the pod asks for an extended resource that looks like a GPU but is not in "
         "the rules' accelerators; it is judged as one GPU per unit, with no vendor check",
         "add it to accelerators.resources with its vendor (or to notAccelerators if it is not a GPU)"),
    Code("host-memory-request-missing", "warn", "a GPU container requests no host memory (staging a model "
         "without one ends OOMKilled)", "set resources.requests.memory"),
    Code("tensor-parallel-over-pcie", "warn", "one model split over several cards joined only by PCIe",
         "prefer an NVLink model, or fewer, larger cards"),
    Code("training-not-guaranteed", "warn", "a training pod is not Guaranteed QoS, so it is evicted first under "
         "memory pressure", "set requests equal to limits for cpu and memory in every container"),
    Code("gpu-allocation-all", "deny", "a DRA request with allocationMode All for a GPU class takes every GPU "
         "of a node", "ask for a count (exactly.count), or set dra.allowAllocationModeAll in the rules"),
    Code("claim-not-known", "warn", "the pod takes a ResourceClaim or ResourceClaimTemplate that is not known here "
         "(not among check's input, or not yet seen by the server's watch), so what it asks for was not judged "
         "with the pod", "check the claim with the pod (give both to ai-admission check); it is judged at its own "
         "admission"),
    Code("gpu-visible-devices-env", "deny or warn", "a container sets NVIDIA_VISIBLE_DEVICES (or AMD_VISIBLE_DEVICES) "
         "to devices, from valueFrom or through $(...): the container runtime hands it GPUs the scheduler never "
         "counted", "remove it (or set it to void) and ask for the GPU in resources with its model and memory"),
    Code("gpu-runtime-class", "deny or warn", "the pod runs under a GPU RuntimeClass (nvidia) but asks for no GPU: that "
         "runtime honours the image's own NVIDIA_VISIBLE_DEVICES=all", "remove runtimeClassName, or ask for the GPU"),
    Code("gpu-privileged", "deny or warn", "a privileged container asks for GPUs: it sees every GPU of its node, not "
         "the ones it was given", "remove privileged: true"),
    Code("privileged-sees-gpus", "deny or warn", "a privileged container on a GPU node sees every GPU",
         "remove privileged: true, or run it in a namespace exempted for GPU infrastructure (bypasses.exempt)"),
    Code("gpu-cdi-annotation", "deny or warn", "a pod annotation (nvidia.cdi.k8s.io/, cdi.k8s.io/) asks the NRI plugin "
         "or the runtime to inject devices", "remove it and ask for the GPU in resources"),
    Code("gpu-device-request-mount", "deny or warn", "a volume mounted under /var/run/nvidia-container-devices, which "
         "the NVIDIA container runtime reads as a device request", "remove the mount and ask for the GPU"),
    Code("gpu-host-device", "deny or warn", "a hostPath volume of device nodes (/dev, /dev/nvidia*, /dev/dri, /dev/kfd), "
         "the NVIDIA driver root, CDI specs or the kubelet's device-plugin socket",
         "remove it and ask for the GPU in resources"),
    Code("device-class-unknown", "deny or warn", "a container asks for deviceclass.resource.kubernetes.io/<class> of a "
         "DeviceClass ai-admission does not know", "add the class to dra.deviceClasses (or check with --cluster)"),
    Code("mig-profile-unknown", "deny", "a container asks for MIG slices through a DRA device class's extended "
         "resource (deviceclass.resource.kubernetes.io/<class>) whose selectors pin no MIG profile: the slice may be "
         "of any size", "ask for nvidia.com/mig-<profile>, or for a device class whose selector pins one profile"),
    Code("job-priorities-differ", "deny", "the pod templates of one job name different PriorityClasses: a scheduler "
         "that preempts by priority can take some pods of the job and leave the rest waiting",
         "give every template the same priorityClassName, or none (the class's is set)"),
    Code("queue-not-found", "deny or warn", "the scheduler backend's queue the workload names does not exist in the "
         "cluster (or is not open; for coscheduling, its PodGroup does not exist): it would never be admitted",
         "name a queue the message lists, or create it"),
    Code("gang-exceeds-quota", "deny", "the job asks for more GPUs in all than its queue can ever give (its quota, "
         "with what it may borrow)", "ask for fewer GPUs, or name a queue with more quota"),
    Code("gang-exceeds-topology", "deny", "the job requires a topology level (the backend's required-topology "
         "annotation) that no GPU node carries, or none of whose domains holds all its GPUs: it would never be placed",
         "require a broader level, or ask for it as preferred"),
    Code("job-never-fits", "deny or warn", "a multi-node job asks for more GPUs than all the nodes of its model "
         "hold together (or, where its class packs a job into one domain, than the largest domain holds): it can "
         "never be placed whole; a warning unless the rules' nodeCatalog.jobBeyondNodes is deny",
         "ask for fewer pods or GPUs per pod, or add nodes of the model"),
    Code("job-not-grouped", "warn", "a multi-node training Job on a cluster that serves the Workload API is not one "
         "the Job controller schedules as a gang (all or nothing)",
         "make it Indexed with completions equal to parallelism (above 1)"),
    Code("gpu-product-name-form", "warn", "a DRA selector compares the product name with a node-label form "
         "(no spaces), which matches no NVIDIA device", "write the name as nvidia-smi prints it, with spaces"),
)
CODES_BY_NAME: dict[str, Code] = {c.code: c for c in CODES}
