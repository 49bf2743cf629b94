"""`accelpolicy agent`: the per-node agent (docs/agent.md "The node agent (`accelpolicy agent`)").

Runs forever (every ``--interval`` seconds) unless ``--once``. ``--dry-run -o yaml`` prints what it
would write (NodeFeatures, the Node annotation/capacity patch, Devices) and writes nothing; with
``--facts FILE --node-capacity-cpu N`` (or ``--backend dra --resourceslices FILE --node-capacity-cpu N``,
docs/concepts/dra.md "Accelerators from DRA drivers"; ``--backend auto`` takes either) and no ``--kubeconfig``
it needs no cluster at all. Exit codes: 0 success, 2 bad input (unreadable facts, broken rules, bad flag
combination).
"""
from __future__ import annotations

import json
import os
import platform
import sys

import click
import yaml
from loguru import logger

from probes.backend import BACKEND_ENV, BACKENDS, FACTS_ENV, select_backend
from runtime.agent.dra import (AUTO, BACKEND as DRA, AutoBackend, DraBackend, auto_fallback,
                               cluster_publishes_for,
                              describe, publishes_for, slices_from_file)
from probes.cpu import CPUINFO
from runtime.agent.runner import ALLOCATION_SOURCES, NodeAgent
from runtime.cli.common import fail, rules_cache_options, rules_read, starting_policy
from runtime.cli.observability import configure_logging, log_options
from runtime.engine.devices import agent_rules, apply_manufacturer_env
from runtime.engine.policy import Policy
from runtime.engine.settings import parse_bool
from runtime.model.facts import FactsError
from runtime.rules.loader import RuleLoadError, load_rules

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def offline_node(policy: Policy, name: str, cpu: str, labels: tuple[str, ...]) -> dict:
    """The Node a cluster-less dry run plans against: this host's os/arch, ``--node-label`` pairs."""
    node_labels = {policy.key("os"): platform.system().lower(),
                   policy.key("arch"): _ARCH.get(platform.machine().lower(), platform.machine().lower())}
    for pair in labels:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--node-label")
        node_labels[key] = value
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": "", "labels": node_labels},
            "status": {"capacity": {"cpu": cpu}}}


@click.command("agent")
@click.option("--node", "node_name", required=True, help="this node's name (the Node object)")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig file (default: in-cluster, then ~/.kube/config)")
@click.option("--once", is_flag=True, help="reconcile once and exit")
@click.option("--dry-run", is_flag=True, help="print what would be written; write nothing")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--backend", type=click.Choice(BACKENDS + (DRA, AUTO)), default=None,
              help="accelerator probe: real (pynvml), fake (recorded facts), dra (the ResourceSlices a DRA "
                   "driver of rules/dra.yaml publishes for the node) or auto (one setting for a mixed "
                   "cluster: dra from the first pass on which such a driver publishes slices for the node; "
                   "until then the --facts document if that file exists, else real); env "
                   "ACCELPOLICY_NVML_BACKEND")
@click.option("--facts", type=click.Path(dir_okay=False), default=None,
              help="recorded-facts document for --backend fake, or for auto where the file exists (its CPU "
                   "is then the node's whatever gives the accelerators); env ACCELPOLICY_RECORDED_FACTS")
@click.option("--resourceslices", "resourceslices", type=click.Path(dir_okay=False), default=None,
              help="cluster-less dry run with --backend dra|auto: a file of ResourceSlice objects "
                   "(YAML/JSON, e.g. kubectl get resourceslices -o yaml)")
@click.option("--allocation-source", type=click.Choice(ALLOCATION_SOURCES), default="auto", show_default=True,
              help="where the ledger's allocations come from "
                   "(docs/agent.md 'The Devices object and its ledger')")
@click.option("--podresources-socket", default=None,
              help="kubelet PodResources socket [default: rules/agent.yaml podResources.socket]")
@click.option("--node-capacity-cpu", default=None,
              help="cluster-less dry run: the Node's status.capacity.cpu")
@click.option("--node-label", "node_labels", multiple=True,
              help="cluster-less dry run: a Node label KEY=VALUE")
@click.option("--cpuinfo", default=CPUINFO, show_default=True, help="CPU facts file")
@click.option("--interval", type=float, default=30.0, show_default=True, help="seconds between reconciles")
@click.option("--health-port", type=click.IntRange(0, 65535), default=None, metavar="N",
              help="serve /healthz (the loop keeps passing), /readyz (the last pass succeeded) and /metrics "
                   "(Prometheus) over HTTP on port N, for kubelet probes and scrapes")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False), envvar="ACCELPOLICY_RULES",
              default=None, help="rules directory (default: the installed rules/, or env ACCELPOLICY_RULES)")
