"""The shared webhook serving certificate (runtime/controller/servingcert.py): issuing, the rotation
reasons, the files, and a running HTTPS server switching to a rotated certificate."""
from __future__ import annotations

import datetime as dt
import socket
import ssl

import pytest
from cryptography import x509

from runtime.controller.servingcert import (CA_KEY, CA_PRIVATE_KEY, CERT_KEY, KEY_KEY, issue,
                                            rotation_reason, service_names, write_files)
from runtime.webhook.server import ServerThread

NAMES = service_names("gpustack-system", "gpustack-operator-worker")
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def _leaf(data):
    return x509.load_pem_x509_certificate(data[CERT_KEY])


def _cas(data):
    return x509.load_pem_x509_certificates(data[CA_KEY])


def test_service_names_are_the_ones_the_api_server_dials():
    assert NAMES == ("gpustack-operator-worker.gpustack-system.svc",
                     "gpustack-operator-worker.gpustack-system.svc.cluster.local",
                     "gpustack-operator-worker.gpustack-system", "gpustack-operator-worker")


def test_issue_signs_a_leaf_for_the_names_with_a_ten_times_longer_ca():
    data = issue(NAMES, days=90, now=NOW)
    assert set(data) == {CA_KEY, CERT_KEY, KEY_KEY, CA_PRIVATE_KEY}
    leaf, cas = _leaf(data), _cas(data)
    assert len(cas) == 1
    leaf.verify_directly_issued_by(cas[0])
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == list(NAMES)
    assert leaf.not_valid_after_utc == NOW + dt.timedelta(days=90)
    assert cas[0].not_valid_after_utc == NOW + dt.timedelta(days=900)
    assert rotation_reason(data, NAMES, 90, 30, now=NOW) is None


def test_rotation_reasons_name_what_is_wrong():
    data = issue(NAMES, days=90, now=NOW)
    assert rotation_reason(data, NAMES, 90, 30, now=NOW + dt.timedelta(days=59)) is None
    assert rotation_reason(data, NAMES, 90, 30, now=NOW + dt.timedelta(days=60)) == \
        "tls.crt ends 2027-03-01T00:00:00Z, within 30 days"
    assert rotation_reason(data, NAMES[:2], 90, 30, now=NOW) == \
        f"names {sorted(NAMES)} differ from {sorted(NAMES[:2])}"
    assert rotation_reason({k: v for k, v in data.items() if k != CA_PRIVATE_KEY}, NAMES, 90, 30, now=NOW) == \
        "missing ca.key"
    other = issue(NAMES, days=90, now=NOW)
    assert rotation_reason({**data, CA_KEY: other[CA_KEY]}, NAMES, 90, 30, now=NOW) == \
        "tls.crt is not signed by the first CA of ca.crt (InvalidSignature)"
    assert rotation_reason({**data, CERT_KEY: b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
                           NAMES, 90, 30, now=NOW).startswith("unreadable PEM")


def test_a_renewed_leaf_keeps_the_ca_until_the_ca_nears_its_end():
    first = issue(NAMES, days=90, now=NOW)
    later = NOW + dt.timedelta(days=61)
    second = issue(NAMES, days=90, now=later, previous=first, renew_days=30)
    assert second[CA_KEY] == first[CA_KEY] and second[CA_PRIVATE_KEY] == first[CA_PRIVATE_KEY]
    assert _leaf(second).serial_number != _leaf(first).serial_number
    _leaf(second).verify_directly_issued_by(_cas(first)[0])
    # 900-day CA: 120 days (90 + 30) before its end a new CA signs, the old one stays in the bundle
    recent = issue(NAMES, days=90, now=NOW + dt.timedelta(days=779), previous=second, renew_days=30)
    assert recent[CA_KEY] == first[CA_KEY]
    late = NOW + dt.timedelta(days=781)
    assert rotation_reason(recent, NAMES, 90, 30, now=late) == \
        "the CA ends 2029-05-19T00:00:00Z, within 120 days"
    third = issue(NAMES, days=90, now=late, previous=recent, renew_days=30)
    cas = _cas(third)
    assert len(cas) == 2 and cas[1] == _cas(first)[0] and cas[0] != cas[1]
    _leaf(third).verify_directly_issued_by(cas[0])
    assert rotation_reason(third, NAMES, 90, 30, now=late) is None
    # once the old CA has ended it leaves the bundle at the next CA change
    fourth = issue(NAMES, days=90, now=late + dt.timedelta(days=900), previous=third, renew_days=30)
    assert len(_cas(fourth)) == 1


def test_write_files_keeps_the_key_private_and_never_writes_the_ca_key(tmp_path):
    data = issue(NAMES, days=90, now=NOW)
    paths = write_files(tmp_path / "tls", data)
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert paths[KEY_KEY].stat().st_mode & 0o777 == 0o600
    assert paths[CERT_KEY].read_bytes() == data[CERT_KEY]


def _peer_serial(port: int, ca_pem: bytes) -> int:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_a_running_server_presents_the_reloaded_certificate(tmp_path):
    async def app(scope, receive, send):  # pragma: no cover - never called: only the handshake matters
        raise AssertionError

    names = ("127.0.0.1", "localhost")
    first = issue(names, days=90)
    paths = write_files(tmp_path, first)
    server = ServerThread(app, str(paths[CERT_KEY]), str(paths[KEY_KEY])).start()
    try:
        assert _peer_serial(server.port, first[CA_KEY]) == _leaf(first).serial_number
        second = issue(names, days=90)  # a new CA too: the client trusts only the new bundle
        write_files(tmp_path, second)
        server.reload_tls(paths[CERT_KEY], paths[KEY_KEY])
        assert _peer_serial(server.port, second[CA_KEY]) == _leaf(second).serial_number
        with pytest.raises(ssl.SSLCertVerificationError):
            _peer_serial(server.port, first[CA_KEY])
    finally:
        server.stop()


def _controller(*args):
    from click.testing import CliRunner

    from runtime.cli import main
    return CliRunner().invoke(main, ["controller", *args])


def test_the_secret_flags_are_checked_before_connecting(tmp_path):
    result = _controller("--webhook-cert-secret", "tls")
    assert result.exit_code == 2 and "error: --webhook-cert-secret need --webhook-port" in result.output
    result = _controller("--webhook-port", "0", "--webhook-cert-secret", "tls")
    assert result.exit_code == 2
    assert "error: --webhook-cert-secret needs --webhook-cert-dir DIR (where its files are written)" in result.output
    result = _controller("--webhook-port", "0", "--webhook-cert-dir", str(tmp_path))
    assert result.exit_code == 2 and "error: --webhook-cert-dir needs --webhook-cert-secret" in result.output
    result = _controller("--webhook-port", "0", "--webhook-cert-secret", "tls", "--webhook-cert-dir", str(tmp_path),
                         "--webhook-self-signed", str(tmp_path / "ss"))
    assert result.exit_code == 2
    assert ("error: give one of --webhook-cert and --webhook-key and --webhook-ca, --webhook-cert-secret NAME "
            "with --webhook-cert-dir DIR, or --webhook-self-signed DIR (got --webhook-self-signed, "
            "--webhook-cert-secret)") in result.output
