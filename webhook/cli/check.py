"""``ai-admission check``: the webhook's verdicts offline, for CI, with no cluster and no server.

Reads YAML or JSON (multi-document files, ``kind: List``, directories, standard input) into documents, which
`webhook.core.documents.check` judges with the webhook's own code, and renders the report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, TextIO

import yaml

from webhook.core import podview
from webhook.core.documents import Document, Report, Result

SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """Unreadable or invalid input; the message names the file and document."""


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    return [path]


def read_documents(sources: Iterable[str], stdin: TextIO | None = None) -> Iterator[Document]:
    """Every object in the given files, directories or ``-``; ``kind: List`` is expanded."""
    for source in sources:
        if source == "-":
            texts = [("<stdin>", (stdin or sys.stdin).read())]
        else:
            path = Path(source)
            if not path.exists():
                raise InputError(f"{source}: no such file or directory")
            try:
                texts = [(str(p), p.read_text(encoding="utf-8")) for p in _files(path)]
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{source}: cannot read: {exc}") from exc
        for name, text in texts:
            try:
                loaded = list(yaml.safe_load_all(text))
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f"line {mark.line + 1}" if mark else "?"
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                raise InputError(f"{name}: invalid YAML at {where}: {problem}") from exc
            for index, obj in enumerate(loaded):
                if obj is None:
                    continue
                if not isinstance(obj, dict):
                    raise InputError(f"{name} (document {index + 1}): expected a Kubernetes object, got "
                                     f"{type(obj).__name__}")
                if obj.get("kind") == "List" or str(obj.get("kind", "")).endswith("List") and "items" in obj:
                    for item in podview.as_list(obj.get("items")):
                        if isinstance(item, dict):
                            yield Document(name, index, item)
                    continue
                if "kind" not in obj or "apiVersion" not in obj:
                    raise InputError(f"{name} (document {index + 1}): not a Kubernetes object (no kind/apiVersion)")
                yield Document(name, index, obj)


def gpu_text(result: Result) -> str:
    """``  gpus=8 needed=1``: the GPUs one pod asks for and those its memory need takes (where known)."""
    if not result.gpus:
        return ""
    needed = f" needed={result.gpus_needed}" if result.gpus_needed is not None else ""
    return f"  gpus={result.gpus}{needed}"


def answers_text(result: Result) -> str:
    """The first and third of the three questions as the pod is given them, with where each came from (the second,
    the GPUs, is on the line above)."""
    answers = result.answers()
    if not answers:
        return ""
    preemptible = "yes" if answers["preemptible"] else "no"
    across = "yes" if answers["multiNode"] else "no"
    where = f" ({answers['multiNodeReason']})" if answers["multiNodeReason"] else ""
    return f"preemptible={preemptible} ({answers['preemptibleReason']})  across-nodes={across}{where}"


def render_text(report: Report) -> str:
    lines = []
    for r in report.results:
        target = f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}" + (f" {r.path}" if r.path else "")
        reasons = ",".join(r.verdict.reason_codes) or "-"
        why = f" ({r.reason})" if r.reason else ""
        reader = f"  reader={r.reader}" if r.path else ""  # templates: the kinds table or the generic reader
        lines.append(f"{r.status:<5} {target}  class={r.workload}{why}{gpu_text(r)}  reasons={reasons}{reader}")
        answers = answers_text(r)
        if answers:
            lines.append(f"      {answers}")
        if r.verdict.message:
            lines.extend(f"      {line}" for line in r.verdict.message.splitlines()[1:])
        lines.extend(f"      warning: {w}" for w in r.verdict.warnings)
    for document in report.skipped:
        paths = report.unread_paths(document)
        if paths:
            meta = podview.metadata(document.obj)
            namespace = meta.get("namespace")
            where = f"{str(namespace) + '/' if namespace else ''}{meta.get('name', '')}"
            lines.append(f"SKIP  {document.obj.get('kind')} {where}  speaks of GPUs at {', '.join(paths)}, in fields "
                         f"of its own: not judged here (it holds no pod spec or container object); the pods it "
                         f"makes are judged when created")
    counts = {s: sum(1 for r in report.results if r.status == s) for s in ("ALLOW", "WARN", "DENY")}
    summary = (f"{len(report.results)} checked: {counts['ALLOW']} allowed, {counts['WARN']} allowed with warnings, "
               f"{counts['DENY']} denied")
    if report.skipped:
        count = len(report.skipped)
        summary += f"; {count} object{'' if count == 1 else 's'} without pod templates skipped"
    if report.gpus_beyond_need:
        summary += f"; {report.gpus_beyond_need} GPUs asked beyond the need"
    lines.append(summary)
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    payload = {"results": [r.as_dict() for r in report.results],
               "skipped": [{"file": d.source, "document": d.index + 1, "kind": d.obj.get("kind"),
                            "name": podview.metadata(d.obj).get("name"), "gpuFieldsNotRead": report.unread_paths(d)}
                           for d in report.skipped],
               "denied": report.denied}
    return json.dumps(payload, indent=2) + "\n"


def render_yaml(report: Report) -> str:
    """The pods as they will be after mutation (for templates: the pod the controller will create); for what is
    denied, the verdict instead: a denied pod is never created, so its mutated form would mislead."""
    documents: list[dict[str, Any]] = []
    for r in report.results:
        if not r.verdict.allowed:
            documents.append({"verdict": r.status, "kind": r.kind, "namespace": r.namespace, "name": r.name,
                              "template": r.path, "class": r.workload, "reasons": r.verdict.reason_codes,
                              "message": r.verdict.message})
        elif r.mutated is not None:
            documents.append(r.mutated)
    return yaml.safe_dump_all(documents, sort_keys=False)
