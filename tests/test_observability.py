"""The dashboard and the alerts name only metrics and labels that exist, and the committed copies are current.

Every PromQL expression is parsed (a syntax error fails here, not in Prometheus); each metric it selects must be
exposed by a running server (``ai_admission_*``) or by the real kube-apiserver of the test session
(``apiserver_*``), with every label the expression matches on.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Iterator

import promql_parser
import pytest
import yaml

from tests.conftest import ROOT, Server
from tests.control_plane import ControlPlane, namespace_name
from tests.e2e_install import BARE_POD
from tests.reviews import admission_review
from tests.test_operations import metric, settled
from webhook.generate import observability
from webhook.generate.webhooks import render

COMPONENT = ROOT / "manifests" / "components" / "prometheus"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+")


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every dashboard target and alert, Grafana's variables replaced as Grafana does."""
    found = [(f"panel {p['title']!r}", t["expr"]) for p in observability.dashboard()["panels"]
             for t in p.get("targets", [])]
    found += [(f"alert {r['alert']}", r["expr"]) for r in observability.alert_rules()]
    return [(where, expr.replace("$__rate_interval", "1m")) for where, expr in found]


def selectors(node: Any) -> Iterator[Any]:
    """Every VectorSelector in a parsed expression."""
    if isinstance(node, list):
        for item in node:
            yield from selectors(item)
        return
    if type(node).__name__ == "VectorSelector":
        yield node
        return
    for attribute in ("lhs", "rhs", "expr", "args", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        if child is not None and not isinstance(child, (str, int, float)):
            yield from selectors(child)


def used() -> dict[str, set[str]]:
    """Metric name -> label names matched on, over every expression."""
    names: dict[str, set[str]] = {}
    for where, expr in expressions():
        try:
            parsed = promql_parser.parse(expr)
        except Exception as exc:  # noqa: BLE001 - the parser's own error type is not exported
            pytest.fail(f"{where}: {exc}\n{expr}")
        for selector in selectors(parsed):
            assert selector.name, f"{where}: a selector without a metric name"
            names.setdefault(selector.name, set()).update(m.name for m in selector.matchers.matchers)
    return names


def exposed(text: str) -> dict[str, set[str]]:
    """Metric sample name -> label names seen, from the Prometheus text format."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match:
            found.setdefault(match.group(1), set()).update(re.findall(r'(\w+)="', match.group(2) or ""))
    return found


def missing(wanted: dict[str, set[str]], have: dict[str, set[str]]) -> list[str]:
    problems = []
    for name, labels in sorted(wanted.items()):
        if name not in have:
            problems.append(f"{name}: not exposed")
        elif labels - have[name]:
            problems.append(f"{name}: no label {', '.join(sorted(labels - have[name]))}")
    return problems


# -- generated files -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text"), [
    ("dashboard.json", lambda: observability.render_dashboard()),
    ("prometheusrule.yaml", lambda: render([observability.prometheus_rule()], "prometheusrule")),
    ("servicemonitor.yaml", lambda: render([observability.service_monitor()], "servicemonitor")),
])
def test_committed_copies_are_current(name: str, text: Any) -> None:
    what = name.split(".")[0]
    assert (COMPONENT / name).read_text() == text(), \
        f"run: ai-admission manifests {what} > manifests/components/prometheus/{name}"


def test_dashboard_panels_do_not_overlap() -> None:
    panels = observability.dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_webhook_name_pattern_matches_exactly_our_webhooks() -> None:
    pattern = observability.WEBHOOKS.replace("\\\\", "\\")  # as PromQL reads the string
    for name in observability.WEBHOOK_NAMES:
        assert re.fullmatch(pattern, name)
    assert not re.fullmatch(pattern, "validate.other.io") and not re.fullmatch(pattern, "xvalidate.ai-admission.io")


# -- the names exist -------------------------------------------------------------------------------------------

def test_own_metrics_exist_in_a_running_server(server: Server) -> None:
    """Labelled series appear once used, so the server answers a denial, a mutation and a bad request first."""
    pod = {**BARE_POD, "metadata": {"name": "bare", "namespace": "ml-team"}}
    assert server.review("/validate", admission_review(pod))["allowed"] is False
    server.review("/mutate", admission_review(pod))
    assert server.post("/validate", data=b"not json", headers={"Content-Type": "application/json"}).status_code == 400
    text = settled(server, lambda t: "ai_admission_denials_total{" in t and "ai_admission_bad_requests_total{" in t)
    # per-product series exist only where a node watch runs: tests/test_node_catalog.py checks those
    wanted = {name: labels for name, labels in used().items()
              if name.startswith("ai_admission_") and name != "ai_admission_catalog_model_nodes"}
    assert wanted, "the dashboard names no metric of ours"
    assert not missing(wanted, exposed(text))
    assert {name for name in used() if not name.startswith(("ai_admission_", "apiserver_"))} == set()
    # every worker records its certificate at start: the minimum over workers is never a worker's initial 0
    assert metric(text, "ai_admission_certificate_expiry_timestamp_seconds") > time.time()


@pytest.mark.e2e
@pytest.mark.usefixtures("webhook_installed")
def test_api_server_metrics_exist_in_the_real_kube_apiserver(control_plane: ControlPlane, tmp_path: Path) -> None:
    """The API server's webhook metrics, with the label names the alerts use, after it called our webhooks
    (a denial) and failed open on one it could not reach."""
    namespace = control_plane.create_namespace(namespace_name("metrics"))
    denied = control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(BARE_POD))
    assert denied.returncode != 0
    unreachable = _unreachable_webhook(control_plane, namespace)
    try:
        wanted = {name: labels for name, labels in used().items() if name.startswith("apiserver_")}
        deadline = time.monotonic() + 30
        while True:  # the configuration reaches the API server's admission chain a moment after it is created
            control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                                  input=json.dumps({**BARE_POD, "metadata": {"name": "probe"}}))
            raw = control_plane.kubectl("get", "--raw", "/metrics")
            assert raw.returncode == 0, raw.stderr
            problems = missing(wanted, exposed(raw.stdout))
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not problems, problems
    finally:
        control_plane.kubectl("delete", "validatingwebhookconfiguration", unreachable, "--ignore-not-found")


def _unreachable_webhook(plane: ControlPlane, namespace: str) -> str:
    """A validating webhook, failurePolicy Ignore, on a loopback port nothing listens on, for ``namespace`` only."""
    from tests.control_plane import free_port

    name = f"unreachable-{namespace}"
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{"name": "unreachable.ai-admission.io", "failurePolicy": "Ignore", "sideEffects": "None",
                      "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
                      "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/validate"},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"]}],
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]}
    done = plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(configuration))
    assert done.returncode == 0, done.stderr
    return name
