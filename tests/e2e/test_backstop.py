"""The backstop ValidatingAdmissionPolicy through a real kube-apiserver: it agrees with the webhook.

The policy (`webhook.generate.backstop`) must deny exactly what the webhook denies as ``gpu-model-missing`` or
``gpu-memory-missing``, and nothing else. Every fixture pod and every object of tests/manifests goes through the
API server (server dry run) in a namespace that only the policy watches (no webhook is registered for it), and
the API server's answer is compared with the webhook's own verdict on the same object, template by template.
Then what the policy is for: with the webhook server stopped, a bare GPU pod is still denied while pod
creation goes on.
"""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any, Iterator

import jsonpatch
import pytest
import yaml

from tests.conftest import ROOT, start_server, stop_server
from tests.support.apiserver import DEFAULT_TOLERATIONS, create, for_apiserver, named, warnings
from tests.support.contexts import as_context
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.crds import crds
from tests.support.e2e_install import (
    BARE_JOB,
    BARE_POD,
    PROFILED_POD,
    ROUTE_LABEL,
    install,
    legacy_deployment,
    route_labels,
    uninstall,
)
from tests.support.fixtures import POD_CASES
from webhook.core.admission import judge_object, judge_pod, mutate_verdict
from webhook.core.rules import Rules
from webhook.core.workloads.kinds import KINDS, group_of
from webhook.generate import backstop
from webhook.generate.cel.paths import denied_paths
from webhook.generate.webhooks import priority_classes

pytestmark = [pytest.mark.e2e]

MISSING = ("gpu-model-missing", "gpu-memory-missing")
BOUND = "test.ai-admission.io/backstop"  # the test narrows every binding to namespaces with this label
TOLERATING = "test.ai-admission.io/tolerations"  # and the toleration policy's to these
POLICY_ONLY = {BOUND: "true", ROUTE_LABEL: "no-webhook"}  # a route no webhook is registered for
DENIED = f"ValidatingAdmissionPolicy '{backstop.NAME}"  # either of the two: pods, and the kinds' templates
MANIFESTS = sorted((ROOT / "tests" / "manifests").rglob("*.yaml"))
NGINX = next(case for case in POD_CASES if case.name == "nginx-no-gpu")


def documents() -> list[dict[str, Any]]:
    found = []
    for path in MANIFESTS:
        found += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return found


def wait_until_enforced(plane: ControlPlane, namespace: str, obj: dict[str, Any] = BARE_POD,
                        seconds: float = 60) -> None:
    """A new policy reaches the admission chain a moment after it is stored (the API server compiles it)."""
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        done = create(plane, namespace, obj, dry_run=True)
        last = done.stderr
        if done.returncode != 0 and DENIED in last:
            return
        time.sleep(0.2)
    raise AssertionError(f"the backstop policy is not enforced in {namespace} after {seconds} s: {last}")


@pytest.fixture(scope="module")
def policy_installed(control_plane: ControlPlane, rules: Rules) -> Iterator[str]:
    """The CRDs of the AI kinds, the policy and its bindings (narrowed to the test label); a policy-only
    namespace, enforced."""
    # PriorityClasses as the install has them: fixture pods name them, and the Priority plugin refuses a pod whose
    # class does not exist before any policy is asked
    objects = [*priority_classes(rules), *crds(documents()),
               *backstop.manifests(rules, [{"key": BOUND, "operator": "Exists"}])]
    done = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    assert done.returncode == 0, done.stderr
    control_plane.kubectl("wait", "--for=condition=established", "--timeout=60s",
                          *[f"crd/{o['metadata']['name']}" for o in objects if o["kind"] == "CustomResourceDefinition"])
    namespace = control_plane.create_namespace(namespace_name("backstop"), POLICY_ONLY)
    wait_until_enforced(control_plane, namespace)
    wait_until_enforced(control_plane, namespace, BARE_JOB)  # the kinds' policy is compiled apart, and takes longer
    yield namespace
    names = [f"{o['kind'].lower()}/{o['metadata']['name']}" for o in objects if "AdmissionPolicy" in o["kind"]]
    control_plane.kubectl("delete", "--ignore-not-found", *names)


