"""``ai-admission check``: the webhook's verdicts offline, for CI, with no cluster and no server.

Reads YAML or JSON (multi-document files, ``kind: List``, directories, standard input) and sends every Pod and
every pod template through the same functions the webhook calls (`judge_pod`, `judge_object`, `mutate_pod`).
DRA ResourceClaims and ResourceClaimTemplates are judged too (`judge_claim`), and are what the pods and
templates among the same input find when they take claims (where the server keeps the cluster's, from a watch).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, TextIO

import yaml

from . import dra, podview
from .admission import Verdict, judge_claim, judge_object, judge_pod, object_subject, resolve_mode
from .kinds import KINDS, group_of
from .mutate import mutate_pod
from .rules import Rules

SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """Unreadable or invalid input; the message names the file and document."""


@dataclass(frozen=True)
class Document:
    source: str
    index: int
    obj: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.source} (document {self.index + 1})"


@dataclass
class Result:
    """One judged Pod or template."""

    document: Document
    kind: str
    name: str
    namespace: str
    path: str | None
    verdict: Verdict
    mutated: dict[str, Any] | None = None
    workload: str = "none"
    reason: str = ""          # why the pod has its class
    generic: bool = False     # the kind is not one ai-admission knows: its pod spec was found by shape

    @property
    def status(self) -> str:
        if not self.verdict.allowed:
            return "DENY"
        return "WARN" if self.verdict.warnings else "ALLOW"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.document.source, "document": self.document.index + 1, "kind": self.kind,
                "namespace": self.namespace, "name": self.name, "template": self.path, "verdict": self.status,
                "class": self.workload, "classReason": self.reason, "readGenerically": self.generic,
                "allowed": self.verdict.allowed, "mode": self.verdict.mode,
                "reasons": self.verdict.reason_codes,
                "denials": [f.code for f in self.verdict.findings if f.severity == "deny"],
                "message": self.verdict.message,
                "warnings": list(self.verdict.warnings)}


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    skipped: list[Document] = field(default_factory=list)

    @property
    def denied(self) -> bool:
        return any(not r.verdict.allowed for r in self.results)


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


class Index:
    """The documents of one check by kind, name and namespace, for objects a template refers to (a TrainJob's
    runtime)."""

    def __init__(self, documents: list[Document]) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for document in documents:
            meta = podview.metadata(document.obj)
            key = (str(document.obj.get("kind", "")), str(meta.get("name", "")), str(meta.get("namespace") or ""))
            self._objects[key] = document.obj

    def find(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        return self._objects.get((kind, name, namespace)) or self._objects.get((kind, name, ""))


def _is_claim(obj: dict[str, Any]) -> bool:
    return obj.get("kind") in dra.KINDS and str(obj.get("apiVersion", "")).startswith(dra.GROUP + "/")


def _claim_index(documents: list[Document], namespace: str | None) -> dra.ClaimIndex:
    """The claims and templates among the input, each in its namespace (as the server's watch holds them)."""
    index = dra.ClaimIndex()
    for document in documents:
        if _is_claim(document.obj):
            obj = document.obj
            own = podview.metadata(obj).get("namespace")
            meta = {**podview.metadata(obj), "namespace": str(own or namespace or "default")}
            index.put(str(obj["kind"]), {**obj, "metadata": meta})
    return index


def check(documents: Iterable[Document], *, rules: Rules, namespace: str | None = None) -> Report:
    """Judge every document exactly as the webhook would (the mode in force for its namespace applies).

    Pods and the pod templates of the kinds ai-admission knows are judged; any other object with a pod spec that
    asks for an accelerator is judged too, marked as read generically; objects with no pod spec are skipped.
    """
    report = Report()
    documents = list(documents)
    index = Index(documents)
    claims = _claim_index(documents, namespace)
    for document in documents:
        obj = document.obj
        meta = podview.metadata(obj)
        kind = str(obj.get("kind"))
        known = KINDS.get((group_of(str(obj.get("apiVersion", ""))), kind))
        cluster_scoped = known is not None and known.scope == "Cluster"
        ns = "" if cluster_scoped else str(meta.get("namespace") or namespace or "default")
        mode = resolve_mode(rules, namespace=ns, path_mode=None)
        name = str(meta.get("name") or meta.get("generateName") or "")
        source = claims.source(ns)
        if _is_claim(obj):
            gpus = bool(dra.analyse_claim(obj, kind, rules).requests)
            claim_verdict = judge_claim(obj, rules=rules, mode=mode, kind=kind, namespace=ns) if gpus else None
            if claim_verdict is None:
                report.skipped.append(document)  # no GPU request (or made by Kubernetes): nothing to judge
            else:
                report.results.append(Result(document, kind, name, ns, None, claim_verdict, workload="-"))
            continue
        if kind == "Pod" and str(obj.get("apiVersion")) == "v1":
            verdict = judge_pod(obj, rules=rules, mode=mode, subject=object_subject(obj, kind="pod", namespace=ns),
                                claims=source)
            profile = verdict.profile
            mutated = mutate_pod(obj, profile, rules).pod if profile else None
            report.results.append(Result(document, kind, name, ns, None, verdict, mutated,
                                         profile.workload if profile else "none",
                                         profile.classification.reason if profile else ""))
            continue
        judged = judge_object(obj, rules=rules, mode=mode, namespace=ns, resolve=index.find, claims=source)
        if judged is None:
            report.skipped.append(document)
            continue
        for template in judged[1]:
            profile = template.verdict.profile
            assert profile is not None  # judge_pod always profiles the pod
            mutated = mutate_pod(template.pod, profile, rules).pod
            report.results.append(Result(document, kind, name, ns, template.path, template.verdict, mutated,
                                         profile.workload, profile.classification.reason, template.generic))
    return report


def render_text(report: Report) -> str:
    lines = []
    for r in report.results:
        target = f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}" + (f" {r.path}" if r.path else "")
        reasons = ",".join(r.verdict.reason_codes) or "-"
        why = f" ({r.reason})" if r.reason else ""
        generic = "  (kind read generically)" if r.generic else ""
        lines.append(f"{r.status:<5} {target}  class={r.workload}{why}  reasons={reasons}{generic}")
        if r.verdict.message:
            lines.extend(f"      {line}" for line in r.verdict.message.splitlines()[1:])
        lines.extend(f"      warning: {w}" for w in r.verdict.warnings)
    counts = {s: sum(1 for r in report.results if r.status == s) for s in ("ALLOW", "WARN", "DENY")}
    summary = (f"{len(report.results)} checked: {counts['ALLOW']} allowed, {counts['WARN']} allowed with warnings, "
               f"{counts['DENY']} denied")
    if report.skipped:
        count = len(report.skipped)
        summary += f"; {count} object{'' if count == 1 else 's'} without pod templates skipped"
    lines.append(summary)
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    payload = {"results": [r.as_dict() for r in report.results],
               "skipped": [{"file": d.source, "document": d.index + 1, "kind": d.obj.get("kind"),
                            "name": podview.metadata(d.obj).get("name")} for d in report.skipped],
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
