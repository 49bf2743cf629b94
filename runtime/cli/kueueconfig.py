"""`accelpolicy kueue-config`: the Kueue Configuration fragment of docs/concepts/pools-and-flavors.md "Kueue's
resource charging", to merge into Kueue's ConfigMap (``controller_manager_config.yaml``), with the
``deviceClassMappings`` of the DeviceClasses accelpolicy derives for DRA drivers (docs/concepts/dra.md "The
ledger from claims") when the rules have any."""
from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from runtime.cli.common import bad_input_exits, fail, load_policy, rules_option
from runtime.engine.pools import KueueConfigurationError, kueue_configuration
from runtime.engine.pools.deviceclasses import device_class_mappings


@click.command("kueue-config")
@rules_option
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@bad_input_exits
def command(rules_dir: Path, output: str) -> None:
    """Print Kueue's resource charging: excludeResourcePrefixes and transformations.

    Built from rules/pools/kueue.yaml over the manufacturer table: accelerator keys become
    credits.gpustack.ai/<manufacturer>, the other keys a Pod may carry (cpu included) are excluded.
    With DRA drivers in the rules (rules/dra.yaml), also deviceClassMappings: each manufacturer's
    <base> key names the DeviceClasses accelpolicy derives for it, which workloads that request
    ResourceClaims directly need (Kueue's DRA support, its DynamicResourceAllocation feature gate).
    Merge the `resources` field into Kueue's Configuration; Kueue reads it at start.
    """
    policy = load_policy(rules_dir)
    try:
        configuration = kueue_configuration(policy)
    except KueueConfigurationError as exc:
        fail(str(exc))
    except KeyError as exc:  # a dangling resourceKeysParams
        fail(str(exc.args[0]) if exc.args else str(exc))
    mappings = device_class_mappings(policy)
    if mappings:
        configuration["resources"]["deviceClassMappings"] = mappings
    if output == "json":
        click.echo(json.dumps(configuration, indent=2))
    else:
        click.echo(yaml.safe_dump(configuration, sort_keys=False, width=200).rstrip("\n"))
