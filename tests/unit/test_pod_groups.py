"""The default scheduler's gang through the Workload API (`webhook.core.podgroups`): which pods join a group, what
a group holds, what the Job controller's group is given at its CREATE, and what the user is told where nothing can
be written. The same decisions through a real API server, scheduler and Job controller: tests/e2e/test_gang.py."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.support.builders import rules_with
from tests.support.clusters import gke_cluster, with_nodes
from tests.support.contexts import as_context
from tests.support.gang import indexed_job, job_controller_group, worker
from tests.support.reviews import admission_review, apply_verdict, assert_valid_pod
from webhook.core.admission import decide, judge, mutate_verdict
from webhook.core.podgroups import plan as groups
from webhook.core.podgroups.support import POD_GROUP_LABEL, PodGroupApi, PodGroupSupport
from webhook.core.profile import Profile, build_profile
from webhook.core.review import parse_review
from webhook.core.rules import Rules
from webhook.core.workloads.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
ALPHA = PodGroupApi("v1alpha2", topology=True, preemption=True)
IN_SERVICE = PodGroupSupport(api=ALPHA, controller=True, known=True)


@pytest.fixture(scope="module")
def gke(rules: Rules) -> Rules:
    return with_nodes(gke_cluster(), rules)


def _valid(obj: dict[str, Any], version: str = "1.36.0") -> None:
    kubernetes_validate.validate(obj, version, strict=True)


# -- which pods join a group ---------------------------------------------------------------------------------------

def test_a_worker_of_a_pytorchjob_joins_the_group_its_owner_names(gke: Rules) -> None:
    pod = worker("llama-ft", 1, 3)
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny")
    patched = apply_verdict(pod, verdict)
    job = groups.job_of(pod)
    assert job == groups.JobRef("kubeflow.org/v1", "PyTorchJob", "llama-ft", "0b7c2f4e-1d8a-4c3e-9f21-6a5d4e3c2b10")
    name = groups.group_name(job)
    assert patched["spec"]["schedulingGroup"] == {"podGroupName": name}
    assert patched["metadata"]["labels"][POD_GROUP_LABEL] == name
    assert not [w for w in verdict.warnings if "gang" in w]
    assert_valid_pod(patched)
    # every worker of the job names the same group: derived from the owner alone
    other = apply_verdict(worker("llama-ft", 2, 3), mutate_verdict(worker("llama-ft", 2, 3), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny"))
    assert other["spec"]["schedulingGroup"] == patched["spec"]["schedulingGroup"]
    # and once named, mutating again adds nothing (reinvocation)
    again = mutate_verdict(copy.deepcopy(patched), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny")
    assert not [op for op in again.patch if "schedulingGroup" in op["path"] or "pod-group" in op["path"]]


def test_the_group_name_is_a_label_value_and_differs_per_job() -> None:
    job = groups.JobRef("kubeflow.org/v1", "PyTorchJob", "A" * 80 + "-job", "u-1")
    name = groups.group_name(job)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), name
    assert groups.group_name(dataclasses.replace(job, uid="u-2")) != name
    assert groups.group_name(dataclasses.replace(job, kind="MPIJob")) != name
    assert groups.group_name(job) == name


@pytest.mark.parametrize("support, told", [
    (PodGroupSupport(known=True), None),                                     # no Workload API: nothing of this
    (PodGroupSupport(), None),                                               # offline: nothing known
    (PodGroupSupport(api=ALPHA, controller=False, known=True), "PodGroup controller is not running"),
])
def test_where_no_group_can_be_made_the_pod_is_scheduled_alone(gke: Rules, support: PodGroupSupport,
                                                               told: str | None) -> None:
    pod = worker("llama-ft", 0, 3)
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(gke, pod_groups=support), mode="deny")
    patched = apply_verdict(pod, verdict)
    assert "schedulingGroup" not in patched["spec"] and POD_GROUP_LABEL not in patched["metadata"]["labels"]
    said = [w for w in verdict.warnings if "not scheduled as a gang" in w]
    assert (said == []) if told is None else (len(said) == 1 and told in said[0]), verdict.warnings


def test_a_single_pod_a_pod_with_a_group_and_a_job_controllers_pod_are_left_alone(gke: Rules) -> None:
    single = worker("llama-ft", 0, 1)
    single["metadata"]["labels"].pop("training.kubeflow.org/replica-type")
    assert "schedulingGroup" not in apply_verdict(single, mutate_verdict(
        copy.deepcopy(single), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny"))["spec"]
    own = worker("llama-ft", 0, 3)
    own["spec"]["schedulingGroup"] = {"podGroupName": "mine"}
    assert apply_verdict(own, mutate_verdict(copy.deepcopy(own), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny"))["spec"]["schedulingGroup"] == {"podGroupName": "mine"}
    of_a_job = worker("train", 0, 3, kind="Job", api_version="batch/v1")
    verdict = mutate_verdict(copy.deepcopy(of_a_job), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny")
    assert "schedulingGroup" not in apply_verdict(of_a_job, verdict)["spec"]
    assert not [w for w in verdict.warnings if "gang" in w]


def test_a_pod_of_a_kind_no_one_groups_is_told(gke: Rules) -> None:
    pod = worker("lws", 0, 3, kind="StatefulSet", api_version="apps/v1")
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny")
    assert "schedulingGroup" not in apply_verdict(pod, verdict)["spec"]
    assert any("not scheduled as a gang" in w and "StatefulSet" in w for w in verdict.warnings), verdict.warnings


def test_with_a_queueing_backend_its_words_win(rules: Rules) -> None:
    kueue = with_nodes(gke_cluster(), rules_with({"scheduler": {"backend": "kueue"}}))
    pod = worker("llama-ft", 0, 3)
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(kueue, pod_groups=IN_SERVICE), mode="deny")
    assert "schedulingGroup" not in apply_verdict(pod, verdict)["spec"]
    assert not [w for w in verdict.warnings if "gang" in w]


def test_the_kinds_grouped_are_the_training_kinds_of_the_table() -> None:
    """Each job kind is in the kinds table; those whose operator makes the pods own them there (the pods' owner is
    the job); a Job is the Job controller's to group."""
    assert {("kubeflow.org", k) for k in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")} \
        | {("batch.volcano.sh", "Job"), ("ray.io", "RayCluster"), ("jobset.x-k8s.io", "JobSet"),
           ("leaderworkerset.x-k8s.io", "LeaderWorkerSet")} == groups.JOB_KINDS
    assert ("batch", "Job") not in groups.JOB_KINDS
    for group, kind in groups.OWNED_KINDS:
        sites = KINDS[(group, kind)].sites
        assert sites and all(site.owner is not None and site.owner.kind == kind for site in sites), kind