@click.option("--watch-rules-seconds", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="With --rules: poll the directory this often and plan with a changed set from the next "
                   "pass on, once it lints and compiles (a broken set is refused and logged; the working one "
                   "stays); the generation in force is the accelpolicy_rules_generation metric. 0: never.")
@click.option("--rules-configmap", default=None, metavar="NAME", envvar="ACCELPOLICY_RULES_CONFIGMAP",
              help="With --rules: the ConfigMap (in --rules-namespace) the rules are mounted from: a changed "
                   "set is planned with only once the controller's leader recorded there that it accepted it "
                   "(docs/rule-authoring.md 'How a rules change goes live').")
@click.option("--rules-namespace", default="gpustack-system", show_default=True,
              envvar="KUBERNETES_POD_NAMESPACE",
              help="Namespace of --rules-configmap.")
@rules_cache_options(log=True)
@log_options
def command(node_name, kubeconfig, once, dry_run, output, backend, facts, allocation_source,
            podresources_socket, node_capacity_cpu, node_labels, cpuinfo, interval, rules_dir,
            resourceslices=None, health_port=None, log_level="INFO", log_format="text",
            watch_rules_seconds=2.0, rules_configmap=None, rules_namespace="gpustack-system") -> None:
    """Publish this node's facts: NodeFeatures, CPU annotations, capacity keys, Devices and its ledger."""
    configure_logging(log_level, log_format)
    try:
        policy = Policy(load_rules(rules_read(rules_dir)))
    except RuleLoadError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    rules = agent_rules(policy)
    for name in apply_manufacturer_env(policy, os.environ):
        logger.info("manufacturer override from {}", name)
    with_memory = bool(parse_bool(policy.settings, os.environ.get(rules.groupIdWithMemoryEnv, "")))
    offline = dry_run and kubeconfig is None and node_capacity_cpu is not None
    chosen = backend or os.environ.get(BACKEND_ENV)
    try:   # real and fake are checked before any cluster is reached; dra and auto may need it
        probe = None if chosen in (DRA, AUTO) else _backend(policy, chosen, facts, resourceslices, node_name,
                                                            None)
        session, node = _cluster_or_node(policy, kubeconfig, node_name, node_capacity_cpu, node_labels,
                                         offline)
        if probe is None:
            if session is not None and resourceslices:
                raise ValueError("--resourceslices is for the cluster-less dry run (--dry-run, no "
                                 "--kubeconfig, --node-capacity-cpu N); a cluster agent watches the "
                                 "cluster's slices")
            probe = _backend(policy, chosen, facts, resourceslices, node_name, session)
    except FactsError as exc:  # the file's content, not the command line: no usage text
        fail(f"recorded facts refused:\n{exc}")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if session is not None and rules_dir and rules_configmap:   # the generation in force (a serving copy)
        policy = _starting(rules_dir, session, rules_namespace, rules_configmap)
    recorded_node = getattr(probe, "node", "") if probe.name == "fake" else ""
    if recorded_node and recorded_node != node_name:
        raise click.UsageError(
            f"the recorded facts describe node {recorded_node!r}, not --node {node_name!r}")
    try:
        agent = NodeAgent(policy, probe, node_name, session=session, node=node, cpuinfo=cpuinfo,
                          allocation_source=allocation_source, group_id_with_memory=with_memory,
                          podresources_socket=podresources_socket)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if dry_run or once:
        _one_pass(agent, dry_run, output)
        return
    registry = _serve_health(agent, health_port, interval) if health_port is not None else None
    if rules_dir and watch_rules_seconds > 0:
        _watch_rules(agent, rules_dir, watch_rules_seconds, registry,
                     (rules_namespace, rules_configmap) if rules_configmap else None)
    agent.run(interval)


def _starting(rules_dir: str, session, namespace: str, configmap: str) -> Policy:
    """The rules the agent plans with from its start: :func:`runtime.cli.common.starting_policy` (the serving
    copy when the mounted rules are not in force), the manufacturer env overrides applied; broken rules exit
    2."""
    try:
        policy = starting_policy(rules_dir, session, namespace, configmap)
    except RuleLoadError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    apply_manufacturer_env(policy, os.environ)
    return policy


def _serve_health(agent: NodeAgent, port: int, interval: float):
    """/healthz, /readyz and /metrics on ``port`` (``--health-port``); returns the metrics registry. A port
    that cannot be bound is a usage error."""
    from runtime.agent.health import PassClock, serve_health
    from runtime.agent.metrics import AgentMetrics
    clock = PassClock(stale_seconds=3 * interval + 60)
    agent.on_pass = clock.passed
    registry = AgentMetrics().bind(agent).registry
    try:
        server = serve_health(clock, port=port, metrics=registry)
    except OSError as exc:
        raise click.UsageError(f"--health-port {port}: {exc.strerror or exc}") from None
    logger.info("serving /healthz, /readyz and /metrics on port {}", server.server_address[1])
    return registry


