"""Judging a set of objects as the webhook would: the documents of ``ai-admission check`` (files) and of
``ai-admission audit`` and the PolicyReports (objects listed from the cluster).

Every object goes through `webhook.core.admission.judge`, the function the webhook's `decide` calls. DRA
ResourceClaims and ResourceClaimTemplates among the documents are also what the pods and templates among them
find when they take claims (where the server keeps the cluster's, from a watch), and a TrainJob finds its runtime
among them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from . import podview
from .admission import Verdict, heard, is_pod, judge, resolve_mode
from .bypasses import env_sources
from .context import Context
from .dra import claims as dra
from .mutate import mutate_pod
from .quantity import format_bytes
from .view import claims as claim_view
from .view.cluster_view import INPUT, Objects
from .view.observe import classes_seen, queues_seen
from .workloads.generic import gpu_mentions, readable
from .workloads.kinds import KINDS, group_of


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
    reader: str = ""          # what read it: "pod", "claim", the kinds table, or the generic reader and the shape
    replicas: int = 1         # the pods it stands for (a template's replicas)

    @property
    def generic(self) -> bool:
        return self.reader.startswith("generic")

    @property
    def gpus(self) -> int:
        """GPUs one of its pods asks for."""
        profile = self.verdict.profile
        return profile.gpu_count if profile is not None else 0

    @property
    def gpus_needed(self) -> int | None:
        """GPUs the memory need of one of its pods takes (None: not known)."""
        profile = self.verdict.profile
        return profile.gpus_needed if profile is not None else None

    @property
    def gpus_beyond_need(self) -> int:
        """GPUs its pods ask for beyond their need, over all its pods (its replicas)."""
        profile = self.verdict.profile
        return profile.gpus_beyond_need * self.replicas if profile is not None else 0

    def answers(self) -> dict[str, Any]:
        """The three questions' answers one of its pods is given, each with where it came from (None: no profile)."""
        profile = self.verdict.profile
        if profile is None or not profile.gpu_count:
            return {}
        return {"preemptible": profile.preemptible, "preemptibleReason": profile.preemptible_reason,
                "gpus": profile.gpu_count, "model": profile.model.name if profile.model else profile.model_name,
                "gpuMemoryPerGpu": format_bytes(profile.memory_per_gpu) if profile.memory_per_gpu is not None else None,
                "multiNode": profile.multi_node, "multiNodeReason": profile.multi_node_reason,
                "jobPods": profile.world.pods}

    @property
    def status(self) -> str:
        if not self.verdict.allowed:
            return "DENY"
        return "WARN" if self.verdict.warnings else "ALLOW"

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.document.source, "document": self.document.index + 1, "kind": self.kind,
                "namespace": self.namespace, "name": self.name, "template": self.path, "verdict": self.status,
                "class": self.workload, "classReason": self.reason, "reader": self.reader,
                "readGenerically": self.generic,
                "gpus": self.gpus, "gpusNeeded": self.gpus_needed, "replicas": self.replicas,
                "gpusBeyondNeed": self.gpus_beyond_need, "answers": self.answers(),
                "allowed": self.verdict.allowed, "mode": self.verdict.mode,
                "reasons": self.verdict.reason_codes,
                "denials": [f.code for f in self.verdict.findings if f.severity == "deny"],
                "message": self.verdict.message,
                "warnings": list(self.verdict.warnings)}


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    skipped: list[Document] = field(default_factory=list)
    # skipped objects of kinds with no table entry that speak of GPUs in fields of their own, and where
    unread: dict[int, list[str]] = field(default_factory=dict)  # id(document) -> paths

    def unread_paths(self, document: Document) -> list[str]:
        return self.unread.get(id(document), [])

    @property
    def denied(self) -> bool:
        return any(not r.verdict.allowed for r in self.results)

    @property
    def gpus_beyond_need(self) -> int:
        """GPUs asked for beyond the need, over every pod the results stand for."""
        return sum(r.gpus_beyond_need for r in self.results)


