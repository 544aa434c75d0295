"""End to end: pods sent through a real kube-apiserver that calls the real webhook server.

What only a real API server shows: its admission order (built-in plugins such as Priority before and after the
webhooks, reinvocation), that it accepts our JSON Patches, what kubectl prints for a denial or a warning, the
namespace selectors as shipped, and what ``failurePolicy: Ignore`` does when the server is gone. Every test
works in a namespace of its own (see tests/conftest.py); how the session's registration is shared is explained
in tests/support/e2e_install.py.
"""

from __future__ import annotations

import copy
import json
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.conftest import ROOT, RULES_FILE, Server, start_server, stop_server
from tests.support.apiserver import (
    DENIED_BY,
    create,
    for_apiserver,
    get_pod,
    named,
    warnings,
)
from tests.support.contexts import as_context
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.crds import crds
from tests.support.e2e_install import (
    BARE_POD,
    PROFILED_POD,
    ROUTE_LABEL,
    install,
    legacy_deployment,
    route_labels,
    uninstall,
)
from tests.support.fixtures import POD_CASES, PodCase, pod_cases
from tests.support.metrics import metric, settled
from webhook.config.rules_file import load_rules
from webhook.core.admission import judge_object
from webhook.core.rules import Rules
from webhook.core.workloads.kinds import KINDS, group_of

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("webhook_installed")]

NO_MODEL = "says how many GPUs but not which model"
PROFILE_ANNOTATION = "ai-admission.io/profile"


# -- helpers -------------------------------------------------------------------------------------------------









def is_mutated(pod: dict[str, Any]) -> bool:
    return PROFILE_ANNOTATION in (pod["metadata"].get("annotations") or {})






def message_pattern(fragment: str, case: PodCase, namespace: str) -> str:
    """A message fragment as a pattern for what the API server passes on.

    The fixture's namespace becomes the test's. A pod created with ``generateName`` is named ``<prefix>*`` in
    the fixture (the webhook's view without a name); through the API server the validating webhook sees the
    generated name (names are generated after the mutating webhooks, before the validating ones).
    """
    original = case.pod["metadata"].get("namespace") or case.namespace
    if original:
        fragment = fragment.replace(f'"{original}/', f'"{namespace}/')
    pattern = re.escape(fragment)
    prefix = case.pod["metadata"].get("generateName")
    if prefix and not case.pod["metadata"].get("name"):
        pattern = pattern.replace(re.escape(f"{prefix}*"), re.escape(prefix) + "[a-z0-9]{5}")
    return pattern


@contextmanager
def own_server(plane: ControlPlane, tmp: Path, rules: Rules, route: str) -> Iterator[tuple[Server, str]]:
    """A second webhook server, registered for ``route`` only, and a namespace routed to it."""
    server = start_server(tmp)
    try:
        install(plane, url=server.url, ca=Path(server.ca), rules=rules, route=route)
        yield server, plane.create_namespace(namespace_name(route), route_labels(route))
    finally:
        uninstall(plane, route)
        stop_server(server)


# -- tests ---------------------------------------------------------------------------------------------------

def test_bare_gpu_pod_is_denied_by_server_dry_run(control_plane: ControlPlane, namespace: str) -> None:
    done = control_plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                                 input=json.dumps(BARE_POD))
    assert done.returncode != 0
    assert DENIED_BY in done.stderr and NO_MODEL in done.stderr, done.stderr
    assert f'"{namespace}/bare-gpu"' in done.stderr  # the request's namespace reaches the message
    assert control_plane.kubectl("get", "pod", "-n", namespace, "bare-gpu").returncode != 0  # dry run: not stored


