"""`accelpolicy demo`: the seed walkthrough, live on a local control plane or replayed from snapshots.

Live (the default when the control-plane and component binaries of ``make controlplane`` exist, or
``--live``): starts etcd, kube-apiserver, kube-scheduler, kwok, nfd-master and Kueue on loopback,
installs the CRDs, starts our agents, controller and the device-plugin stand-in around the seed's
four nodes (:mod:`testing.localcluster.walkthrough`), then walks steps 1-6 running the seed's own
``kubectl`` lines, printing each line before its output as the seed does and each
``kubectl get instancetypes`` table once the controller has reconciled it (the table of the
snapshot replay of that step, AGE ignored). Progress of the slow parts goes to stderr. Everything
is stopped and its temporary directories removed at the end, on an error and on Ctrl-C/SIGTERM.

Snapshot replay (``--snapshot``/``--offline``, or automatically with a message when the binaries
are missing): each step's snapshot (tests/fixtures/seed/<step>/) through the same engine.

Step 4's custom type shows the entrance of its own name (gpustack-fnv64-d4c0e6cd72686015); the
seed's capture shows a stale hash of an older name (decision 3).
"""
from __future__ import annotations

import importlib
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, load_policy, rules_option
from runtime.engine.pools import derive
from runtime.report.tables import render, resolve_kind
from runtime.snapshots import load_snapshot

CHECKOUT = Path(__file__).resolve().parents[2]   # the source checkout, when this module runs from one
DEFAULT_STEPS = CHECKOUT / "tests" / "fixtures" / "seed"
NEEDS_CHECKOUT = ("the live demo needs a source checkout of accelpolicy (its local control-plane harness, "
                  "testing/localcluster, is not part of the installed package): run `make demo` there")
STEPS = (
    ("step1", "Step 1: the initial pools"),
    ("step2-unmanaged", "Step 2: node-a10g's worker NodeFeature patched to gpustack.ai/managed=false"),
    ("step2-readmitted", "Step 2: patched back to true"),
    ("step3-sliced-demo", "Step 3: sliced-demo holds 20 % of the A10G"),
    ("step4-custom-type", "Step 4: the custom type a10g-12c128g applied"),
    ("step4-custom-demo", "Step 4: custom-demo holds the A10G whole"),
    ("step4-deleted-type", "Step 4: a10g-12c128g deleted, custom-demo stopped"),
    ("step5-aware", "Step 5: instance-type-aware-cpu-manufacturer=true"),
    ("step5-repoint", "Step 5: custom-demo repointed to the aware A10G pool"),
)


# -- the live script -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """Run a seed console line and print it with its output; ``fails``: the line is expected to be refused."""
    line: str
    fails: bool = False


@dataclass(frozen=True)
class Table:
    """Wait until ``kubectl get instancetypes`` equals the snapshot replay of ``step``, then print it."""
    step: str


@dataclass(frozen=True)
class Until:
    """Poll a seed console line until its output is ``want``, then print it (e.g. an Instance phase)."""
    line: str
    want: str


def harness(module: str = ""):
    """The test harness module ``testing.localcluster[.module]`` of the source checkout this CLI runs from,
    imported on demand; None from an installed wheel (the harness is not shipped)."""
    if not (CHECKOUT / "testing" / "localcluster" / "__init__.py").is_file():
        return None
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    return importlib.import_module("testing.localcluster" + (f".{module}" if module else ""))


