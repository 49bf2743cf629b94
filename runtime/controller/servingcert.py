"""One webhook serving certificate shared by every controller replica, kept in a Secret.

The controller Deployment runs several replicas; each serves every admission webhook behind one
Service, so they must present certificates the registered ``caBundle`` verifies. The certificate,
its key and the CA bundle live in one Secret (type ``kubernetes.io/tls``; keys ``tls.crt``,
``tls.key``, ``ca.crt``: the layout cert-manager writes, so a cert-manager Certificate can fill the
same Secret instead):

* **issued here** (``manage=True``, the default): the first replica that finds the Secret missing
  creates it (``create`` is atomic: a replica that loses the race reads the winner's); only the
  leader rotates it (an ``update`` guarded by ``resourceVersion``) when the leaf certificate is
  within ``renew`` of its end, its names differ from the Service's, or the CA nears its own end.
  A new CA is added in front of the old one in ``ca.crt`` while the old one is still valid, so
  replicas that still serve the old leaf stay verifiable during the hand-over.
* **issued elsewhere** (``manage=False``, cert-manager mode): the Secret is only read.

Every replica copies the Secret's three keys into ``directory`` (an emptyDir: the root filesystem
is read-only) and, when they change, calls its listeners: the server reloads its TLS context
(:meth:`runtime.webhook.host.WebhookServer.follow`) and the leader re-registers ``caBundle`` from
``ca.crt``.

Validity (``days``, ``renew_days``) are deployment settings given as CLI flags; the CA lives
``CA_LIFETIMES`` leaf lifetimes. Keys are EC P-256, as in the rest of the project.
"""
from __future__ import annotations

import base64
import datetime as _dt
import ipaddress
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from loguru import logger

from runtime.controller.clock import Clock, utc_now
from runtime.kube.session import KubeApiError, Session
from runtime.model.rfc3339 import format_time

CA_KEY, CERT_KEY, KEY_KEY = "ca.crt", "tls.crt", "tls.key"
CA_PRIVATE_KEY = "ca.key"  # kept in the Secret when issued here, so the leader can re-sign leaves
CA_LIFETIMES = 10  # the CA is valid for this many leaf lifetimes
ISSUER_ANNOTATION = "gpustack.ai/serving-certificate-issuer"
ISSUER = "accelpolicy"


def service_names(namespace: str, name: str) -> tuple[str, ...]:
    """The DNS names the API server uses for Service ``namespace/name`` (clientConfig.service)."""
    return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}", name)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(names) -> x509.SubjectAlternativeName:
    entries = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def _new_ca(now: _dt.datetime, days: float):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"accelpolicy webhook CA {now:%Y%m%dT%H%M%SZ}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(hours=1)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         key_cert_sign=True, crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def _new_leaf(ca: x509.Certificate, ca_key, names: tuple[str, ...], now: _dt.datetime, days: float):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(hours=1)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .add_extension(_san(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def issue(names: tuple[str, ...], days: float, now: _dt.datetime | None = None,
          previous: dict[str, bytes] | None = None, renew_days: float = 0.0) -> dict[str, bytes]:
    """A serving certificate for ``names`` valid ``days`` days: the Secret's data (raw bytes).

    The CA of ``previous`` (its ``ca.crt`` first certificate and ``ca.key``) signs the new leaf while
    it stays valid for more than ``days + renew_days``; otherwise a new CA (``CA_LIFETIMES * days``)
    signs it and ``ca.crt`` lists the new CA first, then the previous CA while it is still valid.
    """
    now = now or utc_now()
    old_cas = x509.load_pem_x509_certificates(previous[CA_KEY]) if previous and previous.get(CA_KEY) else []
    ca = ca_key = None
    if previous and previous.get(CA_PRIVATE_KEY) and old_cas:
        if old_cas[0].not_valid_after_utc - now > _dt.timedelta(days=days + renew_days):
            ca, ca_key = old_cas[0], serialization.load_pem_private_key(previous[CA_PRIVATE_KEY], None)
    bundle = [ca] if ca is not None else []
    if ca is None:
        ca, ca_key = _new_ca(now, CA_LIFETIMES * days)
        bundle = [ca] + [c for c in old_cas[:1] if c.not_valid_after_utc > now]
    leaf, key = _new_leaf(ca, ca_key, names, now, days)
    return {CA_KEY: b"".join(_pem(c) for c in bundle), CERT_KEY: _pem(leaf), KEY_KEY: _key_pem(key),
            CA_PRIVATE_KEY: _key_pem(ca_key)}


