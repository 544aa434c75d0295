"""The dashboard and the alerts name only metrics and labels that exist, and the committed copies are current.

Every PromQL expression is parsed (a syntax error fails here, not in Prometheus); each metric it selects must be
exposed by a running server (``ai_admission_*``) or by the real kube-apiserver of the test session
(``apiserver_*``), with every label the expression matches on.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import ROOT
from webhook.generate import observability
from webhook.generate.webhooks import render

COMPONENT = ROOT / "manifests" / "components" / "prometheus"


@pytest.mark.parametrize(("name", "text"), [
    ("dashboard.json", lambda: observability.render_dashboard()),
    ("prometheusrule.yaml", lambda: render([observability.prometheus_rule()], "prometheusrule")),
    ("servicemonitor.yaml", lambda: render([observability.service_monitor()], "servicemonitor")),
])
def test_committed_copies_are_current(name: str, text: Any) -> None:
    what = name.split(".")[0]
    assert (COMPONENT / name).read_text() == text(), \
        f"stale: run make generated (ai-admission manifests {what} > manifests/components/prometheus/{name})"


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
