"""The CRDs of the scheduler backends and of the owners ai-admission writes, with the real group, versions, kind,
plural and scope, and the schema of every field ai-admission reads or writes (the rest is kept unknown-preserving).

Sources, each project's published API types (docs/admins/schedulers.md):

- Kueue ``kueue.x-k8s.io/v1beta2`` (storage since v0.16): LocalQueue (namespaced; ``spec.clusterQueue``),
  ClusterQueue (cluster; ``spec.cohortName``, ``spec.resourceGroups[].coveredResources``, ``flavors[].resources[]``
  with ``name``, ``nominalQuota``, ``borrowingLimit``), WorkloadPriorityClass (cluster; ``value``) -
  kubernetes-sigs/kueue apis/kueue/v1beta2/*_types.go.
- KAI-Scheduler Queue ``scheduling.run.ai/v2`` (cluster; ``spec.parentQueue``, ``spec.resources.{gpu,cpu,memory}.
  {quota, limit, overQuotaWeight}``) - kai-scheduler/KAI-Scheduler pkg/apis/scheduling/v2/queue_types.go.
- Volcano Queue ``scheduling.volcano.sh/v1beta1`` (cluster; ``spec.capability``, ``status.state``) and Job
  ``batch.volcano.sh/v1alpha1`` (``spec.queue``, ``minAvailable``, ``schedulerName``, ``tasks[].template``) -
  volcano-sh/apis pkg/apis/scheduling/v1beta1/types.go, pkg/apis/batch/v1alpha1/job.go.
- scheduler-plugins PodGroup ``scheduling.x-k8s.io/v1alpha1`` (namespaced; ``spec.minMember``) -
  kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1/types.go.
- The owners: PyTorchJob ``kubeflow.org/v1`` (``spec.pytorchReplicaSpecs.<role>.template``), JobSet
  ``jobset.x-k8s.io/v1alpha2`` (``spec.replicatedJobs[].template.spec.template``), LeaderWorkerSet
  ``leaderworkerset.x-k8s.io/v1`` (``spec.leaderWorkerTemplate.{leader,worker}Template``), TrainJob
  ``trainer.kubeflow.org/v1alpha1`` (``spec.runtimePatches[]``: ``manager``, ``trainingRuntimeSpec.template``
  with labels and annotations at JobSet, Job and pod level; kubeflow/trainer pkg/apis/trainer/v1alpha1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

# The CRDs as each project publishes them (../shared/backend-crds, its SOURCES.md says from where), for a real API
# server: the schemas above are for validating objects offline, and an API server refuses some of their shapes
# (a CRD may say nothing of metadata but name and generateName).
PUBLISHED = Path(__file__).resolve().parents[3] / "shared" / "backend-crds"

UNKNOWN: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
STRINGS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
QUANTITY: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
META: dict[str, Any] = {"type": "object", "properties": {"labels": STRINGS, "annotations": STRINGS},
                        "x-kubernetes-preserve-unknown-fields": True}
POD_SPEC: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
    "schedulerName": {"type": "string"}, "priorityClassName": {"type": "string"},
    "containers": {"type": "array", "items": UNKNOWN}}}
POD_TEMPLATE: dict[str, Any] = {"type": "object", "properties": {"metadata": META, "spec": POD_SPEC}}


def _object(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    properties: dict[str, Any] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": META,
                                  "spec": spec}
    if status is not None:
        properties["status"] = status
    return {"type": "object", "properties": properties}


def crd(group: str, version: str, kind: str, plural: str, scope: str, schema: dict[str, Any],
        short: list[str] | None = None) -> dict[str, Any]:
    approved = {"api-approved.kubernetes.io": "unapproved, a test's copy"} \
        if group.endswith(".k8s.io") or group.endswith(".kubernetes.io") else {}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}", "annotations": approved},
            "spec": {"group": group, "scope": scope,
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List",
                               **({"shortNames": short} if short else {})},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}]}}


KUEUE = [
    crd("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues", "Namespaced",
        _object({"type": "object", "required": ["clusterQueue"], "properties": {
            "clusterQueue": {"type": "string", "maxLength": 253}}, "x-kubernetes-preserve-unknown-fields": True}),
        ["queue", "queues", "lq"]),
    crd("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", "Cluster", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "cohortName": {"type": "string"},
            "namespaceSelector": UNKNOWN,
            "resourceGroups": {"type": "array", "maxItems": 16, "items": {
                "type": "object", "required": ["coveredResources", "flavors"], "properties": {
                    "coveredResources": {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string"}},
                    "flavors": {"type": "array", "minItems": 1, "maxItems": 64, "items": {
                        "type": "object", "required": ["name", "resources"], "properties": {
                            "name": {"type": "string"},
                            "resources": {"type": "array", "minItems": 1, "maxItems": 64, "items": {
                                "type": "object", "required": ["name", "nominalQuota"], "properties": {
                                    "name": {"type": "string"}, "nominalQuota": QUANTITY,
                                    "borrowingLimit": QUANTITY, "lendingLimit": QUANTITY}}}}}}}}}}}),
        ["cq"]),
    # kueue apis/kueue/v1beta2/resourceflavor_types.go: nodeLabels, nodeTaints, tolerations, topologyName
    crd("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", "Cluster", _object({
        "type": "object", "properties": {
            "nodeLabels": {"type": "object", "maxProperties": 8, "additionalProperties": {"type": "string"}},
            "nodeTaints": {"type": "array", "maxItems": 8, "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "tolerations": {"type": "array", "maxItems": 8, "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "topologyName": {"type": "string"}}}),
        ["rf"]),
    crd("kueue.x-k8s.io", "v1beta2", "WorkloadPriorityClass", "workloadpriorityclasses", "Cluster", {
        "type": "object", "required": ["value"], "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": META,
            "value": {"type": "integer", "format": "int32"}, "description": {"type": "string", "maxLength": 2048}}}),
]
KAI = [
    crd("scheduling.run.ai", "v2", "Queue", "queues", "Cluster", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "parentQueue": {"type": "string"}, "priority": {"type": "integer"},
            "resources": {"type": "object", "properties": {r: {"type": "object", "properties": {
                "quota": {"type": "number"}, "limit": {"type": "number"}, "overQuotaWeight": {"type": "number"}}}
                for r in ("gpu", "cpu", "memory")}}}})),
]
VOLCANO = [
    crd("scheduling.volcano.sh", "v1beta1", "Queue", "queues", "Cluster", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "weight": {"type": "integer"}, "reclaimable": {"type": "boolean"},
            "capability": {"type": "object", "additionalProperties": QUANTITY}}}, {
        "type": "object", "properties": {"state": {"type": "string", "enum": ["Open", "Closed", "Closing", "Unknown"]}}}),
        ["q", "queue-v1beta1"]),
    crd("batch.volcano.sh", "v1alpha1", "Job", "jobs", "Namespaced", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "queue": {"type": "string"}, "minAvailable": {"type": "integer", "format": "int32"},
            "schedulerName": {"type": "string"}, "priorityClassName": {"type": "string"},
            "tasks": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "replicas": {"type": "integer"}, "template": POD_TEMPLATE},
                "x-kubernetes-preserve-unknown-fields": True}}}}), ["vcjob", "vj"]),
]
COSCHEDULING = [
    crd("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", "Namespaced", _object({
        "type": "object", "properties": {"minMember": {"type": "integer", "format": "int32"},
                                         "minResources": UNKNOWN, "scheduleTimeoutSeconds": {"type": "integer"}}}),
        ["pg", "pgs"]),
]
_PATCH_META = {"type": "object", "properties": {"labels": STRINGS, "annotations": STRINGS}, "additionalProperties": False}
OWNERS = [
    crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", "Namespaced", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "pytorchReplicaSpecs": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "replicas": {"type": "integer"}, "restartPolicy": {"type": "string"}, "template": POD_TEMPLATE}}}}})),
    crd("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", "Namespaced", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "replicatedJobs": {"type": "array", "items": {"type": "object", "required": ["name", "template"],
                                                          "properties": {
                "name": {"type": "string"}, "replicas": {"type": "integer"},
                "template": {"type": "object", "properties": {"metadata": META, "spec": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"template": POD_TEMPLATE}}}}}}}}})),
    crd("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", "Namespaced", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "leaderWorkerTemplate": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
                "size": {"type": "integer"}, "leaderTemplate": POD_TEMPLATE, "workerTemplate": POD_TEMPLATE}}}})),
    crd("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", "Namespaced", _object({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
            "runtimeRef": UNKNOWN, "trainer": UNKNOWN,
            "runtimePatches": {"type": "array", "maxItems": 16, "x-kubernetes-list-type": "map",
                               "x-kubernetes-list-map-keys": ["manager"], "items": {
                "type": "object", "required": ["manager"], "properties": {
                    "manager": {"type": "string", "minLength": 1, "maxLength": 253},
                    "time": {"type": "string", "format": "date-time"},
                    "trainingRuntimeSpec": {"type": "object", "properties": {"template": {
                        "type": "object", "properties": {"metadata": _PATCH_META, "spec": {
                            "type": "object", "properties": {"replicatedJobs": {
                                "type": "array", "maxItems": 100, "items": {
                                    "type": "object", "required": ["name"], "properties": {
                                        "name": {"type": "string"}, "template": {"type": "object", "properties": {
                                            "metadata": _PATCH_META, "spec": {"type": "object", "properties": {
                                                "template": {"type": "object", "properties": {
                                                    "metadata": _PATCH_META,
                                                    "spec": UNKNOWN}}}}}}}}}}}}}}}}}}}})),
]
ALL = [*KUEUE, *KAI, *VOLCANO, *COSCHEDULING, *OWNERS]
BY_KIND = {(c["spec"]["group"], c["spec"]["names"]["kind"]): c for c in ALL}


def published(*files: str) -> list[dict[str, Any]]:
    """The CRDs of ``files`` (names in ../shared/backend-crds) as published; the caller skips where that folder is
    absent (`PUBLISHED.is_dir()`)."""
    found: list[dict[str, Any]] = []
    for name in files:
        found.extend(d for d in yaml.safe_load_all((PUBLISHED / name).read_text()) if d)
    assert found and all(d["kind"] == "CustomResourceDefinition" for d in found), files
    return found


KUEUE_PUBLISHED = ("kueue_localqueues.yaml", "kueue_clusterqueues.yaml", "kueue_resourceflavors.yaml",
                   "kueue_topologies.yaml", "kueue_workloadpriorityclasses.yaml")


def validate(obj: dict[str, Any]) -> None:
    """``obj`` against its CRD's schema here (raises ``jsonschema.ValidationError``)."""
    group = str(obj["apiVersion"]).rpartition("/")[0]
    definition = BY_KIND[(group, obj["kind"])]
    (version,) = definition["spec"]["versions"]
    assert str(obj["apiVersion"]).rpartition("/")[2] == version["name"], f"{obj['kind']}: served only as {version['name']}"
    jsonschema.validate(obj, version["schema"]["openAPIV3Schema"])