def rotation_reason(data: dict[str, bytes], names: tuple[str, ...], days: float, renew_days: float,
                    now: _dt.datetime | None = None) -> str | None:
    """Why the Secret data must be re-issued, or None when it is good.

    Reasons (one line): a key missing or unreadable, the leaf not signed by the bundle's first CA,
    names differing from ``names``, the leaf ending within ``renew_days`` days, the CA ending within
    ``days + renew_days`` days.
    """
    now = now or utc_now()
    missing = [k for k in (CA_KEY, CERT_KEY, KEY_KEY, CA_PRIVATE_KEY) if not data.get(k)]
    if missing:
        return f"missing {', '.join(missing)}"
    try:
        cas = x509.load_pem_x509_certificates(data[CA_KEY])
        leaf = x509.load_pem_x509_certificate(data[CERT_KEY])
        serialization.load_pem_private_key(data[KEY_KEY], None)
    except ValueError as exc:
        return f"unreadable PEM ({exc})"
    try:
        leaf.verify_directly_issued_by(cas[0])
    except Exception as exc:  # noqa: BLE001 - InvalidSignature, ValueError, TypeError
        return f"{CERT_KEY} is not signed by the first CA of {CA_KEY} ({type(exc).__name__})"
    try:
        have = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have_names = sorted([str(v) for v in have.get_values_for_type(x509.DNSName)]
                            + [str(v) for v in have.get_values_for_type(x509.IPAddress)])
    except x509.ExtensionNotFound:
        have_names = []
    if have_names != sorted(names):
        return f"names {have_names} differ from {sorted(names)}"
    if leaf.not_valid_after_utc - now <= _dt.timedelta(days=renew_days):
        return f"{CERT_KEY} ends {format_time(leaf.not_valid_after_utc)}, within {renew_days:g} days"
    if cas[0].not_valid_after_utc - now <= _dt.timedelta(days=days + renew_days):
        return f"the CA ends {format_time(cas[0].not_valid_after_utc)}, within {days + renew_days:g} days"
    return None


