"""A stand-in for the vendor device plugin on kwok's fake Nodes — test and demo machinery only.

accelpolicy does not ship a device plugin (decision 11, docs/index.md "Not in this release"): on a real node the vendor
plugin advertises the accelerator tokens and kubelet assigns devices to containers; the agent then
reads kubelet's PodResources and writes each Pod's allocation annotation. On the local control plane
neither kubelet nor a plugin exists (kwok only fakes Node and Pod status), so this module plays both
parts, from outside, the way they would look through the API:

* :meth:`DevicePluginStandIn.advertise` puts the tokens a plugin serves (docs/agent.md "Capacity and fit labels", "keys
  the device plugin serves") on each fake Node's ``status.capacity``/``allocatable``: ``<base>`` =
  whole-capable healthy accelerators, ``<base>.shared`` = that x 10, ``<base>.sliced`` = the sum of
  their ``logicalSliced.count``, ``device.gpustack.ai/<manufacturer>.visibility`` = healthy
  accelerators. Hardware partitions (``<base>.partitioned``) are not served: no seed node has one.
* For every Pod bound to one of its nodes (``spec.nodeName``, i.e. what kubelet would admit) whose
  containers request accelerator tokens and which carries no allocation annotation yet, it picks
  accelerators as a plugin's ``Allocate`` would, from the node's ``Devices`` ledger (``status``):
  whole = a free accelerator (mode 0); shared = mode 0 or 2 with a share left; sliced = mode 0 or 3
  with the container's ``<base>.sliced.units`` left. The choice is expressed as the PodResources
  answer kubelet would give and turned into the annotation by the agent's own mapping
  (:func:`runtime.engine.devices.podresources.pod_allocations`, docs/agent.md "The Devices object and its ledger"), which is then
  merge-patched onto the Pod. The agent's loop (annotation allocation source) rebuilds the ledger.

A Pod whose request cannot be served (no free accelerator, a sliced request without its ``.units``
key because no Pod webhook folded it) is left without annotation and the reason is kept in
:attr:`DevicePluginStandIn.problems` (and logged once), the way a failed ``Allocate`` leaves a Pod
without devices.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping

from loguru import logger

from runtime.engine.devices import agent_rules, annotation_text, pod_allocations
from runtime.kube.applier import Applier
from runtime.kube.cache import WatchedKind
from runtime.kube.clustercache import ClusterCache
from runtime.model.normalize import parse_quantity
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers, classifier_table
from runtime.model.resourcefamily import resource_family

#: Token suffixes a vendor plugin serves per family (appended to the manufacturer's ``<base>``).
TOKEN_SUFFIXES = {"exclusive": "", "shared": ".shared", "sliced": ".sliced"}
#: The per-manufacturer visibility token (sidecars that must see the accelerators without a charge).
VISIBILITY_TOKEN = "device.gpustack.ai/{manufacturer}.visibility"
TERMINAL_PHASES = ("Succeeded", "Failed")


class AllocationRefused(Exception):
    """The stand-in cannot serve a Pod's request (the message says why, naming Pod and key)."""


def advertised_tokens(policy: Policy, devices: Mapping[str, Any]) -> dict[str, str]:
    """The device-plugin tokens for one node's ``Devices`` object: ``{resource name: count}``.

    Counts only healthy accelerators that are not partitioned (docs/agent.md "The Devices object and its ledger").
    """
    bases = {m["id"]: m["base"] for m in classifier_manufacturers(policy)}
    out: dict[str, int] = {}
    for group in (devices.get("spec") or {}).get("groups") or []:
        manufacturer = group["manufacturer"]
        base = bases.get(manufacturer)
        if base is None:
            continue
        for acc in group.get("accelerators") or []:
            st = acc.get("status") or {}
            if st.get("unhealthy") or (st.get("physicalSliced") or {}).get("count", 0) > 0:
                continue
            for family, suffix in TOKEN_SUFFIXES.items():
                add = {"exclusive": 1, "shared": 10,
                       "sliced": (st.get("logicalSliced") or {}).get("count", 0)}[family]
                out[base + suffix] = out.get(base + suffix, 0) + add
            vis = VISIBILITY_TOKEN.format(manufacturer=manufacturer)
            out[vis] = out.get(vis, 0) + 1
    return {k: str(v) for k, v in out.items()}


