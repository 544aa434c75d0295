"""Certificate tooling: a CA and serving certificates for the webhook, made with `cryptography`.

ECDSA P-256 keys: small, fast handshakes (the API server opens TLS connections to the webhook), and accepted by
every Kubernetes version. The development certificates of ``make serve`` come from the same functions that
``ai-admission certs`` uses for a cluster, so what is tested locally is what runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVING_DAYS = 365
DEV_SANS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class KeyPair:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def create_ca(common_name: str = "ai-admission CA", days: int = CA_DAYS) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def create_serving(ca: KeyPair, names: Iterable[str], days: int = SERVING_DAYS) -> KeyPair:
    """A TLS server certificate for ``names`` (DNS names or IP addresses), signed by ``ca``."""
    names = list(names)
    if not names:
        raise ValueError("a serving certificate needs at least one name")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.certificate.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write atomically (a server reading the file never sees half of it) with ``mode`` permissions."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def load_pair(cert_path: Path, key_path: Path) -> KeyPair:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: expected an ECDSA key")
    return KeyPair(cert, key)


def still_valid(cert: x509.Certificate, *, margin: dt.timedelta = dt.timedelta(days=1)) -> bool:
    return cert.not_valid_after_utc - margin > _now()


def ensure_dev_certs(directory: str | os.PathLike[str], names: Iterable[str] = DEV_SANS) -> Path:
    """Make ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` in ``directory`` unless valid ones are there."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key, tls_crt, tls_key = (folder / n for n in ("ca.crt", "ca.key", "tls.crt", "tls.key"))
    ca: KeyPair | None = None
    if ca_crt.is_file() and ca_key.is_file():
        try:
            ca = load_pair(ca_crt, ca_key)
            if not still_valid(ca.certificate, margin=dt.timedelta(days=30)):
                ca = None
        except (ValueError, OSError):
            ca = None
    serving_ok = False
    if ca is not None and tls_crt.is_file() and tls_key.is_file():
        try:
            serving = load_pair(tls_crt, tls_key)
            serving_ok = still_valid(serving.certificate) and serving.certificate.issuer == ca.certificate.subject
        except (ValueError, OSError):
            serving_ok = False
    if ca is None:
        ca = create_ca("ai-admission development CA")
        _write(ca_key, ca.key_pem(), 0o600)
        _write(ca_crt, ca.cert_pem(), 0o644)
    if not serving_ok:
        serving = create_serving(ca, names)
        _write(tls_key, serving.key_pem(), 0o600)
        _write(tls_crt, serving.cert_pem(), 0o644)
    return folder