@pytest.fixture(scope="module")
def tolerations_installed(control_plane: ControlPlane, rules: Rules) -> Iterator[str]:
    """The toleration MutatingAdmissionPolicy, bound to namespaces with the test label; one with no webhook."""
    objects = backstop.toleration_policy(rules, [{"key": TOLERATING, "operator": "Exists"}])
    objects[0]["spec"]["failurePolicy"] = "Fail"  # shipped as Ignore; here an error in its CEL must show
    done = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([*priority_classes(rules), *objects]))
    assert done.returncode == 0, done.stderr
    namespace = control_plane.create_namespace(namespace_name("tolerations"),
                                               {TOLERATING: "true", ROUTE_LABEL: "no-webhook"})
    deadline = time.monotonic() + 60
    while not any(t.get("key") == "nvidia.com/gpu" for t in tolerations_of(control_plane, namespace, BARE_POD) or []):
        assert time.monotonic() < deadline, "the toleration policy does not act"
        time.sleep(0.2)
    yield namespace
    control_plane.kubectl("delete", "--ignore-not-found", *[f"{o['kind'].lower()}/{o['metadata']['name']}"
                                                            for o in objects])




def tolerations_of(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The pod's tolerations as created (server dry run); None when the API server's own validation refused it
    (a pod that can never exist)."""
    done = plane.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(pod))
    if done.returncode != 0:
        assert "is invalid" in done.stderr and backstop.TOLERATIONS not in done.stderr, done.stderr
        return None
    return json.loads(done.stdout)["spec"].get("tolerations") or []


def denied(rules: Rules) -> tuple[str, ...]:
    """The codes the policy denies: the missing information, and the bypass paths denied for every class."""
    return (*MISSING, *denied_paths(rules))


def webhook_says(obj: dict[str, Any], namespace: str, rules: Rules) -> dict[str, set[str]]:
    """The webhook's own verdict (deny mode, as the server judges: no claims known, no runtime looked up):
    for each code the policy also denies, the paths of the templates (``pod`` for a pod) it is found in."""
    found: dict[str, set[str]] = {code: set() for code in denied(rules)}
    if obj.get("kind") == "Pod":
        verdicts = [("pod", judge_pod(obj, ctx=as_context(rules), mode="deny", subject="pod", namespace=namespace))]
    else:
        judged = judge_object(obj, ctx=as_context(rules), mode="deny", namespace=namespace, generic=False)
        verdicts = [(t.path, t.verdict) for t in (judged[1] if judged else [])]
    for path, verdict in verdicts:
        for finding in verdict.findings:
            if finding.code in found and finding.severity == "deny":
                found[finding.code].add(path)
    return found


_SAYS = {"gpu-model-missing": "does not say which model", "gpu-memory-missing": "does not say how much GPU memory"}


def _paths(listed: str, obj: dict[str, Any]) -> list[str]:
    """"<Kind> <name (generated, for generateName)> <path>, <path>" (or "pod") -> the paths, in order."""
    return ["pod"] if obj["kind"] == "Pod" else listed.split(" ", 2)[2].split(", ")


def policy_says(stderr: str, obj: dict[str, Any], rules: Rules) -> dict[str, set[str]]:
    """What the policy's message names, per code: the paths before "asks for GPUs but ..." and, for the paths to a
    GPU that are not requests, before "reaches GPUs without asking for them (<codes> | <codes>)"."""
    found: dict[str, set[str]] = {code: set() for code in denied(rules)}
    if DENIED not in stderr:
        return found
    message = stderr.split("denied request: ", 1)[1]
    for part in message.split("; "):
        for code, says in _SAYS.items():
            if f"asks for GPUs but {says}" in part:
                paths = _paths(part.split(" asks for GPUs")[0], obj)
                # a KServe multi-node worker is its predictor's second template: the webhook names both spec.predictor
                found[code] = {p.removesuffix(".workerSpec") for p in paths}
        if " reaches GPUs without asking for them (" in part:
            listed, _, rest = part.partition(" reaches GPUs without asking for them (")
            for path, codes in zip(_paths(listed, obj), rest.split("): ", 1)[0].split(" | "), strict=True):
                for code in codes.split(", "):
                    found.setdefault(code, set()).add(path.removesuffix(".workerSpec"))
    return found


def through_api_server(plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> tuple[int, str]:
    done = plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj))
    return done.returncode, done.stderr


@pytest.mark.parametrize("case", POD_CASES, ids=[c.name for c in POD_CASES])
def test_every_fixture_pod_is_denied_by_the_policy_exactly_when_the_webhook_misses_model_or_memory(
        control_plane: ControlPlane, policy_installed: str, rules: Rules, case: Any) -> None:
    pod = for_apiserver(case.pod, policy_installed)
    expected = webhook_says(copy.deepcopy(pod), policy_installed, rules)
    code, stderr = through_api_server(control_plane, policy_installed, pod)
    if code != 0 and DENIED not in stderr:  # the API server's own validation refused it: it can never exist
        assert "is invalid" in stderr, stderr
        return
    assert policy_says(stderr, pod, rules) == expected, stderr
    assert (code != 0) == any(expected.values()), stderr


TEMPLATED = [(path, index, d) for path in MANIFESTS
             for index, d in enumerate(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
             if d.get("kind") == "Pod" or (group_of(str(d.get("apiVersion", ""))), d.get("kind")) in KINDS]


@pytest.mark.parametrize("path,index,obj", TEMPLATED,
                         ids=[f"{p.relative_to(ROOT / 'tests' / 'manifests')}#{i}" for p, i, _ in TEMPLATED])
def test_every_manifest_is_denied_by_the_policy_exactly_when_the_webhook_misses_model_or_memory(
        control_plane: ControlPlane, policy_installed: str, rules: Rules, path: Path, index: int,
        obj: dict[str, Any]) -> None:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("namespace", None)
    expected = webhook_says(copy.deepcopy(obj), policy_installed, rules)
    code, stderr = through_api_server(control_plane, policy_installed, obj)
    assert code == 0 or DENIED in stderr, stderr
    assert policy_says(stderr, obj, rules) == expected, stderr
    assert (code != 0) == any(expected.values()), stderr  # a denial for another reason (a CEL error) shows here


def _gpu_pod(name: str, *, notes: dict[str, str] | None = None, selector: dict[str, str] | None = None,
             terms: list[list[dict[str, Any]]] | None = None, limits: dict[str, Any] | None = None,
             init: bool = False, claims: bool = False) -> dict[str, Any]:
    """A pod as a user writes it (a Job's worker), with one way or another of saying model and memory."""
    container = {"name": "worker", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "resources": {"limits": limits or {"nvidia.com/gpu": "1"}}}
    spec: dict[str, Any] = {"containers": [{"name": "log", "image": "busybox:1.36"}]}
    spec.setdefault("initContainers" if init else "containers", []).append(container)
    if selector:
        spec["nodeSelector"] = selector
    if terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "a100"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": notes or {}}, "spec": spec}


MEMORY = {"ai-admission.io/gpu-memory": "40Gi"}
MODEL = {"ai-admission.io/gpu-model": "a100-80g"}
PRODUCT = {"key": "nvidia.com/gpu.product", "operator": "In",
           "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"]}
# Every way the webhook accepts (and a few that look like one but are not): the two must agree on each.
WAYS = [
    _gpu_pod("annotations", notes={**MODEL, **MEMORY}),
    _gpu_pod("blank-model", notes={"ai-admission.io/gpu-model": "  ", **MEMORY}),
    _gpu_pod("zero-memory", notes={**MODEL, "ai-admission.io/gpu-memory": "0"}),
    _gpu_pod("not-a-quantity", notes={**MODEL, "ai-admission.io/gpu-memory": "forty"}),
    _gpu_pod("spaced-memory", notes={**MODEL, "ai-admission.io/gpu-memory": " 40Gi "}),
    _gpu_pod("params", notes={**MODEL, "ai-admission.io/model-params": "7B",
                              "ai-admission.io/model-precision": "bf16"}),
    _gpu_pod("params-no-precision", notes={**MODEL, "ai-admission.io/model-params": "7B"}),
    _gpu_pod("params-spaced", notes={**MODEL, "ai-admission.io/model-params": "70 b",
                                     "ai-admission.io/model-precision": " FP16 "}),
    _gpu_pod("params-tiny", notes={**MODEL, "ai-admission.io/model-params": "0.0000000001B",
                                   "ai-admission.io/model-precision": "fp16"}),
    _gpu_pod("params-bad-precision", notes={**MODEL, "ai-admission.io/model-params": "7B",
                                            "ai-admission.io/model-precision": "fp7"}),
    _gpu_pod("selector", notes=MEMORY, selector={"gpu-type": "a100-80g"}),
    _gpu_pod("selector-empty", notes=MEMORY, selector={"gpu-type": ""}),
    _gpu_pod("selector-unknown-model", notes=MEMORY, selector={"gpu-type": "z100"}),
    _gpu_pod("instance-type", notes=MEMORY, selector={"node.kubernetes.io/instance-type": "p4d.24xlarge"}),
    _gpu_pod("instance-type-unknown", notes=MEMORY, selector={"node.kubernetes.io/instance-type": "m5.large"}),
    _gpu_pod("affinity", notes=MEMORY, terms=[[PRODUCT]]),
    _gpu_pod("affinity-one-term-without", notes=MEMORY,
             terms=[[PRODUCT], [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]]),
    _gpu_pod("affinity-not-in", notes=MEMORY, terms=[[{**PRODUCT, "operator": "NotIn"}]]),
    _gpu_pod("hami", notes={"nvidia.com/use-gputype": "A100,H100"}, limits={"nvidia.com/gpu": "1",
                                                                           "nvidia.com/gpumem": "20000"}),
    _gpu_pod("hami-only-commas", notes={"nvidia.com/use-gputype": " , "}, limits={"nvidia.com/gpu": "1",
                                                                                 "nvidia.com/gpumem": "20000"}),
    _gpu_pod("hami-percent", notes=MODEL, limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
    _gpu_pod("memory-label", notes=MODEL, selector={"nvidia.com/gpu.memory": "81920"}),
    _gpu_pod("memory-label-gt", notes=MODEL, terms=[[{"key": "nvidia.com/gpu.memory", "operator": "Gt",
                                                      "values": ["40000"]}]]),
    _gpu_pod("memory-label-words", notes=MODEL, terms=[[{"key": "nvidia.com/gpu.memory", "operator": "In",
                                                         "values": ["big"]}]]),
    _gpu_pod("karpenter", selector={"karpenter.k8s.aws/instance-gpu-name": "a100",
                                    "karpenter.k8s.aws/instance-gpu-memory": "81920"}, notes=MEMORY),
    _gpu_pod("mig", limits={"nvidia.com/mig-1g.10gb": "1"}),
    _gpu_pod("mig-and-whole", limits={"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"}),
    _gpu_pod("zero-gpus", limits={"nvidia.com/gpu": "0"}),
    _gpu_pod("init-container-gpu", init=True),
    _gpu_pod("device-class-resource", limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}),
    _gpu_pod("amd", notes=MEMORY, selector={"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
             limits={"amd.com/gpu": "1"}),
]


@pytest.mark.parametrize("pod", WAYS, ids=[p["metadata"]["name"] for p in WAYS])
def test_each_way_of_saying_model_and_memory(control_plane: ControlPlane, policy_installed: str, rules: Rules,
                                            pod: dict[str, Any]) -> None:
    expected = webhook_says(copy.deepcopy(pod), policy_installed, rules)
    code, stderr = through_api_server(control_plane, policy_installed, pod)
    assert code == 0 or DENIED in stderr, stderr
    assert policy_says(stderr, pod, rules) == expected, stderr
    assert (code != 0) == any(expected.values()), stderr


def test_a_pod_that_takes_claims_is_left_to_the_webhook(control_plane: ControlPlane, policy_installed: str,
                                                         rules: Rules) -> None:
    """A policy cannot look up the claim a pod names, and a claim may pin the model and the memory: such a pod
    is the webhook's (which knows the claims from its watch), so the policy admits what the webhook, not knowing
    the claim here, would deny."""
    pod = _gpu_pod("claims", claims=True)
    said = webhook_says(copy.deepcopy(pod), policy_installed, rules)
    assert {code: paths for code, paths in said.items() if paths} == {"gpu-model-missing": {"pod"},
                                                                       "gpu-memory-missing": {"pod"}}
    assert set(said) > {"gpu-model-missing", "gpu-memory-missing"}  # the bypass codes, none of them found
    code, stderr = through_api_server(control_plane, policy_installed, pod)
    assert code == 0, stderr


def _tolerating(name: str, *tolerations: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    pod = _gpu_pod(name, notes={**MODEL, **MEMORY}, **kwargs)
    pod["spec"]["tolerations"] = list(tolerations)
    return pod


# The tolerations a pod may already have: one that covers the GPU taint, and ones that look like it but do not.
ALREADY = [
    _tolerating("tolerates-everything", {"operator": "Exists"}),
    _tolerating("tolerates-the-key", {"key": "nvidia.com/gpu", "operator": "Exists"}),
    _tolerating("tolerates-noexecute-only", {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}),
    _tolerating("tolerates-one-value", {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                        "effect": "NoSchedule"}),
    _tolerating("two-kinds", limits={"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"}),
    _tolerating("init-only", init=True),
]
ALREADY[-1]["spec"]["containers"].append({"name": "second", "image": "busybox:1.36",
                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}})


@pytest.mark.parametrize("pod", [*(c.pod for c in POD_CASES), *WAYS, *ALREADY],
                         ids=[*(c.name for c in POD_CASES), *(p["metadata"]["name"] for p in [*WAYS, *ALREADY])])
def test_the_toleration_policy_adds_the_gpu_tolerations_the_webhook_adds(
        control_plane: ControlPlane, tolerations_installed: str, rules: Rules, pod: dict[str, Any]) -> None:
    """In a namespace with no webhook (as in an outage), a pod gets the toleration of each accelerator it asks
    for, exactly those /mutate adds for them (the class's pool tolerations are the webhook's alone)."""
    pod = for_apiserver(pod, tolerations_installed)
    before = pod["spec"].get("tolerations") or []
    mutation = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny")
    mutated = jsonpatch.apply_patch(copy.deepcopy(pod), list(mutation.patch))
    accelerators = set(mutation.profile.gpus) if mutation.profile else set()
    expected = [t for t in mutated["spec"].get("tolerations") or [] if t not in before and t["key"] in accelerators]
    after = tolerations_of(control_plane, tolerations_installed, pod)
    if after is None:
        return
    added = [t for t in after if t not in before and t.get("key") not in DEFAULT_TOLERATIONS]
    assert sorted(added, key=str) == sorted(expected, key=str)


def test_the_policy_says_what_to_add(control_plane: ControlPlane, policy_installed: str) -> None:
    code, stderr = through_api_server(control_plane, policy_installed, BARE_POD)
    assert code != 0
    assert re.search(r"denied request: pod asks for GPUs but does not say which model: add nodeSelector "
                     r'"gpu-type: a100-80g" or annotation "ai-admission.io/gpu-model: a100-80g" \(known models: '
                     r"a100-80g, .* and \d+ more\); pod asks for GPUs but does not say how much GPU memory it needs: "
                     r'add annotation "ai-admission.io/gpu-memory: \d+Gi" \(per GPU\)', stderr), stderr
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm"},
                  "spec": {"selector": {"matchLabels": {"app": "llm"}},
                           "template": {"metadata": {"labels": {"app": "llm"},
                                                     "annotations": {"ai-admission.io/gpu-memory": "20Gi"}},
                                        "spec": copy.deepcopy(BARE_POD["spec"])}}}
    code, stderr = through_api_server(control_plane, policy_installed, deployment)
    assert code != 0 and "denied request: Deployment llm spec.template asks for GPUs but does not say which model" \
        in stderr and "GPU memory" not in stderr, stderr


def test_the_binding_follows_the_namespace_mode(control_plane: ControlPlane, policy_installed: str) -> None:
    """warn: admitted with the policy's warning; audit: admitted silently (the API server's audit log has it)."""
    warn = control_plane.create_namespace(namespace_name("backstop-warn"),
                                          {**POLICY_ONLY, "ai-admission.io/mode": "warn"})
    audit = control_plane.create_namespace(namespace_name("backstop-audit"),
                                           {**POLICY_ONLY, "ai-admission.io/mode": "audit"})
    deadline = time.monotonic() + 30
    while True:
        warned = create(control_plane, warn, BARE_POD, dry_run=True)
        said = [w for w in warnings(warned.stderr) if backstop.NAME in w]
        if said or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert warned.returncode == 0 and said and "asks for GPUs but does not say which model" in said[0], warned.stderr
    audited = create(control_plane, audit, BARE_POD, dry_run=True)
    assert audited.returncode == 0 and not warnings(audited.stderr), audited.stderr
    excluded = create(control_plane, "kube-system", named(BARE_POD, "backstop-kube-system"), dry_run=True)
    assert excluded.returncode == 0, excluded.stderr


def test_an_update_that_leaves_the_templates_alone_is_not_judged(control_plane: ControlPlane,
                                                                  policy_installed: str) -> None:
    """A Deployment made before the policy keeps scaling; changing its GPU template is judged."""
    namespace = control_plane.create_namespace(namespace_name("backstop-legacy"), {ROUTE_LABEL: "no-webhook"})
    legacy_deployment(control_plane, namespace)
    labelled = control_plane.kubectl("label", "namespace", namespace, f"{BOUND}=true")
    assert labelled.returncode == 0, labelled.stderr
    wait_until_enforced(control_plane, namespace)
    scaled = control_plane.kubectl("patch", "deployment", "legacy", "-n", namespace, "--type=merge",
                                   "-p", '{"spec": {"replicas": 3}}')
    assert scaled.returncode == 0, scaled.stderr
    changed = control_plane.kubectl("patch", "deployment", "legacy", "-n", namespace, "--type=json", "-p",
                                    '[{"op": "replace", "path": "/spec/template/spec/containers/0/resources/limits/'
                                    'nvidia.com~1gpu", "value": "2"}]')
    assert changed.returncode != 0 and DENIED in changed.stderr, changed.stderr


def test_with_the_webhook_down_no_bare_gpu_pod_gets_through(control_plane: ControlPlane, policy_installed: str,
                                                            tolerations_installed: str, rules: Rules,
                                                            tmp_path: Path) -> None:
    """The point of the backstop: the webhook's failurePolicy Ignore lets pods through while it is down; the
    policy still denies a bare GPU pod, every other pod is created as before, and a GPU pod still gets the GPU
    toleration (from the toleration policy)."""
    route = "backstop-outage"
    server = start_server(tmp_path)
    try:
        install(control_plane, url=server.url, ca=Path(server.ca), rules=rules, route=route)
        namespace = control_plane.create_namespace(namespace_name(route), {**route_labels(route), BOUND: "true",
                                                                           TOLERATING: "true"})
        wait_until_enforced(control_plane, namespace)
        stop_server(server)
        bare = create(control_plane, namespace, BARE_POD)
        assert bare.returncode != 0 and DENIED in bare.stderr, bare.stderr
        others = create(control_plane, namespace, named(PROFILED_POD, "train"), for_apiserver(NGINX.pod, namespace))
        assert others.returncode == 0, others.stderr
        train = json.loads(control_plane.kubectl("get", "pod", "-n", namespace, "train", "-o", "json").stdout)
        assert "priorityClassName" not in train["spec"]  # not mutated by the webhook: it really was down
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in train["spec"]["tolerations"]
    finally:
        uninstall(control_plane, route)
        stop_server(server)
