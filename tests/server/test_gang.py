"""The default scheduler's gang through the real server (HTTPS, gunicorn, the shipped configuration), with the API
stand-in serving the Workload API: what each worker finds and shows, the pod of a training job named into its job's
group, the Job controller's PodGroup given the profile's words at its CREATE, the group made by the one controller,
and the metrics. The same through a real control plane: tests/e2e/test_gang.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import jsonpatch
import kubernetes_validate
import pytest

from tests.conftest import Server, eventually, start_server, stop_server
from tests.support.builders import priority_class
from tests.support.gang import UID, indexed_job, job_controller_group, pytorchjob, serve_workload_api, worker
from tests.support.kubeapi import FakeKubeAPI
from tests.support.metrics import metric
from tests.support.reviews import admission_review, apply_patch, assert_valid_pod, decode_patch
from webhook.core.podgroups import plan as groups
from webhook.core.podgroups.support import POD_GROUP_LABEL

HOME = "ai-admission"


def every_worker(server: Server, check: Any) -> bool:
    """Asked two dozen times (each connection may reach either worker), every answer holds."""
    return all(check(server.get("/readyz").json().get("podGroups", {})) for _ in range(24))


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, Server]]:
    with FakeKubeAPI() as api:
        serve_workload_api(api)
        for name in ("ai-training", "ai-inference", "ai-batch", "ai-hpo"):
            api.add("priorityclasses", priority_class(name))
        server = start_server(tmp_path, extra_env={
            "KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig")), "AI_ADMISSION_NAMESPACE": HOME,
            "AI_ADMISSION_POD_GROUPS": "true", "AI_ADMISSION_POD_GROUPS_CHECK_SECONDS": "0.3"})
        try:
            eventually(lambda: every_worker(server, lambda found: found.get("controllerInService")))
            yield api, server
        finally:
            stop_server(server)


def test_each_worker_shows_what_it_found(cluster: tuple[FakeKubeAPI, Server]) -> None:
    api, server = cluster
    shown = server.get("/readyz").json()["podGroups"]
    assert (shown["served"], shown["topology"], shown["preemption"]) == ("scheduling.k8s.io/v1alpha2", True, True)
    assert api.objects[("leases", HOME, "ai-admission-pod-groups")]["spec"]["holderIdentity"]
    text = server.get("/metrics").text
    assert metric(text, "ai_admission_pod_groups_served") == 1
    assert metric(text, "ai_admission_pod_group_controller_in_service") == 1


def test_a_training_jobs_pod_is_named_into_its_group_which_the_controller_makes(
        cluster: tuple[FakeKubeAPI, Server]) -> None:
    api, server = cluster
    job = pytorchjob()
    api.add("pytorchjobs", job, "ml-team")
    pod = worker("llama-ft", 1, 3, uid=UID)
    response = server.review("/mutate", admission_review(pod))
    assert response["allowed"] is True
    mutated = apply_patch(pod, response)
    assert_valid_pod(mutated)
    name = groups.group_name(groups.JobRef("kubeflow.org/v1", "PyTorchJob", "llama-ft", UID))
    assert mutated["spec"]["schedulingGroup"] == {"podGroupName": name}
    assert mutated["metadata"]["labels"][POD_GROUP_LABEL] == name
    assert not [w for w in response.get("warnings", []) if "gang" in w]
    api.add("pods", mutated, "ml-team")  # created: the controller's watch sees it and makes its group
    group = eventually(lambda: api.objects.get(("podgroups", "ml-team", name)))
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group["metadata"]["ownerReferences"][0]["uid"] == UID
    eventually(lambda: metric(server.get("/metrics").text, "ai_admission_pod_groups_made_total") == 1)


def test_the_job_controllers_group_is_given_the_profiles_words(cluster: tuple[FakeKubeAPI, Server]) -> None:
    """No node watch here: no topology is known, so the group gets the class's PriorityClass and disruption mode."""
    api, server = cluster
    job = indexed_job("train", 3)
    api.add("jobs", job, "ml-team")
    group = job_controller_group(job)
    review = admission_review(group, group="scheduling.k8s.io", version="v1alpha2", kind="PodGroup",
                              resource="podgroups")
    response = eventually(lambda: (answer := server.review("/mutate", review)).get("patch") and answer)
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
    patched = jsonpatch.apply_patch(group, decode_patch(response))
    kubernetes_validate.validate(patched, "1.36.0", strict=True)  # 1.37 serves PodGroups as v1beta1
    assert (patched["spec"]["priorityClassName"], patched["spec"]["disruptionMode"]) == ("ai-training", "PodGroup")
    assert "priority" not in patched["spec"]  # the Priority plugin sets it again from the class
    assert patched["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert any("topology is not known here" in w for w in response.get("warnings", [])), response