def _script():
    w = harness("walkthrough")
    ALLOW_HOST_PATH, AWARE, READMIT, REPOINT, RESTART, UNMANAGE = (  # noqa: N806 - the walkthrough's names
        w.ALLOW_HOST_PATH, w.AWARE, w.READMIT, w.REPOINT, w.RESTART, w.UNMANAGE)
    phase = "kubectl -n default get instance {} -o jsonpath='{{.status.phase}}'"
    return (
        ("Step 1: Read the initial pools", (
            Table("step1"), Run("kubectl get resourceflavor"), Run("kubectl get clusterqueue"),
            Run("kubectl get instancetypeflavor"), Run("kubectl get devices"))),
        ("Step 2: Remove a managed node", (
            Run(UNMANAGE), Table("step2-unmanaged"), Run(READMIT), Table("step2-readmitted"))),
        ("Step 3: Request a logical slice", (
            Run("kubectl apply -f sliced-demo.yaml"), Until(phase.format("sliced-demo"), "Ready"),
            Table("step3-sliced-demo"), Run("kubectl -n default delete instance sliced-demo"),
            Table("step2-readmitted"))),
        ("Step 4: Manage a custom InstanceType", (
            Run("kubectl apply -f a10g-12c128g.yaml"), Table("step4-custom-type"),
            Run("kubectl apply -f custom-demo.yaml"), Until(phase.format("custom-demo"), "Ready"),
            Table("step4-custom-demo"), Run("kubectl delete instancetype a10g-12c128g"),
            Until(phase.format("custom-demo"), "Stopped"), Table("step4-deleted-type"))),
        ("Step 5: Enable CPU awareness", (
            Run(AWARE), Run(RESTART), Table("step5-aware"), Run("kubectl get instancetypeflavor"),
            Run("kubectl get resourceflavor --no-headers | wc -l"), Run(REPOINT),
            Until(phase.format("custom-demo"), "Ready"), Table("step5-repoint"))),
        ("Step 6: Instance pinning and volumes", (
            Run("kubectl apply -f model-config.yaml"), Run("kubectl apply -f pinned-demo.yaml", fails=True),
            Run(ALLOW_HOST_PATH),
            Until("kubectl -n gpustack-system get setting instance-host-path-volume-allowed "
                  "-o jsonpath='{.status.value}'", "true"),
            Run("kubectl apply -f pinned-demo.yaml"),
            Until("kubectl -n default get instance pinned-demo -o jsonpath='{.status.phaseMessage}'",
                  'PersistentVolumeClaim "datasets" does not exist in this namespace'),
            Run("kubectl apply -f datasets.yaml"), Until(phase.format("pinned-demo"), "Ready"),
            Run("kubectl -n default get pod pinned-demo -o wide"),
            Run("kubectl apply -f privileged-demo.yaml", fails=True))),
    )


class DemoFailed(Exception):
    """A live step did not reach its expected state (the message names it)."""


def _expected_tables(policy, steps_dir: Path) -> dict[str, str]:
    table = resolve_kind("instancetypes")
    out = {}
    for step, _ in STEPS:
        snapshot = load_snapshot([steps_dir / step])
        out[step] = render(table, derive(policy, snapshot).view(policy, table.kind, snapshot))
    return out


def _progress(line: str) -> None:
    click.echo(f"  ... {line}", err=True)


def run_live(policy, rules_dir: Path | None, steps_dir: Path, timeout: float) -> float:
    """The live walkthrough (module docstring); returns its wall seconds. Raises :class:`DemoFailed`."""
    w = harness("walkthrough")
    Walkthrough, start_local_cluster, tables_equal = (  # noqa: N806
        w.Walkthrough, w.start_local_cluster, w.tables_equal)

    from loguru import logger
    expected = _expected_tables(policy, steps_dir)
    t_start = time.monotonic()
    _progress("starting the local control plane: etcd, kube-apiserver, kube-scheduler, kwok, nfd-master, "
              "Kueue, and installing the CRDs (about a minute)")
    cluster, kubectl = start_local_cluster(policy)
    try:
        _progress(f"control plane up in {time.monotonic() - t_start:.0f}s")
        logger.remove()   # the device-plugin stand-in's log lines go to a file, not between the tables
        walk = Walkthrough(cluster.kubeconfig, rules_dir=rules_dir, policy=policy, progress=_progress)
        logger.add(str(walk.workdir / "demo.log"), level="INFO")
        with walk:
            for title, actions in _script():
                if not walk.webhooks and not title.startswith(("Step 1", "Step 2")):
                    raise DemoFailed(f"{title} needs our admission webhooks (Instance and InstanceType "
                                     "defaulting, the Pod webhook's units fold), and this checkout's "
                                     "`accelpolicy controller` has no --webhook-port")
                click.echo(f"## {title}\n")
                for action in actions:
                    _act(walk, action, expected, timeout, tables_equal)
        return time.monotonic() - t_start
    finally:
        _progress("stopping the controller, the agents and the control plane")
        cluster.stop()


