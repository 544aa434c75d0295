"""The dashboard and the alerts name only metrics and labels that exist, and the committed copies are current.

Every PromQL expression is parsed (a syntax error fails here, not in Prometheus); each metric it selects must be
exposed by a running server (``ai_admission_*``) or by the real kube-apiserver of the test session
(``apiserver_*``), with every label the expression matches on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.e2e_install import BARE_POD
from tests.support.metrics import exposed, missing, used


@pytest.mark.e2e
@pytest.mark.usefixtures("webhook_installed")
def test_api_server_metrics_exist_in_the_real_kube_apiserver(control_plane: ControlPlane, tmp_path: Path) -> None:
    """The API server's webhook metrics, with the label names the alerts use, after it called our webhooks
    (a denial) and failed open on one it could not reach."""
    namespace = control_plane.create_namespace(namespace_name("metrics"))
    denied = control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(BARE_POD))
    assert denied.returncode != 0
    unreachable = _unreachable_webhook(control_plane, namespace)
    try:
        wanted = {name: labels for name, labels in used().items() if name.startswith("apiserver_")}
        deadline = time.monotonic() + 30
        while True:  # the configuration reaches the API server's admission chain a moment after it is created
            control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                                  input=json.dumps({**BARE_POD, "metadata": {"name": "probe"}}))
            raw = control_plane.kubectl("get", "--raw", "/metrics")
            assert raw.returncode == 0, raw.stderr
            problems = missing(wanted, exposed(raw.stdout))
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not problems, problems
    finally:
        control_plane.kubectl("delete", "validatingwebhookconfiguration", unreachable, "--ignore-not-found")


def _unreachable_webhook(plane: ControlPlane, namespace: str) -> str:
    """A validating webhook, failurePolicy Ignore, on a loopback port nothing listens on, for ``namespace`` only."""
    from tests.support.control_plane import free_port

    name = f"unreachable-{namespace}"
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": "unreachable.ai-admission.io", "failurePolicy": "Ignore", "sideEffects": "None",
                      "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
                      "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/validate"},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"]}],
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]}
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(configuration))
    assert done.returncode == 0, done.stderr
    return name
