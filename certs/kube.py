"""Certificates in a cluster: the serving Secret (and its CA's own Secret), and caBundle injection.

Uses the official kubernetes client's typed APIs over the one client (`webhook.cluster.client.client`: in-cluster
config first, then the kubeconfig), passed in as ``api``. Nothing here runs on the request path: these are
one-shot commands (the cert Job and its renewal CronJob).
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, Iterable

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from . import RENEW_BEFORE_DAYS, SERVING_DAYS, Issued, KeyPair, issue


def _pair(data: dict[str, str] | None, cert_key: str, key_key: str) -> KeyPair | None:
    if not data or cert_key not in data or key_key not in data:
        return None
    try:
        cert = x509.load_pem_x509_certificate(base64.b64decode(data[cert_key]))
        key = serialization.load_pem_private_key(base64.b64decode(data[key_key]), password=None)
    except ValueError:
        return None
    return KeyPair(cert, key)  # type: ignore[arg-type]


def _read_secret(core: Any, name: str, namespace: str) -> Any | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write_secret(core: Any, existing: Any | None, *, name: str, namespace: str, secret_type: str,
                  data: dict[str, bytes]) -> None:
    from kubernetes import client

    metadata = client.V1ObjectMeta(name=name, namespace=namespace, labels={"app.kubernetes.io/name": "ai-admission"})
    body = client.V1Secret(api_version="v1", kind="Secret", type=secret_type, metadata=metadata,
                           data={k: _b64(v) for k, v in data.items()})
    if existing is None:
        core.create_namespaced_secret(namespace, body)
    else:
        metadata.resource_version = existing.metadata.resource_version
        core.replace_namespaced_secret(name, namespace, body)


def issue_to_secret(api: Any, *, secret: str, namespace: str, names: list[str], days: int = SERVING_DAYS,
                    renew_before: dt.timedelta = dt.timedelta(days=RENEW_BEFORE_DAYS)) -> Issued:
    """Keep ``secret`` (type kubernetes.io/tls: tls.crt, tls.key, ca.crt) valid; the CA lives in ``<secret>-ca``.

    The CA key is kept apart from the serving Secret, so the webhook pods that mount the serving Secret never
    hold the key that could sign certificates.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    ca_secret = _read_secret(core, f"{secret}-ca", namespace)
    serving_secret = _read_secret(core, secret, namespace)
    issued = issue(names=names, ca=_pair(ca_secret.data if ca_secret else None, "ca.crt", "ca.key"),
                   serving=_pair(serving_secret.data if serving_secret else None, "tls.crt", "tls.key"),
                   days=days, renew_before=renew_before)
    if issued.new_ca:
        _write_secret(core, ca_secret, name=f"{secret}-ca", namespace=namespace, secret_type="Opaque",
                      data={"ca.crt": issued.ca.cert_pem(), "ca.key": issued.ca.key_pem()})
    if issued.renewed or issued.new_ca:
        _write_secret(core, serving_secret, name=secret, namespace=namespace, secret_type="kubernetes.io/tls",
                      data={"tls.crt": issued.serving.cert_pem(), "tls.key": issued.serving.key_pem(),
                            "ca.crt": issued.ca.cert_pem()})
    return issued


def read_ca_bundle(api: Any, *, secret: str, namespace: str) -> bytes:
    from kubernetes import client

    found = _read_secret(client.CoreV1Api(api), secret, namespace)
    if found is None or "ca.crt" not in (found.data or {}):
        raise LookupError(f"secret {namespace}/{secret} has no ca.crt")
    return base64.b64decode(found.data["ca.crt"])


def patch_ca_bundle(api: Any, *, ca_bundle: bytes, mutating: Iterable[str] = (), validating: Iterable[str] = ()
                    ) -> list[str]:
    """Write ``ca_bundle`` into every webhook entry of the named configurations; returns what changed."""
    from kubernetes import client

    admission = client.AdmissionregistrationV1Api(api)
    encoded = _b64(ca_bundle)
    changed = []
    for names, read, patch, kind in (
        (mutating, admission.read_mutating_webhook_configuration, admission.patch_mutating_webhook_configuration,
         "MutatingWebhookConfiguration"),
        (validating, admission.read_validating_webhook_configuration,
         admission.patch_validating_webhook_configuration, "ValidatingWebhookConfiguration"),
    ):
        for name in names:
            current = read(name)
            webhooks = current.webhooks or []
            if all((w.client_config.ca_bundle or "") == encoded for w in webhooks):
                continue
            ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded}
                   for i in range(len(webhooks))]
            patch(name, ops)
            changed.append(f"{kind}/{name}")
    return changed
