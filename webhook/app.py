"""The HTTP shell: parse the request, call the admission core, serialise the answer. No policy lives here.

`create_app(rules)` is an app factory with no import-time side effects; gunicorn calls ``create_app()``, which
loads the rules named by ``AI_ADMISSION_RULES`` (or the default file) once, before the first request.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
from cryptography import x509
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import metrics, podview
from .admission import MUTATE, VALIDATE, Verdict, decide, respond
from .logs import AdmissionLog
from .catalog import EffectiveRules
from .cluster import UNKNOWN, ClusterFacts, PriorityClassWatch, watch_from_environment
from .nodes import NodeWatch, watch_from_environment as nodes_from_environment
from .compiled import running_compiled
from .decision_cache import SIZE as CACHE_SIZE, SIZE_ENV as CACHE_SIZE_ENV, DecisionCache
from .draining import is_draining
from .dra import CLAIM, TEMPLATE
from .dra_watch import ClaimWatch
from .dra_watch import watch_from_environment as claim_watch_from_environment
from .review import AdmissionRequest, ReviewError, build_response, parse_review
from .reload import INTERVAL_ENV, RulesWatch, load_or_last_good
from .rules import MODES, PriorityClassSpec, Rules, default_rules_path
from .kinds import KINDS

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


_KNOWN_KINDS = frozenset({"Pod", TEMPLATE, CLAIM, *(kind for _, kind in KINDS)})


def _count(review: AdmissionRequest, endpoint: str, verdict: Verdict | None, started: float) -> None:
    if verdict is None:
        outcome, workload, reasons, mode = "allowed", "-", [], None
    else:
        outcome = "denied" if not verdict.allowed else ("warned" if verdict.warnings else "allowed")
        workload = verdict.profile.workload if verdict.profile else "-"
        reasons = [f.code for f in verdict.findings if f.severity == "deny"]
        mode = verdict.mode
    metrics.count_request(endpoint=endpoint, operation=review.operation, kind=review.kind, verdict=outcome,
                          workload=workload, denial_reasons=reasons, mode=mode,
                          seconds=time.perf_counter() - started, kinds=_KNOWN_KINDS)


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


def _priority_classes(rules: Rules) -> list[PriorityClassSpec]:
    return [p.priority_class for p in rules.classes.values() if p.priority_class]


def _tls_status() -> dict[str, Any] | None:
    """The serving certificate in ``AI_ADMISSION_TLS_DIR``: loadable and unexpired (None when not configured)."""
    folder = os.environ.get("AI_ADMISSION_TLS_DIR")
    if not folder:
        return None
    try:
        cert = x509.load_pem_x509_certificate(Path(folder, "tls.crt").read_bytes())
    except (OSError, ValueError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    expires = cert.not_valid_after_utc
    return {"ok": expires > datetime.now(timezone.utc), "notAfter": expires.isoformat()}


def _record_certificate_expiry() -> None:
    """The expiry gauge from the start of each worker: its TLS context is loaded only at its first connection,
    and until then the worker's 0 would be the minimum over workers (and look like an expired certificate)."""
    folder = os.environ.get("AI_ADMISSION_TLS_DIR")
    if folder and Path(folder, "tls.crt").is_file():
        from .tls import record_expiry

        record_expiry(str(Path(folder, "tls.crt")))


