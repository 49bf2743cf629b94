"""`accelpolicy` command line: a click group whose subcommands live one per module in this package.

Exit codes shared by every subcommand: 0 success, 1 a policy verdict said no (e.g. `admit` denied),
2 bad input (unreadable snapshot, broken rule file, unknown kind).

A subcommand's module is imported only when that subcommand runs: `accelpolicy
--help` imports none of them, `accelpolicy get` imports its own stack and never the kubernetes client,
grpc, the agent or the webhook server. The group's command list shows each command's short help from
:data:`SUBCOMMANDS`; tests/cli/test_lazy_imports.py holds it equal to each command's own docstring.
"""
from __future__ import annotations

import gc
import importlib

import click

# name -> (module under runtime.cli exposing a click command named `command`, its short help as
# `accelpolicy --help` lists it: the first sentence of the command's docstring, as click shortens it).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "get": ("get",
            "Print KIND [NAME...] as `kubectl get` would once the controller has reconciled the snapshot."),
    "derive": ("derive", "Print the derived objects as one stream that `kubectl apply -f -` accepts."),
    "demo": ("demo",
             "The seed walkthrough: live on a local control plane (default when `make controlplane` has "
             "built it), else replayed from snapshots; prints each step's `kubectl get instancetypes`."),
    "agent": ("agent",
              "Publish this node's facts: NodeFeatures, CPU annotations, capacity keys, Devices and its "
              "ledger."),
    "controller": ("controller",
                   "Keep the cluster's pools equal to what the rule files derive from its node facts."),
    "admission": ("admission",
                  "Serve every admission webhook of rules/admission/ from watch caches of what admission "
                  "reads."),
    "admit": ("admit", "Judge one object as the admission webhooks would and print the AdmissionReview."),
    "test": ("ruletest",
             "Run every AdmissionTests and DraDriverTests suite under RULES_DIR/tests; exit 1 when a case "
             "fails."),
    "webhook": ("webhook",
                "Serve every AdmissionPolicy of the rules at its own path, plus /healthz, /readyz, "
                "/metrics."),
    "kueue-config": ("kueueconfig",
                     "Print Kueue's resource charging: excludeResourcePrefixes and transformations."),
    "lint": ("lint", "Check a rules directory without loading it: print every problem of every file."),
    "audit": ("audit",
              "Judge every existing object with the admission rules and report drift from the derived "
              "state."),
    "diff": ("diff", "Show what a rules edit changes before it goes live: pools, work, verdicts and costs."),
    "explain": ("explain", "Explain a pool (instancetype) or an admission decision (admit)."),
    "webhook-probe": ("probe",
                      "Send one admission review to each webhook of the rules and check each verdict."),
    "snapshot": ("snapshot",
                 "Write what the offline commands read from the live cluster to DIR, one file per kind."),
    "completion": ("completion",
                   "Print the shell completion script for bash or zsh (eval it in the shell's rc file)."),
    "node-cleanup": ("nodecleanup",
                     "Remove the agents' annotations and capacity keys from the Nodes (after an uninstall)."),
    "usage": ("usage",
              "Print accelerator-hours by namespace, pool, product and view, idle hours per pool, and quota "
              "held vs used per ClusterQueue."),
    "approve": ("approve", "Let the held rules generation GENERATION (its content hash id) serve."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use (click's documented lazy-loading
    recipe) and lists the commands from :data:`SUBCOMMANDS` without importing any."""

    freeze_after_import = False  # set by :func:`run`: the process is the program's own

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        """Every subcommand name, sorted (click's order)."""
        return sorted(set(SUBCOMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        """The subcommand ``cmd_name``, its module imported now; None when there is no such command."""
        if cmd_name in self.commands or cmd_name not in SUBCOMMANDS:
            return self.commands.get(cmd_name)
        command = importlib.import_module(f"runtime.cli.{SUBCOMMANDS[cmd_name][0]}").command
        self.add_command(command, cmd_name)
        if self.freeze_after_import:  # the program's own process (:func:`run`)
            gc.freeze()
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help`` from :data:`SUBCOMMANDS` (no subcommand imported)."""
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = [(name, click.Command(name, help=SUBCOMMANDS[name][1]).get_short_help_str(limit))
                for name in self.list_commands(ctx) if name in SUBCOMMANDS]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="accelpolicy")
@click.option("-v", "--verbose", is_flag=True, help="say which rules directory a command reads (on stderr)")
def main(verbose: bool) -> None:
    """accelpolicy: Kueue pools, four-view capacity and admission policy for accelerator clusters.

    Policy lives in rule files (rules/ by default, --rules DIR to override); this program evaluates
    them against a cluster snapshot or a live cluster.
    """
    from runtime.cli import common

    common.VERBOSE = verbose


def run(prog_name: str | None = None, complete_var: str | None = None) -> None:
    """The ``accelpolicy`` program (the console script): :func:`main` as a process of its own.

    Around it, what only a whole process may do with Python's cyclic garbage collector
    (``gc.freeze``: what is held now is never traversed again): once the subcommand's modules are
    imported (they live as long as the process), so the collections while the command runs do not
    traverse them again and again; and when the command has ended (its output written), so the
    interpreter's exit does not run its full collections over everything the command built, only to
    find cycles whose memory the OS takes back anyway (about 0.1 s of a one-shot command's CPU).
    Objects are still released by reference counting; atexit handlers and logging shutdown still run.
    :func:`main` itself (tests, ``CliRunner``) leaves the collector alone."""
    LazyGroup.freeze_after_import = True
    try:
        main(prog_name=prog_name, complete_var=complete_var)
    finally:
        gc.freeze()


def run_plugin() -> None:
    """The ``kubectl-accelpolicy`` program: :func:`run` named as kubectl runs its plugins
    (``kubectl accelpolicy explain instancetype X`` executes ``kubectl-accelpolicy`` from PATH);
    its completion script is ``accelpolicy completion bash --program kubectl-accelpolicy``."""
    run("kubectl accelpolicy", "_KUBECTL_ACCELPOLICY_COMPLETE")
