"""The native set against the webhook, offline: the installations compared, the pods they are compared on, and what
counts as a difference.

Three installations of one cluster (`installations`), each through the admission chain of
`tests.support.policy_chain`: the webhooks alone (as `manifests/` installs them), the native set with the webhooks
(as `manifests/overlays/native` installs them: the webhooks' conditions patched by the native component), and the
native set with the webhooks unreachable. For every pod (`corpus`) and cluster (`CONTEXTS`), `differences` says
where the native set changes what a user gets:

- with the webhooks too, the pod is the webhooks' alone (the mark of a native judgement aside), admitted or denied
  alike, with the same warnings from the webhooks;
- a pod the native policy judges whole is, with no webhook at all, the pod the webhooks make;
- with no webhook, the backstop denies a pod exactly when the webhook denies it for a reason the backstop claims
  (`webhook.generate.ledger.BACKSTOP`), in a namespace of the default mode.

The corpus: every fixture pod; the pods the published manifests' controllers make (read in place, where
``../shared`` is present) and those of tests/manifests; and edits of the profiled pods, one and two at a time, each
as sent and naming the class the webhook gives it.
"""

from __future__ import annotations

import copy
import itertools
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import yaml

from tests.conftest import ROOT
from tests.support.clusters import a100_cluster, discovered, gke_cluster
from tests.support.contexts import as_context
from tests.support.fixtures import POD_CASES
from tests.support.policy_chain import Cluster, Outcome, in_process
from webhook.core import names
from webhook.core.admission import judge_pod, mutate_verdict
from webhook.core.context import Context
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import NAME as FACTS
from webhook.core.view.cluster_facts import facts_data, param
from webhook.core.view.node_facts import UNDISCOVERED
from webhook.core.view.observe import observe
from webhook.core.view.priority_state import PriorityClassState
from webhook.core.workloads.kinds import templates_of
from webhook.generate import ledger, native
from webhook.generate.cel.paths import denied_paths
from webhook.generate.native_record import JUDGE
from webhook.generate.webhooks import NAME as HOME
from webhook.generate.webhooks import webhook_configurations

PUBLISHED = ROOT.parent / "shared" / "published-manifests"
NAMESPACE = "ml-team"
MARK = names.JUDGED_BY


# -- the clusters ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    """A cluster as the server sees it: its nodes (None: no node known), the PriorityClasses' state, and whether
    the facts' object exists yet."""

    name: str
    nodes: Callable[[], list[dict[str, Any]]] | None
    priority: PriorityClassState = PriorityClassState(checked=True)
    facts_object: bool = True


CONTEXTS = (
    Scenario("no facts object yet", None, facts_object=False),
    Scenario("no node known", None),
    Scenario("A100, H100 and L4 nodes", a100_cluster),
    Scenario("GKE's nodes, ai-batch missing and ai-inference differing", gke_cluster,
            PriorityClassState(missing_priority_classes=frozenset({"ai-batch"}), checked=True,
                               differing_priority_classes={"ai-inference": "value 1 in the cluster"})),
)


