"""End to end: GPUs claimed through DRA, through a real kube-apiserver with resource.k8s.io/v1.

The DeviceClasses are created as NVIDIA's DRA driver installs them; claim templates and claims are created for
real (the API server defaults, converts and validates them before the webhook sees them), and pods take them.
The webhook server of this module watches the control plane's claims (`webhook.cluster.claims`), as a deployed one
watches its cluster's; a test that creates a template and then a pod waits until every worker has seen the
template (`wait_seen`), the way the PriorityClass tests wait for the background check.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.conftest import Server, start_server, stop_server
from tests.support.apiserver import DENIED_BY, create, get_pod, warnings
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.e2e_install import install, route_labels, uninstall
from tests.support.reviews import admission_review
from webhook.core.rules import Rules

pytestmark = pytest.mark.e2e

ROUTE = "dra"
ROOT = Path(__file__).resolve().parent.parent.parent

# As NVIDIA's Helm chart installs them (selectors of deviceclass-gpu.yaml / deviceclass-mig.yaml, with the
# extendedResourceName the chart adds for resource.k8s.io/v1; see the research in rules/default.yaml's dra block).
NVIDIA_DEVICE_CLASSES = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                   "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
              "extendedResourceName": "nvidia.com/gpu"}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig.nvidia.com"},
     "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                   "device.attributes['gpu.nvidia.com'].type == 'mig'"}}]}},
]
A100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"'
MEM_40 = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
NO_MODEL = ('- request "gpu" (2 x gpu.nvidia.com) does not pin the GPU model: add the selector '
            'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB" (the product name as the '
            'driver publishes it; known models: {known}), or use a device class that pins one model')
NO_MEMORY = ('- request "gpu" (2 x gpu.nvidia.com) does not say how much GPU memory it needs: add the selector '
             'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0 (per GPU), or annotation '
             '"ai-admission.io/gpu-memory: 40Gi" on the {kind}')


def claim_template(name: str, *selectors: str, count: int = 2) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}


def dra_pod(name: str, *templates: str, env: dict[str, str] | None = None,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A training pod whose container takes one claim from each of ``templates``."""
    claims = [{"name": f"gpu{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    resources = {"limits": {"memory": "64Gi", "cpu": "8"}, "requests": {"memory": "64Gi", "cpu": "8"},
                 "claims": [{"name": c["name"]} for c in claims]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"training.kubeflow.org/job-name": "llama"} if labels is None
                         else labels},
            "spec": {"resourceClaims": claims, "containers": [{
                "name": "train", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": resources,
                "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}]}}


@pytest.fixture(scope="module")
def dra_server(control_plane: ControlPlane, rules: Rules, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that watches the control plane's claims, registered for namespaces routed to it."""
    done = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(NVIDIA_DEVICE_CLASSES))
    assert done.returncode == 0, done.stderr
    server = start_server(tmp_path_factory.mktemp("dra"), extra_env={
        "KUBECONFIG": str(control_plane.kubeconfig), "AI_ADMISSION_WATCH_CLAIMS": "true"})
    try:
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=ROUTE)
        yield server
    finally:
        uninstall(control_plane, ROUTE)
        stop_server(server)


@pytest.fixture
def namespace(control_plane: ControlPlane, dra_server: Server, request: pytest.FixtureRequest) -> str:
    return control_plane.create_namespace(namespace_name(request.node.name), route_labels(ROUTE))


@pytest.fixture(scope="module")
def known(rules: Rules) -> str:
    """The NVIDIA models a message lists: the first eight of the catalog, and how many more."""
    nvidia = [m.name for m in rules.catalog.values() if m.vendor == "nvidia"]
    return ", ".join(nvidia[:8]) + f" and {len(nvidia) - 8} more"


def eventually(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def wait_seen(server: Server, kind: str, created: dict[str, Any]) -> None:
    """Until every worker's watch has reached the resourceVersion ``created`` was stored at.

    Each /readyz is a new connection, which SO_REUSEPORT hands to either worker: 24 of them reach both but for
    a chance of about 1 in 8 million (as in tests/server/test_cluster.py).
    """
    version = int(created["metadata"]["resourceVersion"])

    def everyone() -> bool:
        states = [server.get("/readyz").json()["claims"][kind] for _ in range(24)]
        return all(s["synced"] and int(s["resourceVersion"] or 0) >= version for s in states)

    eventually(everyone)


def create_seen(plane: ControlPlane, server: Server, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    done = create(plane, namespace, obj)
    assert done.returncode == 0, done.stderr
    stored = json.loads(done.stdout)
    wait_seen(server, obj["kind"], stored)
    return stored


# -- claims and templates ---------------------------------------------------------------------------------------

def test_nvidias_template_is_denied_with_the_cel_to_add(control_plane: ControlPlane, namespace: str,
                                                       known: str) -> None:
    template = claim_template("single-gpu")
    expected = "\n".join([f'{DENIED_BY}: ResourceClaimTemplate "{namespace}/single-gpu" was denied by ai-admission:',
                          NO_MODEL.format(known=known), NO_MEMORY.format(kind="ResourceClaimTemplate")])
    dry = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(template))
    assert dry.returncode != 0 and expected in dry.stderr, dry.stderr
    done = create(control_plane, namespace, template)
    assert done.returncode != 0 and expected in done.stderr, done.stderr
    assert control_plane.kubectl("get", "resourceclaimtemplate", "-n", namespace, "single-gpu").returncode != 0


def test_a_v1beta1_template_arrives_as_v1(control_plane: ControlPlane, namespace: str, known: str) -> None:
    """The flat v1beta1 request (NVIDIA's older demos) is converted by the API server (matchPolicy Equivalent)."""
    flat = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate", "metadata": {"name": "old"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com",
                                                        "count": 2, "selectors": [{"cel": {"expression": MEM_40}}]}]}}}}
    done = create(control_plane, namespace, flat)
    assert done.returncode != 0, done.stdout
    assert f'ResourceClaimTemplate "{namespace}/old" was denied by ai-admission:\n{NO_MODEL.format(known=known)}\n' \
           in done.stderr + "\n", done.stderr