def test_the_server_may_read_every_owner_it_counts_a_group_by() -> None:
    """RBAC: get on each kind the controller reads a group's count from (the kinds table's), no more."""
    roles = [d for d in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text())
             if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "ai-admission-pod-groups"]
    assert len(roles) == 1
    readable = {(group, resource) for rule in roles[0]["rules"] if "get" in rule["verbs"]
                for group in rule["apiGroups"] for resource in rule["resources"]}
    wanted = {(group, KINDS[(group, kind)].resource) for group, kind in groups.JOB_KINDS}
    assert wanted <= readable, wanted - readable
    assert ("scheduling.k8s.io", "podgroups") in readable


# -- what a group holds ----------------------------------------------------------------------------------------------

def _profile(pod: dict[str, Any], rules: Rules) -> Profile:
    return build_profile(pod, as_context(rules))


def test_a_group_holds_the_count_the_narrowest_level_the_class_and_its_disruption(gke: Rules) -> None:
    plan = groups.plan_of(_profile(worker("llama-ft", 0, 3), gke), as_context(gke), ALPHA, pods=3)
    assert plan is not None
    # 24 GPUs: more than a sub-block (16) of the A3 Mega nodes holds, within a block
    assert (plan.min_count, plan.topology_key, plan.priority_class, plan.disruption_mode) == (
        3, "cloud.google.com/gce-topology-block", "ai-training", "PodGroup")
    job = groups.JobRef("kubeflow.org/v1", "PyTorchJob", "llama-ft", "u")
    body = groups.podgroup_body(ALPHA, name="llama-ft-gang-x", namespace="ml-team", plan=plan, job=job)
    _valid(body)
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}},
                            "schedulingConstraints": {"topology": [{"key": "cloud.google.com/gce-topology-block"}]},
                            "priorityClassName": "ai-training", "disruptionMode": "PodGroup"}
    assert "controller" not in body["metadata"]["ownerReferences"][0]  # owned, not controlled: the operator ignores it
    beta = groups.podgroup_body(PodGroupApi("v1beta1", True, True), name="g", namespace="ml-team", plan=plan, job=job)
    assert beta["apiVersion"] == "scheduling.k8s.io/v1beta1" and beta["spec"]["disruptionMode"] == {"all": {}}
    _valid(beta, "1.37.0")  # the v1beta1 schema of Kubernetes 1.37
    _valid(groups.podgroup_body(ALPHA, name="g", namespace="ml-team", plan=groups.BASIC, job=job))