def _watch_rules(agent: NodeAgent, rules_dir: str, seconds: float, registry, configmap=None):
    """Reload ``rules_dir`` live (:class:`runtime.reload.holder.RulesHolder` with an
    :class:`runtime.reload.hosts.AgentHost`): a set that loads and passes the rule suites beside it (the
    part of the reload gate an agent can run) becomes the agent's policy from its next pass on (the
    manufacturer env overrides applied again). With ``configmap`` (``(namespace, name)`` of the rules
    ConfigMap, --rules-configmap) only once the verdict the controller's leader recorded there accepted that
    generation (read at most every 15 s), else at once. ``accelpolicy_rules_generation`` and the refusal
    counters go into ``registry`` (the agent's /metrics) when given. Returns the started holder."""
    from runtime.reload.board import Board
    from runtime.reload.holder import RulesHolder
    from runtime.reload.hosts import AgentHost

    session = agent.cluster.session if agent.cluster is not None else None
    board = Board(session, *configmap, keys=lambda: agent.policy.ruleset.get("ReloadGate").annotations,
                  min_seconds=15.0) if configmap and session is not None else None
    holder = RulesHolder(AgentHost(agent, apply_manufacturer_env), rules_dir, agent.policy.ruleset,
                         board=board, decides=lambda: board is None, registry=registry,
                         interval=seconds).start()
    logger.info("watching {} for rule changes every {:g}s", rules_dir, seconds)
    return holder


def _backend(policy: Policy, name: str | None, facts: str | None, slices_file: str | None, node: str,
             session: object):
    """The probe backend: ``real``/``fake`` as probes/backend.py selects them; ``dra`` reading the
    node's ResourceSlices (``slices_file`` in a cluster-less dry run, else the agent's watch cache);
    ``auto`` (runtime/agent/dra.py): on a cluster an :class:`AutoBackend` (``dra`` from the first pass on
    which a driver of rules/dra.yaml publishes slices for the node, the recorded facts or NVML until
    then), or the fallback alone where the cluster does not serve ResourceSlices; in a dry run ``dra``
    when the file's slices name the node, else the fallback. Raises ValueError for a bad choice or file."""
    if name not in (DRA, AUTO):
        if slices_file:
            raise ValueError("--resourceslices is for --backend dra or auto")
        return select_backend(name, facts)
    facts = facts or os.environ.get(FACTS_ENV) or None
    if session is None and not slices_file:
        if name == AUTO and facts:
            return auto_fallback(facts, node)
        raise ValueError(f"--backend {name} without a cluster needs --resourceslices FILE"
                         + (" (or --facts FILE)" if name == AUTO else ""))
    if session is not None:
        if name == DRA:
            return DraBackend(policy, node, lambda: [], "the cluster's ResourceSlices")
        if cluster_publishes_for(session, policy, node) is None:
            return auto_fallback(facts, node)
        return AutoBackend(policy, node, auto_fallback(facts, node))
    slices = slices_from_file(slices_file)
    drivers = publishes_for(policy, slices, node)
    if name == AUTO and not drivers:
        fallback = auto_fallback(facts, node)
        logger.info("backend auto: no DRA driver of the rules publishes slices for node {} in {}: {}", node,
                    slices_file, describe(fallback))
        return fallback
    if name == AUTO:
        logger.info("backend auto: {} publish(es) slices for node {}: reading them (backend dra)",
                    ", ".join(drivers), node)
    return DraBackend(policy, node, lambda: slices, slices_file)


def _cluster_or_node(policy: Policy, kubeconfig: str | None, node_name: str, node_capacity_cpu: str | None,
                     node_labels: tuple[str, ...], offline: bool) -> tuple[object, dict | None]:
    """``(session, None)`` for a cluster run (runtime.kube.session.connect), ``(None, Node)`` for a
    cluster-less dry run; no usable configuration is a usage error naming the cluster-less way."""
    if offline:
        return None, offline_node(policy, node_name, node_capacity_cpu, node_labels)
    from runtime.kube.session import connect  # only a cluster run needs the kubernetes client
    try:
        return connect(kubeconfig), None
    except Exception as exc:
        raise click.UsageError(f"no cluster configuration ({exc}); for a cluster-less dry run give "
                               "--dry-run --facts FILE (or --backend dra --resourceslices FILE) "
                               "--node-capacity-cpu N") from None


def _one_pass(agent: NodeAgent, dry_run: bool, output: str) -> None:
    """--once / --dry-run: one reconcile (the watches stopped after it); with --dry-run the objects
    it would write on stdout as a v1 List (json) or a YAML stream. A failed pass exits 2."""
    try:
        plan = agent.reconcile(dry_run=dry_run)
    finally:
        agent.close()
    if plan is None:
        sys.exit(2)
    if dry_run:
        objects = plan.objects()
        if output == "json":
            click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
        else:
            click.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
