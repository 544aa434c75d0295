"""The Deployment of manifests/ boots and serves as the kubelet would run it, in every `make test`.

Each overlay's Deployment is rendered by kustomize and its container started exactly (`tests.support.deployed`:
image, env, args, mounts laid out as the kubelet lays them out) against the in-process API stand-in serving what a
GPU cluster has: GKE-like GPU Nodes with their topology labels and taint, the PriorityClasses the manifests
install, a DRA DeviceClass and each scheduler backend's queues. For the shipped rules and for the rules with each
backend chosen (the ConfigMap edited as an admin edits it): readiness comes by the declared probe, a training pod's
CREATE is judged and mutated with the placement those nodes give, a workload naming a missing queue is denied, and
the server stays up and keeps judging while the API server goes away and comes back and while the ConfigMap is
rewritten. The node watch runs as shipped (``AI_ADMISSION_NODE_CATALOG=true``): with it, every worker once died at
start.
"""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.conftest import RULES_FILE, eventually
from tests.support import backend_crds, owners
from tests.support.builders import render
from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.deployed import Container, Pod, deployment_container, image, start
from tests.support.kubeapi import FakeKubeAPI
from tests.support.reviews import admission_review, apply_patch, assert_valid_pod
from webhook.config.rules_file import load_rules
from webhook.config.settings import Settings
from webhook.core.rules import Rules, compile_rules
from webhook.core.view.cluster_facts import NAME as FACTS
from webhook.core.view.cluster_facts import PLURAL, facts_data
from webhook.core.view.priority_state import PriorityClassState

OVERLAYS = ("manifests", *sorted(f"manifests/overlays/{p.name}" for p in (RULES_FILE.parent.parent / "manifests"
                                                                          / "overlays").iterdir() if p.is_dir()))
SHIPPED_TEXT = RULES_FILE.read_text()
BACKENDS = tuple(load_rules(RULES_FILE).scheduler.known)
BLOCK = "cloud.google.com/gce-topology-block"
NAMESPACE = "ml-team"


def with_backend(backend: str) -> str:
    """The shipped rules with ``backend`` chosen, as an admin edits the ConfigMap (one line changed)."""
    if backend == "default":
        return SHIPPED_TEXT
    text, changed = re.subn(r"(?m)^(scheduler:\n  backend: )default$", rf"\g<1>{backend}", SHIPPED_TEXT)
    assert changed == 1
    return text


# -- what the stand-in serves -------------------------------------------------------------------------------------

def kai_queue(name: str, parent: str | None = "research") -> dict[str, Any]:
    """A KAI Queue as KAI-Scheduler's docs/quickstart/queues.yaml writes one (gpu quota, -1: unlimited)."""
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": 64, "limit": -1, "overQuotaWeight": 1},
                                          "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                          "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def queues(backend: str) -> list[dict[str, Any]]:
    """The queues an admin of ``backend`` creates for the classes the shipped rules name (each backend's
    published examples); each one valid under that backend's CRD."""
    classes = ("training", "inference", "batch", "hpo")
    if backend == "kueue":
        found = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                  "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"clusterQueue": "gpu-cq"}}
                 for name in classes]
        found.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu-cq"},
                      "spec": {"namespaceSelector": {}, "resourceGroups": [{
                          "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                          "flavors": [{"name": "h100", "resources": [
                              {"name": "cpu", "nominalQuota": 1536}, {"name": "memory", "nominalQuota": "14Ti"},
                              {"name": "nvidia.com/gpu", "nominalQuota": 64}]}]}]}})
        # Kueue's site/static/examples/admin/single-clusterqueue-setup.yaml, and a WorkloadPriorityClass per class
        found.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
                      "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}}})
        found += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                   "metadata": {"name": f"ai-{name}"}, "value": 100000 if name in ("training", "inference") else 1000}
                  for name in classes]
        return found
    if backend == "kai":
        return [kai_queue("research", parent=None), *(kai_queue(name) for name in classes)]
    if backend == "volcano":
        return [{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
                 "spec": {"weight": 1, "reclaimable": True, "capability": {"nvidia.com/gpu": 64}},
                 "status": {"state": "Open"}}]
    if backend == "coscheduling":
        return [{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "resnet-train", "namespace": NAMESPACE}, "spec": {"minMember": 3}}]
    assert backend == "default"
    return []


def test_every_backend_the_rules_know_has_queues_here() -> None:
    assert set(BACKENDS) == {"default", "kueue", "kai", "volcano", "coscheduling"}
    for backend in BACKENDS:
        rules = load_rules_text(with_backend(backend))
        kinds = {q.kind for q in rules.scheduler.backend.queue_kinds}
        served = queues(backend)
        assert {o["kind"] for o in served} == kinds, backend
        for obj in served:
            backend_crds.validate(obj)


