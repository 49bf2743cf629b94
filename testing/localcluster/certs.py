"""Throw-away PKI for the local control plane (``cryptography``).

Everything is written as PEM files into one directory: a CA (certificate and key), the API server's serving certificate
(for 127.0.0.1 / localhost / the in-cluster service names), an admin client certificate
(``CN=accelpolicy-admin, O=system:masters``, so RBAC lets it do everything) and the RSA key pair
that signs and verifies service-account tokens. Keys are EC P-256 except the service-account key
(RSA 2048, which kube-apiserver accepts for RS256 tokens). Validity: 1 day back-dated by 1 hour.
:func:`issue_serving_cert` signs further serving certificates with the same CA (e.g. for Kueue's
webhook server on 127.0.0.1, whose ``caBundle`` is then :attr:`Pki.ca_cert`).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PEM files."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path
    ca_key: Path | None = None


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _leaf(ca: x509.Certificate, ca_key, subject: x509.Name, usage, sans, start, end):
    key = ec.generate_private_key(ec.SECP256R1())
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(start).not_valid_after(end)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                        critical=False))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


def issue_serving_cert(pki: Pki, cert_path: Path, key_path: Path, *, common_name: str,
                       ips: tuple[str, ...] = ("127.0.0.1",), dns_names: tuple[str, ...] = ("localhost",),
                       days: int = 1) -> None:
    """Sign a TLS serving certificate with ``pki``'s CA and write it (PEM) to ``cert_path``/``key_path``.

    The certificate names ``common_name`` and has the IP and DNS subject alternative names given
    (default 127.0.0.1 and localhost); EC P-256 key, valid ``days`` days back-dated by 1 hour.
    Raises ``ValueError`` when ``pki`` has no CA key (a :class:`Pki` not made by :func:`generate_pki`).
    """
    if pki.ca_key is None:
        raise ValueError("the PKI has no CA key; it must come from generate_pki()")
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    now = _dt.datetime.now(_dt.timezone.utc)
    sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName(d) for d in dns_names]
    cert, key = _leaf(ca, ca_key, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, sans,
                      now - _dt.timedelta(hours=1), now + _dt.timedelta(days=days))
    Path(cert_path).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(Path(key_path), key)


def generate_pki(directory: Path, *, days: int = 1) -> Pki:
    """Create the CA, serving, admin and service-account key material in ``directory``.

    ``directory`` must exist. Returns a :class:`Pki` of absolute paths. ``days`` is the validity of
    every certificate (default 1).
    """
    directory = Path(directory).resolve()
    now = _dt.datetime.now(_dt.timezone.utc)
    start, end = now - _dt.timedelta(hours=1), now + _dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("accelpolicy-local-ca")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(subject: x509.Name, usage, sans=None):
        return _leaf(ca, ca_key, subject, usage, sans, start, end)

    serving, serving_key = leaf(_name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ])
    admin, admin_key = leaf(_name("accelpolicy-admin", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(ca_cert=directory / "ca.crt", serving_cert=directory / "apiserver.crt",
              serving_key=directory / "apiserver.key", admin_cert=directory / "admin.crt",
              admin_key=directory / "admin.key", sa_public_key=directory / "sa.pub",
              sa_private_key=directory / "sa.key", ca_key=directory / "ca.key")
    pem = serialization.Encoding.PEM
    pki.ca_cert.write_bytes(ca.public_bytes(pem))
    _write_key(pki.ca_key, ca_key)
    pki.serving_cert.write_bytes(serving.public_bytes(pem))
    _write_key(pki.serving_key, serving_key)
    pki.admin_cert.write_bytes(admin.public_bytes(pem))
    _write_key(pki.admin_key, admin_key)
    _write_key(pki.sa_private_key, sa_key)
    pki.sa_public_key.write_bytes(sa_key.public_key().public_bytes(
        pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki
