"""Certificates: chain, names and usages, renewal, Secrets and caBundle, and a live rotation under requests."""

from __future__ import annotations

import base64
import datetime as dt
import os
import subprocess
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import create_ca, create_serving, issue, issue_to_files, names_of, needs_renewal, serving_names
from tests.support.builders import CLI
from tests.support.kubeapi import FakeKubeAPI

NAMES = serving_names("ai-admission", "ai-admission", ["webhook.example.com", "10.0.0.7"])


def test_chain_names_and_usages() -> None:
    ca = create_ca()
    serving = create_serving(ca, NAMES)
    serving.certificate.verify_directly_issued_by(ca.certificate)
    assert isinstance(serving.key, ec.EllipticCurvePrivateKey) and serving.key.curve.name == "secp256r1"
    assert names_of(serving.certificate) == ["ai-admission", "ai-admission.ai-admission", "ai-admission.ai-admission.svc",
                                             "ai-admission.ai-admission.svc.cluster.local", "webhook.example.com",
                                             "10.0.0.7"]
    usage = serving.certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    eku = serving.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert serving.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_renewal_reasons() -> None:
    ca = create_ca()
    window = dt.timedelta(days=30)
    assert needs_renewal(create_serving(ca, NAMES, days=365).certificate, names=NAMES, ca=ca.certificate,
                         renew_before=window) is None
    expiring = create_serving(ca, NAMES, days=10).certificate
    assert "within the renewal window" in needs_renewal(expiring, names=NAMES, ca=ca.certificate, renew_before=window)
    narrow = create_serving(ca, NAMES[:2], days=365).certificate
    assert "lacks names" in needs_renewal(narrow, names=NAMES, ca=ca.certificate, renew_before=window)
    foreign = create_serving(create_ca(), NAMES, days=365).certificate
    assert "not issued by the current CA" in needs_renewal(foreign, names=NAMES, ca=ca.certificate, renew_before=window)


def test_issue_reuses_a_valid_ca_and_renews_only_when_needed(tmp_path: Path) -> None:
    first = issue_to_files(tmp_path, names=NAMES)
    assert first.new_ca and first.renewed == "no serving certificate"
    again = issue_to_files(tmp_path, names=NAMES)
    assert not again.new_ca and again.renewed is None
    assert again.serving.certificate.serial_number == first.serving.certificate.serial_number
    forced = issue_to_files(tmp_path, names=NAMES, renew_before=dt.timedelta(days=400))
    assert not forced.new_ca and "renewal window" in (forced.renewed or "")
    assert forced.ca.certificate.serial_number == first.ca.certificate.serial_number
    assert forced.serving.certificate.serial_number != first.serving.certificate.serial_number
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_expired_ca_is_replaced() -> None:
    old_ca = create_ca(days=1)
    issued = issue(names=NAMES, ca=old_ca, serving=create_serving(old_ca, NAMES))
    assert issued.new_ca and issued.renewed == "was not issued by the current CA"


def test_secret_and_ca_bundle_through_the_kubernetes_client(tmp_path: Path) -> None:
    with FakeKubeAPI() as api:
        webhook = {"apiVersion": "admissionregistration.k8s.io/v1", "metadata": {"name": "ai-admission"},
                   "webhooks": [{"name": f"{n}.ai-admission.io", "clientConfig": {"service": {"name": "ai-admission",
                                 "namespace": "ai-admission", "path": f"/{n}"}}, "sideEffects": "None",
                                 "admissionReviewVersions": ["v1"]} for n in ("validate", "validate-warn")]}
        api.add("validatingwebhookconfigurations", webhook)
        env = {**os.environ, "KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig"))}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        create = [CLI, "certs", "create", "--secret", "ai-admission-tls", "--namespace", "ai-admission"]
        first = subprocess.run(create, env=env, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        assert "serving certificate made (no serving certificate)" in first.stdout
        secret = api.objects[("secrets", "ai-admission", "ai-admission-tls")]
        assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
        ca_secret = api.objects[("secrets", "ai-admission", "ai-admission-tls-ca")]
        assert set(ca_secret["data"]) == {"ca.crt", "ca.key"}
        second = subprocess.run(create, env=env, capture_output=True, text=True, timeout=60)
        assert "still valid, kept" in second.stdout
        assert api.objects[("secrets", "ai-admission", "ai-admission-tls")] == secret

        patch = [CLI, "certs", "patch", "--validating", "ai-admission", "--secret", "ai-admission-tls",
                 "--namespace", "ai-admission"]
        done = subprocess.run(patch, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        patched = api.objects[("validatingwebhookconfigurations", "", "ai-admission")]
        bundles = {w["clientConfig"]["caBundle"] for w in patched["webhooks"]}
        assert bundles == {secret["data"]["ca.crt"]}
        cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(base64.b64decode(bundles.pop())))
        again = subprocess.run(patch, env=env, capture_output=True, text=True, timeout=60)
        assert "already current" in again.stdout
