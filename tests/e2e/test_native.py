"""The native set through a real kube-apiserver: with no webhook on a pod's path, the classes'
MutatingAdmissionPolicies give it what /mutate gives it, and the backstop denies a bare GPU pod.

Every fixture pod, annotated with the class the webhook gives it, goes through the API server (server dry run)
in a namespace no webhook is registered for; what the policies wrote is compared, field by field, with the
webhook's own patch applied to the same pod in-process. A class policy acts on a pod whole or not at all (a pod
whose GPUs CEL cannot count as the webhook does is left to the webhook), so each pod is either mutated exactly as
the webhook mutates it or left as it came, and the profiled pods of the issue must be in the first group. Then
the webhook and the policies together: the pod is the webhook's alone, and the webhook adds only what is left.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, start_server, stop_server
from tests.support.apiserver import DEFAULT_TOLERATIONS, create, for_apiserver, named
from tests.support.clusters import a100_cluster, gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.e2e_install import (
    BARE_POD,
    PROFILED_POD,
    ROUTE_LABEL,
    facts_installed,
    install,
    route_labels,
    uninstall,
)
from tests.support.fixtures import POD_CASES
from tests.support.metrics import metric
from webhook.core import names
from webhook.core.admission import judge_pod, mutate_verdict
from webhook.core.context import Context
from webhook.core.profile import build_profile
from webhook.core.rules import Rules
from webhook.core.view.cluster_facts import PLURAL, facts_data, param
from webhook.core.workloads.kinds import templates_of
from webhook.generate import backstop, native, native_record, webhooks
from webhook.generate.webhooks import priority_classes

pytestmark = [pytest.mark.e2e]

NATIVE = "test.ai-admission.io/native"  # the test binds every policy of the set to namespaces with this label
SHM = "/dev/shm"
PUBLISHED = ROOT.parent / "shared" / "published-manifests"  # read in place, where ../shared is present


def inference_pod(memory: str = "32Gi") -> dict[str, Any]:
    """A profiled inference pod, as a Deployment of vLLM's published example makes it (one GPU, a model and its
    memory by annotation): more memory than an L4 holds, so no smaller card of the test clusters is named to it."""
    pod = named(PROFILED_POD, "serve")
    pod["metadata"]["annotations"] = {names.WORKLOAD_TYPE: "inference", names.GPU_MEMORY: memory}
    pod["metadata"]["labels"] = {"app": "vllm"}
    pod["spec"]["containers"][0].update(name="vllm", image="vllm/vllm-openai:v0.6.3",
                                        resources={"limits": {"nvidia.com/gpu": "1", "memory": "32Gi"}})
    return pod


def sized_training_pod() -> dict[str, Any]:
    """Training with a memory limit that caps /dev/shm below the per-GPU size, and a sidecar and an init container."""
    pod = named(PROFILED_POD, "sized")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8", "memory": "40Gi"}}
    pod["spec"]["initContainers"] = [
        {"name": "fetch", "image": "busybox:1.36", "resources": {"limits": {"memory": "1Gi"}}},
        {"name": "log-shipper", "image": "busybox:1.36", "restartPolicy": "Always",
         "resources": {"limits": {"memory": "1536Mi"}}}]
    return pod


PROFILED = {"train": PROFILED_POD, "serve": inference_pod(), "sized": sized_training_pod()}


def with_class(pod: dict[str, Any], rules: Rules | Context) -> dict[str, Any] | None:
    """The pod naming the class the webhook gives it (the first thing the webhook and the policies read); None for
    a pod of no class."""
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    workload = verdict.profile.workload if verdict.profile else None
    if workload not in as_context(rules).rules.classes:
        return None
    result = copy.deepcopy(pod)
    result["metadata"].setdefault("annotations", {})[names.WORKLOAD_TYPE] = workload
    return result


def webhooks_pod(pod: dict[str, Any], rules: Rules | Context) -> dict[str, Any]:
    """``pod`` as the webhook's /mutate patch leaves it (the cluster's nodes not known, as here)."""
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    return jsonpatch.apply_patch(copy.deepcopy(pod), list(verdict.patch))


def gpu_tolerations(pod: dict[str, Any], sent: dict[str, Any], rules: Rules | Context) -> list[dict[str, Any]]:
    """The tolerations added to ``sent`` for the GPU taints of its nodes (the class's pool tolerations are the
    webhook's)."""
    before = sent["spec"].get("tolerations") or []
    workload = (sent["metadata"].get("annotations") or {}).get(names.WORKLOAD_TYPE, "")
    classes = as_context(rules).rules.classes
    pool = list(classes[workload].mutate.tolerations) if workload in classes else []
    return sorted((t for t in pod["spec"].get("tolerations") or [] if t not in before and t not in pool
                   and t.get("key") not in DEFAULT_TOLERATIONS), key=str)


def covered(pod: dict[str, Any], rules: Rules | Context, own: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the class policies write, read off a pod: /dev/shm (the volume and each mount), the PriorityClass with
    its value and preemption policy (where ``own``, the pod as sent, names no class), the class label, the
    run-time bound."""
    spec, meta = pod["spec"], pod["metadata"]
    volume = as_context(rules).rules.mutation.shm_volume_name
    mounts = {f"{kind}/{c['name']}": [m for m in c.get("volumeMounts") or [] if m.get("mountPath") == SHM]
              for kind in ("initContainers", "containers") for c in spec.get(kind) or []}
    named_class = spec.get("priorityClassName")
    written = named_class and not (own or {}).get("spec", {}).get("priorityClassName")
    return {"volume": [v for v in spec.get("volumes") or [] if v.get("name") == volume], "mounts": mounts,
            "priorityClassName": named_class,
            # the Priority plugin resolves these for every pod; they count only beside a class written for it
            "priority": spec.get("priority") if written else None,
            "preemptionPolicy": spec.get("preemptionPolicy") if written else None,
            "label": (meta.get("labels") or {}).get(names.WORKLOAD_TYPE),
            "activeDeadlineSeconds": spec.get("activeDeadlineSeconds")}


def _memory_limited(pod: dict[str, Any]) -> bool:
    """The pod has a memory limit /dev/shm can be sized by (`webhook.core.mutate._pod_memory_limit`)."""
    spec = pod["spec"]
    if "memory" in ((spec.get("resources") or {}).get("limits") or {}):
        return True
    every = [*(spec.get("containers") or []), *(c for c in spec.get("initContainers") or []
                                              if c.get("restartPolicy") == "Always")]
    return all("memory" in ((c.get("resources") or {}).get("limits") or {}) for c in every)


def _but_shm(covered_parts: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in covered_parts.items() if k not in ("volume", "mounts")}


def placed(pod: dict[str, Any]) -> dict[str, Any]:
    """What the placing classes' policies write, read off a pod: the pod affinity that packs its job, the spread of
    its replicas. Apart from `covered`: a policy places a pod only where CEL reads it as the webhook does."""
    spec = pod["spec"]
    return {"podAffinity": (spec.get("affinity") or {}).get("podAffinity"),
            "topologySpreadConstraints": spec.get("topologySpreadConstraints")}


@pytest.fixture(scope="module")
def plain(control_plane: ControlPlane) -> str:
    """A namespace with no policy and no webhook: what the API server alone makes of a pod (its defaults)."""
    return control_plane.create_namespace(namespace_name("plain"), {ROUTE_LABEL: "no-webhook"})


@pytest.fixture(scope="module")
def native_installed(control_plane: ControlPlane, rules: Rules) -> Iterator[str]:
    """The native set bound to namespaces with the test label (its mutating policies fail closed here, so that an
    error in their CEL shows), and a namespace that no webhook is registered for."""
    objects = native.native_set(rules, [{"key": NATIVE, "operator": "Exists"}])
    for obj in objects:
        if obj["kind"] == "MutatingAdmissionPolicy":
            obj["spec"]["failurePolicy"] = "Fail"
    done = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([*priority_classes(rules), *objects]))
    assert done.returncode == 0, done.stderr
    facts_installed(control_plane)
    namespace = control_plane.create_namespace(namespace_name("native"), {NATIVE: "true", ROUTE_LABEL: "no-webhook"})
    deadline = time.monotonic() + 60
    while (natively(control_plane, namespace, PROFILED_POD) or {}).get("spec", {}).get("priorityClassName") is None:
        assert time.monotonic() < deadline, "the native policies do not act"
        time.sleep(0.2)
    yield namespace
    control_plane.kubectl("delete", "--ignore-not-found", *[f"{o['kind'].lower()}/{o['metadata']['name']}"
                                                            for o in objects if "AdmissionPolicy" in o["kind"]])
    control_plane.kubectl("delete", "--ignore-not-found", "-n", webhooks.NAME, f"{PLURAL}/{native.FACTS}")


def natively(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod as created (server dry run); None when the API server refused it for its own reasons (a pod that can
    never exist, or one the backstop denies)."""
    done = create(plane, namespace, for_apiserver(pod, namespace), dry_run=True)
    if done.returncode != 0:
        assert native.PREFIX not in done.stderr, done.stderr  # no policy of the set failed
        return None
    return json.loads(done.stdout)


def test_the_profiled_pods_are_mutated_as_the_webhook_mutates_them(control_plane: ControlPlane,
                                                                     native_installed: str, rules: Rules) -> None:
    """The issue's bar: a profiled training pod and a profiled inference pod, with no webhook, admitted with what
    the webhook gives them."""
    for name, pod in PROFILED.items():
        got = natively(control_plane, native_installed, pod)
        assert got is not None, name
        sent = for_apiserver(pod, native_installed)
        expected = covered(webhooks_pod(sent, rules), rules, sent)
        assert covered(got, rules, sent) == expected, name
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in got["spec"]["tolerations"]
        assert expected["volume"] and expected["priorityClassName"], name  # there was something to write
    sized = natively(control_plane, native_installed, PROFILED["sized"])
    assert sized is not None and sized["spec"]["volumes"][-1]["emptyDir"]["sizeLimit"] == "21248Mi"  # (40Gi + 1.5Gi) / 2, below 8 x 4Gi


def compared(plane: ControlPlane, native_namespace: str, plain: str, rules: Rules | Context,
             pods: list[tuple[str, dict[str, Any]]],
             placing: tuple[list[str], list[str]] = ([], [])) -> tuple[list[str], list[str], list[str]]:
    """Each pod (with the class the webhook gives it) through the policies, against the webhook's patch: (mutated
    as the webhook mutates it, left as it came, refused by the API server). Whole or nothing, else it fails.
    ``placing``: filled with the pods the webhook places, (placed by the policies as it does, left to it)."""
    same, left, refused = [], [], []
    for name, original in pods:
        pod = with_class(original, rules)
        if pod is None:
            continue
        got = natively(plane, native_namespace, pod)
        if got is None:
            refused.append(name)
            continue
        sent = for_apiserver(pod, native_namespace)
        by_webhook, as_sent = natively(plane, plain, webhooks_pod(sent, rules)), natively(plane, plain, sent)
        assert by_webhook is not None and as_sent is not None, name
        # the GPU tolerations, countable or not, as the webhook gives them; with the nodes' facts, for a pod whose
        # model CEL reads as the webhook does (else none: the webhook adds them)
        tolerated = gpu_tolerations(got, sent, rules)
        assert tolerated == gpu_tolerations(by_webhook, sent, rules) or (as_context(rules).nodes and not tolerated), name
        expected, untouched, now = (covered(p, rules, sent) for p in (by_webhook, as_sent, got))
        if now == expected:
            same.append(name)
        elif now != untouched and not _memory_limited(sent) and _but_shm(now) == _but_shm(expected):
            # all but /dev/shm: a pod with no memory limit gets it from the webhook, sized by the class's default
            # with a warning the webhook would not give were the volume there already
            same.append(name)
        else:
            assert now == untouched, (name, now, expected)
            left.append(name)
        # placement on its own: as the webhook places the pod, or left to it
        if placed(by_webhook) != placed(as_sent):
            assert placed(got) in (placed(by_webhook), placed(as_sent)), (name, placed(got), placed(by_webhook))
            (placing[0] if placed(got) == placed(by_webhook) else placing[1]).append(name)
        else:
            assert placed(got) == placed(as_sent), (name, placed(got))
    return same, left, refused


def test_every_fixture_pod_gets_what_the_webhook_gives_or_is_left_to_it(control_plane: ControlPlane,
                                                                        native_installed: str, plain: str,
                                                                        rules: Rules) -> None:
    """Whole or nothing: each pod is mutated exactly as /mutate mutates it, or left as it came (both as the API
    server makes them, its defaults filled in)."""
    same, left, refused = compared(control_plane, native_installed, plain, rules,
                                   [(case.name, case.pod) for case in POD_CASES])
    print(f"\nfixtures: {len(same)} as the webhook, {len(left)} left to it, {len(refused)} refused by the API server "
          f"({', '.join(refused)})")
    assert len(same) >= 20, (same, left, refused)
    assert len(same) > 2 * len(left), (same, left, refused)


def published_pods(rules: Rules | Context) -> list[tuple[str, dict[str, Any]]]:
    """The pods the published manifests' controllers make (their templates, read as the webhook reads them), each
    naming a GPU model and memory by annotation where it does not already: most published manifests name neither,
    and the backstop would deny them before their mutation could be compared (the backstop's own agreement with
    the webhook is tests/e2e/test_backstop.py's)."""
    found = []
    for path in sorted(PUBLISHED.glob("*.yaml")):
        for index, obj in enumerate(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)):
            if obj.get("kind") == "Pod":
                found.append((f"{path.name}#{index}", obj))
                continue
            for template in templates_of(obj, ctx=as_context(rules)) or []:
                pod = copy.deepcopy(template.pod)
                pod["metadata"]["name"] = f"p{len(found)}"
                found.append((f"{path.name}#{index}:{template.path}", pod))
    for _, pod in found:
        pod["metadata"].pop("generateName", None)  # the reader's "-" where the owner has no name here
        for kind in ("initContainers", "containers"):
            for container in pod["spec"].get(kind) or []:
                container.setdefault("image", "registry.example.com/filled-in-by-the-runtime:1")  # a runtime's
        notes = pod["metadata"].setdefault("annotations", {})
        notes.setdefault(names.GPU_MODEL, "a100-80g")
        notes.setdefault(names.GPU_MEMORY, "32Gi")  # more than an L4 holds: no smaller card is named to it
    return found


def test_every_published_manifests_pod_gets_what_the_webhook_gives_or_is_left_to_it(
        control_plane: ControlPlane, native_installed: str, plain: str, rules: Rules) -> None:
    """The same over pods the policies never saw: those the published manifests' controllers make."""
    if not (PUBLISHED / "SOURCES.md").is_file():
        pytest.skip(f"no published manifests at {PUBLISHED}")
    pods = published_pods(rules)
    assert len(pods) >= 60
    same, left, refused = compared(control_plane, native_installed, plain, rules, pods)
    print(f"\npublished: {len(same)} as the webhook, {len(left)} left to it, {len(refused)} refused by the API server")
    assert len(same) >= 45, (same, left, refused)


def job_pod(name: str, *, pods: int, gpus: int, selector: dict[str, str]) -> dict[str, Any]:
    """A worker of a PyTorchJob of ``pods`` pods (torchrun's PET_NNODES), ``gpus`` GPUs each, on the nodes of
    ``selector``."""
    pod = named(PROFILED_POD, name)
    pod["metadata"]["labels"] = {"training.kubeflow.org/job-name": name}
    pod["spec"]["nodeSelector"] = selector
    pod["spec"]["containers"][0].update(env=[{"name": "PET_NNODES", "value": str(pods)}],
                                        resources={"limits": {"nvidia.com/gpu": str(gpus), "memory": "64Gi"}})
    return pod


def replica_pod(name: str, model: str, memory: str = "32Gi") -> dict[str, Any]:
    """One replica of a served model on ``model``'s nodes."""
    pod = inference_pod(memory)
    pod["metadata"]["name"] = name
    pod["metadata"]["annotations"][names.GPU_MODEL] = model
    del pod["spec"]["nodeSelector"]
    return pod


H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}  # as GKE labels its A3 Mega nodes
PLACED = {  # name: (pod, what the webhook writes on GKE's nodes of tests/support/clusters.py)
    "four-by-eight": (job_pod("four-by-eight", pods=4, gpus=8, selector=H100), "cloud.google.com/gce-topology-block"),
    "two-by-eight": (job_pod("two-by-eight", pods=2, gpus=8, selector={"gpu-type": "h100-80g"}),
                     "cloud.google.com/gce-topology-subblock"),
    "alone": (job_pod("alone", pods=1, gpus=8, selector=H100), None),
    "serve-h100": (replica_pod("serve-h100", "H100_80GB"), ["kubernetes.io/hostname"]),
    "serve-l4": (replica_pod("serve-l4", "l4", "20Gi"), ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
}


def facts_replaced(plane: ControlPlane, data: dict[str, str]) -> None:
    """The parameter as the server writes it (every key replaced)."""
    done = plane.kubectl("replace", "-f", "-", input=json.dumps(param(webhooks.NAME, data)))
    assert done.returncode == 0, done.stderr


def pack_key(pod: dict[str, Any] | None) -> str | None:
    terms = (((pod or {})["spec"].get("affinity") or {}).get("podAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution") or []
    return terms[-1]["podAffinityTerm"]["topologyKey"] if terms else None


def facts_in_place(plane: ControlPlane, namespace: str, nodes: list[dict[str, Any]], rules: Rules,
                   probe: dict[str, Any], shows: Callable[[dict[str, Any] | None], bool]) -> Iterator[Context]:
    """The facts of ``nodes`` in the parameter (as the server writes them while its node watch sees them), once
    the policies act on them (``shows`` holds of ``probe`` as they make it: the API server's parameter informer sees
    a change a moment later); the rules in force with those nodes, for the webhook's side. The empty parameter again
    afterwards."""
    in_force = with_nodes(nodes, rules)
    facts_replaced(plane, facts_data(as_context(in_force)))
    deadline = time.monotonic() + 30
    while not shows(natively(plane, namespace, probe)):
        assert time.monotonic() < deadline, "the policies do not read the new facts"
        time.sleep(0.2)
    yield in_force
    facts_replaced(plane, {})
    while shows(natively(plane, namespace, probe)):
        time.sleep(0.2)


@pytest.fixture
def gke_facts(control_plane: ControlPlane, native_installed: str, rules: Rules) -> Iterator[Context]:
    """GKE's nodes: A3 Mega blocks and sub-blocks, L4 nodes in two zones."""
    yield from facts_in_place(control_plane, native_installed, gke_cluster(), rules, PLACED["two-by-eight"][0],
                              lambda pod: pack_key(pod) is not None)


def test_the_nodes_facts_pack_jobs_and_spread_replicas_as_the_webhook_does(
        control_plane: ControlPlane, native_installed: str, plain: str, gke_facts: Context) -> None:
    """With the facts of the nodes (GKE's A3 Mega blocks and sub-blocks, L4 nodes in two zones) and no webhook,
    a job is packed into the narrowest level that holds its GPUs, a job its operator says is one pod is not, and a
    replica is spread over the keys its model's nodes have two values of: what the webhook does on those nodes."""
    for name, (pod, expected) in PLACED.items():
        got = natively(control_plane, native_installed, pod)
        assert got is not None, name
        sent = for_apiserver(pod, native_installed)
        by_webhook = natively(control_plane, plain, webhooks_pod(sent, gke_facts))
        assert placed(got) == placed(by_webhook), name
        if name.startswith("serve"):
            assert [c["topologyKey"] for c in got["spec"]["topologySpreadConstraints"]] == expected, name
        else:
            assert pack_key(got) == expected, name


def test_with_the_nodes_facts_every_fixture_pod_is_placed_as_the_webhook_places_it_or_left_to_it(
        control_plane: ControlPlane, native_installed: str, plain: str, gke_facts: Context) -> None:
    placing: tuple[list[str], list[str]] = ([], [])
    same, left, refused = compared(control_plane, native_installed, plain, gke_facts,
                                   [(case.name, case.pod) for case in POD_CASES], placing)
    print(f"\nfixtures on GKE's nodes: {len(same)} as the webhook, {len(left)} left to it; placed by the webhook: "
          f"{len(placing[0])} placed natively alike, {len(placing[1])} left to it ({', '.join(placing[1])})")
    assert len(same) >= 20, (same, left, refused)
    assert len(placing[0]) >= 3, placing
    cases = {case.name: case.pod for case in POD_CASES}
    for name in placing[1]:  # each left for its model: the policy reads one model label of a model a node has
        pod = with_class(cases[name], gke_facts)
        assert pod is not None and gke_facts.nodes is not None
        profile = build_profile(pod, as_context(gke_facts))
        selector = pod["spec"].get("nodeSelector") or {}
        read = [key for key in gke_facts.rules.model_keys if selector.get(key)]
        assert (profile.model is None or profile.model.name not in gke_facts.nodes.present or len(read) != 1
                or profile.model_source != f"nodeSelector {read[0]}"), (name, profile.model_source)


def test_with_no_webhook_a_bare_gpu_pod_is_denied(control_plane: ControlPlane, native_installed: str) -> None:
    done = create(control_plane, native_installed, BARE_POD, dry_run=True)
    assert done.returncode != 0 and f"ValidatingAdmissionPolicy '{backstop.NAME}'" in done.stderr, done.stderr


def test_with_the_webhook_too_the_pod_is_the_webhooks_alone(control_plane: ControlPlane, native_installed: str,
                                                           rules: Rules, tmp_path: Path) -> None:
    """Both registered: the policies run first and the webhook adds only what is left (the profile record), so the
    pod is the one the webhook alone makes, and the policies never undo or double what it writes."""
    route = "native-and-webhook"
    server = start_server(tmp_path)
    try:
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=route)
        both = control_plane.create_namespace(namespace_name("both"), {**route_labels(route), NATIVE: "true"})
        alone = control_plane.create_namespace(namespace_name("webhook"), route_labels(route))
        for name, pod in PROFILED.items():
            deadline = time.monotonic() + 30
            while True:
                made = {ns: natively(control_plane, ns, pod) for ns in (both, alone)}
                records = [(p or {}).get("metadata", {}).get("annotations", {}).get(names.PROFILE) for p in made.values()]
                if all(records) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert all(records), (name, made)
            by_both, by_webhook = (made[both] or {}), (made[alone] or {})
            assert by_both["spec"] == {**by_webhook["spec"]}, name
            assert {k: v for k, v in by_both["metadata"]["annotations"].items()} == \
                by_webhook["metadata"]["annotations"], name
            assert by_both["metadata"].get("labels") == by_webhook["metadata"].get("labels"), name
    finally:
        uninstall(control_plane, route)
        stop_server(server)


# -- the pod judged whole natively: no call to the webhook ---------------------------------------------------------

def record_of(pod: dict[str, Any] | None) -> str | None:
    return ((pod or {}).get("metadata", {}).get("annotations") or {}).get(names.PROFILE)


def webhook_says(pod: dict[str, Any], namespace: str, rules: Rules | Context) -> tuple[list[Any], list[str], list[str]]:
    """What the webhook would add to ``pod`` and say of it: its patch, its mutation's warnings, its validation's
    findings (denials and warnings)."""
    mutation = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny", namespace=namespace)
    verdict = judge_pod(copy.deepcopy(pod), ctx=as_context(rules), mode="deny", namespace=namespace, subject="pod")
    return list(mutation.patch), list(mutation.warnings), [f.code for f in verdict.findings]


@pytest.fixture
def a100_facts(control_plane: ControlPlane, native_installed: str, rules: Rules) -> Iterator[Context]:
    """Nodes that have the course example's model (A100 80GB in two zones), beside GKE's."""
    yield from facts_in_place(control_plane, native_installed, a100_cluster(), rules, PROFILED_POD,
                              lambda pod: record_of(pod) is not None)


def test_the_profiled_pods_are_judged_whole_natively(control_plane: ControlPlane, native_installed: str,
                                                    a100_facts: Context) -> None:
    """With the nodes' facts, the profiled training and inference pods get the record the webhook writes, and the
    webhook would add nothing to them and find nothing to say: the common pod needs no call to it."""
    for name in ("train", "serve"):
        made = natively(control_plane, native_installed, PROFILED[name])
        assert made is not None, name
        sent = for_apiserver(PROFILED[name], native_installed)
        written = {op["path"]: op["value"] for op in mutate_verdict(sent, ctx=as_context(a100_facts), mode="deny").patch}
        assert record_of(made) == written["/metadata/annotations/ai-admission.io~1profile"], name
        assert webhook_says(made, native_installed, a100_facts) == ([], [], []), name
    # 20Gi on an A100 is held by one card of the cluster's L4s: the webhook says so, so the policy leaves it to it
    smaller = natively(control_plane, native_installed, inference_pod("20Gi"))
    assert smaller is not None and record_of(smaller) is None
    verdict = judge_pod(for_apiserver(inference_pod("20Gi"), native_installed), ctx=as_context(a100_facts), mode="deny",
                        subject="pod")
    assert verdict.reason_codes == ["gpu-fits-smaller-model"]


def test_every_pod_judged_natively_is_one_the_webhook_would_leave_as_it_is(
        control_plane: ControlPlane, native_installed: str, a100_facts: Context) -> None:
    """Over the fixture pods and the published manifests' pods (each naming its class, and, where it names none,
    the course example's model and memory the way it does: by nodeSelector and annotation): a pod the policies
    judge whole is one the webhook would add nothing to and find nothing in; every other pod carries no record."""
    pods = [(case.name, case.pod) for case in POD_CASES]
    published = (PUBLISHED / "SOURCES.md").is_file()
    if published:
        for name, pod in published_pods(a100_facts):
            notes = pod["metadata"]["annotations"]
            if notes.get(names.GPU_MODEL) == "a100-80g":  # the filler: named as the course example names it
                del notes[names.GPU_MODEL]
                pod["spec"].setdefault("nodeSelector", {"gpu-type": "a100-80g"})
            pods.append((name, pod))
    judged, other = [], []
    for name, original in pods:
        pod = with_class(original, a100_facts)
        made = natively(control_plane, native_installed, pod) if pod is not None else None
        if made is None:
            continue
        if record_of(made) is None:
            other.append(name)
            continue
        judged.append(name)
        assert webhook_says(made, native_installed, a100_facts) == ([], [], []), name
    print(f"\njudged whole natively: {len(judged)}; left to the webhook: {len(other)}")
    fixtures = {case.name for case in POD_CASES}
    assert len(fixtures.intersection(judged)) >= 2, (judged, other)  # a CronJob's pod, an hpo trial
    assert not published or len(judged) >= 5, (judged, other)  # and the published manifests' (8 on 2026-12-02)


def test_a_mark_the_pod_came_with_never_keeps_it_from_the_webhooks(control_plane: ControlPlane,
                                                                    native_installed: str, a100_facts: Context) -> None:
    """The mark of a native judgement written by hand on a pod the policy does not judge (its model named by
    annotation: the webhook pins it) is removed, so the webhooks' condition still sends the pod to them; on a pod
    it judges, it is the policy's own."""
    forged = copy.deepcopy(PROFILED["train"])
    forged["metadata"]["annotations"][names.JUDGED_BY] = "by-hand"
    judged = natively(control_plane, native_installed, forged)
    assert judged is not None and judged["metadata"]["annotations"][names.JUDGED_BY] == native_record.JUDGE
    del forged["spec"]["nodeSelector"]
    forged["metadata"]["annotations"][names.GPU_MODEL] = "a100-80g"
    left = natively(control_plane, native_installed, forged)
    assert left is not None and names.JUDGED_BY not in left["metadata"]["annotations"], left["metadata"]
    assert record_of(left) is None


def test_with_the_webhook_too_a_pod_judged_natively_costs_it_no_call(
        control_plane: ControlPlane, native_installed: str, plain: str, a100_facts: Context, rules: Rules,
        tmp_path: Path) -> None:
    """The webhooks registered with the native component's condition: the profiled pods are admitted as the
    webhook alone admits them on those nodes, and neither webhook is called; a pod the policies leave is sent."""
    route = "native-judged"
    server = start_server(tmp_path)
    try:
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=route, native=True)
        both = control_plane.create_namespace(namespace_name("judged"), {**route_labels(route), NATIVE: "true"})

        def calls() -> float:
            time.sleep(0.5)  # counts reach the shared files in batches
            return metric(server.get("/metrics").text, "ai_admission_requests_total", kind="Pod", operation="CREATE")

        before = calls()
        for name in ("train", "serve"):
            made = natively(control_plane, both, PROFILED[name])
            sent = for_apiserver(PROFILED[name], both)
            alone = natively(control_plane, plain, webhooks_pod(sent, a100_facts))
            assert made is not None and alone is not None, name
            for pod in (made, alone):  # the webhook's patch was applied before the API server's own tolerations
                pod["spec"]["tolerations"].sort(key=str)
            assert made["spec"] == alone["spec"], name
            assert made["metadata"]["annotations"].pop(names.JUDGED_BY) == native_record.JUDGE, name
            assert made["metadata"]["annotations"] == alone["metadata"]["annotations"], name
            assert made["metadata"].get("labels") == alone["metadata"].get("labels"), name
        assert calls() == before
        left = copy.deepcopy(PROFILED["train"])
        del left["spec"]["nodeSelector"]
        left["metadata"]["annotations"][names.GPU_MODEL] = "a100-80g"  # the webhook pins it: not judged natively
        made = natively(control_plane, both, left)
        assert made is not None and made["spec"]["nodeSelector"] == {"gpu-type": "a100-80g"}, made
        assert calls() == before + 2  # /mutate and /validate
    finally:
        uninstall(control_plane, route)
        stop_server(server)


