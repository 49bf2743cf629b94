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
    assert "error: cannot reach the API server: 0 Unreachable: https://127.0.0.1:1" in result.output
    assert "Traceback" not in result.output


def test_missing_kubeconfig_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", str(tmp_path / "none"), "--once"])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_broken_rules_exit_2(tmp_path):
    (tmp_path / "broken.yaml").write_text("kind: [\n")
    result = CliRunner().invoke(main, ["controller", "--rules", str(tmp_path), "--once"])
    assert result.exit_code == 2 and "rule files refused" in result.output