def test_profiled_pod_is_created_mutated(control_plane: ControlPlane, namespace: str, rules: Rules) -> None:
    done = control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(PROFILED_POD))
    assert done.returncode == 0, done.stderr
    pod = get_pod(control_plane, namespace, "train")
    spec = pod["spec"]
    assert spec["priorityClassName"] == "ai-training"
    # the mutation set the class's value; the Priority plugin ran again after it and resolved the same
    training = rules.classes["training"].priority_class
    assert training is not None and spec["priority"] == training.value
    assert {"name": "ai-admission-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in spec["volumes"]
    assert {"name": "ai-admission-shm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert is_mutated(pod)
    assert pod["metadata"]["labels"]["ai-admission.io/workload-type"] == "training"


@pod_cases()
def test_fixture_pod_through_the_api_server(control_plane: ControlPlane, namespace: str, case: PodCase) -> None:
    done = create(control_plane, namespace, for_apiserver(case.pod, namespace))
    # the API server passes warnings on with a denial too; the mutation's come from the first /mutate call
    for fragment in [*(case.warnings or []), *(case.mutation_warnings or [])]:
        assert any(fragment in line for line in warnings(done.stderr)), done.stderr
    if not case.allowed:
        assert done.returncode != 0, f"{case.name} was admitted: {done.stdout}"
        assert DENIED_BY in done.stderr, done.stderr
        for fragment in case.message:
            assert re.search(message_pattern(fragment, case, namespace), done.stderr), done.stderr
        return
    assert done.returncode == 0, done.stderr
    pod = json.loads(done.stdout)
    stored = get_pod(control_plane, namespace, pod["metadata"]["name"])
    labels = stored["metadata"].get("labels") or {}
    if case.workload == "none":
        assert not is_mutated(stored) and "ai-admission.io/workload-type" not in labels
    else:
        assert labels.get("ai-admission.io/workload-type") == case.workload
        assert is_mutated(stored)


def test_kube_system_is_not_reviewed(control_plane: ControlPlane) -> None:
    """Shipped exclusion: the webhook is never called for kube-system, so a bare GPU pod is stored as it is."""
    pod = named(BARE_POD, namespace_name("bare-in-kube-system"))
    done = create(control_plane, "kube-system", pod)
    assert done.returncode == 0, done.stderr
    assert not is_mutated(get_pod(control_plane, "kube-system", pod["metadata"]["name"]))


def test_own_namespace_is_not_reviewed(control_plane: ControlPlane) -> None:
    """Shipped exclusion: the server's own namespace (its pods must start while it is down)."""
    if control_plane.kubectl("get", "namespace", "ai-admission").returncode != 0:
        control_plane.create_namespace("ai-admission")
    done = create(control_plane, "ai-admission", named(BARE_POD, namespace_name("bare-in-own")), dry_run=True)
    assert done.returncode == 0, done.stderr
    assert not is_mutated(json.loads(done.stdout))


MANIFESTS = sorted((ROOT / "tests" / "manifests").rglob("*.yaml"))
# the kinds of the table, and the custom resources the shipped rules have the webhook read by shape
READ = {*KINDS, *((k.group, k.kind) for k in load_rules(RULES_FILE).generic_kinds)}
TEMPLATED = [(path.relative_to(ROOT / "tests" / "manifests"), d) for path in MANIFESTS
             for d in yaml.safe_load_all(path.read_text())
             if isinstance(d, dict) and (group_of(str(d.get("apiVersion", ""))), d.get("kind")) in READ]


@pytest.fixture(scope="module")
def ai_crds(control_plane: ControlPlane, rules: Rules) -> None:
    """The AI kinds' CRDs (group, versions, kind, plural and scope as their projects publish them), and those of
    the kinds the rules read by shape."""
    objects = crds([d for _, d in TEMPLATED], rules.generic_kinds)
    done = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    assert done.returncode == 0, done.stderr
    waited = control_plane.kubectl("wait", "--for=condition=established", "--timeout=60s",
                                   *[f"crd/{o['metadata']['name']}" for o in objects])
    assert waited.returncode == 0, waited.stderr


@pytest.mark.parametrize("obj", [d for _, d in TEMPLATED],
                         ids=[f"{path}:{d['kind']}/{d['metadata'].get('name') or d['metadata'].get('generateName')}"
                              for path, d in TEMPLATED])
def test_controllers_and_ai_crds_are_judged_at_server_dry_run(control_plane: ControlPlane, namespace: str,
                                                              rules: Rules, ai_crds: None,
                                                              obj: dict[str, Any]) -> None:
    """Each Deployment, Job, CronJob and AI custom resource of tests/manifests (those the rules' genericKinds read
    by shape too: NIMService, OME, Knative, ...), sent with --dry-run=server: denied through the API server exactly
    when the webhook's own verdict on it is a denial, with its message."""
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("namespace", None)
    judged = judge_object(copy.deepcopy(obj), ctx=as_context(rules), mode="deny", namespace=namespace)
    done = control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj))
    if judged is None or judged[0].allowed:  # nothing to judge in it (a kind read by shape with no GPU), or allowed
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode != 0 and DENIED_BY in done.stderr, done.stderr
    denied = [t for t in judged[1] if not t.verdict.allowed]
    for template in denied:
        assert f" {template.path} (" in done.stderr, done.stderr  # each bad template is named
    for finding in (f for t in denied for f in t.verdict.findings if f.severity == "deny"):
        assert finding.message.split(";")[0][:60] in done.stderr, done.stderr


