"""DRA device classes of the cluster (and of check's input): which are GPU classes, what they pin, and which
extended resources they serve (KEP-5004: ``deviceclass.resource.kubernetes.io/<class>`` for every class, and
``spec.extendedResourceName``), so that a pod asking for such a resource is judged by the class's selectors.

The classes follow the published ones: NVIDIA's DRA driver chart (gpu.nvidia.com with extendedResourceName
nvidia.com/gpu; a MIG class, kubernetes-sigs/dra-driver-nvidia-gpu demo/specs/extended-resources), Intel's
(gpu.intel.com), and a platform team's class that pins one product (KEP-5004's example, pinned).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from tests.support.contexts import as_context, with_device_classes
from webhook.core.admission import judge_pod
from webhook.core.dra.classes import classes_of, read_device_class
from webhook.core.rules import Rules


def device_class(name: str, expression: str, extended: str | None = None, created: str = "2026-11-01T00:00:00Z",
                 ) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


H100_CLASS = device_class(
    "h100.example.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu' && "
                        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'", "example.com/h100")
MIG_CLASS = device_class(
    "mig-1g-12gb.gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == "
                                  "'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.12gb'", "nvidia.com/gpu")
CHART_CLASS = device_class(
    "gpu.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "nvidia.com/gpu", created="2026-10-01T00:00:00Z")


def pod(resources: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml",
                                                           "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                "limits": {**resources, "memory": "8Gi"}, "requests": {"memory": "8Gi"}}}]}}


def test_a_class_that_pins_a_product_names_the_model_of_its_extended_resource(rules: Rules) -> None:
    read = read_device_class(H100_CLASS, rules, source="the cluster")
    assert read is not None and read.model == "h100-80g" and read.product == "NVIDIA H100 80GB HBM3"
    merged = with_device_classes(rules, [read])
    assert merged.accelerators.is_accelerator("example.com/h100") and merged.accelerators.is_accelerator(
        "deviceclass.resource.kubernetes.io/h100.example.com")
    verdict = judge_pod(pod({"example.com/h100": "2"}, {"ai-admission.io/gpu-memory": "40Gi"}), ctx=as_context(merged),
                        mode="deny", subject="pod")
    assert verdict.allowed and verdict.profile is not None and verdict.profile.model is not None
    assert verdict.profile.model.name == "h100-80g"
    assert verdict.profile.model_source == 'device class "h100.example.com" (which serves example.com/h100)'
    too_big = judge_pod(pod({"example.com/h100": "1"}, {"ai-admission.io/gpu-memory": "90Gi"}), ctx=as_context(merged),
                        mode="deny", subject="pod")
    assert [f.code for f in too_big.findings if f.severity == "deny"] == ["gpu-memory-exceeds"]
    assert not rules.accelerators.is_accelerator("example.com/h100")  # without the class, the name is nothing


def test_a_mig_class_serving_nvidia_gpu_states_the_memory_of_each_device(rules: Rules) -> None:
    """A class that pins one MIG profile states the memory of each slice, by either of its names; the parent GPU
    is not pinned, so the model rule applies as to any GPU."""
    merged = with_device_classes(rules, classes_of([MIG_CLASS], rules, source="the input"))
    for name in ("nvidia.com/gpu", "deviceclass.resource.kubernetes.io/mig-1g-12gb.gpu.nvidia.com"):
        verdict = judge_pod(pod({name: "1"}), ctx=as_context(merged), mode="deny", subject="pod")
        assert [f.code for f in verdict.findings if f.severity == "deny"] == ["gpu-model-missing"]
        assert verdict.profile is not None and verdict.profile.memory_per_gpu == 12 * 10**9
        assert verdict.profile.memory_source == (f'device class "mig-1g-12gb.gpu.nvidia.com" (which serves {name}; '
                                                 f'its MIG profile), 11.2Gi per GPU')


MIG_POD = pod({"deviceclass.resource.kubernetes.io/mig.nvidia.com": "1"},
              {"ai-admission.io/gpu-memory": "10Gi", "ai-admission.io/gpu-model": "a100-80g"})


def test_a_mig_slice_through_the_implicit_name_of_a_class_that_pins_no_profile_is_denied(rules: Rules) -> None:
    """NVIDIA's mig.nvidia.com (the rules' and the chart's) pins no profile: the slice may be 1g.10gb or 7g.80gb,
    so the stated need says nothing of what the pod gets. It was read as no GPU at all (class none, allowed)."""
    for merged in (rules, with_device_classes(rules, classes_of([device_class(
            "mig.nvidia.com", "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'")],
            rules, source="the cluster"))):
        verdict = judge_pod(copy.deepcopy(MIG_POD), ctx=as_context(merged), mode="deny", subject="pod")
        assert verdict.profile is not None and verdict.profile.workload != "none"
        assert [f.code for f in verdict.findings if f.severity == "deny"] == ["mig-profile-unknown"]
        assert ('deviceclass.resource.kubernetes.io/mig.nvidia.com asks for MIG slices of device class '
                '"mig.nvidia.com", which pins no MIG profile') in (verdict.message or "")
        assert 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"' in (verdict.message or "")


def test_of_two_classes_serving_one_name_the_newer_wins_as_in_the_scheduler(rules: Rules) -> None:
    both = with_device_classes(rules, classes_of([CHART_CLASS, MIG_CLASS], rules, source="the cluster"))
    assert both.serving["nvidia.com/gpu"].name == "mig-1g-12gb.gpu.nvidia.com"  # created a month later
    older = copy.deepcopy(MIG_CLASS)
    older["metadata"]["creationTimestamp"] = "2026-09-01T00:00:00Z"
    chart = with_device_classes(rules, classes_of([CHART_CLASS, older], rules, source="the cluster"))
    assert chart.serving["nvidia.com/gpu"].name == "gpu.nvidia.com"
    tie = copy.deepcopy(MIG_CLASS)
    tie["metadata"]["creationTimestamp"] = CHART_CLASS["metadata"]["creationTimestamp"]
    tied = with_device_classes(rules, classes_of([tie, CHART_CLASS], rules, source="the cluster"))
    assert tied.serving["nvidia.com/gpu"].name == "gpu.nvidia.com"  # the name that sorts first
    # the chart's own class pins nothing: a plain nvidia.com/gpu pod is judged as without it
    plain = judge_pod(pod({"nvidia.com/gpu": "1"}), ctx=as_context(chart), mode="deny", subject="pod")
    assert [f.code for f in plain.findings if f.severity == "deny"] == ["gpu-model-missing", "gpu-memory-missing"]


def test_only_gpu_classes_are_read(rules: Rules) -> None:
    nic = device_class("rdma.example.com", "device.driver == 'rdma.mellanox.com'")
    intel = device_class("intel-flex", "device.driver == 'gpu.intel.com' && "
                                       "device.attributes['gpu.intel.com'].model == 'Flex 170'")
    other = device_class("accel.vendor.io", "device.driver == 'gpu.vendor.io' && "
                                            "device.attributes['gpu.vendor.io'].model == 'X1'")
    found = {c.name: c for c in classes_of([nic, intel, other], rules, source="the cluster")}
    assert sorted(found) == ["accel.vendor.io", "intel-flex"]
    assert found["intel-flex"].model == "flex-170-16g" and found["intel-flex"].vendor == "intel"
    assert found["accel.vendor.io"].product_attribute == "model" and found["accel.vendor.io"].model is None


def test_check_reads_the_classes_among_its_input(tmp_path: Path) -> None:
    import json
    import subprocess

    import yaml

    from tests.conftest import ROOT
    from tests.support.builders import CLI

    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([H100_CLASS, pod({"example.com/h100": "1"})]))
    done = subprocess.run([CLI, "check", "-f", str(tmp_path / "all.yaml"), "-o", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    (result,) = json.loads(done.stdout)["results"]
    assert result["denials"] == ["gpu-memory-missing"]  # the class named the model
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod({"example.com/h100": "1"})))
    alone = subprocess.run([CLI, "check", "-f", str(tmp_path / "pod.yaml"), "-o", "json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert json.loads(alone.stdout)["results"][0]["class"] == "none"  # without the class: not an accelerator


def test_the_servers_watch_merges_the_clusters_classes_into_the_rules(rules: Rules, tmp_path: Path) -> None:
    from tests.support.kubeapi import FakeKubeAPI
    from webhook.cluster.claims import ClaimWatch
    from webhook.cluster.informer import api_calls
    from webhook.server.services import Services

    with FakeKubeAPI() as api:
        api.add("deviceclasses", copy.deepcopy(CHART_CLASS))
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        watch = ClaimWatch(api=lambda: api_calls(kubeconfig), resync=60)
        services = Services.fixed(rules, claim_watch=watch)
        watch.start()
        try:
            deadline = time.monotonic() + 15
            while "nvidia.com/gpu" not in services.context.serving and time.monotonic() < deadline:
                time.sleep(0.05)
            assert services.context.serving["nvidia.com/gpu"].source == "the cluster"
            api.add("deviceclasses", copy.deepcopy(H100_CLASS))
            while not services.context.accelerators.is_accelerator("example.com/h100") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert services.context.accelerators.is_accelerator("example.com/h100")
            services.set_rules(rules)  # a rules reload keeps the cluster's classes
            assert services.context.accelerators.is_accelerator("example.com/h100")
        finally:
            services.stop()