def create_app(rules: Rules | None = None, *, watch: PriorityClassWatch | None | bool = True,
               reload: bool = True, nodes: NodeWatch | None | bool = True,
               claims: ClaimWatch | None | bool = True) -> Flask:
    """Build the webhook app around ``rules`` (loaded from the environment's rules file when not given).

    ``watch``: the PriorityClass watch to consult; True starts one when the environment asks for it
    (see `webhook.cluster`), None or False runs without (every class is assumed to exist).
    ``nodes``: the node GPU catalog watch whose facts are merged into the rules (`webhook.catalog`); True starts
    one when the environment asks for it (``AI_ADMISSION_NODE_CATALOG``), None or False: the static catalog.
    ``claims``: the watch of DRA claims and templates (see `webhook.dra_watch`), likewise; without one, GPUs
    taken through claims are not seen on pods (the claims themselves are still judged).
    ``reload``: when the rules come from a file, watch it and take changes without a restart.
    """
    app = Flask("ai_admission")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    path = default_rules_path() if rules is None else None
    file_error: str | None = None
    if path is not None:  # a broken file at start: the last good rules, and the file's error in /readyz
        rules, file_error = load_or_last_good(path)
    state: dict[str, Any] = {"rules": rules}
    # the rules in force: the file's, with the nodes' GPU facts merged in while a node watch runs
    merged = EffectiveRules(state["rules"], lambda new: state.__setitem__("rules", new))
    node_watch = nodes_from_environment(lambda: merged.rules.model_keys, merged.set_discovered) if nodes is True \
        else (nodes or None)
    if node_watch is not None and nodes is not True:
        node_watch.on_change = merged.set_discovered
        merged.set_discovered(node_watch.catalog)
    rules_watch: RulesWatch | None = None
    if path is not None:
        if reload:
            rules_watch = RulesWatch(path, merged.set_rules, interval=float(os.environ.get(INTERVAL_ENV, "2")))
            rules_watch.last_error = file_error
            rules_watch.start()
        # the server's own background work; apps built around given rules (tests) do without
        from .reports import writer_from_environment

        writer_from_environment(lambda: state["rules"])
    metrics.RULES_GENERATION.inc()
    metrics.RULES_LOADED_AT.set(time.time())
    _record_certificate_expiry()
    if watch is True:
        watch = watch_from_environment(lambda: _priority_classes(state["rules"]))
    cluster_watch = watch or None
    if claims is True:
        claims = claim_watch_from_environment()
    claim_watch = claims or None
    claim_index = claim_watch.index if claim_watch else None
    admissions = AdmissionLog()
    cache_size = int(os.environ.get(CACHE_SIZE_ENV, CACHE_SIZE))
    decisions = DecisionCache(cache_size) if cache_size > 0 else None

    def facts() -> ClusterFacts:
        return cluster_watch.facts if cluster_watch else UNKNOWN

    def admit(endpoint: str, path_mode: str | None = None) -> Response:
        started = time.perf_counter()
        try:
            review = _read_review()
        except ReviewError as exc:
            metrics.BAD_REQUESTS.labels(str(exc.status)).inc()
            return _error(exc.status, exc.message)
        try:
            if decisions is None:
                verdict = decide(review, rules=state["rules"], endpoint=endpoint, path_mode=path_mode, facts=facts(),
                                 claims=claim_index)
            else:
                verdict = decisions.decide(review, rules=state["rules"], endpoint=endpoint, path_mode=path_mode,
                                           facts=facts(), decide=decide, claims=claim_index)
            payload = respond(review, verdict)
        except Exception:  # a bug must not kill the worker or block the cluster: admit, say so, log it
            log.exception("internal error reviewing uid %s", review.uid)
            metrics.ERRORS.inc()
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
        """Ready when rules are loaded, the serving certificate is loadable and unexpired, and the server is not
        draining before it stops (see webhook.draining)."""
        current: Rules | None = state.get("rules")
        tls = _tls_status()
        drain = is_draining()
        ready = current is not None and (tls is None or tls["ok"]) and not drain
        detail: dict[str, Any] = {"status": "ready" if ready else ("draining" if drain else "not ready"),
                                  "rules": current.source if current else None,
                                  "compiled": running_compiled()}
        if rules_watch and rules_watch.last_error:
            detail["rulesReloadError"] = rules_watch.last_error
        if tls is not None:
            detail["certificate"] = tls
        if cluster_watch:
            detail["cluster"] = facts().as_dict()
        if node_watch:
            detail["nodeCatalog"] = node_watch.catalog.summary()
        if claim_watch:
            detail["claims"] = claim_watch.status()
        return _json(detail, 200 if ready else 503)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        text = {413: f"request body is larger than {MAX_BODY_BYTES} bytes"}.get(status, exc.description or exc.name)
        return _error(status, text)

    return app