class Index:
    """The documents of one check by kind, name and namespace, for objects a template refers to (a TrainJob's
    runtime, a container's envFrom ConfigMap or Secret)."""

    def __init__(self, documents: list[Document]) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for document in documents:
            meta = podview.metadata(document.obj)
            key = (str(document.obj.get("kind", "")), str(meta.get("name", "")), str(meta.get("namespace") or ""))
            self._objects[key] = document.obj

    def find(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        return self._objects.get((kind, name, namespace)) or self._objects.get((kind, name, ""))


def _is_claim(obj: dict[str, Any]) -> bool:
    return obj.get("kind") in claim_view.CLAIM_KINDS and str(obj.get("apiVersion", "")).startswith(dra.GROUP + "/")


def _claim_index(documents: list[Document], namespace: str | None) -> claim_view.ClaimIndex:
    """The claims and templates among the input, each in its namespace (as the server's watch holds them)."""
    index = claim_view.ClaimIndex()
    for document in documents:
        if _is_claim(document.obj):
            obj = document.obj
            own = podview.metadata(obj).get("namespace")
            meta = {**podview.metadata(obj), "namespace": str(own or namespace or "default")}
            index.put(str(obj["kind"]), {**obj, "metadata": meta})
    return index


# Controllers whose pods are copies of one template, as many as ``spec.replicas`` says (1 where it says none, 0 when
# scaled down): what the GPUs a template's pod asks for beyond its need add up over. Any other kind's template stands
# for the pods of its job (the kinds table's count), else one.
_SCALED = frozenset({("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet")})


def _replicas(obj: dict[str, Any], group: str, kind: str, pods: int) -> int:
    if (group, kind) not in _SCALED:
        return pods
    value = podview.spec(obj).get("replicas", 1)
    return value if type(value) is int and value >= 0 else 1


def check(documents: Iterable[Document], *, context: Context, namespace: str | None = None) -> Report:
    """Judge every document exactly as the webhook would (the mode in force for its namespace applies).

    Each object goes through `webhook.core.admission.judge`, the function the webhook's `decide` calls: pods,
    DRA claims with GPU requests, and the pod templates of every kind (the table's, or found by shape);
    objects with nothing to judge are skipped. Pods and templates are also mutated, for ``-o yaml``.

    ``context``: the rules, and what is known of the cluster (``check --cluster``'s read, the server's watches for
    ``audit``; nothing offline), to which the input adds its own DeviceClasses, its claims, and its queues where the
    cluster's are not known.
    """
    report = Report()
    documents = list(documents)
    rules = context.rules
    given = Objects(tuple(d.obj for d in documents), INPUT)
    cluster = context.cluster
    classes = classes_seen(rules, (given,), cluster.gpu_classes)
    queues = cluster.queues or queues_seen(rules, given, classes)
    claims = _claim_index(documents, namespace)
    ctx = Context(rules, replace(cluster, gpu_classes=classes, queues=queues, claims=claims))
    index = Index(documents)
    for document in documents:
        obj = document.obj
        meta = podview.metadata(obj)
        kind = str(obj.get("kind"))
        group = group_of(str(obj.get("apiVersion", "")))
        known = KINDS.get((group, kind))
        cluster_scoped = known is not None and known.scope == "Cluster"
        ns = "" if cluster_scoped else str(meta.get("namespace") or namespace or "default")
        mode = resolve_mode(rules, namespace=ns, path_mode=None)
        name = str(meta.get("name") or meta.get("generateName") or "")
        # the keys of the ConfigMaps and Secrets among the files, where a container takes env from them
        seen = env_sources.expand(obj, index.find, ns)
        judged = judge(seen, ctx=ctx, mode=mode, group=group, kind=kind, namespace=ns, claims=claims.source(ns),
                       resolve=index.find)
        if judged is None:
            report.skipped.append(document)
            if known is None and readable(group):
                mentions = gpu_mentions(obj, ctx)
                if mentions:
                    report.unread[id(document)] = mentions
            continue
        verdict, templates = judged
        if group == dra.GROUP:
            report.results.append(Result(document, kind, name, ns, None, verdict, workload="-", reader="claim"))
        elif is_pod(group, kind):
            profile = verdict.profile
            mutation = mutate_pod(obj, profile, ctx, namespace=ns) if profile else None
            mutated = mutation.pod if mutation is not None else None
            if mutation is not None:  # what /mutate tells the pod's creator, shown with the rest
                verdict = heard(verdict, mutation, ctx)
            report.results.append(Result(document, kind, name, ns, None, verdict, mutated,
                                         profile.workload if profile else "none",
                                         profile.classification.reason if profile else "", reader="pod"))
        for template in templates:
            profile = template.verdict.profile
            if template.path == "":  # the object as a whole: its scheduler backend's checks
                report.results.append(Result(document, kind, name, ns, None, template.verdict, workload="-",
                                             reader=template.reader))
                continue
            assert profile is not None  # judge_pod always profiles the pod
            mutated = template.mutated if template.mutated is not None else \
                mutate_pod(template.pod, profile, ctx, namespace=ns).pod
            report.results.append(Result(document, kind, name, ns, template.path, template.verdict, mutated,
                                         profile.workload, profile.classification.reason, template.reader,
                                         _replicas(obj, group, kind, template.replicas)))
    return report