def test_what_the_cluster_drops_is_not_written_and_is_said(gke: Rules) -> None:
    bare = PodGroupApi("v1alpha2", topology=False, preemption=False)
    plan = groups.plan_of(_profile(worker("llama-ft", 0, 3), gke), as_context(gke), bare, pods=3)
    assert plan is not None and (plan.topology_key, plan.priority_class, plan.disruption_mode) == (None, None, None)
    assert any("TopologyAwareWorkloadScheduling" in n for n in plan.notes)
    assert any("WorkloadAwarePreemption" in n for n in plan.notes)
    assert groups.group_spec(bare, plan) == {"schedulingPolicy": {"gang": {"minCount": 3}}}


# -- the Job controller's group, at its CREATE ---------------------------------------------------------------------

def _review_of_group(group: dict[str, Any]) -> Any:
    return parse_review(admission_review(group, group="scheduling.k8s.io", version="v1alpha2", kind="PodGroup",
                                         resource="podgroups", namespace="ml-team"))


def test_the_job_controllers_group_is_given_what_the_jobs_template_says(gke: Rules) -> None:
    job = indexed_job("train", 3)
    group = job_controller_group(job)
    verdict = decide(_review_of_group(group), endpoint="mutate", ctx=as_context(
        gke, pod_groups=IN_SERVICE, jobs=lambda kind, name, namespace: job if name == "train" else None))
    assert verdict is not None and verdict.allowed
    patched = jsonpatch.apply_patch(copy.deepcopy(group), list(verdict.patch))
    _valid(patched)
    spec = patched["spec"]
    assert spec["schedulingConstraints"] == {"topology": [{"key": "cloud.google.com/gce-topology-block"}]}
    assert spec["priorityClassName"] == "ai-training" and "priority" not in spec  # the Priority plugin sets it again
    assert spec["disruptionMode"] == "PodGroup"
    assert spec["schedulingPolicy"] == group["spec"]["schedulingPolicy"]  # the controller's count stays
    assert spec["podGroupTemplateRef"] == group["spec"]["podGroupTemplateRef"]


