"""The GPU catalog discovered from the nodes: what node labels mean, how it merges with the rules, and the
server watching a real API server (Node objects created through it, no kubelet needed).

Node label values follow /work/notes/gpu-facts.md (GFD: NVIDIA/k8s-device-plugin internal/lm; AMD:
ROCm/k8s-device-plugin cmd/k8s-node-labeller).
"""

from __future__ import annotations

import copy
import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.conftest import Server, eventually, start_server, stop_server
from tests.control_plane import ControlPlane, namespace_name
from tests.reviews import admission_review
from tests.test_observability import exposed, missing, used
from webhook import cli
from webhook.core.catalog import catalog_block, effective, model_name
from webhook.core.nodes import DiscoveredCatalog, build, node_gpu
from webhook.core.rules import Rules, compile_rules

MIB = Decimal(2**20)


def gfd_node(name: str, product: str, *, count: int = 8, memory: int | None = 81920,
             labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as GPU feature discovery labels it (capacity as the device plugin advertises it)."""
    node_labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                   "nvidia.com/gpu.count": str(count), "nvidia.com/gpu.family": "ampere", "nvidia.com/mig.strategy": "none"}
    if memory is not None:
        node_labels["nvidia.com/gpu.memory"] = str(memory)
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(count), **(capacity or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {**node_labels, **(labels or {})}},
            "status": {"capacity": resources, "allocatable": resources}}


def amd_node(name: str) -> dict[str, Any]:
    """The labeller's documented MI300X example (cu-count 304, vram 192G), 8 GPUs."""
    labels = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "192G",
              "amd.com/gpu.family": "AI", "amd.com/gpu.device-id": "74a1", "amd.com/gpu.cu-count": "304"}
    resources = {"cpu": "192", "amd.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": resources, "allocatable": resources}}


# -- what a node says ------------------------------------------------------------------------------------------

