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
from cryptography.exceptions import InvalidSignature
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


RENEW_BEFORE_DAYS = 30


def serving_names(service: str, namespace: str, extra: Iterable[str] = ()) -> list[str]:
    """The names the API server may use to reach ``service`` in ``namespace``, then any extra ones."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local", *extra]


def names_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.DNSName), *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))]


def needs_renewal(cert: x509.Certificate, *, names: Iterable[str], ca: x509.Certificate,
                  renew_before: dt.timedelta = dt.timedelta(days=RENEW_BEFORE_DAYS)) -> str | None:
    """Why ``cert`` must be replaced (expiring within ``renew_before``, other names, other CA), or None."""
    if cert.not_valid_after_utc - renew_before <= _now():
        return f"expires {cert.not_valid_after_utc:%Y-%m-%d}, within the renewal window"
    missing = set(names) - set(names_of(cert))
    if missing:
        return f"lacks names {', '.join(sorted(missing))}"
    try:
        cert.verify_directly_issued_by(ca)  # by signature: every CA made here has the same subject name
    except (ValueError, TypeError, InvalidSignature):
        return "was not issued by the current CA"
    return None


@dataclass(frozen=True)
class Issued:
    """What `issue` decided: the CA and serving pair to use, and whether each was made anew."""

    ca: KeyPair
    serving: KeyPair
    new_ca: bool
    renewed: str | None  # why the serving certificate was (re)made, or None when the old one was kept


def issue(*, names: list[str], ca: KeyPair | None, serving: KeyPair | None, days: int = SERVING_DAYS,
          renew_before: dt.timedelta = dt.timedelta(days=RENEW_BEFORE_DAYS)) -> Issued:
    """Reuse a still-valid CA and serving pair; make what is missing, expiring or wrong."""
    new_ca = ca is None or not still_valid(ca.certificate, margin=renew_before)
    if new_ca:
        ca = create_ca()
    assert ca is not None
    reason = "no serving certificate" if serving is None else needs_renewal(
        serving.certificate, names=names, ca=ca.certificate, renew_before=renew_before)
    if reason is not None or serving is None:
        serving = create_serving(ca, names, days=days)
    return Issued(ca=ca, serving=serving, new_ca=new_ca, renewed=reason)


def _load_optional(cert_path: Path, key_path: Path) -> KeyPair | None:
    if not (cert_path.is_file() and key_path.is_file()):
        return None
    try:
        return load_pair(cert_path, key_path)
    except (ValueError, OSError):
        return None


def issue_to_files(directory: str | os.PathLike[str], *, names: list[str], days: int = SERVING_DAYS,
                   renew_before: dt.timedelta = dt.timedelta(days=RENEW_BEFORE_DAYS)) -> Issued:
    """`issue` against ``ca.crt``/``ca.key``/``tls.crt``/``tls.key`` in ``directory``, writing what changed."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    issued = issue(names=names, ca=_load_optional(folder / "ca.crt", folder / "ca.key"),
                   serving=_load_optional(folder / "tls.crt", folder / "tls.key"), days=days, renew_before=renew_before)
    if issued.new_ca:
        _write(folder / "ca.key", issued.ca.key_pem(), 0o600)
        _write(folder / "ca.crt", issued.ca.cert_pem(), 0o644)
    if issued.renewed:
        # key first: a reader that sees the new certificate must never pair it with the old key for long
        _write(folder / "tls.key", issued.serving.key_pem(), 0o600)
        _write(folder / "tls.crt", issued.serving.cert_pem(), 0o644)
    return issued


def ensure_dev_certs(directory: str | os.PathLike[str], names: Iterable[str] = DEV_SANS) -> Path:
    """Make ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` in ``directory`` unless valid ones are there."""
    issue_to_files(directory, names=list(names), renew_before=dt.timedelta(days=1))
    return Path(directory)