def write_files(directory: Path, data: dict[str, bytes]) -> dict[str, Path]:
    """Write ``ca.crt``, ``tls.crt``, ``tls.key`` into ``directory`` (each replaced atomically; the
    key 0600). Returns the paths by key. ``ca.key`` is never written to disk."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key in (CA_KEY, CERT_KEY, KEY_KEY):
        path = directory / key
        tmp = directory / f".{key}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if key == KEY_KEY else 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data[key])
        os.replace(tmp, path)
        paths[key] = path
    return paths


@dataclass
class ServingCertificate:
    """The shared serving certificate in Secret ``namespace/name`` (see the module docstring).

    Use: ``ensure()`` once before serving (creates the Secret when ``manage`` and missing, waits up
    to ``wait_seconds`` for it otherwise; writes the files); ``start(stop)`` polls every
    ``check_seconds``; ``leading.set()`` once this replica leads (rotation is the leader's job).
    Listeners ``on_change(data)`` run after the files changed. Raises :class:`KubeApiError` for
    API failures and ``TimeoutError`` when the Secret never appears.
    """

    session: Session
    namespace: str
    name: str
    names: tuple[str, ...]
    directory: Path
    manage: bool = True
    days: float = 90.0
    renew_days: float = 30.0
    check_seconds: float = 60.0
    leading: threading.Event = field(default_factory=threading.Event)
    listeners: list[Callable[[dict[str, bytes]], None]] = field(default_factory=list)
    on_leading: list[Callable[[], None]] = field(default_factory=list)   # run once this replica leads
    data: dict[str, bytes] = field(default_factory=dict)
    rotations: int = 0
    clock: Clock = utc_now  # the wall clock validity is judged and certificates are issued by

    def __post_init__(self):
        self.directory = Path(self.directory)
        self._path = self.session.ref("Secret").path(namespace=self.namespace, name=self.name)
        self._collection = self.session.ref("Secret").path(namespace=self.namespace)

    @property
    def paths(self) -> dict[str, Path]:
        """Where the files are: ``ca.crt``, ``tls.crt``, ``tls.key`` under ``directory``."""
        return {k: self.directory / k for k in (CA_KEY, CERT_KEY, KEY_KEY)}

    def _read(self) -> dict | None:
        try:
            return self.session.call("get", self._path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    @staticmethod
    def _decode(secret: dict) -> dict[str, bytes]:
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def _body(self, data: dict[str, bytes], resource_version: str | None = None) -> dict:
        meta = {"name": self.name, "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "accelpolicy",
                           "app.kubernetes.io/component": "webhook-tls"},
                "annotations": {ISSUER_ANNOTATION: ISSUER}}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta,
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}

    def _create(self) -> dict:
        try:
            created = self.session.call("post", self._collection,
                                        body=self._body(issue(self.names, self.days, self.clock())))
            logger.info("serving certificate: created Secret {}/{}", self.namespace, self.name)
            return created
        except KubeApiError as exc:
            if exc.status == 409 and exc.reason == "AlreadyExists":  # another replica won the race
                return self._read()
            raise

    def ensure(self, wait_seconds: float = 300.0, stop: threading.Event | None = None) -> dict[str, bytes]:
        """The Secret's data once usable (see the class docstring); files written."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + wait_seconds
        while True:
            secret = self._read()
            if secret is None and self.manage:
                secret = self._create()
            if secret is not None and all(self._decode(secret).get(k) for k in (CA_KEY, CERT_KEY, KEY_KEY)):
                self._take(self._decode(secret))
                return self.data
            if time.monotonic() >= deadline or stop.wait(1.0):
                raise TimeoutError(f"Secret {self.namespace}/{self.name} with {CA_KEY}, {CERT_KEY} and "
                                   f"{KEY_KEY} did not appear within {wait_seconds:g}s")

    def _take(self, data: dict[str, bytes]) -> bool:
        served = {k: data[k] for k in (CA_KEY, CERT_KEY, KEY_KEY)}
        if {k: self.data.get(k) for k in served} == served:
            return False
        write_files(self.directory, served)
        self.data = dict(data)
        for listener in list(self.listeners):
            listener(self.data)
        return True

    def check(self) -> str | None:
        """One pass: re-read the Secret (recreate it when ``manage`` and gone), rotate it when this
        replica leads and :func:`rotation_reason` says so, take changes. Returns what it did."""
        secret = self._read()
        if secret is None:
            if not self.manage:
                return None
            secret = self._create()
        data = self._decode(secret)
        did = None
        if self.manage and self.leading.is_set():
            reason = rotation_reason(data, self.names, self.days, self.renew_days, self.clock())
            if reason:
                new = issue(self.names, self.days, self.clock(), previous=data, renew_days=self.renew_days)
                try:
                    secret = self.session.call("put", self._path,
                                               body=self._body(new, secret["metadata"]["resourceVersion"]))
                except KubeApiError as exc:
                    if exc.status != 409:
                        raise
                    return None  # changed meanwhile: the next pass looks again
                self.rotations += 1
                data, did = self._decode(secret), f"rotated ({reason})"
                logger.info("serving certificate {}/{}: {}", self.namespace, self.name, did)
        if self._take(data):
            did = did or "reloaded"
        return did

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run :meth:`check` every ``check_seconds`` in a daemon thread until ``stop``; failures are
        logged and retried on the next pass."""
        def loop() -> None:
            while not stop.wait(self.check_seconds):
                try:
                    self.check()
                except Exception as exc:  # noqa: BLE001 - keep serving the current certificate
                    logger.warning("serving certificate {}/{}: {}", self.namespace, self.name, exc)
        thread = threading.Thread(target=loop, name="serving-certificate", daemon=True)
        thread.start()
        return thread
