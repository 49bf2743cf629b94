"""`accelpolicy demo`: the choice between the live walkthrough and the snapshot replay (no cluster here)."""
from __future__ import annotations

from click.testing import CliRunner

from runtime.cli import demo, main

MISSING = "cluster components missing in /nowhere: kwok; run `make controlplane`"


def test_without_binaries_it_says_so_and_replays_the_snapshots(monkeypatch):
    monkeypatch.setattr(demo, "live_unavailable_reason", lambda: MISSING)
    monkeypatch.setattr(demo, "run_live", lambda *a, **k: (_ for _ in ()).throw(AssertionError("went live")))
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"note: live walkthrough unavailable ({MISSING}); replaying the snapshots instead")
    assert result.stdout.count("$ kubectl get instancetypes") == 9


def test_live_without_binaries_is_exit_2_naming_them(monkeypatch):
    monkeypatch.setattr(demo, "live_unavailable_reason", lambda: MISSING)
    result = CliRunner().invoke(main, ["demo", "--live"])
    assert result.exit_code == 2
    assert result.stderr == f"error: the live demo needs the local control plane: {MISSING}\n"


def test_offline_is_the_snapshot_replay_and_never_looks_for_binaries(monkeypatch):
    monkeypatch.setattr(demo, "live_unavailable_reason", lambda: (_ for _ in ()).throw(AssertionError("looked")))
    result = CliRunner().invoke(main, ["demo", "--offline"])
    assert result.exit_code == 0 and result.stderr == ""
    assert "a10g-12c128g" in result.stdout and "gpustack-fnv64-d4c0e6cd72686015" in result.stdout


def test_the_live_script_runs_the_seeds_lines_and_waits_for_every_replayed_table():
    script = demo._script()
    assert [title for title, _ in script] == [
        "Step 1: Read the initial pools", "Step 2: Remove a managed node", "Step 3: Request a logical slice",
        "Step 4: Manage a custom InstanceType", "Step 5: Enable CPU awareness", "Step 6: Instance pinning and volumes"]
    tables = [a.step for _, actions in script for a in actions if isinstance(a, demo.Table)]
    assert [s for s, _ in demo.STEPS] == [t for i, t in enumerate(tables) if t not in tables[:i]]
    lines = [a.line for _, actions in script for a in actions if isinstance(a, demo.Run)]
    assert "kubectl -n gpustack-system rollout restart deploy/gpustack-operator-worker" in lines


def test_without_the_checkout_harness_live_is_exit_2_saying_it_needs_a_checkout(monkeypatch):
    monkeypatch.setattr(demo, "harness", lambda module="": None)   # as from an installed wheel
    for args in (["demo"], ["demo", "--live"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2
        assert result.stderr == (
            "error: the live demo needs a source checkout of accelpolicy (its local control-plane harness, "
            "testing/localcluster, is not part of the installed package): run `make demo` there; "
            "`accelpolicy demo --snapshot` replays the steps without a cluster\n")