def test_pinned_templates_and_claims_are_created(control_plane: ControlPlane, namespace: str) -> None:
    assert create(control_plane, namespace, claim_template("a100x2", A100, MEM_40)).returncode == 0
    shared = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "shared"},
              "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                  "deviceClassName": "gpu.nvidia.com", "count": 16,
                  "selectors": [{"cel": {"expression": f"{A100} && {MEM_40}"}}]}}]}}}
    done = create(control_plane, namespace, shared)
    assert done.returncode != 0
    assert (f'ResourceClaim "{namespace}/shared" was denied by ai-admission:\n- request "gpu" asks for 16 x a100-80g, '
            f'but one a100-80g node holds 8; split the work over several pods (one per node) or use fewer GPUs') \
        in done.stderr, done.stderr
    shared["spec"]["devices"]["requests"][0]["exactly"]["count"] = 8
    assert create(control_plane, namespace, shared).returncode == 0


def test_a_selector_the_api_server_cannot_compile_never_reaches_the_webhook(control_plane: ControlPlane,
                                                                             namespace: str) -> None:
    broken = claim_template("broken", 'device.attributes["gpu.nvidia.com"].productName == ')
    done = create(control_plane, namespace, broken)
    assert done.returncode != 0 and "compilation failed" in done.stderr and DENIED_BY not in done.stderr


