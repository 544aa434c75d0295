"""Readiness as named checks (as controller-runtime's ``healthz.Checks``): each says whether it holds and, when
it does not, why. ``/readyz`` answers 200 only when every check holds; the background services' state is shown
beside them (a watch that is down does not make the worker unready: it serves with what it knew).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from cryptography import x509

from webhook.compiled import running_compiled
from webhook.config.settings import Settings

from .draining import is_draining
from .services import Services


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    reason: str | None = None


def certificate_status(tls_dir: str | None) -> dict[str, Any] | None:
    """The serving certificate in ``tls_dir``: loadable and unexpired (None when no directory is configured)."""
    if not tls_dir:
        return None
    try:
        cert = x509.load_pem_x509_certificate(Path(tls_dir, "tls.crt").read_bytes())
    except (OSError, ValueError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    expires = cert.not_valid_after_utc
    return {"ok": expires > datetime.now(timezone.utc), "notAfter": expires.isoformat()}


def _rules(services: Services, settings: Settings) -> Check:
    loaded = services.rules is not None
    return Check("rules", loaded, None if loaded else "no rules loaded")


def _certificate(services: Services, settings: Settings) -> Check:
    status = certificate_status(settings.tls_dir)
    if status is None or status["ok"]:
        return Check("certificate", True)
    return Check("certificate", False, status.get("error") or f"expired at {status.get('notAfter')}")


def _not_draining(services: Services, settings: Settings) -> Check:
    draining = is_draining(settings.drain_flag)
    return Check("notDraining", not draining, "the server is draining before it stops" if draining else None)


CHECKS: tuple[Callable[[Services, Settings], Check], ...] = (_rules, _certificate, _not_draining)


def readiness(services: Services, settings: Settings) -> tuple[bool, dict[str, Any]]:
    """Whether the worker is ready, and what `/readyz` shows."""
    checks = [check(services, settings) for check in CHECKS]
    ready = all(c.ok for c in checks)
    draining = not next(c for c in checks if c.name == "notDraining").ok
    rules = services.rules
    detail: dict[str, Any] = {"status": "ready" if ready else ("draining" if draining else "not ready"),
                              "rules": rules.source if rules else None, "compiled": running_compiled(),
                              "checks": {c.name: {"ok": c.ok, **({"reason": c.reason} if c.reason else {})}
                                         for c in checks}}
    if services.rules_watch and services.rules_watch.last_error:
        detail["rulesReloadError"] = services.rules_watch.last_error
    certificate = certificate_status(settings.tls_dir)
    if certificate is not None:
        detail["certificate"] = certificate
    if services.priority_class_watch:
        detail["cluster"] = services.priority_classes.as_dict()
    if services.node_watch:
        detail["nodeCatalog"] = services.node_watch.summary()
    if services.claim_watch:
        detail["claims"] = services.claim_watch.status()
    if services.queue_watch:
        detail["queues"] = services.queue_watch.status()
    if services.pod_group_watch:
        detail["podGroups"] = services.pod_group_watch.summary()
    return ready, detail
