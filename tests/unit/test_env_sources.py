"""Env from ConfigMaps and Secrets (``envFrom``): a path to a GPU no request shows. A container that takes
``NVIDIA_VISIBLE_DEVICES: all`` from a ConfigMap and asks for no GPU sees every GPU of its node; it was allowed with
no word everywhere, and such a pod did not even reach the webhook.

The pod follows the Kubernetes documentation's "Configure all key-value pairs in a ConfigMap as container environment
variables" (configmap/pod-configmap-envFrom.yaml) field for field, its ConfigMap holding the device variable.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from tests.support.builders import rules_with
from tests.support.contexts import as_context
from webhook.core.admission import mutate_verdict
from webhook.core.documents import Document, check
from webhook.core.rules import Rules

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def env_from_pod(namespace: str = "ml-team", **ref: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dapi-test-pod", "namespace": namespace},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "test-container", "image": "registry.k8s.io/busybox", "command": ["/bin/sh", "-c", "env"],
                "envFrom": [ref or {"configMapRef": {"name": "special-config"}}]}]}}


def config_map(data: dict[str, str], name: str = "special-config") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ml-team"}, "data": data}


def checked(*objects: dict[str, Any], rules: Rules) -> list[Any]:
    return check([Document("f.yaml", i, copy.deepcopy(o)) for i, o in enumerate(objects)], context=as_context(rules)).results


# -- admission: the keys are unseen, the container is voided ---------------------------------------------------------

def test_a_pod_that_asks_for_no_gpu_gets_void_on_the_containers_that_take_env_from(rules: Rules) -> None:
    pod = env_from_pod()
    pod["spec"]["containers"].append({"name": "plain", "image": "registry.k8s.io/busybox"})
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny", namespace="ml-team")
    assert [dict(op) for op in verdict.patch] == [{"op": "add", "path": "/spec/containers/0/env", "value": [VOID]}]
    assert verdict.warnings == ()
    secret = env_from_pod(secretRef={"name": "gpu-env"}, prefix="NVIDIA_")
    secret["spec"]["initContainers"] = copy.deepcopy(secret["spec"]["containers"])
    ops = mutate_verdict(secret, ctx=as_context(rules), mode="deny", namespace="ml-team").patch
    assert [op["path"] for op in ops] == ["/spec/initContainers/0/env", "/spec/containers/0/env"]


def test_what_the_pod_sets_itself_and_gpu_infrastructure_are_left_alone(rules: Rules) -> None:
    own = env_from_pod()
    own["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert mutate_verdict(own, ctx=as_context(rules), mode="deny", namespace="ml-team").patch == ()
    assert mutate_verdict(env_from_pod("gpu-operator"), ctx=as_context(rules), mode="deny", namespace="gpu-operator").patch == ()


def test_where_the_rules_do_not_void_the_pod_is_told_what_admission_cannot_see() -> None:
    rules = rules_with({"bypasses": {"voidVisibleDevices": False}})
    verdict = mutate_verdict(env_from_pod(), ctx=as_context(rules), mode="deny", namespace="ml-team")
    assert verdict.patch == ()
    assert verdict.warnings == ("container 'test-container' takes env from ConfigMap \"special-config\", which "
                                "admission cannot read: if it sets NVIDIA_VISIBLE_DEVICES, the container sees GPUs it "
                                "never asked for",)


# -- check: the ConfigMaps and Secrets among the files are read ------------------------------------------------------

@pytest.mark.parametrize(("ref", "source"), [
    ({"configMapRef": {"name": "special-config"}}, config_map({"NVIDIA_VISIBLE_DEVICES": "all", "SPECIAL": "x"})),
    ({"secretRef": {"name": "gpu-env"}}, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                          "metadata": {"name": "gpu-env", "namespace": "ml-team"},
                                          "data": {"NVIDIA_VISIBLE_DEVICES": base64.b64encode(b"all").decode()}}),
    ({"secretRef": {"name": "gpu-env"}}, {"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "gpu-env", "namespace": "ml-team"}, "stringData": {"NVIDIA_VISIBLE_DEVICES": "0,1"}}),
    ({"prefix": "NVIDIA_", "configMapRef": {"name": "special-config"}}, config_map({"VISIBLE_DEVICES": "all"})),
], ids=["configmap", "secret-data", "secret-stringdata", "prefix"])
def test_check_judges_the_keys_a_container_takes(rules: Rules, ref: dict[str, Any], source: dict[str, Any]) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "env", "namespace": "ml-team"},
           "spec": {"template": {"spec": env_from_pod(**ref)["spec"]}}}
    (result,) = checked(job, source, rules=rules)
    assert result.status == "DENY" and list(result.verdict.reason_codes) == ["gpu-visible-devices-env"]
    kind = source["kind"]
    name = source["metadata"]["name"]
    assert 'container "test-container" sets NVIDIA_VISIBLE_DEVICES=' in (result.verdict.message or "")
    assert f'(from {kind} "{name}", by envFrom)' in (result.verdict.message or "")
    (alone,) = checked(job, rules=rules)  # without the ConfigMap among the files: nothing to judge by
    assert alone.status == "ALLOW" and alone.workload == "none"


def test_the_containers_own_env_wins_over_its_config_map(rules: Rules) -> None:
    pod = env_from_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    (result,) = checked(pod, config_map({"NVIDIA_VISIBLE_DEVICES": "all"}), rules=rules)
    assert result.status == "ALLOW"
    assert result.document.obj == pod  # the file as written: the keys are only read for the judgement