def load_rules_text(text: str) -> Rules:
    return compile_rules(yaml.safe_load(text), source="test")


DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                              "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}


def plural(obj: dict[str, Any]) -> str:
    return {"Node": "nodes", "PriorityClass": "priorityclasses", "DeviceClass": "deviceclasses",
            "LocalQueue": "localqueues", "ClusterQueue": "clusterqueues", "Queue": "queues",
            "PodGroup": "podgroups", "ResourceFlavor": "resourceflavors",
            "WorkloadPriorityClass": "workloadpriorityclasses"}[obj["kind"]]


def serve(api: FakeKubeAPI, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        api.add(plural(obj), obj)


# -- the pod ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered() -> dict[str, Container]:
    return {overlay: deployment_container(render(overlay)) for overlay in OVERLAYS}


def test_every_overlay_ships_one_webhook_container_with_both_probes(rendered: dict[str, Container]) -> None:
    assert len(rendered) >= 2 and "manifests" in rendered
    for overlay, container in rendered.items():
        assert container.readiness is not None and container.liveness is not None, overlay
        assert {"/etc/ai-admission/rules", "/etc/ai-admission/tls"} <= set(container.mounts), overlay
        env = {e["name"]: e.get("value") for e in container.env}
        assert env.get("AI_ADMISSION_NODE_CATALOG") == "true", overlay  # what made every worker die


def test_the_image_runs_the_servers_gunicorn_configuration() -> None:
    base = image()
    assert base.entrypoint == ["gunicorn", "-c", "python:webhook.server.gunicorn_conf"]
    assert base.env["AI_ADMISSION_RULES"] == "/etc/ai-admission/rules"
    assert base.env["PATH"].startswith("/opt/ai-admission/bin:")


class Deployed:
    """One pod of the shipped Deployment, running against a stand-in that serves a GPU cluster."""

    def __init__(self, api: FakeKubeAPI, pod: Pod, backend: str) -> None:
        self.api, self.pod, self.backend = api, pod, backend

    def ready(self) -> dict[str, Any]:
        """Readiness as the kubelet decides it (the declared probe), and what `/readyz` says once it holds on
        both workers with every watch synced."""
        probe = self.pod.container.readiness

        def synced() -> dict[str, Any] | None:
            answer = self.pod.probe(probe)
            if not 200 <= answer.status_code < 400:
                return None
            detail = answer.json()
            watches = [detail["nodeCatalog"]["synced"], detail["cluster"]["checked"],
                       *(w["synced"] for w in detail["claims"].values()),
                       *(w["synced"] for w in detail.get("queues", {}).values())]
            return detail if all(watches) else None

        eventually(lambda: all(synced() for _ in range(8)), seconds=60)
        detail = synced()
        assert detail is not None
        return detail


@pytest.fixture(scope="module", params=BACKENDS)
def deployed(request: pytest.FixtureRequest, rendered: dict[str, Container],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    backend: str = request.param
    tmp = tmp_path_factory.mktemp(f"deployed-{backend}")
    with FakeKubeAPI() as api:
        serve(api, [*gke_cluster(), *[o for o in render("manifests") if o["kind"] == "PriorityClass"],
                    DEVICE_CLASS, *queues(backend)])
        kubeconfig = api.kubeconfig(tmp / "kubeconfig")
        pod = start(rendered["manifests"], tmp, kubeconfig=kubeconfig, api_port=api.server.server_address[1],
                    rules=with_backend(backend))
        try:
            yield Deployed(api, pod, backend)
        finally:
            pod.stop()
        log = pod.log.read_text()
        assert "Traceback" not in log and "Worker failed to boot" not in log, log


def training_worker(job: str = "resnet-train") -> dict[str, Any]:
    """Worker 0 of a 3-pod PyTorchJob of 8 H100s each, as the training operator creates it."""
    return owners.pytorchjob_worker(owners.course_pytorchjob(model="h100-80g", workers=2, name=job))


def test_readiness_comes_with_every_watch_synced(deployed: Deployed) -> None:
    detail = deployed.ready()
    assert detail["status"] == "ready"
    assert detail["nodeCatalog"]["gpuNodes"] == 12 and detail["nodeCatalog"]["error"] is None
    assert detail["cluster"]["missingPriorityClasses"] == []
    if deployed.backend != "default":
        assert detail["queues"], deployed.backend
    liveness = deployed.pod.probe(deployed.pod.container.liveness)
    assert liveness.status_code == 200 and liveness.json() == {"status": "ok"}


def test_a_training_pod_is_placed_by_the_served_nodes(deployed: Deployed) -> None:
    deployed.ready()
    pod = training_worker()
    response = deployed.pod.review("/mutate", admission_review(pod))
    assert response["allowed"] is True
    patched = apply_patch(pod, response)
    assert_valid_pod(patched)
    spec = patched["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (term,) = spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == BLOCK  # 24 GPUs: more than a sub-block, within a block
    assert spec["priorityClassName"] == "ai-training" and spec["priority"] == 100000
    # A3 Mega nodes: GPUDirect-TCPXO needs what this pod does not carry, and it is told (nothing else to say)
    (told,) = response.get("warnings", [])
    assert told.startswith("NCCL talks TCP between nodes: fabric gpudirect-tcpxo needs the tcpxo-daemon"), told
    validated = deployed.pod.review("/validate", admission_review(patched))
    assert validated["allowed"] is True


def missing_queue_workload(deployed: Deployed) -> dict[str, Any]:
    """A training pod whose backend words name a queue (or PodGroup) that is not there."""
    rules = load_rules_text(with_backend(deployed.backend))
    pod = owners.plain_pod(world=3, job="ghost")
    pod["spec"]["nodeSelector"] = {"gpu-type": "h100-80g"}
    words = [w for w in rules.scheduler.backend.writes_on("pod", "", "Pod") if w.intent in ("queue", "podGroup")]
    assert words, deployed.backend
    for word in words:
        place = "labels" if word.label else "annotations"
        pod["metadata"].setdefault(place, {})[word.label or word.annotation] = "no-such-queue"
    return pod


def test_a_workload_naming_a_missing_queue_is_denied(deployed: Deployed) -> None:
    if deployed.backend == "default":
        pytest.skip("the default scheduler has no queues")
    deployed.ready()
    response = deployed.pod.review("/validate", admission_review(missing_queue_workload(deployed)))
    if deployed.backend == "coscheduling":  # a PodGroup the user has yet to create: told, not denied
        assert response["allowed"] is True
        assert any('PodGroup "no-such-queue" does not exist in namespace "ml-team"' in w
                   for w in response.get("warnings", [])), response
        return
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert '"no-such-queue" does not exist' in message or '"no-such-queue" is not' in message, message


def test_the_server_judges_on_while_the_api_server_is_away_and_follows_it_back(deployed: Deployed) -> None:
    deployed.ready()
    pod = training_worker()
    with deployed.api.outage():
        time.sleep(2)  # every watch cut, every reconnection refused
        for _ in range(8):
            answer = deployed.pod.probe(deployed.pod.container.readiness)
            assert answer.status_code == 200  # it serves with what it knew
            response = deployed.pod.review("/mutate", admission_review(pod))
            placed = apply_patch(pod, response)["spec"]["affinity"]["podAffinity"]
            assert placed["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
                "topologyKey"] == BLOCK
        assert deployed.pod.alive()
        eventually(lambda: deployed.pod.readyz()["nodeCatalog"]["error"] is not None, seconds=30)
    # back: the watches list again and follow what changed while they were away
    tainted = copy.deepcopy(gke_cluster()[0])
    tainted["spec"]["taints"].append({"key": "maintenance", "value": "planned", "effect": "NoExecute"})
    deployed.api.add("nodes", tainted)

    def healed() -> bool:
        catalog = deployed.pod.readyz()["nodeCatalog"]
        return catalog["error"] is None and catalog["gpuNodes"] == 12

    eventually(lambda: all(healed() for _ in range(8)), seconds=60)
    assert deployed.pod.alive()
    assert deployed.pod.review("/mutate", admission_review(pod))["allowed"] is True


def test_a_rewritten_rules_configmap_takes_effect_without_a_restart(deployed: Deployed) -> None:
    deployed.ready()
    rules_dir = deployed.pod.volumes["/etc/ai-admission/rules"]
    bare = owners.plain_pod()
    bare["metadata"]["annotations"].pop("ai-admission.io/gpu-memory")
    bare["spec"]["nodeSelector"] = {"gpu-type": "h100-80g"}
    assert deployed.pod.review("/validate", admission_review(bare))["allowed"] is False
    workers = deployed.pod.process.pid
    relaxed = with_backend(deployed.backend).replace("  namespaces: {gpu-operator: audit, nvidia-gpu-operator: audit}",
                                                     "  namespaces: {gpu-operator: audit, nvidia-gpu-operator: audit, "
                                                     f"{NAMESPACE}: warn}}", 1)
    assert relaxed != with_backend(deployed.backend)
    try:
        rules_dir.update({"rules.yaml": relaxed.encode()})

        def warned() -> bool:
            answer = deployed.pod.review("/validate", admission_review(bare))
            return answer["allowed"] and any("gpu-memory" in w for w in answer.get("warnings", []))

        steadily(warned)
        rules_dir.update({"rules.yaml": b"version: 1\nclasses: [not, a, mapping]\n"})  # a broken edit: kept out
        eventually(lambda: "rulesReloadError" in deployed.pod.readyz(), seconds=30)
        assert deployed.pod.probe(deployed.pod.container.readiness).status_code == 200
        assert deployed.pod.review("/validate", admission_review(bare))["allowed"] is True
    finally:
        rules_dir.update({"rules.yaml": with_backend(deployed.backend).encode()})
    steadily(lambda: not deployed.pod.review("/validate", admission_review(bare))["allowed"])
    assert deployed.pod.process.pid == workers and deployed.pod.alive()


def steadily(check: Callable[[], bool], *, span: float = 2 * Settings.rules_check_seconds, seconds: float = 60) -> None:
    """Wait until ``check()`` holds on every try for ``span`` seconds. Each worker polls the rules file on its
    own (every ``rules_check_seconds``, as shipped), so a change is in force in one worker before the others: a few answers
    in a row can all come from the one that has it, and the next from one that does not yet (seen on a busy
    machine). Within a span of two intervals every worker has polled and answered."""
    deadline = time.monotonic() + seconds
    since = time.monotonic()
    while time.monotonic() - since < span:
        if not check():
            since = time.monotonic()
        assert time.monotonic() < deadline, "condition not held steadily in time"
        time.sleep(0.05)


# -- every overlay's container boots as it ships ------------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS[1:])
def test_each_overlays_deployment_boots_and_serves(overlay: str, rendered: dict[str, Container],
                                                   tmp_path: Path) -> None:
    with FakeKubeAPI() as api:
        serve(api, [*gke_cluster(), *[o for o in render(overlay) if o["kind"] == "PriorityClass"]])
        pod = start(rendered[overlay], tmp_path, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"),
                    api_port=api.server.server_address[1], rules=SHIPPED_TEXT)
        try:
            deployed = Deployed(api, pod, "default")
            assert deployed.ready()["status"] == "ready"
            response = pod.review("/mutate", admission_review(training_worker()))
            assert response["allowed"] is True and "patch" in response
        finally:
            pod.stop()
    assert "Traceback" not in pod.log.read_text()



def test_the_native_overlay_writes_the_nodes_facts_its_policies_read(rendered: dict[str, Container],
                                                                      tmp_path: Path) -> None:
    """As shipped (its namespace from the downward API, the writer on inside a cluster, the parameter's kind the
    native component installs), the server creates the policies' parameter with what its node watch learns, and
    takes the Lease that makes it the one writer."""
    overlay = "manifests/overlays/native"
    objects = render(overlay)
    assert [o["spec"]["names"]["kind"] for o in objects if o["kind"] == "CustomResourceDefinition"] == ["ClusterFacts"]
    (binding, *_) = [o for o in objects if o["kind"] == "MutatingAdmissionPolicyBinding" and "paramRef" in o["spec"]]
    home = binding["spec"]["paramRef"]["namespace"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["metadata"]["namespace"] == home  # where the server writes is where the policies read
    with FakeKubeAPI() as api:
        serve(api, [*gke_cluster(), *[o for o in objects if o["kind"] == "PriorityClass"]])
        pod = start(rendered[overlay], tmp_path, kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"),
                    api_port=api.server.server_address[1], rules=SHIPPED_TEXT)
        try:
            # the PriorityClasses' state as the server's watch finds them: each as the rules say (the base's)
            shipped = load_rules_text(SHIPPED_TEXT)
            expected = facts_data(as_context(with_nodes(gke_cluster(), shipped), priority_classes=PriorityClassState(checked=True)))
            assert expected["priorityClasses"] == ",ai-batch=as-rules,ai-hpo=as-rules,ai-inference=as-rules,ai-training=as-rules,"
            assert expected["pack.h100-80g"].endswith(f"{BLOCK}=32")
            eventually(lambda: (api.objects.get((PLURAL, home, FACTS)) or {}).get("data") == expected)
            assert api.objects[("leases", home, FACTS)]["spec"]["holderIdentity"]
        finally:
            pod.stop()
    assert "Traceback" not in pod.log.read_text()
