"""`accelpolicy` command line: a click group whose subcommands live one per module in this package.

Exit codes shared by every subcommand: 0 success, 1 a policy verdict said no (e.g. `admit` denied),
2 bad input (unreadable snapshot, broken rule file, unknown kind).

A subcommand's module is imported only when that subcommand runs (issue 24 item 2): `accelpolicy
--help` imports none of them, `accelpolicy get` imports its own stack and never the kubernetes client,
grpc, the agent or the webhook server. The group's command list shows each command's short help from
:data:`SUBCOMMANDS`; tests/cli/test_lazy_imports.py holds it equal to each command's own docstring.
"""
from __future__ import annotations

import importlib

import click

# name -> (module under runtime.cli exposing a click command named `command`, its short help as
# `accelpolicy --help` lists it: the first sentence of the command's docstring, as click shortens it).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "get": ("get", "Print KIND [NAME...] as `kubectl get` would once the controller has reconciled the snapshot."),
    "derive": ("derive", "Print the derived objects as one stream that `kubectl apply -f -` accepts."),
    "demo": ("demo", "The seed walkthrough: live on a local control plane (default when `make controlplane` has built it), else replayed from snapshots; prints each step's `kubectl get instancetypes`."),
    "agent": ("agent", "Publish this node's facts: NodeFeatures, CPU annotations, capacity keys, Devices and its ledger."),
    "controller": ("controller", "Keep the cluster's pools equal to what the rule files derive from its node facts."),
    "admit": ("admit", "Judge one object as the admission webhooks would and print the AdmissionReview."),
    "test": ("ruletest", "Run every AdmissionTests and DraDriverTests suite under RULES_DIR/tests; exit 1 when a case fails."),
    "webhook": ("webhook", "Serve every AdmissionPolicy of the rules at its own path, plus /healthz, /readyz, /metrics."),
    "kueue-config": ("kueueconfig", "Print Kueue's resource charging: excludeResourcePrefixes and transformations."),
    "lint": ("lint", "Check a rules directory without loading it: print every problem of every file."),
    "audit": ("audit", "Judge every existing object with the admission rules and report drift from the derived state."),
    "explain": ("explain", "Explain a pool (instancetype) or an admission decision (admit)."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use (click's documented lazy-loading
    recipe) and lists the commands from :data:`SUBCOMMANDS` without importing any."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        """Every subcommand name, sorted (click's order)."""
        return sorted(set(SUBCOMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        """The subcommand ``cmd_name``, its module imported now; None when there is no such command."""
        if cmd_name in self.commands or cmd_name not in SUBCOMMANDS:
            return self.commands.get(cmd_name)
        command = importlib.import_module(f"runtime.cli.{SUBCOMMANDS[cmd_name][0]}").command
        self.add_command(command, cmd_name)
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
def main() -> None:
    """accelpolicy: Kueue pools, four-view capacity and admission policy for accelerator clusters.

    Policy lives in rule files (rules/ by default, --rules DIR to override); this program evaluates
    them against a cluster snapshot or a live cluster.
    """
