"""`Context`: what a request is judged by, the rules file and the cluster side by side.

The rules say what the policy is (`webhook.core.rules.Rules`, only what the file says); the cluster's view says
what the cluster is (`webhook.core.view.cluster_view.ClusterView`). Where a decision reads both (the catalog in
force: the rules' models with what the nodes publish; the accelerators in force: the rules' with the extended
resources the cluster's DeviceClasses serve), it asks the context, which looks in the view first and falls back
on the rules. Nothing is merged per request: each part of the view was worked out once per change of the watches,
so a context is two references, made for every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .dra.rules import GpuDeviceClass
from .rules import Accelerators, GpuModel, Rules, lookup_model
from .view.cluster_view import NOTHING_KNOWN, ClusterView
from .view.gpu_classes import accelerators_in_force
from .view.node_catalog import NodeCatalog
from .view.targets import ALL_MODELS, TargetNodes


@dataclass(frozen=True)
class Context:
    """The rules file and the cluster's view of one request (`NOTHING_KNOWN` offline)."""

    rules: Rules
    cluster: ClusterView = NOTHING_KNOWN

    @property
    def nodes(self) -> NodeCatalog | None:
        """The GPU nodes, where the node watch (or ``check --cluster``) knows them."""
        return self.cluster.nodes

    @property
    def catalog(self) -> Mapping[str, GpuModel]:
        """The catalog in force: the rules' models with what the nodes publish merged in."""
        nodes = self.cluster.nodes
        return nodes.catalog if nodes is not None else self.rules.catalog

    def find_model(self, name: str) -> GpuModel | None:
        """The model of the catalog in force that ``name`` stands for (`webhook.core.rules.lookup_model`)."""
        nodes = self.cluster.nodes
        index = nodes.index if nodes is not None else self.rules.model_index
        return lookup_model(index, self.rules.model_label_suffix, name)

    @property
    def accelerators(self) -> Accelerators:
        """The accelerators in force: the rules' with the extended resources the cluster's DeviceClasses serve."""
        return accelerators_in_force(self.rules, self.cluster.gpu_classes)

    @property
    def device_classes(self) -> Mapping[str, GpuDeviceClass]:
        """Every GPU DeviceClass known: the rules' own with the cluster's."""
        classes = self.cluster.gpu_classes
        return classes.device_classes if classes is not None else self.rules.dra.device_classes

    @property
    def serving(self) -> Mapping[str, GpuDeviceClass]:
        """Each extended resource a GPU DeviceClass serves, with its class."""
        classes = self.cluster.gpu_classes
        return classes.serving if classes is not None else self.rules.dra.serving

    def nodes_of(self, model: GpuModel) -> TargetNodes | None:
        """The nodes of ``model`` alone, never all GPU nodes; None when the cluster's nodes are not known or none of
        them is of the model."""
        nodes = self.cluster.nodes
        return nodes.placement.get(model.name) if nodes is not None else None

    def target_of(self, model: GpuModel | None) -> TargetNodes | None:
        """The target nodes of a pod whose model is ``model`` (all GPU nodes when its model has none, or is not
        known); None when the cluster's nodes are not known (offline, no node watch)."""
        nodes = self.cluster.nodes
        if nodes is None:
            return None
        target = nodes.placement.get(model.name) if model is not None else None
        return target if target is not None else nodes.placement.get(ALL_MODELS)