def test_updating_a_legacy_deployment_is_not_blocked(control_plane: ControlPlane, rules: Rules) -> None:
    """A Deployment made before ai-admission served its namespace keeps scaling and changing its other fields;
    changing its bad GPU template is judged."""
    namespace = control_plane.create_namespace(namespace_name("legacy"), route_labels("nowhere"))
    legacy_deployment(control_plane, namespace)
    served = control_plane.kubectl("label", "namespace", namespace, f"{ROUTE_LABEL}-")  # now the session's
    assert served.returncode == 0, served.stderr
    deadline = time.monotonic() + 30
    while DENIED_BY not in create(control_plane, namespace, BARE_POD, dry_run=True).stderr:
        assert time.monotonic() < deadline, "the namespace is not served"
        time.sleep(0.2)
    for patch in ('{"spec": {"replicas": 3}}', '{"metadata": {"labels": {"team": "llm"}}}'):
        done = control_plane.kubectl("patch", "deployment", "legacy", "-n", namespace, "--type=merge", "-p", patch)
        assert done.returncode == 0, done.stderr
    changed = control_plane.kubectl("patch", "deployment", "legacy", "-n", namespace, "--type=json", "-p",
                                    '[{"op": "replace", "path": "/spec/template/spec/containers/0/image", '
                                    '"value": "nvidia/cuda:12.6.0-base-ubuntu22.04"}]')
    assert changed.returncode != 0 and DENIED_BY in changed.stderr and 'Deployment "' in changed.stderr, \
        changed.stderr


def test_warn_namespace_admits_with_a_warning(control_plane: ControlPlane) -> None:
    """``ai-admission.io/mode=warn`` selects the /validate/warn entry: admitted, and kubectl shows why."""
    namespace = control_plane.create_namespace(namespace_name("warn"), {"ai-admission.io/mode": "warn"})
    done = create(control_plane, namespace, BARE_POD)
    assert done.returncode == 0, done.stderr
    assert any(NO_MODEL in line and "would deny" in line for line in warnings(done.stderr)), done.stderr
    assert is_mutated(get_pod(control_plane, namespace, "bare-gpu"))  # the mutating entry selects every mode


def test_warn_mode_warnings_reach_kubectl_whole(control_plane: ControlPlane) -> None:
    """The API server cuts a warning longer than 256 characters (ending it with '…'): warn mode's warnings are
    written to fit (a missing model's drops its list of known models)."""
    namespace = control_plane.create_namespace(namespace_name("warn-whole"), {"ai-admission.io/mode": "warn"})
    done = create(control_plane, namespace, BARE_POD)
    assert done.returncode == 0, done.stderr
    cut = [line for line in warnings(done.stderr) if line.endswith("\u2026")]
    assert not cut, f"warnings cut by the API server: {cut}"