def choose_devices(policy: Policy, pod: Mapping[str, Any], devices: Mapping[str, Any],
                   taken: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """What kubelet's PodResources would report for ``pod`` after a plugin's ``Allocate``.

    Returns ``[{name, devices: [{resourceName, deviceIds}]}]`` per container with accelerator tokens
    (empty when it requests none). ``devices`` is the node's Devices object (ledger in ``status``);
    ``taken`` maps accelerator ids to credits already promised by this stand-in but not yet in the
    ledger. Raises :class:`AllocationRefused` when no accelerator can serve a request.
    """
    rules = agent_rules(policy)
    table = classifier_table(policy, rules.podResources.resourceKeysParams)
    manufacturers = classifier_manufacturers(policy)
    manu_of_base = {m["base"]: m["id"] for m in manufacturers}
    credits, share = policy.constants.creditsPerAccelerator, policy.constants.share
    modes = rules.ledger.modes
    sep = rules.podResources.deviceIdSeparator
    ledger = {(g["manufacturer"], a["id"]): dict(a) for g in (devices.get("status") or {}).get("groups") or []
              for a in g.get("accelerators") or []}
    promised = dict(taken or {})
    meta = pod.get("metadata") or {}
    who = f"Pod {meta.get('namespace')}/{meta.get('name')}"
    out = []
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        res = ctr.get("resources") or {}
        requests = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        found = []
        for key, value in sorted(requests.items()):
            info = resource_family(key, table, manufacturers)
            family = info["family"]
            if family not in TOKEN_SUFFIXES or key != info["base"] + TOKEN_SUFFIXES[family]:
                continue   # only the tokens themselves are allocated; .units/percentages ride along
            manufacturer = manu_of_base[info["base"]]
            count = int(str(value))
            if family == "exclusive":
                need, want_modes = credits, (modes.none,)
            elif family == "shared":
                need, want_modes = share, (modes.none, modes.shared)
            else:
                units_key = rules.capacity.slicedUnits.format(base=info["base"])
                if units_key not in requests:
                    raise AllocationRefused(f"{who} container {ctr['name']}: {key} without {units_key} "
                                            "(the Pod webhook folds it; is it registered?)")
                need, want_modes = int(parse_quantity(requests[units_key])), (modes.none, modes.sliced)
            ids = []
            for (manu, acc_id), acc in sorted(ledger.items(), key=lambda kv: kv[1].get("index", 0)):
                if len(ids) == count:
                    break
                if manu != manufacturer or acc.get("mode", 0) not in want_modes:
                    continue
                left = acc.get("remaining", credits if acc.get("mode", 0) == modes.none else 0) - promised.get(acc_id, 0)
                if left < need or (family == "exclusive" and promised.get(acc_id)):
                    continue
                promised[acc_id] = promised.get(acc_id, 0) + need
                ids.append(acc_id if family == "exclusive" else f"{acc_id}{sep}{len(ids)}")
            if len(ids) < count:
                raise AllocationRefused(f"{who} container {ctr['name']}: {key}: {count} wanted, "
                                        f"{len(ids)} free on node {(pod.get('spec') or {}).get('nodeName')}")
            found.append({"resourceName": key, "deviceIds": ids})
        if found:
            out.append({"name": ctr["name"], "devices": found})
    return out


class DevicePluginStandIn:
    """Advertise tokens on ``nodes`` and annotate the Pods bound to them (see the module docstring).

    ``session`` is a :class:`runtime.kube.session.Session`: the stand-in reads through a
    :class:`runtime.kube.clustercache.ClusterCache` (Pods, Devices, Nodes) and writes through an
    :class:`runtime.kube.applier.Applier`, as the agent and the controller do. :meth:`start` advertises
    once (every node in ``nodes`` must have its Devices object; ``TimeoutError`` otherwise) and starts
    a daemon thread that re-checks the Pods of those nodes on every Pod event; :meth:`stop` ends it.
    """

    def __init__(self, session: Any, policy: Policy, nodes: list[str]):
        self.policy, self.nodes = policy, list(nodes)
        self._devices_kind = agent_rules(policy).devices.kind
        self.cache = ClusterCache(session, [WatchedKind("Pod"), WatchedKind(self._devices_kind), WatchedKind("Node")],
                                  on_event=self._on_event)
        self.applier = Applier(session, policy, cache=self.cache, field_manager="device-plugin-stand-in")
        self.problems: dict[tuple[str, str], str] = {}
        self.annotated: list[tuple[str, str, str]] = []   # (namespace, name, node) in order
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_event(self, kind: str, _type: str, _obj: dict) -> None:
        if kind == "Pod":
            self._wake.set()

    def devices(self, node: str) -> dict[str, Any] | None:
        return self.cache.get(self._devices_kind, node)

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """The cached Pods bound to ``node`` (``spec.nodeName``)."""
        return [p for p in self.cache["Pod"].objects() if (p.get("spec") or {}).get("nodeName") == node]

    def advertise(self) -> dict[str, dict[str, str]]:
        """Patch every node's status with its tokens (only when they differ); returns them by node."""
        out = {}
        for node in self.nodes:
            devices = self.devices(node)
            if devices is None:
                raise TimeoutError(f"no Devices object for node {node}: has its agent run?")
            tokens = advertised_tokens(self.policy, devices)
            status = (self.cache.get("Node", node) or {}).get("status") or {}
            if any((status.get(k) or {}).get(t) != v for k in ("capacity", "allocatable") for t, v in tokens.items()):
                self.applier.merge_patch("Node", node, {"status": {"capacity": tokens, "allocatable": tokens}},
                                         subresource="status")
            out[node] = tokens
        return out

    def sync(self) -> None:
        """One pass: annotate every bound, unannotated, non-terminal Pod requesting accelerator tokens."""
        key = self.policy.key("allocation")
        for node in self.nodes:
            pods = [p for p in self.pods_on_node(node)
                    if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES
                    and not (p["metadata"].get("deletionTimestamp"))]
            todo = [p for p in pods if key not in (p["metadata"].get("annotations") or {})]
            if not todo:
                continue
            devices = self.devices(node) or {}
            taken: dict[str, int] = {}
            for pod in todo:
                ident = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                try:
                    containers = choose_devices(self.policy, pod, devices, taken)
                except AllocationRefused as exc:
                    if self.problems.get(ident) != str(exc):
                        logger.warning("device plugin stand-in: {}", exc)
                    self.problems[ident] = str(exc)
                    continue
                if not containers:
                    continue
                answer = [{"namespace": ident[0], "name": ident[1], "containers": containers}]
                docs, events = pod_allocations(self.policy, node, devices.get("spec") or {}, answer, [pod])
                for ev in events:
                    logger.warning("device plugin stand-in: {}", ev.message)
                doc = docs.get(ident)
                if not doc:
                    continue
                for groups in doc.values():
                    for g in groups:
                        for a in g["accelerators"]:
                            taken[a["id"]] = taken.get(a["id"], 0) + a["allocated"]
                self.applier.merge_patch("Pod", ident[1], {"metadata": {"annotations": {key: annotation_text(doc)}}},
                                         ident[0])
                self.problems.pop(ident, None)
                self.annotated.append((ident[0], ident[1], node))
                logger.info("device plugin stand-in: allocated {} on {}", "/".join(ident), node)

    def start(self, sync_timeout: float = 60.0) -> "DevicePluginStandIn":
        """Start the watches (once), advertise, then start the annotating thread; TimeoutError while
        a node has no Devices object yet or the caches did not sync (call again)."""
        self.cache.start()
        if not self.cache.wait_synced(sync_timeout):
            raise TimeoutError(f"device plugin stand-in: caches not synced: {self.cache.unsynced()}")
        self.advertise()
        self._thread = threading.Thread(target=self._loop, name="device-plugin-stand-in", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(5.0)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.sync()
            except Exception as exc:   # keep serving through API hiccups, like a plugin would
                logger.warning("device plugin stand-in: pass failed: {}: {}", type(exc).__name__, exc)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        self.cache.stop()
