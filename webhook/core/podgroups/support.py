"""What the cluster offers of the Workload API, and whether ai-admission's group controller runs: a value the
server's discovery fills in (`webhook.cluster.pod_groups`) and every request reads, like the PriorityClasses'
state.

The API server keeps the fields of a feature gate that is off by dropping them without a word (a PodGroup
created with ``schedulingConstraints`` while TopologyAwareWorkloadScheduling is off is stored without them), so
which gated fields are kept is found by a dry-run create, not assumed from the version.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "scheduling.k8s.io"
RESOURCE = "podgroups"
# the versions that serve PodGroups, newest first: v1beta1 from Kubernetes 1.37, v1alpha2 in 1.36
VERSIONS = ("v1beta1", "v1alpha2")
# on the pods ai-admission puts in a group it makes (the controller watches only those) and on those groups
POD_GROUP_LABEL = "ai-admission.io/pod-group"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "ai-admission"


@dataclass(frozen=True)
class PodGroupApi:
    """The Workload API as this cluster serves it: ``version`` of ``scheduling.k8s.io``; whether a PodGroup keeps
    ``schedulingConstraints.topology`` (TopologyAwareWorkloadScheduling) and its ``priorityClassName`` and
    ``disruptionMode`` (WorkloadAwarePreemption)."""

    version: str
    topology: bool = False
    preemption: bool = False

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"


@dataclass(frozen=True)
class PodGroupSupport:
    """What a request knows: ``api`` (None: the cluster serves no PodGroups, or it is not known) and whether the
    group controller that makes the groups of the training kinds is in service (its Lease renewed lately).

    ``known``: the server has looked (offline, and before the first look, nothing is written and nothing is said)."""

    api: PodGroupApi | None = None
    controller: bool = False
    known: bool = False

    @property
    def served(self) -> bool:
        return self.api is not None


NOT_KNOWN = PodGroupSupport()
