"""A second baseline: the minimal app, answering /mutate with the very patch ai-admission gives each pod.

Every pod of the benchmark's loads is known in advance, so the patches are computed once, at import, by
ai-admission's own core, and a request only looks its pod up (by name, annotations and labels). The API
server then does exactly the work ai-admission's answers make it do (apply the patch, check whether another
call is needed, validate the bigger pod), while the webhook does almost none: the difference between this
baseline and the minimal app is the cost of mutating at all, the difference between it and ai-admission is
ai-admission's own.

With ``AI_ADMISSION_BENCH_PATCH=one-label`` it answers every pod with one small operation instead (a label), which
separates what any change to the pod costs the API server from what the size of ai-admission's patch adds.
"""

from __future__ import annotations

import base64
import copy
import json
import os
from typing import Any

from flask import Flask, Response, request

from tests.bench.e2e import BURST_POD, mix_pods
from tests.support.contexts import as_context
from webhook.config.rules_file import default_rules_path, load_rules
from webhook.core.admission import mutate_verdict

app = Flask("patching")


def _key(pod: dict[str, Any]) -> str:
    """What tells the loads' pods apart and the API server does not change before the webhooks (it defaults the
    spec): the name or generateName, the annotations and the labels."""
    meta = pod.get("metadata") or {}
    name = meta.get("generateName") if meta.get("generateName") else meta.get("name")
    return json.dumps([name, meta.get("annotations"), meta.get("labels")], sort_keys=True)


def _one_label(pod: dict[str, Any]) -> list[dict[str, Any]]:
    if pod["metadata"].get("labels"):
        return [{"op": "add", "path": "/metadata/labels/ai-admission.io~1workload-type", "value": "batch"}]
    return [{"op": "add", "path": "/metadata/labels", "value": {"ai-admission.io/workload-type": "batch"}}]


def _patches() -> dict[str, str]:
    rules = load_rules(default_rules_path())
    one_label = os.environ.get("AI_ADMISSION_BENCH_PATCH") == "one-label"
    found = {}
    for pod in [BURST_POD, *mix_pods()]:
        patch = list(mutate_verdict(copy.deepcopy(pod), ctx=as_context(rules), mode="deny").patch)
        if patch and one_label:
            patch = _one_label(pod)
        if patch:
            found[_key(pod)] = base64.b64encode(json.dumps(patch).encode()).decode()
    return found


PATCHES = _patches()


def _answer(review: dict[str, Any], patch: str | None) -> Response:
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
    if patch:
        response.update(patchType="JSONPatch", patch=patch)
    body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}
    return Response(json.dumps(body), mimetype="application/json")


@app.post("/mutate")
def mutate() -> Response:
    review = json.loads(request.get_data())
    return _answer(review, PATCHES.get(_key(review["request"]["object"])))


@app.post("/validate")
def validate() -> Response:
    return _answer(json.loads(request.get_data()), None)


@app.get("/healthz")
def healthz() -> Response:
    return Response('{"status":"ok"}', mimetype="application/json")