def _patched(configurations: list[dict[str, Any]], patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The webhook configurations with the native component's patch applied, as kustomize applies it (each
    entry's matchConditions replaced whole)."""
    found = copy.deepcopy(configurations)
    for change in patch:
        for configuration in found:
            if configuration["kind"] == change["kind"] and configuration["metadata"]["name"] == change["metadata"]["name"]:
                by_name = {w["name"]: w for w in configuration["webhooks"]}
                for entry in change["webhooks"]:
                    by_name[entry["name"]]["matchConditions"] = entry["matchConditions"]
    return found


@dataclass
class Installations:
    alone: Cluster
    both: Cluster
    native: Cluster
    context: Context  # what the webhook judges in


def installations(rules: Rules, context: Scenario) -> Installations:
    nodes = context.nodes() if context.nodes else None
    in_force = Context(rules, observe(rules, nodes=discovered(nodes, rules) if nodes is not None else UNDISCOVERED,
                                      priority_classes=context.priority))
    classes = {s.priority_class.name: (s.priority_class.value, s.priority_class.preemption_policy)
               for s in rules.classes.values() if s.priority_class is not None}
    for missing in context.priority.missing_priority_classes:
        classes.pop(missing, None)
    for differing in context.priority.differing_priority_classes:
        classes[differing] = (1, classes[differing][1])
    namespaces = {NAMESPACE: {"kubernetes.io/metadata.name": NAMESPACE}}
    webhook = in_process(in_force)
    params = {(HOME, FACTS): param(HOME, facts_data(in_force))} if context.facts_object else {}
    configurations = webhook_configurations(rules)
    native_set = native.native_set(rules)
    return Installations(
        alone=Cluster(objects=configurations, namespaces=namespaces, priority_classes=classes, webhook=webhook),
        both=Cluster(objects=[*native_set, *_patched(configurations, native.webhook_patch(rules))],
                     namespaces=namespaces, priority_classes=classes, webhook=webhook, params=params),
        native=Cluster(objects=native_set, namespaces=namespaces, priority_classes=classes, webhook=None, params=params),
        context=in_force)


# -- the pods ----------------------------------------------------------------------------------------------------

def _course_pod(workload: str, **resources: str) -> dict[str, Any]:
    amounts = {"nvidia.com/gpu": "2", "memory": "64Gi", "cpu": "8", **resources}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{workload}-0", "labels": {"app": "llm"},
                         "annotations": {names.WORKLOAD_TYPE: workload, names.GPU_MEMORY: "40Gi"}},
            "spec": {"nodeSelector": {"gpu-type": "a100-80g"},
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                                     "resources": {"limits": dict(amounts), "requests": dict(amounts)}}]}}


BASES = {f"{w}-course": _course_pod(w) for w in ("training", "inference", "hpo", "batch")}


