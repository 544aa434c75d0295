"""The dashboard and the alerts name only metrics and labels that exist, and the committed copies are current.

Every PromQL expression is parsed (a syntax error fails here, not in Prometheus); each metric it selects must be
exposed by a running server (``ai_admission_*``) or by the real kube-apiserver of the test session
(``apiserver_*``), with every label the expression matches on.
"""

from __future__ import annotations

import time

from tests.conftest import Server
from tests.support.e2e_install import BARE_POD
from tests.support.fixtures import FIXTURES, load_pod_case
from tests.support.metrics import exposed, metric, missing, settled, used
from tests.support.reviews import admission_review

OVER_PROVISIONED = load_pod_case(FIXTURES / "pods" / "vllm-7b-eight-h100.yaml").pod


def test_own_metrics_exist_in_a_running_server(server: Server) -> None:
    """Labelled series appear once used, so the server answers a denial, a mutation and a bad request first."""
    pod = {**BARE_POD, "metadata": {"name": "bare", "namespace": "ml-team"}}
    assert server.review("/validate", admission_review(pod))["allowed"] is False
    server.review("/mutate", admission_review(pod))
    assert server.post("/validate", data=b"not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert server.review("/validate", admission_review(OVER_PROVISIONED))["allowed"] is True  # GPUs beyond its need
    text = settled(server, lambda t: "ai_admission_denials_total{" in t and "ai_admission_bad_requests_total{" in t
                   and "ai_admission_gpus_beyond_need_total{" in t)
    # per-product series exist only where a node watch runs: tests/e2e/test_node_catalog.py checks those
    wanted = {name: labels for name, labels in used().items()
              if name.startswith("ai_admission_") and name != "ai_admission_catalog_model_nodes"}
    assert wanted, "the dashboard names no metric of ours"
    assert not missing(wanted, exposed(text))
    assert {name for name in used() if not name.startswith(("ai_admission_", "apiserver_"))} == set()
    # every worker records its certificate at start: the minimum over workers is never a worker's initial 0
    assert metric(text, "ai_admission_certificate_expiry_timestamp_seconds") > time.time()