def test_a_group_whose_job_is_not_known_or_not_ours_is_left_as_it_came(gke: Rules) -> None:
    job = indexed_job("train", 3)
    group = job_controller_group(job)
    for jobs in (lambda kind, name, namespace: None,                       # the watch has not seen it
                 lambda kind, name, namespace: {**job, "metadata": {**job["metadata"], "uid": "another"}}):
        assert decide(_review_of_group(group), ctx=as_context(gke, pod_groups=IN_SERVICE, jobs=jobs),
                      endpoint="mutate") is None
    ours = copy.deepcopy(group)
    ours["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "ai-admission"}
    assert decide(_review_of_group(ours), ctx=as_context(gke, pod_groups=IN_SERVICE, jobs=lambda *a: job),
                  endpoint="mutate") is None


def test_a_multi_node_training_job_the_controller_will_not_group_is_told_what_to_change(gke: Rules) -> None:
    for job, wanted in ((indexed_job("train", 3, mode="NonIndexed"), "completionMode: Indexed"),
                        (indexed_job("train", 3, completions=6), "completions equal to parallelism")):
        job["spec"]["template"]["metadata"]["annotations"]["ai-admission.io/multi-node"] = "true"
        judged = judge(job, ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny", group="batch", kind="Job")
        assert judged is not None
        found = [f for f in judged[0].findings if f.code == "job-not-grouped"]
        assert len(found) == 1 and wanted in found[0].message and found[0].severity == "warn", judged[0].findings
        assert judged[0].allowed
        # without the Workload API nothing is said
        quiet = judge(job, ctx=as_context(gke, pod_groups=PodGroupSupport(known=True)), mode="deny", group="batch", kind="Job")
        assert quiet is not None and not [f for f in quiet[0].findings if f.code == "job-not-grouped"]
    grouped = judge(indexed_job("train", 3), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny", group="batch", kind="Job")
    assert grouped is not None and not [f for f in grouped[0].findings if f.code == "job-not-grouped"]


# -- a job that can never be placed whole ---------------------------------------------------------------------------

def test_a_job_more_than_the_models_nodes_hold_is_told_with_the_numbers(gke: Rules) -> None:
    # GKE's A3 Mega nodes: 8 nodes of 8 H100
    judged = judge(worker("huge", 0, 9), ctx=as_context(gke), mode="deny", group="", kind="Pod")
    assert judged is not None
    found = [f for f in judged[0].findings if f.code == "job-never-fits"]
    assert len(found) == 1 and found[0].severity == "warn" and judged[0].allowed
    assert "72 GPUs (9 pods of 8)" in found[0].message and "8 h100-80g nodes hold together (64)" in found[0].message
    fits = judge(worker("fits", 0, 8), ctx=as_context(gke), mode="deny", group="", kind="Pod")
    assert fits is not None and not [f for f in fits[0].findings if f.code == "job-never-fits"]


def test_the_rules_may_deny_it(rules: Rules) -> None:
    strict = with_nodes(gke_cluster(), rules_with({"nodeCatalog": {"jobBeyondNodes": "deny"}}))
    judged = judge(worker("huge", 0, 9), ctx=as_context(strict), mode="deny", group="", kind="Pod")
    assert judged is not None and not judged[0].allowed and "job-never-fits" in judged[0].reason_codes
    assert "more than the cluster's 8 h100-80g nodes hold together" in (judged[0].message or "")



def test_a_job_that_opts_out_is_scheduled_one_by_one(gke: Rules) -> None:
    """``ai-admission.io/gang: "false"`` on the pod (its template's annotation): no group, no warning, and the
    controller does not count it."""
    pod = worker("llama-ft", 0, 3)
    pod["metadata"]["annotations"]["ai-admission.io/gang"] = "false"
    verdict = mutate_verdict(copy.deepcopy(pod), ctx=as_context(gke, pod_groups=IN_SERVICE), mode="deny")
    assert "schedulingGroup" not in apply_verdict(pod, verdict)["spec"]
    assert not [w for w in verdict.warnings if "gang" in w]
    assert not groups.groups_class(build_profile(pod, as_context(gke)), as_context(gke))
    pod["metadata"]["annotations"]["ai-admission.io/gang"] = "maybe"
    judged = judge(pod, ctx=as_context(gke), mode="deny", group="", kind="Pod")
    assert judged is not None and "invalid-annotation" in judged[0].reason_codes
