"""The GPU catalog discovered from the nodes: what node labels mean, how it merges with the rules, and the
server watching a real API server (Node objects created through it, no kubelet needed).

Node label values follow GPU feature discovery (NVIDIA/k8s-device-plugin internal/lm) and AMD's node labeller
(ROCm/k8s-device-plugin cmd/k8s-node-labeller).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.conftest import Server, eventually, start_server, stop_server
from tests.support.control_plane import ControlPlane, namespace_name
from tests.support.metrics import exposed, missing, used
from tests.support.nodes import gfd_node, pod, verdict
from webhook import cli
from webhook.core.rules import Rules


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


def on_every_worker(server: Server, obj: dict[str, Any], check: Callable[[dict[str, Any]], bool]) -> bool:
    """``check`` holds for the answers of several new connections (each worker watches on its own)."""
    return all(check(verdict(server, obj)) for _ in range(8))


def denied_for(answer: dict[str, Any], fragment: str) -> bool:
    return not answer["allowed"] and fragment in answer["status"]["message"]


@pytest.mark.e2e
def test_nodes_change_the_verdicts(control_plane: ControlPlane, watching: Server,
                                   nodes: Callable[..., str]) -> None:
    # T4: the rules say 15360 MiB (current drivers); these nodes' older driver reports 15109 (GPU feature discovery's nvidia.com/gpu.memory)
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


@pytest.mark.e2e
def test_the_cluster_models_through_the_api_server(control_plane: ControlPlane, watching: Server,
                                                   nodes: Callable[..., str], rules: Rules) -> None:
    """kubectl shows the warning for a model no node has; adding a node with it removes it (one watch event)."""
    from tests.support.e2e_install import install, route_labels, uninstall

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