def test_webhook_outage_admits_pods_unchecked(control_plane: ControlPlane, rules: Rules, tmp_path: Path) -> None:
    """failurePolicy Ignore as shipped: with the server gone, pods are still created (neither checked nor mutated)."""
    with own_server(control_plane, tmp_path, rules, "outage") as (server, namespace):
        before = create(control_plane, namespace, BARE_POD, dry_run=True)
        assert DENIED_BY in before.stderr, before.stderr  # the route reaches the server while it runs
        stop_server(server)
        started = time.monotonic()
        done = create(control_plane, namespace, BARE_POD, named(PROFILED_POD, "train"))
        elapsed = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        for name in ("bare-gpu", "train"):
            pod = get_pod(control_plane, namespace, name)
            assert not is_mutated(pod) and "priorityClassName" not in pod["spec"]
        assert elapsed < 5, f"a refused connection should fail open at once, took {elapsed:.1f} s"


N_PODS = 5
NGINX = next(case for case in POD_CASES if case.name == "nginx-no-gpu")


def test_calls_per_pod(control_plane: ControlPlane, rules: Rules, tmp_path: Path) -> None:
    """The API server's calls per pod, counted by a server only this test's namespace reaches: one /mutate and
    one /validate for a pod we mutate, none for a pod we leave alone (the matchConditions keep it)."""
    with own_server(control_plane, tmp_path, rules, "calls") as (server, namespace):
        def calls() -> tuple[int, int]:
            text = server.get("/metrics").text
            return tuple(int(metric(text, "ai_admission_requests_total", endpoint=endpoint, kind="Pod",
                                    operation="CREATE")) for endpoint in ("mutate", "validate"))  # type: ignore

        time.sleep(0.3)  # the probes' counts reach the shared files (batched every 0.2 s)
        mutate0, validate0 = calls()
        done = create(control_plane, namespace, *(named(PROFILED_POD, f"train-{i}") for i in range(N_PODS)))
        assert done.returncode == 0, done.stderr
        # every call was made before its create returned; wait for the batches, then for any straggler
        settled(server, lambda t: metric(t, "ai_admission_requests_total", endpoint="validate") - validate0 >= N_PODS)
        time.sleep(0.3)
        mutate1, validate1 = calls()
        print(f"{N_PODS} profiled pods: {mutate1 - mutate0} mutate calls, {validate1 - validate0} validate calls")
        assert (mutate1 - mutate0, validate1 - validate0) == (N_PODS, N_PODS)

        plain = [named(for_apiserver(NGINX.pod, namespace), f"web-{i}") for i in range(N_PODS)]
        done = create(control_plane, namespace, *plain)
        assert done.returncode == 0, done.stderr
        time.sleep(0.5)
        mutate2, validate2 = calls()
        print(f"{N_PODS} plain pods: {mutate2 - mutate1} mutate calls, {validate2 - validate1} validate calls")
        assert (mutate2 - mutate1, validate2 - validate1) == (0, 0)
        assert not is_mutated(get_pod(control_plane, namespace, "web-0"))


def test_a_debug_container_gets_void_and_one_that_takes_gpus_is_denied(control_plane: ControlPlane,
                                                                      namespace: str) -> None:
    """``kubectl debug`` adds an ephemeral container through pods/ephemeralcontainers: /mutate sets
    NVIDIA_VISIBLE_DEVICES=void on it (it can ask for no GPU; its CUDA image would show it every GPU under the
    NVIDIA runtime), and /validate denies one that sets a device value itself."""
    target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug-target"},
              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}
    done = create(control_plane, namespace, target)
    assert done.returncode == 0, done.stderr
    debugged = control_plane.kubectl("debug", "-n", namespace, "debug-target", "-c", "dbg",
                                     "--image=nvidia/cuda:12.4.1-base-ubuntu22.04", "--", "sleep", "1")
    assert debugged.returncode == 0, debugged.stderr
    (added,) = get_pod(control_plane, namespace, "debug-target")["spec"]["ephemeralContainers"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in added.get("env", [])
    grabbing = control_plane.kubectl("debug", "-n", namespace, "debug-target", "-c", "grab",
                                     "--image=nvidia/cuda:12.4.1-base-ubuntu22.04", "--env=NVIDIA_VISIBLE_DEVICES=all",
                                     "--", "sleep", "1")
    assert grabbing.returncode != 0 and DENIED_BY in grabbing.stderr, grabbing.stderr
    assert 'ephemeral container "grab" sets NVIDIA_VISIBLE_DEVICES=all' in grabbing.stderr
