"""The HTTP shell: parse the request, call the admission core, serialise the answer. No policy lives here.

`create_app` wires the routes and nothing else: no import-time side effects, the settings passed in, the rules
and background services of the worker started in one place (`webhook.server.services`), readiness a set of named
checks (`webhook.server.readiness`). gunicorn calls ``create_app()``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook.config.settings import Settings
from webhook.core import podview
from webhook.core.admission import MUTATE, VALIDATE, Verdict, decide, respond, route_of
from webhook.core.review import AdmissionRequest, ReviewError, build_response, parse_review
from webhook.core.rules import MODES
from webhook.core.view.claims import CLAIM, CLAIM_TEMPLATE
from webhook.core.workloads.kinds import KINDS

from .decision_cache import DecisionCache
from .logs import AdmissionLog
from .metrics import count_request, instruments
from .metrics import render as render_metrics
from .readiness import readiness
from .services import Services, start_services

INTERNAL_ERROR_WARNING = "ai-admission had an internal error and admitted this pod unchecked"
MAX_BODY_BYTES = 4 * 1024 * 1024  # an object is at most ~1.5 MiB in etcd; a review carries object and oldObject
log = logging.getLogger("ai_admission")


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": message, "status": status}, status)


def _read_review() -> AdmissionRequest:
    # the media type without parameters, as request.mimetype gives it, without werkzeug's header parser
    mimetype = request.environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower()
    if mimetype != "application/json":
        raise ReviewError(f"Content-Type must be application/json, got {mimetype or 'none'!r}", status=415)
    raw = request.get_data(cache=False)
    try:
        body = orjson.loads(raw)  # nesting deeper than 1024 levels is refused by orjson itself
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise ReviewError("request body is nested too deeply (more than 1024 levels)") from exc
        raise ReviewError(f"request body is not valid JSON: {exc}") from exc
    return parse_review(body)


_KNOWN_KINDS = frozenset({"Pod", CLAIM_TEMPLATE, CLAIM, *(kind for _, kind in KINDS)})


def _beyond_need(review: AdmissionRequest, endpoint: str, verdict: Verdict | None) -> tuple[str, str, int] | None:
    """(class, model, GPUs) an admitted pod asks for beyond its need, counted once per pod: at its creation's
    /validate call, not for a dry run (a pod the native policy judges whole states its need per GPU, which takes
    every GPU it asks for: nothing is missed by its not calling)."""
    profile = verdict.profile if verdict is not None else None
    if (endpoint != VALIDATE or profile is None or not profile.gpus_beyond_need or verdict is None
            or not verdict.allowed or not review.is_pod_create or review.dry_run or profile.model is None):
        return None
    return profile.workload, profile.model.name, profile.gpus_beyond_need


def _count(review: AdmissionRequest, endpoint: str, verdict: Verdict | None, started: float) -> None:
    patch_ops = (len(verdict.patch) if verdict else 0) if endpoint == MUTATE else None
    if verdict is None:
        outcome, workload, reasons, mode = "allowed", "-", [], None
    else:
        outcome = "denied" if not verdict.allowed else ("warned" if verdict.warnings else "allowed")
        workload = verdict.profile.workload if verdict.profile else "-"
        reasons = [f.code for f in verdict.findings if f.severity == "deny"]
        mode = verdict.mode
    count_request(endpoint=endpoint, operation=review.operation, kind=review.kind, verdict=outcome,
                  workload=workload, denial_reasons=reasons, mode=mode,
                  seconds=time.perf_counter() - started, kinds=_KNOWN_KINDS, patch_ops=patch_ops,
                  beyond_need=_beyond_need(review, endpoint, verdict))


def _log_admission(admissions: AdmissionLog, review: AdmissionRequest, endpoint: str, verdict: Verdict | None,
                   started: float, patch_ops: int) -> None:
    if not admissions.enabled:
        return
    meta = podview.metadata(review.object or {})
    profile = verdict.profile if verdict else None
    admissions.write({
        "msg": "admission", "uid": review.uid, "endpoint": endpoint, "operation": review.operation,
        "kind": review.kind, "namespace": review.namespace, "name": review.name or meta.get("generateName") or "",
        "dryRun": review.dry_run, "class": profile.workload if profile else None,
        "allowed": verdict.allowed if verdict else True, "mode": verdict.mode if verdict else None,
        "reasons": verdict.reason_codes if verdict else [], "patchOps": patch_ops,
        "durationMs": round((time.perf_counter() - started) * 1000, 3),
    })


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> Flask:
    """The webhook's routes around ``services``: the rules, the cluster's view and the background services of this
    worker.

    gunicorn's workers call ``create_app()``: the settings are read from the environment and the services started
    from them (`webhook.server.services.start_services`). Tests pass ``services`` (`Services.fixed`) and, where
    readiness or logging matter, their own ``settings``.
    """
    settings = settings or Settings.from_environ()
    if services is None:
        services, _ = start_services(settings)
    running: Services = services
    app = Flask("ai_admission")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.extensions["ai_admission"] = running
    admissions = AdmissionLog(level=settings.log_level)
    decisions = DecisionCache(settings.decision_cache) if settings.decision_cache > 0 else None
    metrics = instruments()

    def admit(endpoint: str, path_mode: str | None = None) -> Response:
        started = time.perf_counter()
        try:
            review = _read_review()
        except ReviewError as exc:
            metrics.bad_requests.labels(str(exc.status)).inc()
            return _error(exc.status, exc.message)
        try:
            ctx = running.context
            route = route_of(review, rules=ctx.rules, endpoint=endpoint, path_mode=path_mode)
            if decisions is None:
                verdict = decide(review, ctx=ctx, endpoint=endpoint, route=route)
            else:
                verdict = decisions.decide(review, route, ctx=ctx, endpoint=endpoint, decide=decide)
            payload = respond(review, verdict)
        except Exception:  # a bug must not kill the worker or block the cluster: admit, say so, log it
            log.exception("internal error reviewing uid %s", review.uid)
            metrics.errors.inc()
            verdict = None
            payload = build_response(api_version=review.api_version, uid=review.uid, allowed=True,
                                     warnings=[INTERNAL_ERROR_WARNING])
        _count(review, endpoint, verdict, started)
        _log_admission(admissions, review, endpoint, verdict, started, len(verdict.patch) if verdict else 0)
        return _json(payload)

    @app.post("/validate")
    def validate() -> Response:
        return admit(VALIDATE)

    @app.post("/validate/<mode>")
    def validate_in_mode(mode: str) -> Response:
        if mode not in MODES:
            return _error(404, f"unknown mode {mode!r}; use /validate or /validate/{{{','.join(MODES)}}}")
        return admit(VALIDATE, mode)

    @app.post("/mutate")
    def mutate() -> Response:
        return admit(MUTATE)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """Ready when every check of `webhook.server.readiness` holds (rules loaded, the serving certificate
        loadable and unexpired, not draining before the server stops)."""
        ready, detail = readiness(running, settings)
        return _json(detail, 200 if ready else 503)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body, content_type = render_metrics()
        return Response(body, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        text = {413: f"request body is larger than {MAX_BODY_BYTES} bytes"}.get(status, exc.description or exc.name)
        return _error(status, text)

    return app
