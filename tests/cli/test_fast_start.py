"""The CLI starts light and answers the same from the compiled-rules cache (docs/performance.md "Fast to start, light to hold").

`accelpolicy --help` imports no subcommand; the offline commands never import the kubernetes client,
grpc, the agent or the webhook server; with a damaged cache entry every command prints what it prints
without a cache, plus one warning.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from runtime.cli import SUBCOMMANDS, main
from tests.seedfiles import FIXTURES, seed_table

STEP1 = str(FIXTURES / "seed" / "step1")
REPO = Path(__file__).resolve().parents[2]
NEVER_OFFLINE = ("kubernetes", "grpc", "google.protobuf", "runtime.agent", "runtime.kube", "runtime.controller",
                 "runtime.webhook", "starlette", "uvicorn", "cryptography", "prometheus_client")


def _modules_after(args: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after running ``accelpolicy ARGS`` (exit code ignored)."""
    script = (
        "import json, sys\n"
        "from runtime.cli import main\n"
        "try:\n"
        f"    main({args!r}, standalone_mode=True)\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout.flush()\n"
        "print('\\n' + json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _loaded(modules: set[str], prefixes) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_help_imports_no_subcommand():
    modules = _modules_after(["--help"])
    assert _loaded(modules, [f"runtime.cli.{module}" for module, _ in SUBCOMMANDS.values()]) == []
    assert _loaded(modules, NEVER_OFFLINE + ("runtime.engine", "runtime.rules", "pydantic", "celpy", "lark")) == []


@pytest.mark.parametrize("args", [
    ["get", "instancetypes", "--snapshot", STEP1],
    ["lint", "rules"],
    ["admit", "-f", "demo/privileged-demo.yaml", "--snapshot", STEP1],
    ["test", "rules", "-k", "privileged"],
    ["explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64", "--snapshot", STEP1],
    ["derive", "--snapshot", STEP1],
    ["kueue-config"],
    ["audit", "--snapshot", STEP1],
], ids=lambda args: args[0])
def test_offline_commands_never_import_the_cluster_stack(args):
    modules = _modules_after(args)
    assert _loaded(modules, NEVER_OFFLINE) == []
    assert f"runtime.cli.{SUBCOMMANDS[args[0]][0]}" in modules


def test_the_command_list_is_each_commands_own_short_help():
    for name, (module, short_help) in SUBCOMMANDS.items():
        command = main.get_command(None, name)
        assert isinstance(command, click.Command) and command.name == name
        assert command.get_short_help_str(10_000) == short_help, name
    modules = {path.stem for path in (REPO / "runtime" / "cli").glob("*.py")}
    commands = {stem for stem in modules if hasattr(__import__(f"runtime.cli.{stem}", fromlist=["x"]), "command")}
    assert commands == {module for module, _ in SUBCOMMANDS.values()}


def _run(*args):
    """(exit code, stdout, stderr); a review's random uid reads <uid>."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, re.sub(r"\(uid [0-9a-f-]+\)", "(uid <uid>)", result.stdout), result.stderr


def _damage(cache: Path) -> list[Path]:
    entries = sorted(cache.glob("*.rules"))
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:-100])  # truncated
    return entries


@pytest.mark.parametrize("args", [
    ("get", "instancetypes", "--snapshot", STEP1),
    ("admit", "-f", "demo/privileged-demo.yaml", "--snapshot", STEP1, "-o", "text"),
    ("lint", "rules"),
    ("test", "rules", "-k", "instance"),
], ids=lambda args: args[0])
def test_a_damaged_cache_changes_no_verdict_and_warns_once(tmp_path, args):
    cache = tmp_path / "cache"
    code, out, err = _run(*args, "--no-rules-cache")
    assert not cache.exists()
    assert _run(*args, "--rules-cache", str(cache)) == (code, out, err)  # cold: compiles, writes
    assert len(list(cache.glob("*.rules"))) == 1
    assert _run(*args, "--rules-cache", str(cache)) == (code, out, err)  # warm
    [entry] = _damage(cache)
    damaged_code, damaged_out, damaged_err = _run(*args, "--rules-cache", str(cache))
    assert (damaged_code, damaged_out) == (code, out)
    reading = "reading rules from rules\n" if args[0] == "lint" else ""  # lint names the directory first
    assert err.startswith(reading)
    assert damaged_err == (reading + f"warning: compiled-rules cache entry {entry} is truncated or damaged (its checksum "
                           f"does not match): ignored, compiling the rules again\n" + err[len(reading):])
    assert _run(*args, "--rules-cache", str(cache)) == (code, out, err)  # rewritten


def test_the_seed_table_from_the_cache(tmp_path):
    cache = str(tmp_path / "cache")
    for _ in range(2):
        code, out, _ = _run("get", "instancetypes", "--snapshot", STEP1, "--rules-cache", cache)
        assert code == 0 and out.rstrip("\n") == seed_table("step1-instancetype.txt")


def test_no_rules_cache_wins_and_the_choice_ends_with_the_command(tmp_path, monkeypatch):
    from runtime.rules import compiledcache


    cache = tmp_path / "cache"
    _run("lint", "rules", "--rules-cache", str(cache), "--no-rules-cache")
    assert not cache.exists()
    monkeypatch.setenv(compiledcache.ENV, str(tmp_path / "env"))
    assert compiledcache.active().directory == tmp_path / "env"
