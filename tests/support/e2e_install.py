"""Install ai-admission into the test control plane as a cluster installs it, pointed at a local server.

The webhook configurations are the generated ones (``webhook.generate.webhooks``), so what the API server does with the
shipped rules, namespace selectors, failure policy, timeouts and reinvocation policy is observed, not assumed.
Two changes only, both forced by a control plane with no Service network and shared by the whole session:

- ``clientConfig``: ``service`` becomes ``url: <server URL><path>`` with the server's CA as ``caBundle``;
- routing: one more namespaceSelector expression on a test-only label, ``e2e.ai-admission.io/route``.

Why routing: one API server serves the whole session, and webhook configurations are cluster-wide. The session's
registration (``ai-admission``, calling the session's server) selects namespaces *without* the label, which is
every namespace a test makes by default. A test that needs a server of its own (one it stops, or one whose
metrics only it sees) registers a second copy (``ai-admission-<route>``) that selects only namespaces labelled
``route=<route>`` and calls its server. A namespace is thus served by exactly one copy, tests never see each
other's servers, and the shipped expressions (``kube-system`` excluded, ``ai-admission.io/mode``) apply
unchanged in every copy, because ``NotIn``/``DoesNotExist`` on the extra label holds for all other namespaces.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from pathlib import Path
from typing import Any

import yaml

from tests.support.control_plane import ControlPlane, namespace_name
from webhook.core.rules import Rules
from webhook.generate.native import webhook_patch as native_patch
from webhook.generate.webhooks import NAME, priority_classes, webhook_configurations

ROUTE_LABEL = "e2e.ai-admission.io/route"
WAIT_SECONDS = 30.0

# A pod every registration denies (no model, no memory) and one it admits and mutates: the probes that show a
# registration has reached the API server's webhook informers.
BARE_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare-gpu"},
    "spec": {"containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}
# the same, as a Job's template: what the backstop's policy for the kinds' templates denies
BARE_JOB: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bare-gpu-job"},
                            "spec": {"template": {"spec": {**copy.deepcopy(BARE_POD["spec"]), "restartPolicy": "Never"}}}}
PROFILED_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train", "annotations": {"ai-admission.io/workload-type": "training",
                                                  "ai-admission.io/gpu-memory": "40Gi"}},
    "spec": {"nodeSelector": {"gpu-type": "a100-80g"},
             "containers": [{"name": "train", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                             "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "64Gi", "cpu": "8"},
                                           "requests": {"nvidia.com/gpu": "2", "memory": "64Gi", "cpu": "8"}}}]},
}


def legacy_deployment(plane: ControlPlane, namespace: str) -> None:
    """Create, in ``namespace`` (not yet served), a Deployment whose GPU template says neither model nor memory:
    one made before ai-admission, whose updates must not be blocked unless they change that template."""
    legacy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "legacy"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "legacy"}},
                       "template": {"metadata": {"labels": {"app": "legacy"}},
                                    "spec": copy.deepcopy(BARE_POD["spec"])}}}
    made = plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(legacy))
    assert made.returncode == 0, made.stderr


def registration_name(route: str | None) -> str:
    return NAME if route is None else f"{NAME}-{route}"


def route_labels(route: str | None) -> dict[str, str]:
    """The namespace labels that send a namespace's pods to ``route``'s server."""
    return {} if route is None else {ROUTE_LABEL: route}


def _route_expression(route: str | None) -> dict[str, Any]:
    if route is None:
        return {"key": ROUTE_LABEL, "operator": "DoesNotExist"}
    return {"key": ROUTE_LABEL, "operator": "In", "values": [route]}


def routed_configurations(*, url: str, ca_pem: bytes, rules: Rules, route: str | None = None,
                          native: bool = False) -> list[dict[str, Any]]:
    """The generated webhook configurations, calling ``url`` and selecting only ``route``'s namespaces; ``native``:
    with the native component's condition too (`webhook.generate.native.webhook_patch`)."""
    patched = {w["name"]: w["matchConditions"] for c in native_patch(rules) for w in c["webhooks"]} if native else {}
    ca_bundle = base64.b64encode(ca_pem).decode()
    result = []
    for generated in webhook_configurations(rules):
        configuration = copy.deepcopy(generated)
        configuration["metadata"]["name"] = registration_name(route)
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
            hook["namespaceSelector"]["matchExpressions"].append(_route_expression(route))
            if hook["name"] in patched:
                hook["matchConditions"] = patched[hook["name"]]
        result.append(configuration)
    return result


def _apply(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    if done.returncode != 0:
        raise RuntimeError(f"kubectl apply failed: {done.stderr}")


def install(plane: ControlPlane, *, url: str, ca: Path, rules: Rules, route: str | None = None,
            native: bool = False) -> None:
    """Apply the PriorityClasses and the routed webhook configurations, and wait until both webhooks act.

    The PriorityClasses come first: the mutation sets them, and the Priority plugin refuses a pod whose class
    does not exist. The configurations reach the API server's admission chain through informers, a moment after
    ``apply`` returns, so ``install`` waits until a probe pod is mutated and a bare one denied (server dry-run,
    in a namespace of the route, nothing stored).
    """
    _apply(plane, priority_classes(rules))
    _apply(plane, routed_configurations(url=url, ca_pem=ca.read_bytes(), rules=rules, route=route, native=native))
    probe = plane.create_namespace(namespace_name(f"probe-{route or 'session'}"), route_labels(route))
    wait_until_active(plane, probe)


def uninstall(plane: ControlPlane, route: str) -> None:
    """Remove a route's configurations (never the session's: other tests rely on them)."""
    name = registration_name(route)
    plane.kubectl("delete", "--ignore-not-found", f"mutatingwebhookconfiguration/{name}",
                  f"validatingwebhookconfiguration/{name}")


def _dry_run(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> tuple[int, str, str]:
    done = plane.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                         input=json.dumps(pod))
    return done.returncode, done.stdout, done.stderr


def wait_until_active(plane: ControlPlane, namespace: str, *, seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    mutated = denied = False
    last = ""
    while time.monotonic() < deadline:
        if not mutated:
            code, out, last = _dry_run(plane, namespace, PROFILED_POD)
            mutated = code == 0 and "priorityClassName" in json.loads(out)["spec"]
        if mutated and not denied:
            code, _, last = _dry_run(plane, namespace, BARE_POD)
            denied = code != 0 and 'admission webhook "validate.ai-admission.io" denied' in last
        if mutated and denied:
            return
        time.sleep(0.1)
    raise RuntimeError(f"webhooks not active in namespace {namespace} after {seconds} s "
                       f"(mutating: {mutated}, validating: {denied}); last kubectl stderr: {last}")


def facts_installed(plane: ControlPlane, data: dict[str, str] | None = None) -> None:
    """The native policies' parameter as the server writes it, once its kind (installed with the native set) is
    established, in the server's namespace: empty, as before any node is known, or with ``data``."""
    from webhook.core.view.cluster_facts import GROUP, PLURAL, param
    from webhook.generate.webhooks import NAME as HOME

    done = plane.kubectl("wait", "--for=condition=established", "--timeout=60s", f"crd/{PLURAL}.{GROUP}")
    assert done.returncode == 0, done.stderr
    home = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOME}}
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([home, param(HOME, data)]))
    assert done.returncode == 0, done.stderr