def test_a_gfd_node() -> None:
    gpu = node_gpu(gfd_node("n", "NVIDIA-A100-SXM4-80GB", labels={"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}))
    assert gpu is not None
    assert (gpu.product, gpu.vendor, gpu.count, gpu.memory_mib, gpu.family) == (
        "NVIDIA-A100-SXM4-80GB", "nvidia", 8, 81920, "ampere")
    assert ("cloud.google.com/gke-accelerator", "nvidia-a100-80gb") in gpu.names


def test_a_shared_node_counts_physical_gpus() -> None:
    """Time-slicing: -SHARED on the product, capacity = count x replicas (the count label stays physical)."""
    node = gfd_node("n", "NVIDIA-H100-NVL-SHARED", count=1, memory=95830, capacity={"nvidia.com/gpu": "5"},
                    labels={"nvidia.com/gpu.replicas": "5", "nvidia.com/gpu.sharing-strategy": "time-slicing"})
    gpu = node_gpu(node)
    assert gpu is not None and (gpu.product, gpu.count, gpu.memory_mib) == ("NVIDIA-H100-NVL", 1, 95830)
    del node["metadata"]["labels"]["nvidia.com/gpu.count"]  # an older GFD: capacity / replicas
    assert node_gpu(node).count == 1  # type: ignore[union-attr]


def test_mig_single_and_mixed() -> None:
    single = node_gpu(gfd_node("n", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", count=56, memory=9728))
    assert single is not None
    assert (single.product, single.count, single.memory_mib, single.mig_profiles) == (
        "NVIDIA-A100-SXM4-80GB", None, None, ("1g.10gb",))  # slices, not GPUs
    mixed = gfd_node("n", "NVIDIA-A100-SXM4-80GB", labels={"nvidia.com/mig.strategy": "mixed",
                                                          "nvidia.com/mig-3g.40gb.count": "2"},
                     capacity={"nvidia.com/mig-1g.10gb": "7"})
    assert node_gpu(mixed).mig_profiles == ("1g.10gb", "3g.40gb")  # type: ignore[union-attr]


def test_an_amd_node() -> None:
    gpu = node_gpu(amd_node("m"))
    assert gpu is not None
    assert (gpu.product, gpu.vendor, gpu.count, gpu.memory_mib, gpu.memory_rounded) == (
        "AMD_Instinct_MI300X_OAM", "amd", 8, 192 * 1024, True)


def test_a_node_without_gpus_or_labels() -> None:
    plain = {"metadata": {"name": "cpu"}, "status": {"capacity": {"cpu": "8"}}}
    assert node_gpu(plain) is None
    catalog = build({"cpu": None, "bare": None}, unlabelled=["bare"], synced_at=1.0)
    assert (catalog.gpu_nodes, catalog.unlabelled_nodes, dict(catalog.models)) == (0, ("bare",), {})


# -- merged into the rules -------------------------------------------------------------------------------------

def discovered(*nodes: dict[str, Any]) -> DiscoveredCatalog:
    return build({n["metadata"]["name"]: node_gpu(n) for n in nodes}, synced_at=time.time())


def test_nothing_known_keeps_the_rules(rules: Rules) -> None:
    assert effective(rules, DiscoveredCatalog()) is rules


def test_nodes_give_memory_and_gpus_per_node(rules: Rules) -> None:
    merged = effective(rules, discovered(
        gfd_node("h1", "NVIDIA-H100-80GB-HBM3", count=8, memory=81559),
        gfd_node("h2", "NVIDIA-H100-80GB-HBM3", count=4, memory=81559),
        gfd_node("a1", "A100-SXM4-40GB", count=4, memory=40536),  # an old driver: no NVIDIA- prefix, less memory
        amd_node("m1")))
    h100 = merged.catalog["h100-80g"]
    assert (h100.memory, h100.gpus_per_node, h100.interconnect) == (81559 * MIB, 8, "nvlink")
    assert merged.find_model("h100") is h100 and merged.find_model("NVIDIA-H100-80GB-HBM3") is h100
    assert merged.catalog["a100-40g"].memory == 40536 * MIB and merged.catalog["a100-40g"].gpus_per_node == 4
    assert merged.find_model("A100-SXM4-40GB") is merged.catalog["a100-40g"]
    assert merged.catalog["mi300x-192g"].memory == rules.catalog["mi300x-192g"].memory  # rounded GiB: not used
    assert merged.nodes is not None
    assert merged.nodes.present == {"a100-40g": "1 node x 4 GPUs", "h100-80g": "2 nodes x 4-8 GPUs",
                                    "mi300x-192g": "1 node x 8 GPUs"}
    assert rules.catalog["a100-40g"].memory == 40960 * MIB and rules.nodes is None  # the rules are untouched


def test_a_model_only_the_nodes_know_is_added(rules: Rules) -> None:
    merged = effective(rules, discovered(gfd_node("n", "NVIDIA-RTX-A6000", count=2, memory=49140)))
    name = model_name("NVIDIA-RTX-A6000")
    assert name == "nvidia-rtx-a6000"
    model = merged.find_model("NVIDIA-RTX-A6000")
    assert model is not None and model is merged.catalog[name]
    assert (model.memory, model.gpus_per_node, model.interconnect, model.vendor) == (49140 * MIB, 2, "unknown", "nvidia")


def test_the_catalog_block_is_a_valid_rules_catalog(rules: Rules) -> None:
    found = discovered(gfd_node("h", "NVIDIA-H100-80GB-HBM3", memory=81559), gfd_node("n", "NVIDIA-RTX-A6000", count=2,
                                                                                   memory=49140))
    block = catalog_block(found, rules)["catalog"]
    assert block["h100-80g"]["memory"] == "81559Mi" and block["nvidia-rtx-a6000"]["gpusPerNode"] == 2
    assert block["nvidia-rtx-a6000"]["vendor"] == "nvidia"
    document = copy.deepcopy(dict(rules.raw))
    document["catalog"].update(block)  # the rules' instance types and GPU names refer to their own models too
    compiled = compile_rules(document)
    assert compiled.catalog["h100-80g"].memory == 81559 * MIB


# -- the server watching a real API server ---------------------------------------------------------------------

@pytest.fixture
def nodes(control_plane: ControlPlane) -> Iterator[Callable[..., str]]:
    """Create Nodes through the API (deleted again after the test: Nodes are cluster-wide)."""
    created: list[str] = []

    def create(*objects: dict[str, Any]) -> str:
        for obj in objects:
            done = control_plane.kubectl("create", "-f", "-", input=json.dumps(obj))
            assert done.returncode == 0, done.stderr
            created.append(obj["metadata"]["name"])
        return objects[-1]["metadata"]["name"]

    yield create
    if created:
        control_plane.kubectl("delete", "node", *created, "--ignore-not-found", "--wait=false")


def node_name(hint: str) -> str:
    return namespace_name(f"node-{hint}")


@pytest.fixture
def watching(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Server]:
    """A server whose workers watch the control plane's Nodes; returned once every worker has listed them."""
    server = start_server(tmp_path, extra_env={"KUBECONFIG": str(control_plane.kubeconfig),
                                               "AI_ADMISSION_NODE_CATALOG": "true"})
    try:
        eventually(lambda: all(server.get("/readyz").json()["nodeCatalog"]["synced"] for _ in range(24)))
        yield server
    finally:
        stop_server(server)


def pod(model: str, memory: str = "40Gi", gpus: int = 1, key: str = "gpu-type") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml-team", "annotations": {"ai-admission.io/gpu-memory": memory}},
            "spec": {"nodeSelector": {key: model},
                     "containers": [{"name": "c", "image": "i", "resources": {
                         "limits": {"nvidia.com/gpu": str(gpus), "memory": "64Gi", "cpu": "8"},
                         "requests": {"nvidia.com/gpu": str(gpus), "memory": "64Gi", "cpu": "8"}}}]}}


def verdict(server: Server, obj: dict[str, Any]) -> dict[str, Any]:
    return server.review("/validate", admission_review(obj))


def on_every_worker(server: Server, obj: dict[str, Any], check: Callable[[dict[str, Any]], bool]) -> bool:
    """``check`` holds for the answers of several new connections (each worker watches on its own)."""
    return all(check(verdict(server, obj)) for _ in range(8))


def denied_for(answer: dict[str, Any], fragment: str) -> bool:
    return not answer["allowed"] and fragment in answer["status"]["message"]


@pytest.mark.e2e
def test_nodes_change_the_verdicts(control_plane: ControlPlane, watching: Server,
                                   nodes: Callable[..., str]) -> None:
    # T4: the rules say 15360 MiB (current drivers); these nodes' older driver reports 15109 (gpu-facts.md 0)
    needs_15gi = pod("t4-16g", memory="15Gi")
    assert on_every_worker(watching, needs_15gi, lambda a: a["allowed"])
    started = time.monotonic()
    nodes(gfd_node(node_name("t4"), "Tesla-T4", count=4, memory=15109))
    eventually(lambda: on_every_worker(watching, needs_15gi, lambda a: denied_for(a, "gpu")), step=0.02)
    seen_after = time.monotonic() - started
    message = verdict(watching, needs_15gi)["status"]["message"]
    assert "holds 14.8Gi" in message, message
    # the largest T4 node holds 4 GPUs, not the rules' 8
    assert denied_for(verdict(watching, pod("t4-16g", memory="10Gi", gpus=8)), "one t4-16g node holds 4")

    # a product the rules do not list is a model once a node has it, with what its nodes report
    a6000 = pod("NVIDIA-RTX-A6000", memory="40Gi", key="nvidia.com/gpu.product")
    assert denied_for(verdict(watching, a6000), "is not in the catalog")
    nodes(gfd_node(node_name("a6000"), "NVIDIA-RTX-A6000", count=2, memory=49140))
    eventually(lambda: on_every_worker(watching, a6000, lambda a: a["allowed"]))
    assert denied_for(verdict(watching, pod("NVIDIA-RTX-A6000", memory="48Gi", key="nvidia.com/gpu.product")),
                      "card holds 48Gi")
    print(f"a new node changed the verdicts of every worker {seen_after:.2f} s after it was created")

    ready = watching.get("/readyz").json()["nodeCatalog"]
    assert ready["synced"] and ready["gpuNodes"] >= 2 and ready["models"] >= 2 and ready["error"] is None
    text = watching.get("/metrics").text
    catalog_metrics = {n: labels for n, labels in used().items() if n.startswith("ai_admission_catalog_")}
    assert catalog_metrics and not missing(catalog_metrics, exposed(text))
    assert 'ai_admission_catalog_model_nodes{product="NVIDIA-RTX-A6000"} 1.0' in text


@pytest.mark.e2e
def test_catalog_command_and_check_against_the_cluster(control_plane: ControlPlane, nodes: Callable[..., str],
                                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    name = nodes(gfd_node(node_name("cli"), "NVIDIA-L4", count=2, memory=23034,
                          labels={"cloud.google.com/gke-accelerator": "nvidia-l4",
                                  "node.kubernetes.io/instance-type": "g2-standard-24"}))
    kubeconfig = str(control_plane.kubeconfig)
    assert cli.main(["catalog", "--kubeconfig", kubeconfig]) == 0
    table = capsys.readouterr().out
    (row,) = [line for line in table.splitlines() if line.startswith("NVIDIA-L4 ")]
    assert "l4-24g" in row and "23034 MiB" in row and "2 (x1)" in row and "instance-type=g2-standard-24" in row
    assert cli.main(["catalog", "--kubeconfig", kubeconfig, "-o", "json"]) == 0
    (l4,) = [p for p in json.loads(capsys.readouterr().out)["products"] if p["product"] == "NVIDIA-L4"]
    assert name in l4["nodes"] and l4["catalog"] == "l4-24g"
    assert cli.main(["catalog", "--kubeconfig", kubeconfig, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["catalog"]["l4-24g"]["gpusPerNode"] >= 2

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod("l4-24g", memory="10Gi", gpus=4)))
    assert cli.main(["check", "-f", str(manifest)]) == 0  # the rules' catalog: 8 L4 per node
    capsys.readouterr()
    assert cli.main(["check", "-f", str(manifest), "--cluster", "--kubeconfig", kubeconfig]) == 1
    assert "one l4-24g node holds 2" in capsys.readouterr().out


# -- the policy with the cluster's models ------------------------------------------------------------------------

def judged(rules: Rules, obj: dict[str, Any]) -> Any:
    from webhook.core.admission import judge_pod

    return judge_pod(obj, rules=rules, mode="deny", subject='pod "ml-team/p"')


def only_l4(rules: Rules, *, absent: str | None = None) -> Rules:
    if absent:
        rules = compile_rules({**copy.deepcopy(dict(rules.raw)), "nodeCatalog": {"modelWithoutNodes": absent}})
    return effective(rules, discovered(gfd_node("l4-a", "NVIDIA-L4", count=2, memory=23034)))


def test_a_model_no_node_has_is_a_warning(rules: Rules) -> None:
    verdict = judged(only_l4(rules), pod("a100-80g"))
    assert verdict.allowed and verdict.reason_codes == ["gpu-model-not-in-cluster"]
    assert verdict.warnings == ("no node of this cluster has GPU model a100-80g (nodeSelector gpu-type), so the pod "
                                "stays Pending until one joins; this cluster has l4-24g (1 node x 2 GPUs)",)
    assert judged(rules, pod("a100-80g")).warnings == ()  # offline: the rules alone, nothing known about nodes


def test_the_rules_can_make_it_a_denial(rules: Rules) -> None:
    verdict = judged(only_l4(rules, absent="deny"), pod("a100-80g"))
    assert not verdict.allowed and "no node of this cluster has GPU model a100-80g" in verdict.message


def test_an_unknown_model_lists_what_the_cluster_has(rules: Rules) -> None:
    verdict = judged(only_l4(rules), pod("rtx-9000"))
    assert not verdict.allowed and verdict.reason_codes == ["gpu-model-unknown"]
    assert ('GPU model "rtx-9000" (nodeSelector gpu-type) is not in the catalog nor on any node; this cluster has '
            'l4-24g (1 node x 2 GPUs)') in verdict.message


def test_the_fix_names_a_model_the_cluster_has(rules: Rules) -> None:
    bare = pod("x")
    del bare["spec"]["nodeSelector"]
    message = judged(only_l4(rules), bare).message
    assert 'add nodeSelector "gpu-type: l4-24g" or annotation "ai-admission.io/gpu-model: l4-24g" (this cluster has ' \
           'l4-24g (1 node x 2 GPUs))' in message
    assert "known nvidia models: a100-80g" in judged(rules, bare).message  # offline as before


def test_a_long_list_is_cut(rules: Rules) -> None:
    products = ["NVIDIA-L4", "NVIDIA-A10", "Tesla-T4", "NVIDIA-L40S", "NVIDIA-H200", "NVIDIA-B200"]
    merged = effective(rules, discovered(*(gfd_node(f"n{i}", p, count=1, memory=20000) for i, p in enumerate(products))))
    message = judged(merged, pod("rtx-9000")).message
    assert message.endswith("and 2 more") and message.count(" x 1 GPU") == 4


@pytest.mark.e2e
def test_the_cluster_models_through_the_api_server(control_plane: ControlPlane, watching: Server,
                                                   nodes: Callable[..., str], rules: Rules) -> None:
    """kubectl shows the warning for a model no node has; adding a node with it removes it (one watch event)."""
    from tests.e2e_install import install, route_labels, uninstall

    install(control_plane, url=watching.url, ca=Path(watching.ca), rules=rules, route="nodes")
    try:
        namespace = control_plane.create_namespace(namespace_name("nodes"), route_labels("nodes"))
        nodes(gfd_node(node_name("l4"), "NVIDIA-L4", count=2, memory=23034))
        a100 = {**pod("a100-80g"), "metadata": {"name": "train", "annotations": {"ai-admission.io/gpu-memory": "40Gi"}}}

        def create() -> Any:
            return control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                                         input=json.dumps(a100))

        warning = "no node of this cluster has GPU model a100-80g"
        done = eventually(lambda: (d := create()).returncode == 0 and warning in d.stderr and "l4-24g" in d.stderr
                          and d)
        assert "Warning: " in done.stderr
        unknown = control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                                        input=json.dumps({**a100, "spec": pod("rtx-9000")["spec"]}))
        assert "is not in the catalog nor on any node; this cluster has l4-24g (1 node x 2 GPUs)" in unknown.stderr

        nodes(gfd_node(node_name("a100"), "NVIDIA-A100-SXM4-80GB"))
        eventually(lambda: all(warning not in create().stderr for _ in range(4)))
    finally:
        uninstall(control_plane, "nodes")
