"""Operations: metrics over all workers, readiness, rules hot reload and a soak with reload and rotation."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from certs import issue_to_files
from webhook.server.readiness import certificate_status


def expired_certificate() -> x509.Certificate:
    """A self-signed certificate that expired yesterday."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=2))
            .not_valid_after(now - dt.timedelta(days=1)).sign(key, hashes.SHA256()))


def test_readiness_needs_an_unexpired_certificate(tmp_path: Path) -> None:
    def _tls_status() -> dict[str, Any] | None:
        return certificate_status(str(tmp_path))

    assert _tls_status() == {"ok": False, "error": f"FileNotFoundError: [Errno 2] No such file or directory: "
                                                   f"'{tmp_path / 'tls.crt'}'"}
    (tmp_path / "tls.crt").write_text("not a certificate")
    status = _tls_status()
    assert status is not None and status["ok"] is False and status["error"].startswith("ValueError: ")
    expired = expired_certificate()
    (tmp_path / "tls.crt").write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    assert _tls_status() == {"ok": False, "notAfter": expired.not_valid_after_utc.isoformat()}
    (tmp_path / "tls.crt").unlink()
    issue_to_files(tmp_path, names=["localhost"], days=30)
    status = _tls_status()
    assert status is not None and status["ok"] is True
    assert dt.datetime.fromisoformat(status["notAfter"]) > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=29)


def test_an_unreadable_certificate_is_logged_not_recorded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from webhook.server import metrics, tls

    before = metrics.instruments().cert_expiry._value.get()
    (tmp_path / "tls.crt").write_text("rotated half-way")
    with caplog.at_level("WARNING", logger="ai_admission"):
        tls.record_expiry(str(tmp_path / "tls.crt"))
    (record,) = [json.loads(r.getMessage()) for r in caplog.records]
    assert record["msg"] == "certificate expiry not recorded" and record["file"] == str(tmp_path / "tls.crt")
    assert record["error"].startswith("ValueError: ")
    assert metrics.instruments().cert_expiry._value.get() == before
