"""`accelpolicy node-cleanup`: remove what the agents published on the Nodes (the full removal of
docs/install.md): their annotations (rules/labels.yaml ``cpuNameAnnotation``, ``cpuFamilyAnnotation``)
and their extended-resource keys in ``status.capacity`` and ``status.allocatable`` (rules/agent.yaml
``capacity``; the kubelet never clears keys it did not publish). Device-plugin keys (``nvidia.com/gpu``)
and everything else stay.

Prints one line per Node changed. Exit 0, 1 when a patch failed, 2 bad input (no cluster configuration,
broken rules).
"""
from __future__ import annotations

import sys

import click

from runtime.cli.common import connect_or_exit, policy_from
from runtime.engine.devices.devicesobject import is_agent_capacity_key


def cleanup_patches(policy, node: dict) -> tuple[dict | None, dict | None]:
    """``(metadata merge patch, status merge patch)`` removing the agent's keys from ``node`` (None: nothing
    to remove)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    owned = [policy.key("cpuNameAnnotation"), policy.key("cpuFamilyAnnotation")]
    meta = {k: None for k in owned if k in annotations}
    status = {}
    for field in ("capacity", "allocatable"):
        keys = [k for k in ((node.get("status") or {}).get(field) or {}) if is_agent_capacity_key(policy, k)]
        if keys:
            status[field] = {k: None for k in keys}
    return ({"metadata": {"annotations": meta}} if meta else None), ({"status": status} if status else None)


@click.command("node-cleanup")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
@click.option("--node", "nodes", multiple=True, help="only these Nodes (default: every Node)")
@click.option("--rules", default=None, envvar="ACCELPOLICY_RULES",
              help="rules directory (default: the installed rules/, or env ACCELPOLICY_RULES)")
def command(kubeconfig: str | None, nodes: tuple[str, ...], rules: str | None) -> None:
    """Remove the agents' annotations and capacity keys from the Nodes (after an uninstall)."""
    from runtime.kube.session import KubeApiError

    policy = policy_from(rules)
    session = connect_or_exit(kubeconfig, quiet=True)
    ref = session.ref("Node")
    items = session.call("get", ref.path())["items"]
    failed = 0
    for node in items:
        name = node["metadata"]["name"]
        if nodes and name not in nodes:
            continue
        meta, status = cleanup_patches(policy, node)
        try:
            if meta:
                session.call("patch", ref.path(name=name), body=meta,
                             content_type="application/merge-patch+json")
            if status:
                session.call("patch", ref.path(name=name, subresource="status"), body=status,
                             content_type="application/merge-patch+json")
        except KubeApiError as exc:
            failed += 1
            click.echo(f"error: Node {name}: {exc}", err=True)
            continue
        if meta or status:
            removed = sorted((meta or {}).get("metadata", {}).get("annotations", {})) + sorted(
                {k for f in (status or {}).get("status", {}).values() for k in f})
            click.echo(f"Node {name}: removed {', '.join(removed)}")
    sys.exit(1 if failed else 0)