def _edit(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``path`` (keys and list indices) of a pod to ``value``, making the maps on the way."""
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for key in path[:-1]:
            target = target[key] if isinstance(key, int) else target.setdefault(key, {})
        target[path[-1]] = value
    return change


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for key in path[:-1]:
            target = target[key]
        target.pop(path[-1], None)
    return change


def _append(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for key in path[:-1]:
            target = target[key] if isinstance(key, int) else target.setdefault(key, {})
        target.setdefault(path[-1], []).append(copy.deepcopy(value))
    return change


MAIN = ("spec", "containers", 0)
BUSYBOX = {"image": "busybox:1.36", "resources": {"limits": {"memory": "1Gi", "cpu": "1"},
                                                  "requests": {"memory": "1Gi", "cpu": "1"}}}
# small edits to the profiled pods, each of which may or may not leave the webhook something to add or say
EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "an init container": _append(("spec", "initContainers"), {"name": "fetch", **BUSYBOX}),
    "a sidecar": _append(("spec", "containers"), {"name": "log", **BUSYBOX}),
    "a device env": _append((*MAIN, "env"), {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}),
    "another env": _append((*MAIN, "env"), {"name": "HF_HOME", "value": "/cache"}),
    "env from a ConfigMap": _append((*MAIN, "envFrom"), {"configMapRef": {"name": "settings"}}),
    "privileged": _edit((*MAIN, "securityContext"), {"privileged": True}),
    "a volume and its mount": _append(("spec", "volumes"), {"name": "cache", "emptyDir": {}}),
    "a volume named as ai-admission's /dev/shm": _append(("spec", "volumes"), {"name": "ai-admission-shm",
                                                                               "emptyDir": {}}),
    "a /dev/shm of its own": _append((*MAIN, "volumeMounts"), {"name": "cache", "mountPath": "/dev/shm"}),
    "a PriorityClass": _edit(("spec", "priorityClassName"), "ai-batch"),
    "more memory than a card": _edit(("metadata", "annotations", names.GPU_MEMORY), "96Gi"),
    "memory in decimal units": _edit(("metadata", "annotations", names.GPU_MEMORY), "40G"),
    "1536Mi of memory": _edit(("metadata", "annotations", names.GPU_MEMORY), "1536Mi"),
    "the model by annotation too": _edit(("metadata", "annotations", names.GPU_MODEL), "a100-80g"),
    "an instance type": _edit(("spec", "nodeSelector", "node.kubernetes.io/instance-type"), "a2-ultragpu-8g"),
    "an unknown model": _edit(("spec", "nodeSelector", "gpu-type"), "z100-80g"),
    "the L4's model": _edit(("spec", "nodeSelector", "gpu-type"), "l4-24g"),
    "16 GPUs": _edit((*MAIN, "resources", "limits", "nvidia.com/gpu"), "16"),
    "8 GPUs": _edit((*MAIN, "resources", "limits", "nvidia.com/gpu"), "8"),
    "a GPU request unlike its limit": _edit((*MAIN, "resources", "requests", "nvidia.com/gpu"), "1"),
    "no cpu limit": _drop((*MAIN, "resources", "limits", "cpu")),
    "no memory limit": _drop((*MAIN, "resources", "limits", "memory")),
    "preemptible": _edit(("metadata", "annotations", names.PREEMPTIBLE), "true"),
    "one of 4 pods": _append((*MAIN, "env"), {"name": "PET_NNODES", "value": "4"}),
    "no app label": _edit(("metadata", "labels"), {}),
    "a spread of its own": _append(("spec", "topologySpreadConstraints"), {
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "vllm"}}}),
    "a GPU toleration of its own": _append(("spec", "tolerations"), {"key": "nvidia.com/gpu", "operator": "Exists"}),
    "a run-time bound": _edit(("spec", "activeDeadlineSeconds"), 600),
    "a GPU RuntimeClass": _edit(("spec", "runtimeClassName"), "nvidia"),
    "a required node affinity": _edit(("spec", "affinity"), {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100-80g"]}]}]}}}),
    "a CDI annotation": _edit(("metadata", "annotations", "cdi.k8s.io/gpu"), "nvidia.com/gpu=all"),
    "the hpo class": _edit(("metadata", "annotations", names.WORKLOAD_TYPE), "hpo"),
    "the batch class": _edit(("metadata", "annotations", names.WORKLOAD_TYPE), "batch"),
}


@given(base=st.sampled_from(["train", "serve"]),
       edits=st.lists(st.sampled_from(sorted(EDITS)), min_size=1, max_size=3, unique=True))
@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_a_profiled_pod_edited_is_judged_whole_only_where_the_webhook_has_nothing_to_add(
        control_plane: ControlPlane, native_installed: str, a100_facts: Context, base: str, edits: list[str]) -> None:
    """The judgement against shapes the fixtures lack: the profiled pods with up to three small edits each (an
    init container, a device env, a PriorityClass, memory past a card, ...). Where the policy judges the pod whole,
    the webhook would add nothing to it and find nothing in it."""
    pod = copy.deepcopy(PROFILED[base])
    pod["metadata"]["name"] = f"{base}-edited"
    for edit in edits:
        EDITS[edit](pod)
    if "a volume and its mount" in edits:
        pod["spec"]["containers"][0].setdefault("volumeMounts", []).append({"name": "cache", "mountPath": "/cache"})
    made = natively(control_plane, native_installed, pod)
    if made is None or record_of(made) is None:
        return
    assert webhook_says(made, native_installed, a100_facts) == ([], [], []), edits


def test_each_edit_alone_is_judged_whole_only_where_the_webhook_has_nothing_to_add(
        control_plane: ControlPlane, native_installed: str, a100_facts: Context) -> None:
    """Each edit of the property above on the profiled training pod, alone: not a vacuous property (some edits
    keep the pod judged whole, most send it to the webhook), and the same answer."""
    judged, left = [], []
    for name, edit in EDITS.items():
        pod = copy.deepcopy(PROFILED["train"])
        edit(pod)
        made = natively(control_plane, native_installed, pod)
        if made is None or record_of(made) is None:
            left.append(name)
            continue
        judged.append(name)
        assert webhook_says(made, native_installed, a100_facts) == ([], [], []), name
    print(f"\nedits judged whole: {', '.join(judged)}")
    assert len(judged) >= 4 and len(left) >= 20, (judged, left)
