"""The devices of the cluster smaller than a card: one card of each smaller model its nodes have, and each MIG slice
its nodes offer, of the card's vendor.

"Smaller" is by memory, the catalog's (merged with what the nodes report), per GPU: a device with at most
``rightsizing.smallerShare`` (three quarters) of the card's memory. The share keeps apart what memory alone cannot:
an 80 GB A100 and an H100 report 81920 and 81559 MiB, and neither is a smaller card of the other. Read by the
findings (`webhook.core.rightsizing.findings`) and by the facts the server writes for the native policy
(`webhook.core.view.cluster_facts`: the largest of them per model, which its CEL compares with a pod's memory), so
both say the same. Nothing is known, and nothing named, without the node watch: never a model no node has.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ..context import Context
from ..rules import GpuModel


@dataclass(frozen=True)
class Device:
    """One device of the cluster: a card of ``model``, or a MIG slice (``mig``: its profile) cut from one."""

    memory: Decimal
    model: GpuModel
    mig: str | None = None


def smaller_devices(ctx: Context, card: GpuModel, memory: Decimal) -> list[Device]:
    """The devices of the cluster of ``card``'s vendor with at most the rules' share of ``memory`` (the memory of
    the card asked for), smallest first (a card before a slice of the same memory); none without the node watch."""
    nodes = ctx.nodes
    if nodes is None:
        return []
    limit = memory * ctx.rules.rightsizing.smaller_share
    found = [Device(model.memory, model) for name in nodes.present
             if (model := ctx.catalog.get(name)) is not None and model.vendor == card.vendor
             and model.memory <= limit]
    found += [Device(size, parent, profile) for profile, (size, name) in nodes.mig_slices.items()
              if (parent := ctx.catalog.get(name)) is not None and parent.vendor == card.vendor and size <= limit]
    return sorted(found, key=lambda d: (d.memory, d.mig is not None, d.model.name, d.mig or ""))


def largest_smaller(ctx: Context, card: GpuModel) -> Decimal:
    """The memory of the largest device smaller than a card of ``card`` (0: none): a need above it fits none."""
    return max((d.memory for d in smaller_devices(ctx, card, card.memory)), default=Decimal(0))
