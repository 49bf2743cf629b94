"""`accelpolicy controller` error paths that need no API server."""
from __future__ import annotations

from click.testing import CliRunner

from runtime.cli import main

DEAD = """apiVersion: v1
kind: Config
clusters:
- cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
  name: dead
contexts:
- context: {cluster: dead, user: u}
  name: dead
current-context: dead
users:
- name: u
  user: {token: x}
"""


def test_unreachable_server_is_one_line_and_exit_1(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(DEAD)
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", str(kubeconfig), "--once"])
    assert result.exit_code == 1
    assert ("error: the connection to the server https://127.0.0.1:1 was refused - did you specify the right host "
            "or port? (") in result.output
    assert "Traceback" not in result.output


def test_missing_kubeconfig_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", str(tmp_path / "none"), "--once"])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_broken_rules_exit_2(tmp_path):
    (tmp_path / "broken.yaml").write_text("kind: [\n")
    result = CliRunner().invoke(main, ["controller", "--rules", str(tmp_path), "--once"])
    assert result.exit_code == 2 and "rule files refused" in result.output


# -- the chart's layout (docs/availability.md "Admission apart from reconciling"): admission apart, the controller registering for it ---
def _controller(*args):
    return CliRunner().invoke(main, ["controller", *args])


def test_registration_only_refuses_what_would_serve_here_or_cannot_be_registered(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("not a certificate")
    cases = [
        (["--webhook-registration-only", "--webhook-port", "9443", "--webhook-url-base", "https://127.0.0.1:1",
          "--webhook-ca", str(ca)], "--webhook-registration-only serves no webhook here: drop --webhook-port"),
        (["--webhook-registration-only", "--webhook-ca", str(ca)],
         "--webhook-registration-only needs --webhook-service NS/NAME[:PORT] or --webhook-url-base URL"),
        (["--webhook-registration-only", "--webhook-service", "ns/svc"],
         "--webhook-registration-only needs the CA to register: --webhook-cert-secret NAME or --webhook-ca FILE"),
        (["--webhook-registration-only", "--webhook-service", "ns/svc", "--webhook-self-signed", str(tmp_path)],
         "--webhook-registration-only serves no webhook here: drop --webhook-self-signed"),
        (["--webhook-registration-only", "--no-webhook-registration", "--webhook-service", "ns/svc"],
         "--webhook-registration-only and --no-webhook-registration leave nothing to do: give one"),
        (["--webhook-registration-only", "--once"], "--once reconciles and exits: it registers no webhooks"),
        (["--webhook-registration-only", "--webhook-service", "ns/svc", "--webhook-ca", str(ca)],
         f"--webhook-ca {ca}: no PEM certificate in it"),
    ]
    for args, message in cases:
        result = _controller(*args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)


ONE_OF = ("give one of --webhook-cert and --webhook-key, --webhook-cert-secret NAME with --webhook-cert-dir DIR, "
          "or --webhook-self-signed DIR")


def test_admission_needs_exactly_one_tls_source(tmp_path):
    cases = [
        ([], ONE_OF),
        (["--webhook-self-signed", str(tmp_path), "--webhook-cert-secret", "s", "--webhook-cert-dir", str(tmp_path)],
         f"{ONE_OF} (got --webhook-self-signed, --webhook-cert-secret)"),
        (["--webhook-cert-secret", "s"], "--webhook-cert-secret needs --webhook-cert-dir DIR (where its files are "
                                         "written)"),
        (["--webhook-cert-dir", str(tmp_path)], "--webhook-cert-dir needs --webhook-cert-secret"),
        (["--webhook-cert", str(tmp_path / "c")], "give --webhook-cert and --webhook-key together"),
        (["--webhook-cert", str(tmp_path / "c"), "--webhook-key", str(tmp_path / "k")],
         f"--webhook-cert {tmp_path / 'c'}: No such file"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(main, ["admission", *args])
        assert result.exit_code == 2 and f"error: {message}\n" in result.output, (args, result.output)


def test_admission_against_an_unreachable_server_is_one_line_and_exit_1(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(DEAD)
    result = CliRunner().invoke(main, ["admission", "--kubeconfig", str(kubeconfig), "--webhook-self-signed",
                                       str(tmp_path / "t")])
    assert result.exit_code == 1
    assert ("error: the connection to the server https://127.0.0.1:1 was refused - did you specify the right host "
            "or port? (") in result.output