def _set(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for key in path[:-1]:
            target = target.setdefault(key, {}) if isinstance(target, dict) else target[int(key)]
        target[path[-1]] = copy.deepcopy(value)
    return change


def _drop(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for key in path[:-1]:
            target = target.get(key, {}) if isinstance(target, dict) else target[int(key)]
        if isinstance(target, dict):
            target.pop(path[-1], None)
    return change


def _notes(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["metadata"].setdefault("annotations", {})


def _labels(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["metadata"].setdefault("labels", {})


def _resource(name: str, value: Any, *, part: str = "both") -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        resources = pod["spec"]["containers"][0].setdefault("resources", {})
        for which in (("limits", "requests") if part == "both" else (part,)):
            resources.setdefault(which, {})[name] = value
    return change


def _without_resource(name: str, part: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0].get("resources", {}).get(part, {}).pop(name, None)
    return change


def _container(container: dict[str, Any], kind: str = "containers") -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"].setdefault(kind, []).append(copy.deepcopy(container))
    return change


def _env(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0].setdefault("env", []).append({"name": name, "value": value})
    return change


SIDECAR = {"name": "log", "image": "busybox:1.36", "resources": {"limits": {"memory": "1Gi", "cpu": "1"},
                                                                   "requests": {"memory": "1Gi", "cpu": "1"}}}
INIT = {"name": "fetch", "image": "busybox:1.36", "resources": {"limits": {"memory": "1Gi", "cpu": "1"}}}
NATIVE_SIDECAR = {**INIT, "name": "shipper", "restartPolicy": "Always"}
GPU_INIT = {"name": "warm", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}}

EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "model by annotation": _set("metadata", "annotations", names.GPU_MODEL, value="a100-80g"),
    "model by annotation, no selector": lambda pod: (_notes(pod).__setitem__(names.GPU_MODEL, "h100"),
                                                     pod["spec"].pop("nodeSelector", None)),
    "unknown model": _set("spec", "nodeSelector", "gpu-type", value="z9000"),
    "H100 by GKE's label": lambda pod: pod["spec"].__setitem__(
        "nodeSelector", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}),
    "L4 by GFD's label": lambda pod: pod["spec"].__setitem__("nodeSelector", {"nvidia.com/gpu.product": "NVIDIA-L4"}),
    "an instance type too": _set("spec", "nodeSelector", "node.kubernetes.io/instance-type", value="a2-ultragpu-8g"),
    "required affinity": _set("spec", "affinity", value={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100-80g"]}]}]}}}),
    "memory 1536Mi": _set("metadata", "annotations", names.GPU_MEMORY, value="1536Mi"),
    "memory 40G": _set("metadata", "annotations", names.GPU_MEMORY, value="40G"),
    "memory 96Gi": _set("metadata", "annotations", names.GPU_MEMORY, value="96Gi"),
    "memory 1Ti": _set("metadata", "annotations", names.GPU_MEMORY, value="1Ti"),
    "memory 0.5Gi": _set("metadata", "annotations", names.GPU_MEMORY, value="0.5Gi"),
    "memory not a quantity": _set("metadata", "annotations", names.GPU_MEMORY, value="lots"),
    "no memory": _drop("metadata", "annotations", names.GPU_MEMORY),
    "params and precision": lambda pod: (_notes(pod).pop(names.GPU_MEMORY, None),
                                         _notes(pod).update({names.MODEL_PARAMS: "7B",
                                                                                names.MODEL_PRECISION: "bf16"})),
    "70B fp16": lambda pod: (_notes(pod).pop(names.GPU_MEMORY, None),
                             _notes(pod).update({names.MODEL_PARAMS: "70B",
                                                                    names.MODEL_PRECISION: "fp16"})),
    "1 GPU": _resource("nvidia.com/gpu", "1"),
    "8 GPUs": _resource("nvidia.com/gpu", "8"),
    "16 GPUs": _resource("nvidia.com/gpu", "16"),
    "GPU limit only": _without_resource("nvidia.com/gpu", "requests"),
    "GPU request only": _without_resource("nvidia.com/gpu", "limits"),
    "GPU request differs": _resource("nvidia.com/gpu", "1", part="requests"),
    "GPU as a number": _resource("nvidia.com/gpu", 2),
    "GPU 0.5": _resource("nvidia.com/gpu", "0.5"),
    "GPU 0": _resource("nvidia.com/gpu", "0"),
    "AMD GPUs": lambda pod: (_without_resource("nvidia.com/gpu", "limits")(pod),
                             _without_resource("nvidia.com/gpu", "requests")(pod), _resource("amd.com/gpu", "1")(pod)),
    "a MIG slice": lambda pod: (_without_resource("nvidia.com/gpu", "limits")(pod),
                                _without_resource("nvidia.com/gpu", "requests")(pod),
                                _resource("nvidia.com/mig-1g.10gb", "1")(pod)),
    "a GPU-looking resource": _resource("example.com/gpu", "1"),
    "a DeviceClass's resource": _resource("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1"),
    "no memory limit": lambda pod: (_without_resource("memory", "limits")(pod), _without_resource("memory", "requests")(pod)),
    "memory request only": _without_resource("memory", "limits"),
    "no cpu": lambda pod: (_without_resource("cpu", "limits")(pod), _without_resource("cpu", "requests")(pod)),
    "cpu request differs": _resource("cpu", "4", part="requests"),
    "memory 65536Mi": _resource("memory", "65536Mi"),
    "pod-level memory limit": _set("spec", "resources", value={"limits": {"memory": "48Gi"}}),
    "a sidecar": _container(SIDECAR),
    "an init container": _container(INIT, "initContainers"),
    "a native sidecar": _container(NATIVE_SIDECAR, "initContainers"),
    "an init container with a GPU": _container(GPU_INIT, "initContainers"),
    "PriorityClass of its own": _set("spec", "priorityClassName", value="ai-batch"),
    "PriorityClass not allowed": _set("spec", "priorityClassName", value="system-cluster-critical"),
    "its class's PriorityClass": lambda pod: pod["spec"].__setitem__(
        "priorityClassName", {"training": "ai-training", "inference": "ai-inference", "hpo": "ai-hpo",
                              "batch": "ai-batch"}.get(_notes(pod).get(names.WORKLOAD_TYPE, ""), "ai-batch")),
    "preemptible hint": _set("metadata", "annotations", names.PREEMPTIBLE, value="true"),
    "bad preemptible hint": _set("metadata", "annotations", names.PREEMPTIBLE, value="maybe"),
    "multi-node hint": _set("metadata", "annotations", names.MULTI_NODE, value="true"),
    "single-node hint": _set("metadata", "annotations", names.MULTI_NODE, value="false"),
    "a torchrun job of 4": lambda pod: (_env("PET_NNODES", "4")(pod), _labels(pod).update(
        {"training.kubeflow.org/job-name": "llm"})),
    "a worker replica": _set("metadata", "labels", "training.kubeflow.org/replica-type", value="worker"),
    "a job label": _set("metadata", "labels", "batch.kubernetes.io/job-name", value="llm"),
    "no app label": _drop("metadata", "labels", "app"),
    "no labels": _drop("metadata", "labels"),
    "a spread of its own": _set("spec", "topologySpreadConstraints", value=[
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "llm"}}}]),
    "tolerations of its own": _set("spec", "tolerations", value=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "a toleration of everything": _set("spec", "tolerations", value=[{"operator": "Exists"}]),
    "an affinity of its own": _set("spec", "affinity", value={"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "llm"}}}}]}}),
    "its own /dev/shm volume": lambda pod: (pod["spec"].__setitem__("volumes", [{"name": "ai-admission-shm",
                                                                                  "emptyDir": {}}])),
    "its own /dev/shm mount": lambda pod: (pod["spec"].__setitem__("volumes", [{"name": "dshm", "emptyDir": {
        "medium": "Memory"}}]), pod["spec"]["containers"][0].__setitem__("volumeMounts", [
            {"name": "dshm", "mountPath": "/dev/shm"}])),
    "other volumes": lambda pod: (pod["spec"].__setitem__("volumes", [{"name": "data", "emptyDir": {}}]),
                                  pod["spec"]["containers"][0].__setitem__("volumeMounts", [
                                      {"name": "data", "mountPath": "/data"}])),
    "a deadline of its own": _set("spec", "activeDeadlineSeconds", value=600),
    "privileged": _set("spec", "containers", "0", "securityContext", value={"privileged": True}),
    "a hostPath": _set("spec", "volumes", value=[{"name": "dev", "hostPath": {"path": "/dev"}}]),
    "a GPU runtime class": _set("spec", "runtimeClassName", value="nvidia"),
    "a CDI annotation": _set("metadata", "annotations", "cdi.k8s.io/gpu", value="nvidia.com/gpu=all"),
    "envFrom": _set("spec", "containers", "0", "envFrom", value=[{"configMapRef": {"name": "cfg"}}]),
    "NVIDIA_VISIBLE_DEVICES": _env("NVIDIA_VISIBLE_DEVICES", "all"),
    "NVIDIA_VISIBLE_DEVICES void": _env("NVIDIA_VISIBLE_DEVICES", "void"),
    "tensor parallel 2": _env("TP_SIZE", "2"),
    "vllm command": _set("spec", "containers", "0", "args", value=["--tensor-parallel-size", "2"]),
    "vllm data-parallel": _set("spec", "containers", "0", "args", value=["--data-parallel-size", "2"]),
    "parallelism hint": _set("metadata", "annotations", names.PARALLELISM, value="data"),
    "DRA claims": _set("spec", "resourceClaims", value=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
    "a forged mark": _set("metadata", "annotations", MARK, value=JUDGE),
    "a stale record": _set("metadata", "annotations", names.PROFILE, value="{}"),
    "another class": _set("metadata", "annotations", names.WORKLOAD_TYPE, value="batch"),
    "no class": _drop("metadata", "annotations", names.WORKLOAD_TYPE),
    "an unknown class": _set("metadata", "annotations", names.WORKLOAD_TYPE, value="research"),
    "no annotations but the class": lambda pod: pod["metadata"].__setitem__(
        "annotations", {k: v for k, v in _notes(pod).items() if k == names.WORKLOAD_TYPE}),
    "a generated name": lambda pod: (pod["metadata"].pop("name", None), pod["metadata"].__setitem__("generateName", "w-")),
    "an owner": _set("metadata", "ownerReferences", value=[{"apiVersion": "batch/v1", "kind": "Job", "name": "llm",
                                                            "uid": "6f1d2c3b-0000-4000-8000-000000000001",
                                                            "controller": True}]),
}


def edited(base: dict[str, Any], edits: tuple[str, ...]) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    for edit in edits:
        EDITS[edit](pod)
    return pod


def with_class(pod: dict[str, Any], rules: Rules) -> dict[str, Any] | None:
    """``pod`` naming the class the webhook gives it; None for a pod of no class or one that names it already."""
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    workload = verdict.profile.workload if verdict.profile else None
    notes = pod.get("metadata", {}).get("annotations") or {}
    if workload not in rules.classes or notes.get(names.WORKLOAD_TYPE) == workload:
        return None
    result = copy.deepcopy(pod)
    result["metadata"].setdefault("annotations", {})[names.WORKLOAD_TYPE] = workload
    return result


def _template_pods(objects: list[dict[str, Any]], rules: Rules, source: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for index, obj in enumerate(objects):
        if obj.get("kind") == "Pod":
            yield f"{source}#{index}", copy.deepcopy(obj)
            continue
        for number, template in enumerate(templates_of(copy.deepcopy(obj), ctx=as_context(rules)) or []):
            pod = copy.deepcopy(template.pod)
            pod["metadata"].pop("generateName", None)
            pod["metadata"]["name"] = f"p{index}"
            for kind in ("initContainers", "containers"):
                for container in pod["spec"].get(kind) or []:
                    container.setdefault("image", "registry.example.com/filled-in-by-the-runtime:1")
            yield f"{source}#{index}:{template.path}" + (f" ({number + 1})" if number else ""), pod


def _documents(paths: list[Any]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each file's objects, named by its path under tests/manifests (else by its name: the published ones)."""
    own = ROOT / "tests" / "manifests"
    for path in paths:
        name = str(path.relative_to(own)) if path.is_relative_to(own) else path.name
        yield name, [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def published_present() -> bool:
    return (PUBLISHED / "SOURCES.md").is_file()


def corpus(rules: Rules, pairs: int = 2) -> list[tuple[str, dict[str, Any]]]:
    """Every pod compared, named: the fixtures, the manifests' pods, the edits of the profiled pods (one edit,
    and ``pairs``: pairs of edits); each also naming the class the webhook gives it where it does not."""
    found: list[tuple[str, dict[str, Any]]] = [(f"fixture {c.name}", copy.deepcopy(c.pod)) for c in POD_CASES]
    sources = sorted((ROOT / "tests" / "manifests").rglob("*.yaml"))
    if published_present():
        sources += sorted(PUBLISHED.glob("*.yaml"))
    for name, objects in _documents(sources):
        found += list(_template_pods(objects, rules, name))
    edits = sorted(EDITS)
    for base_name, base in BASES.items():
        found.append((base_name, copy.deepcopy(base)))
        found += [(f"{base_name} + {e}", edited(base, (e,))) for e in edits]
        if pairs:
            share = 2 if base_name == "training-course" else 7  # every second pair of the course example's edits
            found += [(f"{base_name} + {a} + {b}", edited(base, (a, b))) for a, b in itertools.combinations(edits, 2)
                      if zlib.crc32(f"{base_name}/{a}/{b}".encode()) % share == 0]
    classed = [(f"{name} (named class)", pod) for name, p in found if (pod := with_class(p, rules)) is not None]
    return found + classed


# -- the comparison ----------------------------------------------------------------------------------------------

def _unmarked(pod: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    notes = result.get("metadata", {}).get("annotations") or {}
    if notes.get(MARK) == JUDGE:
        del notes[MARK]
    return result


def _webhook_warnings(outcome: Outcome) -> list[str]:
    return sorted(w for w in outcome.warnings if not w.startswith("Validation failed for ValidatingAdmissionPolicy"))


def judged(outcome: Outcome) -> bool:
    """The native policy judged the pod whole: it applied its mutation, the pod carries its mark, and it was
    admitted."""
    return (outcome.allowed and native.POLICY in outcome.applied
            and (outcome.pod.get("metadata", {}).get("annotations") or {}).get(MARK) == JUDGE)


@dataclass
class Compared:
    name: str
    alone: Outcome
    both: Outcome
    native: Outcome
    differences: list[str]
    known: str | None = None  # a divergence the design accepts, and why (docs/admins/native.md says so)


FORGED = ("a mark of the judgement written by hand, where the native policy did not run (no facts' object yet, "
          "or the policy failed on the pod): the webhooks are not called; the backstop and the webhooks' condition "
          "still hold the pod to a model, a memory, no bypass, its class's PriorityClass and no claims")


def backstop_codes(rules: Rules) -> set[str]:
    return {code for code in ledger.BACKSTOP if code in ("gpu-model-missing", "gpu-memory-missing")
            or code in denied_paths(rules)}


def compare(name: str, pod: dict[str, Any], setup: Installations, rules: Rules) -> Compared:
    """The pod through the three installations, and what differs."""
    alone, both, natively = (setup.alone.create(pod, NAMESPACE), setup.both.create(pod, NAMESPACE),
                             setup.native.create(pod, NAMESPACE))
    found: list[str] = []
    sent_marked = (pod.get("metadata", {}).get("annotations") or {}).get(MARK) == JUDGE
    if sent_marked and native.POLICY not in both.applied:
        return Compared(name=name, alone=alone, both=both, native=natively, differences=[], known=FORGED)
    if alone.allowed != both.allowed:
        found.append(f"with the webhooks, {'admitted' if both.allowed else 'denied'} ({both.message[:200]}) "
                     f"where the webhooks alone {'admit' if alone.allowed else 'deny'} ({alone.message[:200]})")
    elif alone.allowed:
        if _unmarked(both.pod) != _unmarked(alone.pod):
            found.append(f"with the webhooks, another pod: {_diff(_unmarked(alone.pod), _unmarked(both.pod))}")
        if _webhook_warnings(both) != _webhook_warnings(alone):
            found.append(f"with the webhooks, warnings {_webhook_warnings(both)} instead of {_webhook_warnings(alone)}")
        if both.mutation_errors:
            found.append(f"a policy failed: {both.mutation_errors}")
    if judged(natively):
        if not alone.allowed:
            found.append(f"judged whole, but the webhooks deny it: {alone.message[:300]}")
        elif _unmarked(natively.pod) != _unmarked(alone.pod):
            found.append(f"judged whole, another pod than the webhooks': {_diff(_unmarked(alone.pod), _unmarked(natively.pod))}")
        elif _webhook_warnings(alone):
            found.append(f"judged whole, but the webhooks warn: {_webhook_warnings(alone)}")
    webhook = judge_pod(copy.deepcopy(natively.pod), ctx=setup.context, mode="deny", subject="pod", namespace=NAMESPACE)
    claimed = {f.code for f in webhook.findings if f.severity == "deny"} & backstop_codes(rules)
    backstop_denies = not natively.allowed and (natively.denied_by or "").startswith("policy")
    refused = natively.denied_by == "Priority"  # the API server's own refusal comes before any policy
    if bool(claimed) != backstop_denies and not refused and not pod.get("spec", {}).get("resourceClaims"):
        found.append(f"the backstop {'denies' if backstop_denies else 'admits'} it, the webhook "
                     f"{'denies it for ' + ', '.join(sorted(claimed)) if claimed else 'does not deny it for that'}")
    return Compared(name=name, alone=alone, both=both, native=natively, differences=found)


def _diff(a: Any, b: Any, path: str = "") -> str:
    """The first place two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _diff(a.get(key), b.get(key), f"{path}/{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _diff(x, y, f"{path}/{index}")
    return f"{path or '/'}: {a!r} against {b!r}"
