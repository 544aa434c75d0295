"""``ai-admission catalog``: the GPU models the cluster's nodes publish, as a table, a rules block or JSON."""

from __future__ import annotations

from typing import Any

import yaml

from webhook.core.rules import Rules
from webhook.core.view.node_catalog import catalog_block, rules_model
from webhook.core.view.node_facts import DiscoveredCatalog, DiscoveredModel


def _memory(model: DiscoveredModel) -> str:
    if model.memory_mib is None:
        return "-"
    return f"{model.memory_mib} MiB" + (" (rounded GiB)" if model.memory_rounded else "")


def _short(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def render_table(discovered: DiscoveredCatalog, rules: Rules) -> str:
    rows = [("MODEL", "CATALOG", "VENDOR", "MEMORY", "GPUS/NODE", "NODES", "LABEL VALUES", "MIG PROFILES")]
    for model in discovered.models.values():
        known = rules_model(rules, model)
        per_node = ", ".join(f"{count} (x{nodes})" for count, nodes in model.gpus_per_node) or "-"
        names = ", ".join(f"{_short(k)}={v}" for k, v in model.names) or "-"
        rows.append((model.product, known.name if known else "(not in the rules)", model.vendor, _memory(model),
                     per_node, str(len(model.nodes)), names, ", ".join(model.mig_profiles) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows]
    lines.append(f"{discovered.gpu_nodes} GPU nodes, {len(discovered.models)} models")
    if discovered.unlabelled_nodes:
        lines.append(f"GPU nodes without product labels (no GPU feature discovery or node labeller there): "
                     f"{', '.join(discovered.unlabelled_nodes)}")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render_yaml(discovered: DiscoveredCatalog, rules: Rules) -> str:
    header = ("# The GPU models of this cluster's nodes, to merge into the rules' catalog (memory as the devices "
              "report it).\n# interconnect \"unknown\": a model the rules do not list; set nvlink or pcie.\n")
    return header + yaml.safe_dump(catalog_block(discovered, rules), sort_keys=False, width=120)


def as_json(discovered: DiscoveredCatalog, rules: Rules) -> dict[str, Any]:
    products = []
    for model in discovered.models.values():
        known = rules_model(rules, model)
        products.append({"product": model.product, "catalog": known.name if known else None, "vendor": model.vendor,
                         "memoryMiB": model.memory_mib, "memoryRounded": model.memory_rounded,
                         "gpusPerNode": [{"gpus": c, "nodes": n} for c, n in model.gpus_per_node],
                         "nodes": list(model.nodes), "labels": [{"key": k, "value": v} for k, v in model.names],
                         "migProfiles": list(model.mig_profiles), "family": model.family})
    return {**discovered.summary(), "products": products}