def test_claim_updates_are_judged_only_when_they_change_what_is_judged(control_plane: ControlPlane,
                                                                        dra_server: Server, known: str) -> None:
    """A claim made while its namespace was in warn mode keeps working after the namespace is enforced."""
    namespace = control_plane.create_namespace(namespace_name("claim-updates"),
                                               {**route_labels(ROUTE), "ai-admission.io/mode": "warn"})
    made = create(control_plane, namespace, claim_template("any-gpu"))
    assert made.returncode == 0, made.stderr
    assert any(w.startswith('ai-admission (warn mode) would deny: request "gpu" (2 x gpu.nvidia.com) does not pin')
               for w in warnings(made.stderr)), made.stderr
    assert control_plane.kubectl("label", "namespace", namespace, "ai-admission.io/mode-").returncode == 0

    def annotate(*args: str) -> Any:
        return control_plane.kubectl("annotate", *args, "resourceclaimtemplate", "-n", namespace, "any-gpu",
                                     "ai-admission.io/gpu-memory=40Gi")

    eventually(lambda: annotate("--dry-run=server").returncode != 0)  # the API server has seen the new labels
    relabeled = control_plane.kubectl("label", "resourceclaimtemplate", "-n", namespace, "any-gpu", "team=llm")
    assert relabeled.returncode == 0, relabeled.stderr  # metadata only: not judged again
    noted = annotate()
    assert noted.returncode != 0
    assert f'ResourceClaimTemplate "{namespace}/any-gpu" was denied by ai-admission:\n' \
           f'{NO_MODEL.format(known=known)}' in noted.stderr, noted.stderr


# -- pods that take claims ---------------------------------------------------------------------------------------

def test_a_dra_pod_gets_the_profile_of_an_nvidia_gpu_pod(control_plane: ControlPlane, dra_server: Server,
                                                         namespace: str, rules: Rules) -> None:
    create_seen(control_plane, dra_server, namespace, claim_template("a100x8", f"{A100} && {MEM_40}", count=8))
    done = create(control_plane, namespace, dra_pod("train", "a100x8", env={"WORLD_SIZE": "16"}))
    assert done.returncode == 0, done.stderr
    pod = get_pod(control_plane, namespace, "train")
    spec = pod["spec"]
    training = rules.classes["training"].priority_class
    assert training is not None
    assert (spec["priorityClassName"], spec["priority"]) == ("ai-training", training.value)
    assert {"name": "ai-admission-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}} in spec["volumes"]
    container = spec["containers"][0]
    assert {"name": "ai-admission-shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert not any(e["name"].startswith("NCCL_") for e in container["env"])  # the default fabric is unknown
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "nodeSelector" not in spec  # the claim pins the model; no node label is assumed
    # no node watch here: no topology to pack the job's pods by, so none is guessed and the pod is told
    assert "affinity" not in spec
    assert any(w.startswith("pods not packed") for w in warnings(done.stderr)), done.stderr
    profile = json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])
    assert profile == {"class": "training", "gpuMemoryPerGpu": "40Gi", "gpus": {"gpu.nvidia.com (claim gpu0)": 8},
                       "gpusNeeded": 8, "model": "a100-80g", "multiNode": True, "preemptible": False, "jobPods": 16,
                       "reason": "label training.kubeflow.org/job-name=llama"}  # WORLD_SIZE with 1 process a pod


