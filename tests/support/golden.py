"""Refresh the golden parts of the fixture pods: the exact JSON Patch of /mutate and its warnings.

``python -m tests.support.golden [NAME ...]`` (``make golden``) rewrites, in each file of tests/fixtures/pods (or
those named), the ``expect.patch`` list and, where the warnings changed, ``expect.mutationWarnings``, from what the
core gives with the shipped rules; everything else of the file (the pod, its description, the message fragments,
``mutated``) stays as written. Review the diff before committing it: it is the change in behaviour. The other
generated files (manifests, dashboards, docs/reference) are refreshed by ``make generated``.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import RULES_FILE
from tests.support.contexts import as_context
from tests.support.fixtures import FIXTURES, load_pod_case
from webhook.config.rules_file import load_rules
from webhook.core.admission import mutate_verdict


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=100_000, sort_keys=False).strip()


def _block(key: str, items: list[Any]) -> list[str]:
    if not items:
        return [f"  {key}: []"]
    return [f"  {key}:", *(f"    - {_flow(item)}" for item in items)]


def _replace(lines: list[str], key: str, new: list[str]) -> list[str]:
    """``lines`` with the ``expect`` entry ``key`` (indent 2, a one-line or a block list) replaced by ``new``."""
    start = next(i for i, line in enumerate(lines) if re.match(rf"^  {key}:", line))
    end = start + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    return [*lines[:start], *new, *lines[end:]]


def _fragment(warning: str) -> str:
    """What a fixture pins of a warning: its first clause (the fixtures hold the decisive part, not every word)."""
    return warning.split("; ")[0].split(": ")[0] if len(warning) > 60 else warning


def _fragments_hold(actual: list[str], fragments: list[str]) -> bool:
    left = list(actual)
    for fragment in fragments:
        found = next((w for w in left if fragment in w), None)
        if found is None:
            return False
        left.remove(found)
    return not left


def refresh(path: Path) -> bool:
    """Rewrite ``path``'s golden parts; True when the file changed."""
    case = load_pod_case(path)
    mutation = mutate_verdict(copy.deepcopy(case.pod), ctx=as_context(load_rules(RULES_FILE)), mode="deny")
    text = path.read_text()
    lines = text.split("\n")
    lines = _replace(lines, "patch", _block("patch", [dict(op) for op in mutation.patch]))
    if not _fragments_hold(list(mutation.warnings), case.mutation_warnings):
        fragments = [_fragment(w) for w in mutation.warnings]
        lines = _replace(lines, "mutationWarnings", [f"  mutationWarnings: {_flow(fragments)}"])
    new = "\n".join(lines)
    if new != text:
        path.write_text(new)
    return new != text


def main(names: list[str]) -> int:
    paths = [FIXTURES / "pods" / f"{name}.yaml" for name in names] or sorted((FIXTURES / "pods").glob("*.yaml"))
    changed = [path.stem for path in paths if refresh(path)]
    print(f"{len(changed)} of {len(paths)} fixtures changed" + (f": {', '.join(changed)}" if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
