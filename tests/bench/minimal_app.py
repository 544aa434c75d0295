"""The baseline for the benchmark: a minimal Flask app that parses the review and answers "allowed".

Served by the same gunicorn config (workers, threads, TLS, keep-alive) as ai-admission, so the ratio between
the two is the cost of ai-admission's own work.
"""

from __future__ import annotations

import json

from flask import Flask, Response, request

app = Flask("minimal")


@app.post("/validate")
@app.post("/mutate")
def allow() -> Response:
    review = json.loads(request.get_data())
    body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True}}
    return Response(json.dumps(body), mimetype="application/json")


@app.get("/healthz")
def healthz() -> Response:
    return Response('{"status":"ok"}', mimetype="application/json")