def test_a_dra_pod_with_nothing_else_to_go_by_reaches_the_webhook(control_plane: ControlPlane, dra_server: Server,
                                                                   namespace: str, rules: Rules) -> None:
    """No label, annotation or GPU resource: only spec.resourceClaims says it takes GPUs, so the webhooks'
    matchConditions must send it (default class batch, and so the batch PriorityClass)."""
    create_seen(control_plane, dra_server, namespace, claim_template("a100x1", f"{A100} && {MEM_40}", count=1))
    done = create(control_plane, namespace, dra_pod("plain", "a100x1", labels={}))
    assert done.returncode == 0, done.stderr
    pod = get_pod(control_plane, namespace, "plain")
    batch = rules.classes["batch"].priority_class
    assert batch is not None and (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == (batch.name, batch.value)
    profile = json.loads(pod["metadata"]["annotations"]["ai-admission.io/profile"])
    assert (profile["class"], profile["gpus"], profile["model"]) == ("batch", {"gpu.nvidia.com (claim gpu0)": 1},
                                                                     "a100-80g")


def test_dra_pods_are_denied_for_what_their_claims_add_up_to(control_plane: ControlPlane, dra_server: Server,
                                                            namespace: str) -> None:
    create_seen(control_plane, dra_server, namespace, claim_template("a100x8", A100, MEM_40, count=8))
    two = create(control_plane, namespace, dra_pod("two-claims", "a100x8", "a100x8"))
    assert two.returncode != 0
    assert (f'pod "{namespace}/two-claims" (training: label training.kubeflow.org/job-name=llama) was denied by '
            f"ai-admission:\n- 16 GPUs in one pod, but one a100-80g node holds 8; split the work over several pods "
            f"(one per node) or use fewer GPUs") in two.stderr, two.stderr
    pinned = dra_pod("pinned-elsewhere", "a100x8")
    pinned["spec"]["nodeSelector"] = {"gpu-type": "h100-80g"}
    elsewhere = create(control_plane, namespace, pinned, dry_run=True)
    assert elsewhere.returncode != 0
    assert (f'- nodeSelector gpu-type pins "h100-80g" (h100-80g) but claim "gpu0" (ResourceClaimTemplate "a100x8" '
            f'request "gpu", selector {A100}) pins a100-80g; keep one of them') in elsewhere.stderr, elsewhere.stderr


def test_a_pod_before_its_template_is_admitted_as_today(control_plane: ControlPlane, namespace: str,
                                                        known: str) -> None:
    done = create(control_plane, namespace, dra_pod("early", "made-later", labels={}))
    assert done.returncode == 0, done.stderr
    pod = get_pod(control_plane, namespace, "early")
    assert "ai-admission.io/profile" not in (pod["metadata"].get("annotations") or {})  # class none: left alone
    later = create(control_plane, namespace, claim_template("made-later"))
    assert later.returncode != 0 and NO_MODEL.format(known=known) in later.stderr, later.stderr


def test_controller_templates_take_claims_too(control_plane: ControlPlane, dra_server: Server, namespace: str) -> None:
    create_seen(control_plane, dra_server, namespace, claim_template("a100x8", A100, MEM_40, count=8))
    pod = dra_pod("unused", "a100x8", "a100x8", labels={})
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "two-claims"},
           "spec": {"template": {"spec": {**pod["spec"], "restartPolicy": "Never"}}}}
    done = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(job))
    assert done.returncode != 0
    assert (f'Job "{namespace}/two-claims" spec.template (batch: owner Job/two-claims; set annotation '
            f'ai-admission.io/workload-type to choose another class) was denied by ai-admission:\n'
            f"- 16 GPUs in one pod, but one a100-80g node holds 8") in done.stderr, done.stderr


def test_the_dra_jobset_manifest_through_the_watch(control_plane: ControlPlane, dra_server: Server) -> None:
    """tests/manifests/jobset-dra.yaml: its templates created for real (the unpinned one in a warn namespace, as
    one made before the policy), its JobSets judged by the server from the watch, as ``check`` judges them."""
    namespace = control_plane.create_namespace(namespace_name("jobset-dra"),
                                               {**route_labels(ROUTE), "ai-admission.io/mode": "warn"})
    objects = [d for d in yaml.safe_load_all((ROOT / "tests" / "manifests" / "jobset-dra.yaml").read_text()) if d]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    for template in (o for o in objects if o["kind"] == "ResourceClaimTemplate"):
        create_seen(control_plane, dra_server, namespace, template)
    verdicts = {}
    for jobset in (o for o in objects if o["kind"] == "JobSet"):
        review = admission_review(copy.deepcopy(jobset), group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                                  resource="jobsets", namespace=namespace)
        answer = dra_server.review("/validate/deny", review)
        audit = dra_server.review("/validate/audit", review).get("auditAnnotations", {})
        verdicts[jobset["metadata"]["name"]] = (answer["allowed"], audit.get("violations", ""))
    assert verdicts == {"llama-dra": (True, ""),
                        "llama-dra-any-gpu": (False, "gpu-model-missing,gpu-memory-missing")}
