"""Reading Prometheus text (a metric's sum over its series, a scrape once counts have settled) and the metrics the
dashboard and the alerts name, parsed from their PromQL."""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterator

import promql_parser
import pytest

from tests.conftest import Server
from webhook.generate import observability


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if not match:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def settled(server: Server, done: Callable[[str], bool], seconds: float = 5) -> str:
    """/metrics once ``done`` holds for it (counts are added in batches, see webhook.batching)."""
    deadline = time.monotonic() + seconds
    while True:
        text = server.get("/metrics").text
        if done(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


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