def _act(walk, action, expected: dict[str, str], timeout: float, tables_equal) -> None:
    if isinstance(action, Run):
        click.echo(f"$ {action.line}")
        out = walk.sh(action.line, check=not action.fails)
        if action.fails and out.returncode == 0:
            raise DemoFailed(
                f"`{action.line}` was expected to be refused but succeeded: {out.stdout.strip()}")
        text = (out.stdout + out.stderr).rstrip()
        if text:
            click.echo(text)
        click.echo()
        return
    t0 = time.monotonic()
    if isinstance(action, Until):
        _progress(f"waiting for `{action.line}` to print {action.want!r}")
        while True:
            walk.check_processes()
            got = walk.sh(action.line, check=False).stdout
            if got == action.want:
                break
            if time.monotonic() - t0 > timeout:
                raise DemoFailed(
                    f"`{action.line}` printed {got!r}, not {action.want!r}, after {timeout:.0f}s")
            time.sleep(0.5)
        click.echo(f"$ {action.line}\n{got}\n")
        return
    want = expected[action.step]
    _progress("waiting for the controller's table")
    while True:
        walk.check_processes()
        got = walk.kubectl.stdout("get", "instancetypes")
        if tables_equal(got, want):
            break
        if time.monotonic() - t0 > timeout:
            raise DemoFailed(f"`kubectl get instancetypes` did not reach the table of {action.step} in "
                             f"{timeout:.0f}s; last:\n{got.rstrip()}\nexpected:\n{want.rstrip()}")
        time.sleep(0.25)
    click.echo(f"$ kubectl get instancetypes    # {time.monotonic() - t0:.1f}s after the previous line")
    click.echo(got.rstrip() + "\n")


def live_unavailable_reason() -> str | None:
    """Why the live demo cannot run here (missing control-plane or component binaries), else None."""
    lc = harness()
    try:
        bins = lc.find_binaries()
        if bins.kube_scheduler is None:
            return f"kube-scheduler missing in {bins.directory}; run `make controlplane`"
        lc.find_component_binaries()
    except lc.MissingBinariesError as exc:
        return str(exc)
    return None


def run_snapshots(policy, steps_dir: Path) -> None:
    table = resolve_kind("instancetypes")
    for step, title in STEPS:
        snapshot = load_snapshot([steps_dir / step])
        state = derive(policy, snapshot)
        click.echo(f"# {title}\n$ kubectl get instancetypes")
        click.echo(render(table, state.view(policy, table.kind, snapshot)))
        click.echo()


def _interrupt(*_) -> None:
    raise KeyboardInterrupt   # SIGTERM cleans up like Ctrl-C


@click.command("demo")
@click.option("--live", "mode", flag_value="live", help="Run the walkthrough on a local control plane (fail "
              "when its binaries are missing).")
@click.option("--snapshot", "--offline", "mode", flag_value="snapshot",
              help="Replay the steps from snapshots (tests/fixtures/seed/<step>/) without a cluster.")
@click.option("--steps", "steps_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_STEPS,
              show_default=True, help="Directory holding one snapshot directory per seed step.")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Live: seconds to wait for each table or phase.")
@rules_option
@bad_input_exits
def command(mode: str | None, steps_dir: Path, timeout: float, rules_dir: Path) -> None:
    """The seed walkthrough: live on a local control plane (default when `make controlplane` has built
    it), else replayed from snapshots; prints each step's `kubectl get instancetypes`.

    Step 4's custom type shows the entrance of its own name (gpustack-fnv64-d4c0e6cd72686015); the
    seed's capture shows a stale hash of an older name (decision 3)."""
    if mode != "snapshot" and harness() is None:
        click.echo(f"error: {NEEDS_CHECKOUT}; `accelpolicy demo --snapshot` replays the steps without a "
                   f"cluster",
                   err=True)
        sys.exit(2)
    if mode == "snapshot" and not steps_dir.is_dir():
        click.echo(f"error: --steps {steps_dir}: no such directory (the seed step snapshots live in a source "
                   "checkout's tests/fixtures/seed/; give --steps DIR)", err=True)
        sys.exit(2)
    policy = load_policy(rules_dir)
    if mode != "snapshot":
        reason = live_unavailable_reason()
        if reason and mode == "live":
            click.echo(f"error: the live demo needs the local control plane: {reason}", err=True)
            sys.exit(2)
        if reason:
            click.echo(f"note: live walkthrough unavailable ({reason}); replaying the snapshots instead",
                       err=True)
            mode = "snapshot"
    if mode == "snapshot":
        run_snapshots(policy, steps_dir)
        return
    signal.signal(signal.SIGTERM, _interrupt)
    given_rules = None if rules_dir is None else Path(rules_dir)
    try:
        seconds = run_live(policy, given_rules, steps_dir, timeout)
    except KeyboardInterrupt:
        click.echo("interrupted; everything stopped and removed", err=True)
        sys.exit(130)
    except (DemoFailed, harness().LocalClusterError) as exc:
        # a step not reached, a seed line that failed or hung
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"live walkthrough done in {seconds:.0f}s", err=True)
