"""The node agent's loop: probe -> observe -> plan (pure engine) -> apply (:mod:`runtime.agent.cluster`:
the controller's session, watch cache and applier, narrowed to one node).

Failure handling (docs/agent.md "Choices where the spec leaves room"): a probe that cannot run never
stops the agent. CPU facts are always published; each distinct failure is logged once with its cause
and its recovery once. A missing NVIDIA library on a node that never showed an accelerator reads as
"no accelerators" (a CPU node); any other accelerator probe failure leaves the device-manager
NodeFeature and the Devices object as they are until the probe works again. A failing reconcile (API
errors) is logged and retried on the next tick; the process never exits because of it.

Sources: docs/agent.md "The Devices object and its ledger", docs/agent.md "Labels, annotations and
NodeFeatures".
"""
from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from loguru import logger

from probes.backend import AcceleratorBackend, cpu_facts
from probes.cpu import CPUINFO
from probes.errors import ProbeError
from runtime.agent.cluster import NodeCluster
from runtime.agent.events import EventRecorder
from runtime.agent.outofservice import OutOfService, start_events, stop_events
from runtime.agent.dra import BACKEND as DRA_BACKEND
from runtime.engine.devices import AgentPlan, LedgerEvent, agent_rules, node_feature_name, plan_node
from runtime.engine.devices.draclaims import claim_pod_resources
from runtime.engine.devices.draslices import dra_policy
from runtime.engine.policy import Policy
from runtime.reload.watcher import content_hash, generation_id
from runtime.engine.settings import Settings, decode_secret_data, resolve
from runtime.kube.podresources import PodResourcesError, list_pod_resources
from runtime.agent.oncelog import OnceLog
from runtime.kube.session import KubeApiError
from runtime.model.facts import CpuFacts, FactsError, NodeFactsDoc, parse_facts

ALLOCATION_SOURCES = ("auto", "podresources", "annotation")


def resolve_allocation_source(choice: str, socket: str) -> str:
    """``auto`` -> ``podresources`` when the kubelet socket exists, else ``annotation``."""
    if choice not in ALLOCATION_SOURCES:
        raise ValueError(f"unknown allocation source {choice!r} (known: {', '.join(ALLOCATION_SOURCES)})")
    if choice == "auto":
        return "podresources" if Path(socket).exists() else "annotation"
    return choice


