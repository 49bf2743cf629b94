"""The node agent's loop: probe -> observe -> plan (pure engine) -> apply (runtime.kube.client).

Failure handling (issue 4): a probe that cannot run never stops the agent. CPU facts are always
published; each distinct failure is logged once with its cause and its recovery once. A missing
NVIDIA library on a node that never showed an accelerator reads as "no accelerators" (a CPU node);
any other accelerator probe failure leaves the device-manager NodeFeature and the Devices object as
they are until the probe works again. A failing reconcile (API errors) is logged and retried on the
next tick; the process never exits because of it.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from loguru import logger

from probes.backend import AcceleratorBackend, cpu_facts
from probes.cpu import CPUINFO
from probes.errors import ProbeError
from runtime.engine.devices import AgentPlan, agent_rules, node_feature_name, plan_node
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings, decode_secret_data, resolve
from runtime.kube.podresources import PodResourcesError, list_pod_resources
from runtime.model.facts import CpuFacts, FactsError, NodeFactsDoc, parse_facts

ALLOCATION_SOURCES = ("auto", "podresources", "annotation")
COMPONENT = "accelpolicy-agent"


class OnceLog:
    """Logs each distinct problem once per topic and its recovery once (never a log per tick)."""

    def __init__(self) -> None:
        self._current: dict[str, str] = {}
        self.listeners: list[Callable[[str, str], None]] = []  # told of every problem (topic, level): metrics

    def problem(self, topic: str, message: str, level: str = "ERROR") -> None:
        for listener in self.listeners:
            listener(topic, level)
        if self._current.get(topic) != message:
            self._current[topic] = message
            logger.log(level, "{}: {}", topic, message)

    def healthy(self, topic: str) -> bool:
        """Whether ``topic`` has no current problem."""
        return topic not in self._current

    def ok(self, topic: str) -> None:
        if self._current.pop(topic, None) is not None:
            logger.info("{}: recovered", topic)


def resolve_allocation_source(choice: str, socket: str) -> str:
    """``auto`` -> ``podresources`` when the kubelet socket exists, else ``annotation`` (§7.5)."""
    if choice not in ALLOCATION_SOURCES:
        raise ValueError(f"unknown allocation source {choice!r} (known: {', '.join(ALLOCATION_SOURCES)})")
    if choice == "auto":
        return "podresources" if Path(socket).exists() else "annotation"
    return choice


class NodeAgent:
    """One node's agent. ``client`` None means no cluster (dry run from facts): then ``node`` must be
    given as the Node object to plan against."""

    def __init__(self, policy: Policy, backend: AcceleratorBackend, node_name: str, *, client: Any = None,
                 node: Mapping[str, Any] | None = None, cpuinfo: str = CPUINFO, allocation_source: str = "auto",
                 group_id_with_memory: bool = False, namespace: str | None = None,
                 podresources_socket: str | None = None):
        self.policy = policy
        self.rules = agent_rules(policy)
        self.backend = backend
        self.node_name = node_name
        self.client = client
        self.on_pass: Callable[[bool], None] | None = None  # called after each reconcile with its success
        self.observers: list[Callable[[AgentPlan | None, float], None]] = []  # each pass: plan, probe seconds
        self.probe_seconds = 0.0
        self.node = node
        self.cpuinfo = cpuinfo
        self.group_id_with_memory = group_id_with_memory
        self.namespace = namespace or os.environ.get(self.rules.namespaceEnv) or self.rules.namespace
        self.podresources_socket = podresources_socket or self.rules.podResources.socket
        resolve_allocation_source(allocation_source, self.podresources_socket)   # validates the choice
        self.allocation_choice = allocation_source
        self.log = OnceLog()
        self._seen_accelerators = False
        self._recorded_events: set[tuple[str, str, str, str]] = set()

    @property
    def allocation_source(self) -> str:
        """The source this pass uses: ``auto`` is resolved against the socket on every pass."""
        return resolve_allocation_source(self.allocation_choice, self.podresources_socket)

    # -- allocations (§7.5) ------------------------------------------------------------------------
    def pod_resources(self) -> list[dict[str, Any]] | None:
        """kubelet's PodResources ``List`` (dicts), or None when the ledger comes from the annotations.

        ``auto`` without the socket: None, logged once at INFO. ``podresources`` without the socket,
        or a failing call: None with an ERROR logged once per distinct cause; the agent keeps running
        on the annotations and logs the recovery once when the socket answers again.
        """
        socket = self.podresources_socket
        if self.allocation_source == "annotation":
            if self.allocation_choice == "auto":
                self.log.problem("allocations", f"no kubelet PodResources socket at {socket}; the ledger is "
                                 "rebuilt from the Pods' allocation annotations", "INFO")
            return None
        if not Path(socket).exists():
            self.log.problem("allocations", f"--allocation-source podresources: the kubelet PodResources socket "
                             f"{socket} does not exist; the ledger is rebuilt from the Pods' allocation "
                             "annotations until it appears")
            return None
        try:
            found = list_pod_resources(socket, self.rules.podResources.timeoutSeconds)
        except PodResourcesError as exc:
            self.log.problem("allocations", f"{exc}; the ledger is rebuilt from the Pods' allocation annotations")
            return None
        self.log.ok("allocations")
        return found

    # -- probe -------------------------------------------------------------------------------------
    def probe(self) -> tuple[NodeFactsDoc, bool]:
        """The node's facts and whether the accelerator part is known (see module docstring)."""
        try:
            cpu = cpu_facts(self.backend, self.cpuinfo)
            self.log.ok("cpu probe")
        except OSError as exc:
            self.log.problem("cpu probe", str(exc))
            cpu = {}
        known = True
        try:
            accelerators = self.backend.accelerators()
            self.log.ok("accelerator probe")
        except ProbeError as exc:
            cause = f"{exc} (cause: {type(exc.cause).__name__}: {exc.cause})" if exc.cause else str(exc)
            if exc.kind == "library" and not self._seen_accelerators:
                self.log.problem("accelerator probe", f"no accelerator library, publishing CPU facts only: {cause}",
                                 "WARNING")
            else:
                self.log.problem("accelerator probe", f"{cause}; accelerator objects left unchanged")
                known = False
            accelerators = []
        except Exception as exc:  # a backend bug must not stop the agent either
            self.log.problem("accelerator probe", f"unexpected {type(exc).__name__}: {exc}")
            accelerators, known = [], False
        source = getattr(self.backend, "source", self.backend.name)
        try:
            facts = parse_facts({"node": self.node_name, "cpu": cpu, "accelerators": accelerators}, source)
            self.log.ok("facts")
        except FactsError as exc:
            self.log.problem("facts", str(exc))
            facts, known = NodeFactsDoc(node=self.node_name, cpu=_cpu_or_empty(cpu)), False
        if known and facts.accelerators:
            self._seen_accelerators = True
        return facts, known

    # -- observe -----------------------------------------------------------------------------------
    def _settings(self) -> Settings:
        catalog = self.policy.settings
        raw: dict[str, str] = {}
        if self.client is not None:
            ns = os.environ.get(catalog.namespaceEnv) or catalog.namespace
            try:
                raw = decode_secret_data(self.client.get_secret(ns, catalog.secretName))
                self.log.ok("settings")
            except Exception as exc:
                self.log.problem("settings", f"cannot read Secret {ns}/{catalog.secretName}, using defaults: {exc}",
                                 "WARNING")
        return resolve(catalog, raw)

    def plan(self) -> AgentPlan:
        """Probe, read the cluster (when there is one) and compute the desired objects."""
        started = time.monotonic()
        facts, known = self.probe()
        self.probe_seconds = time.monotonic() - started
        settings = self._settings()
        worker_now, pods = None, []
        if self.client is not None:
            node = self.client.get_node(self.node_name)
            nf = self.rules.nodeFeature
            worker_now = self.client.get_custom(nf.group, nf.version, nf.plural,
                                                node_feature_name(self.policy, self.node_name, "worker"),
                                                self.namespace)
            pods = self.client.pods_on_node(self.node_name)
            pod_resources = self.pod_resources()
        else:
            node = dict(self.node or {"metadata": {"name": self.node_name}})
            pod_resources = None
        return plan_node(self.policy, facts, node, settings, worker_now=worker_now, pods=pods,
                         accelerators_known=known, group_id_with_memory=self.group_id_with_memory,
                         namespace=self.namespace, pod_resources=pod_resources)

    # -- apply -------------------------------------------------------------------------------------
    def apply(self, plan: AgentPlan) -> list[str]:
        """Write ``plan`` through the client; returns a list of ``"<action> <what>"`` lines."""
        c, nf, dv = self.client, self.rules.nodeFeature, self.rules.devices
        done: list[str] = []
        node = c.get_node(self.node_name)
        uid = (node.get("metadata") or {}).get("uid", "")
        for obj in (plan.worker, plan.device_manager):
            if obj is not None:
                action, _ = c.upsert_custom(nf.group, nf.version, nf.plural, obj)
                if action != "unchanged":
                    done.append(f"{action} NodeFeature {obj['metadata']['name']}")
        if plan.accelerators_known and plan.device_manager is None:
            name = node_feature_name(self.policy, self.node_name, "deviceManager")
            if c.delete_custom_owned(nf.group, nf.version, nf.plural, name, self.namespace, uid, self.node_name):
                done.append(f"deleted NodeFeature {name}")
        annotations = plan.node_patch["metadata"].get("annotations") or {}
        current = (node.get("metadata") or {}).get("annotations") or {}
        if any(current.get(k) != v for k, v in annotations.items()):
            c.patch_node_annotations(self.node_name, annotations)
            done.append("patched Node annotations")
        status = plan.node_patch.get("status")
        if status:
            cap_now = (node.get("status") or {}).get("capacity") or {}
            alloc_now = (node.get("status") or {}).get("allocatable") or {}
            if any(cap_now.get(k) != v for k, v in status["capacity"].items()) or \
                    any(alloc_now.get(k) != v for k, v in status["allocatable"].items()):
                c.patch_node_status(self.node_name, status)
                done.append("patched Node capacity")
        for patch in plan.pod_patches:
            meta = patch["metadata"]
            c.patch_pod_annotations(meta["namespace"], meta["name"], meta["annotations"])
            done.append(f"annotated Pod {meta['namespace']}/{meta['name']}")
        if plan.devices is not None:
            action, _ = c.upsert_custom(dv.group, dv.version, dv.plural, plan.devices)
            if action != "unchanged":
                done.append(f"{action} Devices {self.node_name}")
            if c.replace_custom_status(dv.group, dv.version, dv.plural, self.node_name, plan.devices["status"]):
                done.append(f"wrote Devices {self.node_name} status")
        elif plan.accelerators_known:
            if c.delete_custom_owned(dv.group, dv.version, dv.plural, self.node_name, None, uid, self.node_name):
                done.append(f"deleted Devices {self.node_name}")
        self._record_events(plan, uid)
        return done

    def _record_events(self, plan: AgentPlan, node_uid: str) -> None:
        """Record each ledger Event once per process (a rebuild repeats them every tick)."""
        dv = self.rules.devices
        for ev in plan.events:
            key = (ev.kind, ev.namespace, ev.name, ev.message)
            if key in self._recorded_events:
                continue
            self._recorded_events.add(key)
            if ev.kind == dv.kind:
                involved = {"api_version": dv.apiVersion, "kind": dv.kind, "name": ev.name}
            else:
                involved = {"api_version": "v1", "kind": ev.kind, "name": ev.name, "namespace": ev.namespace}
            logger.warning("{} {}/{}: {}: {}", ev.kind, ev.namespace, ev.name, ev.reason, ev.message)
            self.client.warn(involved, ev.reason, ev.message, COMPONENT)

    # -- loop --------------------------------------------------------------------------------------
    def reconcile(self, dry_run: bool = False) -> AgentPlan | None:
        """One pass. Never raises for cluster or probe trouble: logs once and returns None."""
        plan = None
        try:
            plan = self.plan()
            if not dry_run and self.client is not None:
                for line in self.apply(plan):
                    logger.info("{}", line)
            self.log.ok("reconcile")
            return plan
        except Exception as exc:
            self.log.problem("reconcile", f"{type(exc).__name__}: {exc}")
            plan = None
            return None
        finally:
            if self.on_pass is not None:  # health endpoints (runtime/agent/health.py)
                self.on_pass(self.log.healthy("reconcile"))
            for observer in self.observers:  # metrics (runtime/agent/metrics.py)
                observer(plan, self.probe_seconds)

    def watches(self) -> list:
        """The client's watch specs for this node (Node, NodeFeatures, Pods, settings Secret)."""
        nf, catalog = self.rules.nodeFeature, self.policy.settings
        return self.client.node_watches(
            self.node_name, nf.group, nf.version, nf.plural, self.namespace, self.policy.key("nodeFeatureNode"),
            os.environ.get(catalog.namespaceEnv) or catalog.namespace, catalog.secretName)

    def run(self, interval: float, stop: threading.Event | None = None, watch: bool = True) -> None:
        """Reconcile at start, on every watched change (when ``watch`` and a client), and at least every
        ``interval`` seconds (the probe has no change events), until ``stop`` is set."""
        stop = stop or threading.Event()
        wake = threading.Event()
        if watch and self.client is not None:
            self.client.start_watches(self.watches(), wake, stop)
        while not stop.is_set():
            wake.clear()
            self.reconcile()
            wake.wait(interval)


def _cpu_or_empty(cpu: Mapping[str, Any]) -> CpuFacts:
    try:
        return CpuFacts.model_validate(dict(cpu))
    except Exception:
        return CpuFacts()
