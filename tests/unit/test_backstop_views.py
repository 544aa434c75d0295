"""The backstop policy, evaluated with CEL's own C++ implementation, reads what the webhook reads.

The API server evaluates the policy with cel-go; `tests.support.cel_engine` evaluates it with cel-cpp and the
Kubernetes libraries (RE2 as the API server's regular expressions). The views of every kind are read here, the
builders' twins among them; a kind whose reader the engine cannot parse (more than its parser's 32 levels of
nesting) is listed with the reason, and left to tests/e2e/test_backstop.py, which runs the whole policy on a real
API server.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, RULES_FILE
from tests.support.cel_engine import CelError, evaluate
from tests.support.contexts import as_context
from webhook.config.rules_file import load_rules
from webhook.core import podview
from webhook.core.workloads.kinds import KINDS, group_of, templates_of
from webhook.generate.cel.resources import device_test, is_accelerator
from webhook.generate.cel.text import without_bind
from webhook.generate.cel.views import EXPERIMENT, Views

RULES = load_rules(RULES_FILE)
# what cel-cpp's binding cannot evaluate, as it says so, and why
UNSUPPORTED = {"recursion": "more than its parser's 32 levels of nesting"}

OBJECTS = [(path, index, obj) for path in sorted((ROOT / "tests" / "manifests").rglob("*.yaml"))
           for index, obj in enumerate(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
           if (group_of(str(obj.get("apiVersion", ""))), obj.get("kind")) in KINDS]


def accelerators(spec: Any) -> frozenset[str]:
    """The accelerator resources a pod spec's containers (init containers too) name."""
    found: set[str] = set()
    for container in [*podview.as_list(spec.get("containers")), *podview.as_list(spec.get("initContainers"))]:
        resources = podview.as_dict(podview.as_dict(container).get("resources"))
        for part in ("limits", "requests"):
            found.update(name for name in podview.as_dict(resources.get(part)) if RULES.accelerators.is_accelerator(name))
    return frozenset(found)


def views(obj: dict[str, Any]) -> list[dict[str, Any]]:
    group, kind = group_of(str(obj["apiVersion"])), str(obj["kind"])
    if (group, kind) == EXPERIMENT:
        pytest.skip("the policy reads an Experiment's trial through the trial's own kind (a variable of the policy): "
                    "tests/e2e/test_backstop.py runs it")
    expression = Views(RULES).kind_views(group, kind, "object")
    assert expression is not None
    try:
        found = evaluate(without_bind(expression), object=obj)
    except CelError as exc:  # what the binding cannot parse
        for said, why in UNSUPPORTED.items():
            if said in str(exc):
                pytest.skip(f"the views of {kind} need {why}")
        raise
    return list(found)


@pytest.mark.parametrize("path,index,obj", OBJECTS,
                         ids=[f"{p.relative_to(ROOT / 'tests' / 'manifests')}#{i}" for p, i, _ in OBJECTS])
def test_the_policy_finds_the_templates_the_webhook_finds(path: Any, index: int, obj: dict[str, Any]) -> None:
    """Each template that asks for accelerators, at the same path, asking for the same ones."""
    found = views(obj)
    policy = sorted((v["p"].removesuffix(".workerSpec"), accelerators(v["s"])) for v in found if accelerators(v["s"]))
    group, kind = group_of(str(obj["apiVersion"])), str(obj["kind"])
    templates = templates_of(copy.deepcopy(obj), ctx=as_context(RULES), group=group, kind=kind) or []
    webhook = sorted((t.path, accelerators(podview.spec(t.pod))) for t in templates if accelerators(podview.spec(t.pod)))
    assert policy == webhook


def test_the_builders_twins_are_evaluated() -> None:
    """Not a vacuous pass: the KubeVirt twins run here, and find the devices."""
    kubevirt = [obj for _, _, obj in OBJECTS if obj["apiVersion"].startswith("kubevirt.io/")]
    assert {o["kind"] for o in kubevirt} == {"VirtualMachine", "VirtualMachineInstance"}
    for obj in kubevirt:
        (view,) = views(obj)
        assert accelerators(view["s"]) and view["p"] == ("spec" if obj["kind"] == "VirtualMachineInstance" else
                                                         "spec.template")


@pytest.mark.parametrize("name", [
    "nvidia.com/gpu", "nvidia.com/GA102GL_A10", "nvidia.com/TU104GL_Tesla_T4", "nvidia.com/GRID_T4-1Q",
    "nvidia.com/NVIDIA_H200X-1-18C", "nvidia.com/GA102_HIGH_DEFINITION_AUDIO_CONTROLLER", "nvidia.com/GH100_NVSWITCH",
    "nvidia.com/mlnxnics", "devices.kubevirt.io/kvm", "example.com/gpu", "nvidia.com/gpumem", "nvidia.com/mig-1g.10gb",
    "amd.com/gpu", "nvidia.com/hostdev", "gpu.intel.com/i915", "aliyun.com/gpu-mem"])
def test_the_policy_names_accelerators_and_devices_as_the_webhook_does(name: str) -> None:
    """`Accelerators.is_accelerator` and `Accelerators.device_resource` (a passthrough GPU or a vGPU type, and whether its name
    gives the memory), in the policy's CEL with RE2's regular expressions."""
    device = RULES.accelerators.device_resource(name)
    assert evaluate(is_accelerator(RULES, "n"), n=name) is RULES.accelerators.is_accelerator(name)
    assert evaluate(" || ".join(device_test("n", d) for d in RULES.accelerators.device_resources), n=name) is (device is not None)
    sized = [d for d in RULES.accelerators.device_resources if d.sized]
    assert evaluate(" || ".join(device_test("n", d) for d in sized), n=name) is bool(device and device[0].sized)