class NodeAgent:
    """One node's agent. ``session`` (a :class:`runtime.kube.session.Session`) None means no cluster
    (dry run from facts): then ``node`` must be given as the Node object to plan against. With a
    session the agent reads and writes through :attr:`cluster` (a :class:`NodeCluster`), started on
    the first pass."""

    def __init__(self, policy: Policy, backend: AcceleratorBackend, node_name: str, *, session: Any = None,
                 node: Mapping[str, Any] | None = None, cpuinfo: str = CPUINFO,
                 allocation_source: str = "auto", group_id_with_memory: bool = False,
                 namespace: str | None = None, podresources_socket: str | None = None,
                 clock: Callable[[], datetime] | None = None):
        self.policy = policy
        self.rules = agent_rules(policy)
        self.backend = backend
        self.node_name = node_name
        self.on_pass: Callable[[bool], None] | None = None  # called after each reconcile with its success
        self.observers: list[Callable[[AgentPlan | None, float], None]] = []  # each pass: plan, probe seconds
        self.probe_seconds = 0.0
        self.node = node
        self.cpuinfo = cpuinfo
        self.group_id_with_memory = group_id_with_memory
        self.namespace = namespace or os.environ.get(self.rules.namespaceEnv) or self.rules.namespace
        catalog = policy.settings
        self.settings_namespace = os.environ.get(catalog.namespaceEnv) or catalog.namespace
        self.wake = threading.Event()   # set by every watch event of the cluster view
        self._worker_read: dict | None = None   # the worker NodeFeature as the last plan read it
        self.cluster: NodeCluster | None = None
        reads_slices = callable(getattr(backend, "bind", None))   # dra, or auto that may turn to dra
        if session is not None:
            self.cluster = NodeCluster(session, policy, node_name, self.namespace, self.settings_namespace,
                                       on_event=lambda *_: self.wake.set(), dra=reads_slices)
            if reads_slices:
                backend.bind(self.cluster.resource_slices)
        self.podresources_socket = podresources_socket or self.rules.podResources.socket
        resolve_allocation_source(allocation_source, self.podresources_socket)   # validates the choice
        self.allocation_choice = allocation_source
        self.log = OnceLog()
        # maintenance, health and when to look again at ``clock`` (docs/concepts/out-of-service.md)
        self.service = OutOfService(node_name, self.log, clock)
        self._seen_accelerators = False
        self.events = EventRecorder()   # each Event of a plan once per process

    @property
    def dra(self) -> bool:
        """Whether this pass's facts and allocations come from DRA (docs/concepts/dra.md "Accelerators from
        DRA drivers"): the ``dra`` backend, or ``auto`` once it reads slices (runtime/agent/dra.py
        :class:`AutoBackend`)."""
        return getattr(self.backend, "name", "") == DRA_BACKEND

    @property
    def allocation_source(self) -> str:
        """The source this pass uses: ``auto`` is resolved against the socket on every pass."""
        return resolve_allocation_source(self.allocation_choice, self.podresources_socket)

    # -- allocations -------------------------------------------------------------------------------
    def claim_allocations(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A DRA node's allocations from the ResourceClaims of its devices (docs/concepts/dra.md "The ledger
        from claims"), in the PodResources shape
        (:func:`runtime.engine.devices.draclaims.claim_pod_resources`)."""
        claims = self.cluster.resource_claims() if self.cluster is not None else []
        return claim_pod_resources(self.policy, self.backend.reading, claims, pods)

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
            self.log.problem("allocations",
                             f"--allocation-source podresources: the kubelet PodResources socket "
                             f"{socket} does not exist; the ledger is rebuilt from the Pods' allocation "
                             "annotations until it appears")
            return None
        try:
            found = list_pod_resources(socket, self.rules.podResources.timeoutSeconds)
        except PodResourcesError as exc:
            self.log.problem("allocations",
                             f"{exc}; the ledger is rebuilt from the Pods' allocation annotations")
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
                self.log.problem("accelerator probe",
                                 f"no accelerator library, publishing CPU facts only: {cause}", "WARNING")
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
        if self.dra:
            self._dra_problems()
        return facts, known

    def _dra_problems(self) -> None:
        """Log what the slices could not give (once while it lasts, docs/concepts/dra.md "Views per
        manufacturer", docs/node-facts-robustness.md "A malformed fact costs only its node (decision 19)"); an
        unreadable device also becomes a Warning Event on the Node (:meth:`plan`)."""
        problems = self.backend.problems()
        if problems:
            self.log.problem("accelerators from ResourceSlices", "; ".join(problems), "WARNING")
        else:
            self.log.ok("accelerators from ResourceSlices")

    # -- observe -----------------------------------------------------------------------------------
    def _settings(self) -> Settings:
        catalog = self.policy.settings
        raw: dict[str, str] = {}
        if self.cluster is not None:
            try:
                raw = decode_secret_data(self.cluster.settings_secret())
                self.log.ok("settings")
            except Exception as exc:
                self.log.problem("settings",
                                 f"cannot read Secret {self.settings_namespace}/{catalog.secretName}, "
                                 f"using defaults: {exc}", "WARNING")
        return resolve(catalog, raw)

    def plan(self) -> AgentPlan:
        """Probe, read the cluster (when there is one: its watch cache, started and synced on the
        first pass, before the probe: the ``dra`` backend reads its slices there) and compute the
        desired objects."""
        if self.cluster is not None:
            self.cluster.start()
        started = time.monotonic()
        facts, known = self.probe()
        self.probe_seconds = time.monotonic() - started
        worker_now, pods = None, []
        if self.cluster is not None:
            settings = self._settings()
            node = self.cluster.node()
            worker_now = self.cluster.node_feature(node_feature_name(self.policy, self.node_name, "worker"))
            # the version the plan's managed value came from
            self._worker_read = worker_now
            pods = self.cluster.pods()
            pod_resources = self.claim_allocations(pods) if self.dra else self.pod_resources()
        else:
            settings = self._settings()
            node = dict(self.node or {"metadata": {"name": self.node_name}})
            pod_resources = None
        maintenance, health, moves = self.service.resolve(self.policy, self.cluster, facts, known)
        plan = plan_node(self.policy, facts, node, settings, worker_now=worker_now, pods=pods,
                         accelerators_known=known, group_id_with_memory=self.group_id_with_memory,
                         namespace=self.namespace, pod_resources=pod_resources, maintenance=maintenance,
                         health=health)
        self.service.finish(self.policy, plan, moves)
        if self.dra:
            reason = dra_policy(self.policy).events.unreadableDevice
            plan.events += [
                LedgerEvent("Node", "", self.node_name, reason, w) for w in self.backend.reading.warnings]
        return plan

    # -- apply -------------------------------------------------------------------------------------
    def apply(self, plan: AgentPlan) -> list[str]:
        """Write ``plan`` through :attr:`cluster`; returns a list of ``"<action> <what>"`` lines."""
        node = self.cluster.node()
        done = self._apply_node_features(plan, node)
        done += self._apply_node(plan, node)
        for patch in plan.pod_patches:
            meta = patch["metadata"]
            self.cluster.patch_pod_annotations(meta["namespace"], meta["name"], meta["annotations"])
            done.append(f"annotated Pod {meta['namespace']}/{meta['name']}")
        done += self._apply_devices(plan, node)
        node_uid = (node.get("metadata") or {}).get("uid", "")
        self.events.record(self.cluster, self.rules.devices, plan, node_uid)
        return done

    def _apply_node_features(self, plan: AgentPlan, node: Mapping[str, Any]) -> list[str]:
        """The worker and device-manager NodeFeatures; the device-manager one is deleted (when the
        node owns it) once the probe knows there is no accelerator."""
        c, done = self.cluster, []
        if plan.worker is not None:
            # written against the version the plan read: an administrator's managed flip that lands in
            # between is a 409, not overwritten; the flip's watch event wakes the next pass, which keeps it
            name = plan.worker["metadata"]["name"]
            try:
                action = c.upsert(plan.worker, self._worker_read, reread_on_conflict=False)
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
                logger.info("NodeFeature {} changed since this pass read it; the next pass plans again", name)
                self.wake.set()
                action = "unchanged"
            if action != "unchanged":
                done.append(f"{action} NodeFeature {name}")
        if plan.device_manager is not None:
            action = c.upsert(plan.device_manager, c.node_feature(plan.device_manager["metadata"]["name"]))
            if action != "unchanged":
                done.append(f"{action} NodeFeature {plan.device_manager['metadata']['name']}")
        if plan.accelerators_known and plan.device_manager is None:
            name = node_feature_name(self.policy, self.node_name, "deviceManager")
            if c.delete_owned(c.node_feature(name), node):
                done.append(f"deleted NodeFeature {name}")
        return done

    def _apply_node(self, plan: AgentPlan, node: Mapping[str, Any]) -> list[str]:
        """The Node's CPU annotations and extended-resource capacity (docs/agent.md "Capacity and fit
        labels"), each patched only when a key differs."""
        done = []
        annotations = plan.node_patch["metadata"].get("annotations") or {}
        current = (node.get("metadata") or {}).get("annotations") or {}
        if any(current.get(k) != v for k, v in annotations.items()):
            self.cluster.patch_node_annotations(annotations)
            done.append("patched Node annotations")
        status = plan.node_patch.get("status")
        if status:
            cap_now = (node.get("status") or {}).get("capacity") or {}
            alloc_now = (node.get("status") or {}).get("allocatable") or {}
            if any(cap_now.get(k) != v for k, v in status["capacity"].items()) or \
                    any(alloc_now.get(k) != v for k, v in status["allocatable"].items()):
                self.cluster.patch_node_status(status)
                done.append("patched Node capacity")
        return done

    def _apply_devices(self, plan: AgentPlan, node: Mapping[str, Any]) -> list[str]:
        """The Devices object and its ledger status; deleted (when the node owns it) once the probe
        knows there is no accelerator."""
        c, done = self.cluster, []
        if plan.devices is not None:
            action = c.upsert(plan.devices, c.devices())
            if action != "unchanged":
                done.append(f"{action} Devices {self.node_name}")
            if c.write_status(plan.devices):
                done.append(f"wrote Devices {self.node_name} status")
        elif plan.accelerators_known:
            if c.delete_owned(c.devices(), node):
                done.append(f"deleted Devices {self.node_name}")
        return done

    # -- loop --------------------------------------------------------------------------------------
    def use_policy(self, policy: Policy) -> None:
        """A reloaded rules generation (the chart's mounted ConfigMap changed): the next pass plans and
        writes with ``policy``; a pass in progress finishes on the old one. The watches keep their
        selectors (a change of the NodeFeature node label or of the settings Secret's name needs a
        restart). Wakes the loop."""
        self._next_policy = policy
        self.wake.set()

    def _swap_policy(self) -> None:
        policy, self._next_policy = getattr(self, "_next_policy", None), None
        if policy is None:
            return
        self.policy, self.rules = policy, agent_rules(policy)
        if self.cluster is not None:
            self.cluster.policy, self.cluster.rules = policy, self.rules
            self.cluster.applier.policy = policy
        logger.info("rules generation {} planned with from this pass on",
                    generation_id(content_hash(Path(policy.ruleset.root))))

    def reconcile(self, dry_run: bool = False) -> AgentPlan | None:
        """One pass. Never raises for cluster or probe trouble: logs once and returns None."""
        plan = None
        self._swap_policy()
        try:
            plan = self.plan()
            if not dry_run and self.cluster is not None:
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

    def run(self, interval: float, stop: threading.Event | None = None, watch: bool = True) -> None:
        """Reconcile at start, on every watched change (when ``watch`` and a cluster: the watch cache's
        events), and at least every ``interval`` seconds (the probe has no change events), until
        ``stop`` is set; the watches stop with the loop."""
        stop = stop or threading.Event()
        start_events(self.policy, self.backend)
        try:
            while not stop.is_set():
                self.wake.clear()
                self.reconcile()
                if watch:
                    self.wake.wait(self.service.wait_seconds(interval))
                else:
                    stop.wait(self.service.wait_seconds(interval))
        finally:
            self.close()

    def close(self) -> None:
        """Stop the backend's XID event thread and the cluster view's watches (when there is a cluster)."""
        stop_events(self.backend)
        if self.cluster is not None:
            self.cluster.stop()


def _cpu_or_empty(cpu: Mapping[str, Any]) -> CpuFacts:
    try:
        return CpuFacts.model_validate(dict(cpu))
    except Exception:
        return CpuFacts()
