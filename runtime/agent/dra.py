"""The agent's ``dra`` backend: a node's accelerators from the ResourceSlices of the drivers the rules
list (docs/concepts/dra.md "Two kinds of accelerator node"), and the choice ``auto`` makes between it, the
recorded facts and NVML.

:class:`DraBackend` has the probe backends' interface (``name``, ``cpu()``, ``accelerators()``;
probes/backend.py): its slices come from a callable, the agent's watch cache of its node's slices
(:class:`runtime.agent.cluster.NodeCluster`) or a file (the cluster-less dry run,
:func:`slices_from_file`). The reading itself is the engine's
(:func:`runtime.engine.devices.draslices.read_node`); :attr:`DraBackend.reading` keeps the last one for
the ledger from ResourceClaims (:func:`runtime.engine.devices.draclaims.claim_pod_resources`) and the
warnings the agent logs and records.

``auto`` (:class:`AutoBackend` on a cluster, :func:`auto_fallback`): one DaemonSet for a mixed cluster.
On each probe, the node's accelerators come from its ResourceSlices (the ``dra`` backend) as soon as a
driver of the rules publishes a slice for the node, and from then on (the choice is not undone when
the slices go, e.g. while the driver restarts: the node then shows no accelerator, as with ``dra``);
until then from the recorded facts when ``--facts`` names a file that exists (the chart mounts
``agent.recordedFacts`` as ``<node>.yaml`` files: a node without one gets NVML), else from NVML. The
recorded document stands for the host: its CPU is the node's whichever source gives the accelerators.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from loguru import logger

from runtime.engine.devices.draslices import DraReading, dra_drivers, dra_policy, read_node
from runtime.engine.policy import Policy
from runtime.engine.snapshot import SnapshotError
from runtime.snapshots import read_objects

BACKEND = "dra"
AUTO = "auto"
SLICE_KIND = "ResourceSlice"


class DraBackend:
    """Accelerators from ResourceSlices. ``slices()`` returns the current ResourceSlice objects (the
    node's, or more: the reading keeps the node's); ``source`` names them in messages."""

    name = BACKEND

    def __init__(self, policy: Policy, node: str, slices: Callable[[], list[dict[str, Any]]], source: str):
        if not dra_drivers(policy):
            raise ValueError(dra_policy(policy).messages.noDrivers if dra_policy(policy) is not None
                             else "no DraDriver in the rules: the dra backend reads nothing")
        self.policy, self.node, self._slices, self.source = policy, node, slices, source
        self.reading = DraReading(node=node)

    def bind(self, slices: Callable[[], list[dict[str, Any]]]) -> None:
        """Read the slices from ``slices()`` from now on (the agent's watch cache, once it exists)."""
        self._slices = slices

    def slices(self) -> list[dict[str, Any]]:
        """The slices its source holds now."""
        return self._slices()

    def cpu(self) -> dict[str, str] | None:
        """Slices say nothing about the CPU: None (the agent reads /proc/cpuinfo or --cpuinfo)."""
        return None

    def accelerators(self) -> list[dict[str, Any]]:
        """The node's whole accelerators read from its slices now (docs/agent.md "Probe facts" shape)."""
        self.reading = read_node(self.policy, self.node, self._slices())
        return [dict(a) for a in self.reading.accelerators]

    def problems(self) -> list[str]:
        """What the last reading could not use: unreadable devices, stale slices, MIG-on GPUs."""
        return self.reading.warnings + self.reading.notes + self.reading.offers_nothing(self.policy)


def slices_from_file(path: str | Path) -> list[dict[str, Any]]:
    """The ResourceSlice objects of a YAML/JSON file (documents, ``kind: List``; other kinds skipped).
    Raises ValueError naming the file when it cannot be read or holds no ResourceSlice."""
    try:
        objects, _ = read_objects([str(path)])
    except SnapshotError as exc:
        raise ValueError(str(exc)) from None
    slices = [o for o in objects if isinstance(o, dict) and o.get("kind") == SLICE_KIND]
    if not slices:
        raise ValueError(f"{path}: no {SLICE_KIND} in the file")
    return slices


def publishes_for(policy: Policy, slices: list[dict[str, Any]], node: str) -> list[str]:
    """The configured drivers (rules/dra.yaml) with a slice naming ``node`` in ``slices`` (sorted):
    ``auto`` picks the ``dra`` backend when there is one."""
    drivers = dra_drivers(policy)
    return sorted({s["spec"]["driver"] for s in slices
                   if (s.get("spec") or {}).get("driver") in drivers and s["spec"].get("nodeName") == node})


def cluster_publishes_for(session: Any, policy: Policy, node: str) -> list[str] | None:
    """:func:`publishes_for` over one list of the cluster's ResourceSlices naming ``node`` (field
    selector ``spec.nodeName``); None when the cluster does not serve or refuses them (``auto`` then
    never reads slices), with the reason logged."""
    from runtime.kube.session import KubeApiError

    try:
        path = session.ref(SLICE_KIND).path()
        page = session.call("get", path, query={"fieldSelector": f"spec.nodeName={node}"})
    except KubeApiError as exc:
        logger.info("backend auto: cannot list ResourceSlices ({}): no DRA source for this agent", exc)
        return None
    return publishes_for(policy, page.get("items") or [], node)


def auto_fallback(facts: str | None, node: str):
    """The source ``auto`` uses while no driver publishes slices for ``node``: the recorded facts at
    ``facts`` when that file exists (its ``node`` must be ``node``), else NVML. Raises ValueError for
    an unreadable or foreign document."""
    from probes.backend import select_backend

    if facts and Path(facts).is_file():
        backend = select_backend("fake", facts)
        if backend.node and backend.node != node:
            raise ValueError(
                f"the recorded facts {facts} describe node {backend.node!r}, not --node {node!r}")
        return backend
    return select_backend("real", None)


def describe(backend: Any) -> str:
    """``recorded facts FILE`` or ``NVML``: what a non-DRA backend is, for ``auto``'s log lines."""
    return f"recorded facts {backend.source}" if backend.name == "fake" else "NVML"


class AutoBackend:
    """``--backend auto`` on a cluster (module docstring): ``fallback`` (:func:`auto_fallback`) until a
    driver of the rules publishes a slice for the node in ``slices()`` (the agent's watch cache, bound
    with :meth:`bind` like :class:`DraBackend`), then the ``dra`` backend for good. ``name`` and
    ``source`` are those of the backend in use; ``reading`` and :meth:`problems` the ``dra`` one's."""

    def __init__(self, policy: Policy, node: str, fallback: Any,
                 source: str = "the cluster's ResourceSlices"):
        self.policy, self.node, self.fallback = policy, node, fallback
        self.dra = DraBackend(policy, node, lambda: [], source)
        self.active = fallback
        logger.info("backend auto: {} for node {} until a DRA driver of the rules publishes slices for it",
                    describe(fallback), node)

    @property
    def name(self) -> str:
        return self.active.name

    @property
    def source(self) -> str:
        return getattr(self.active, "source", self.active.name)

    @property
    def reading(self) -> DraReading:
        return self.dra.reading

    def bind(self, slices: Callable[[], list[dict[str, Any]]]) -> None:
        """Read the slices from ``slices()`` from now on (the agent's watch cache)."""
        self.dra.bind(slices)

    def cpu(self) -> dict[str, Any] | None:
        """The recorded CPU when the fallback is a recorded document, else None (/proc/cpuinfo)."""
        return self.fallback.cpu()

    def start_events(self, wait_ms: int) -> bool:
        """The fallback's XID event thread, when it is NVML (probes/nvmlevents.py)."""
        start = getattr(self.fallback, "start_events", None)
        return bool(start(wait_ms)) if start is not None else False

    def stop_events(self) -> None:
        stop = getattr(self.fallback, "stop_events", None)
        if stop is not None:
            stop()

    def accelerators(self) -> list[dict[str, Any]]:
        """The accelerators of the backend in use, after switching to ``dra`` when slices appeared."""
        if self.active is not self.dra:
            drivers = publishes_for(self.policy, self.dra.slices(), self.node)
            if drivers:
                logger.info("backend auto: {} publish(es) slices for node {}: reading them (backend dra)",
                            ", ".join(drivers), self.node)
                self.active = self.dra
        return self.active.accelerators()

    def problems(self) -> list[str]:
        return self.dra.problems()
