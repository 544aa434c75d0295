"""The rules file: the shipped one loads; bad ones fail with file, path and problem in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, RULES_FILE
from tests.support.builders import DEFAULT, broken
from tests.support.contexts import as_context
from webhook.config.rules_file import load_rules
from webhook.core.admission import judge_pod, resolve_mode
from webhook.core.rules import RulesError, compile_rules, parse_rules


def test_default_rules_cover_the_common_gpu_models() -> None:
    rules = load_rules(RULES_FILE)
    for name in ["a100-40g", "a100-80g", "h100-80g", "h200-141g", "b200", "l40s", "l4", "a10", "t4", "v100", "mi300x"]:
        assert rules.find_model(name) is not None, name
    assert set(rules.classes) == {"training", "inference", "batch", "hpo"}


def test_packaged_copy_is_the_same_file() -> None:
    assert (ROOT / "webhook" / "default_rules.yaml").read_text() == RULES_FILE.read_text()


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.pop("catalog"), "(top level): 'catalog' is a required property"),
    (lambda d: d["catalog"]["a100-80g"].update(memory="lots"), "catalog.a100-80g.memory: 'lots' is not a Kubernetes quantity"),
    (lambda d: d["classes"]["batch"].update(memoryFactor="big"), "classes.batch.memoryFactor: 'big' is not of type 'number'"),
    (lambda d: d["modes"].update(default="block"), "modes.default: 'block' is not one of ['deny', 'warn', 'audit']"),
    (lambda d: d["signals"].append({"class": "gaming", "labels": [{"key": "x"}]}), f"signals[{len(DEFAULT['signals'])}].class: 'gaming' is not one of"),
    (lambda d: d["signals"].append({"class": "batch", "labels": [{"keyPattern": "("}]}), f"signals[{len(DEFAULT['signals'])}].labels[0].keyPattern: '(' is not a 'regex'"),
    (lambda d: d["catalog"]["l4-24g"].update(aliases=["h100"]), "catalog.l4-24g: name 'h100' already names 'h100-80g'"),
    (lambda d: d.update(defaultClass="gaming"), "defaultClass: 'gaming' is not one of training, inference, batch, hpo"),
    (lambda d: d["catalog"]["a100-80g"].pop("vendor"), "catalog.a100-80g: 'vendor' is a required property"),
    (lambda d: d["instanceTypes"]["p5.48xlarge"].update(model="h100"), "instanceTypes.p5.48xlarge.model: 'h100' is not a model of the catalog"),
    (lambda d: d["instanceTypes"]["p5.48xlarge"].pop("source"), "instanceTypes.p5.48xlarge: 'source' is a required property"),
    (lambda d: d["gpuNameLabels"]["models"][0].update(model="v100-8g"), "gpuNameLabels.models[0].model: 'v100-8g' is not a model of the catalog"),
    (lambda d: d["fabrics"].update(default="omnipath"), "fabrics.default: fabric 'omnipath' has no entry under fabrics.env"),
    (lambda d: d["fabrics"].update(byModel={"h100-80g": "ib"}), "fabrics.byModel.h100-80g: fabric 'ib' has no entry under fabrics.env"),
    (lambda d: d["fabrics"].update(byModel={"h100": "infiniband"}), "fabrics.byModel.h100: 'h100' is not a model of the catalog"),
    (lambda d: d["accelerators"].update(resources=["nvidia.com/gpu"]), "accelerators.resources: ['nvidia.com/gpu'] is not of type 'object'"),
])
def test_bad_rules_fail_with_path_and_problem(change: Any, expected: str) -> None:
    with pytest.raises(RulesError) as caught:
        compile_rules(broken(change), source="rules.yaml")
    message = str(caught.value)
    assert message.startswith("rules.yaml: ")
    assert expected in message
    assert "\n" not in message


def test_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(RulesError, match=r"^bad.yaml: line 3 column 1: invalid YAML: expected the node content"):
        parse_rules("version: 1\ncatalog: [\n", source="bad.yaml")


def test_missing_file() -> None:
    with pytest.raises(RulesError, match="nope.yaml: cannot read"):
        load_rules("nope.yaml")


def test_directory_means_rules_yaml_inside(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES_FILE.read_text())
    assert load_rules(tmp_path).source == str(tmp_path / "rules.yaml")


def test_namespace_mode_map_needs_no_api_call() -> None:
    rules = compile_rules(broken(lambda d: d["modes"].update(namespaces={"sandbox": "warn"})))
    assert resolve_mode(rules, namespace="sandbox", path_mode=None) == "warn"
    assert resolve_mode(rules, namespace="prod", path_mode=None) == "deny"
    assert resolve_mode(rules, namespace="sandbox", path_mode="deny") == "deny"
    bare = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    verdict = judge_pod(bare, ctx=as_context(rules), mode=resolve_mode(rules, namespace="sandbox", path_mode=None), subject="pod")
    assert verdict.allowed and any("would deny" in w for w in verdict.warnings)


def test_every_figure_has_a_source() -> None:
    """The catalog's memory figures and the instance types and GPU names are facts about hardware: each says where
    it was read."""
    rules = load_rules(RULES_FILE)
    assert all(model.source for model in rules.catalog.values())
    assert all(t.source for t in rules.instance_types.values())
    assert all(e["source"] for e in DEFAULT["gpuNameLabels"]["models"])


def test_memory_is_what_the_device_reports() -> None:
    """MiB as nvidia-smi and GPU feature discovery report them, not the marketing figure in G or Gi."""
    rules = load_rules(RULES_FILE)
    mib = {name: int(model.memory) // 2**20 for name, model in rules.catalog.items()}
    assert (mib["h100-80g"], mib["h200-141g"], mib["b200-180g"], mib["mi300x-192g"]) == (81559, 143771, 183359, 196288)
    assert all(int(model.memory) % 2**20 == 0 for model in rules.catalog.values())


def test_every_vendor_of_an_accelerator_has_a_model() -> None:
    rules = load_rules(RULES_FILE)
    assert set(rules.accelerators.vendors.values()) <= {m.vendor for m in rules.catalog.values()}


def test_gpu_feature_discovery_names_resolve() -> None:
    rules = load_rules(RULES_FILE)
    found = {name: getattr(rules.find_model(name), "name", None) for name in [
        "NVIDIA-H100-80GB-HBM3", "Tesla-T4-SHARED", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA-H100-NVL-MIG-1g.12gb",
        "A100-SXM4-40GB", "nvidia-a100-sxm4-40gb", "AMD_Instinct_MI300X_OAM", "amd-instinct-mi300x-vf", "RTX-4090"]}
    assert found == {"NVIDIA-H100-80GB-HBM3": "h100-80g", "Tesla-T4-SHARED": "t4-16g",
                     "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb": "a100-80g", "NVIDIA-H100-NVL-MIG-1g.12gb": "h100-nvl-94g",
                     "A100-SXM4-40GB": "a100-40g", "nvidia-a100-sxm4-40gb": "a100-40g",
                     "AMD_Instinct_MI300X_OAM": "mi300x-192g", "amd-instinct-mi300x-vf": "mi300x-192g",
                     "RTX-4090": None}
