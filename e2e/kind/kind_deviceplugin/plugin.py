"""The stand-in's servers: one v1beta1 ``DevicePlugin`` per resource name, registered with the kubelet.

Shapes: ``advertised_devices`` -> ``{resource name: [device ID, ...]}``; ``DevicePluginStandIn.allocations``
-> ``{resource name: [[device ID, ...] per Allocate container request]}`` in call order.
"""
from __future__ import annotations

import os
import re
import threading
from concurrent import futures
from pathlib import Path
from typing import Any, Iterator, Mapping

import grpc

from kind_deviceplugin import api_pb2, api_pb2_grpc
from runtime.engine.devices import agent_rules
from runtime.engine.policy import Policy
from runtime.model.facts import parse_facts

#: The device-plugin API version this stand-in speaks (k8s.io/kubelet deviceplugin/v1beta1 Version).
API_VERSION = "v1beta1"
#: The kubelet's Registration socket inside its device-plugins directory (v1beta1 KubeletSocket).
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
#: AF_UNIX path limit (sun_path) less its terminating NUL.
UNIX_PATH_MAX = 107


class RegistrationError(RuntimeError):
    """The kubelet refused or did not answer ``Register``; the message names resource, socket and status."""


def advertised_devices(policy: Policy, document: Mapping[str, Any], source: str = "<facts>") -> dict[str, list[str]]:
    """``{resource name: device IDs}`` a vendor plugin serves for one recorded node.

    ``<base>`` (rules/manufacturers.yaml) gets one ID per healthy accelerator without MIG, its UUID;
    ``<base>.shared`` gets ``sharesPerAccelerator`` (rules/constants.yaml) IDs per such accelerator,
    ``<uuid><deviceIdSeparator><n>`` (rules/agent.yaml, docs/agent.md "The Devices object and its ledger"), and ``<base>.sliced`` the
    manufacturer's ``logicalSlices`` IDs per such accelerator, ``<uuid><separator>slice-<n>``. Raises
    :class:`runtime.model.facts.FactsError` naming ``source`` and the field for a malformed document,
    ValueError for a manufacturer the rules do not know.
    """
    facts = parse_facts(dict(document), source)
    separator = agent_rules(policy).podResources.deviceIdSeparator
    shares = policy.constants.sharesPerAccelerator
    out: dict[str, list[str]] = {}
    for acc in facts.accelerators:
        manufacturer = policy.manufacturers.get(acc.manufacturer)
        if manufacturer is None:
            raise ValueError(f"{source}: accelerators[{acc.index}].manufacturer: {acc.manufacturer!r} "
                             f"is not in rules/manufacturers.yaml")
        if not acc.healthy or acc.migEnabled:
            continue
        out.setdefault(manufacturer.base, []).append(acc.uuid)
        out.setdefault(f"{manufacturer.base}.shared", []).extend(f"{acc.uuid}{separator}{n}" for n in range(shares))
        if manufacturer.logicalSlices:   # a sliced container holds one slice token (its .units ride along)
            out.setdefault(f"{manufacturer.base}.sliced", []).extend(
                f"{acc.uuid}{separator}slice-{n}" for n in range(manufacturer.logicalSlices))
    return out


def env_name(resource: str) -> str:
    """The variable Allocate sets for ``resource``: ``ACCELPOLICY_DEVICES_<NAME>`` (non-alphanumerics -> _)."""
    return "ACCELPOLICY_DEVICES_" + re.sub(r"[^A-Za-z0-9]", "_", resource).upper()


class ResourcePlugin(api_pb2_grpc.DevicePluginServicer):
    """``DevicePlugin`` service for one resource name: all devices Healthy; Allocate hands back an env
    variable listing the allocated IDs and records the request."""

    def __init__(self, resource: str, device_ids: list[str]):
        self.resource = resource
        self.device_ids = list(device_ids)
        self.endpoint = re.sub(r"[^A-Za-z0-9._-]", "_", resource) + ".sock"
        self.allocations: list[list[str]] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def GetDevicePluginOptions(self, request, context):
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=False)

    def ListAndWatch(self, request, context) -> Iterator[api_pb2.ListAndWatchResponse]:
        yield api_pb2.ListAndWatchResponse(devices=[api_pb2.Device(ID=i, health=HEALTHY) for i in self.device_ids])
        while context.is_active() and not self._stopped.wait(0.5):
            pass

    def GetPreferredAllocation(self, request, context):
        return api_pb2.PreferredAllocationResponse()

    def Allocate(self, request, context):
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            unknown = sorted(set(ids) - set(self.device_ids))
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{self.resource}: Allocate asked for unknown device IDs {unknown}")
            with self._lock:
                self.allocations.append(ids)
            responses.append(api_pb2.ContainerAllocateResponse(envs={env_name(self.resource): ",".join(ids)}))
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        return api_pb2.PreStartContainerResponse()

    def stop(self) -> None:
        self._stopped.set()


class DevicePluginStandIn:
    """The stand-in for one node: a server per resource in ``plugin_dir`` (the kubelet's
    device-plugins directory as this process sees it), each registered with the kubelet.

    ``plugin_dir`` must be short enough for AF_UNIX paths (a symlink to the real directory will do).
    """

    def __init__(self, plugin_dir: str | os.PathLike, devices: Mapping[str, list[str]]):
        self.plugin_dir = Path(plugin_dir)
        self.plugins = [ResourcePlugin(resource, ids) for resource, ids in sorted(devices.items())]
        self._servers: dict[str, grpc.Server] = {}
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None
        #: how many times the kubelet was seen restarting and every resource was registered again
        self.reregistrations = 0

    def start(self, register_timeout: float = 10.0, watch_interval: float = 1.0) -> None:
        """Serve every resource, then ``Register`` each with the kubelet. Raises :class:`RegistrationError`.

        Like a vendor plugin, it then watches the directory every ``watch_interval`` seconds: a restarted
        kubelet removes the plugin sockets and makes a new ``kubelet.sock``, so every resource is served
        and registered again.
        """
        self._serve_and_register(register_timeout)
        self._watcher = threading.Thread(target=self._watch, args=(register_timeout, watch_interval),
                                         name="deviceplugin-watch", daemon=True)
        self._watcher.start()

    def _serve_and_register(self, register_timeout: float) -> None:
        for plugin in self.plugins:
            path = self.plugin_dir / plugin.endpoint
            if len(str(path)) > UNIX_PATH_MAX:
                raise ValueError(f"{path}: longer than the {UNIX_PATH_MAX} bytes of a unix socket path; "
                                 f"pass a shorter plugin_dir (a symlink)")
            old = self._servers.pop(plugin.resource, None)
            if old is not None:
                old.stop(grace=None)
            path.unlink(missing_ok=True)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            api_pb2_grpc.add_DevicePluginServicer_to_server(plugin, server)
            server.add_insecure_port(f"unix://{path}")
            server.start()
            self._servers[plugin.resource] = server
        kubelet = f"unix://{self.plugin_dir / KUBELET_SOCKET}"
        self._kubelet_inode = self._inode(self.plugin_dir / KUBELET_SOCKET)
        for plugin in self.plugins:
            request = api_pb2.RegisterRequest(version=API_VERSION, endpoint=plugin.endpoint,
                                              resource_name=plugin.resource, options=api_pb2.DevicePluginOptions())
            try:
                with grpc.insecure_channel(kubelet) as channel:
                    api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=register_timeout)
            except grpc.RpcError as exc:
                raise RegistrationError(f"Register {plugin.resource} on {kubelet} failed: "
                                        f"{exc.code()}: {exc.details()}") from None

    @staticmethod
    def _inode(path: Path) -> int | None:
        try:
            return path.stat().st_ino
        except OSError:
            return None

    def _watch(self, register_timeout: float, interval: float) -> None:
        while not self._watch_stop.wait(interval):
            kubelet = self._inode(self.plugin_dir / KUBELET_SOCKET)
            ours_gone = any(not (self.plugin_dir / p.endpoint).exists() for p in self.plugins)
            if kubelet is None or (kubelet == self._kubelet_inode and not ours_gone):
                continue                      # kubelet down (wait for its socket) or nothing changed
            try:
                self._serve_and_register(register_timeout)
                self.reregistrations += 1
            except (RegistrationError, OSError):
                continue                      # kubelet not answering yet; try again next round

    @property
    def allocations(self) -> dict[str, list[list[str]]]:
        """``{resource: [[device IDs] per allocated container]}`` for resources with allocations."""
        return {p.resource: list(p.allocations) for p in self.plugins if p.allocations}

    def stop(self) -> None:
        """Stop watching and serving and remove the sockets (the kubelet then marks the devices unhealthy)."""
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        for plugin in self.plugins:
            plugin.stop()
        for server in self._servers.values():
            server.stop(grace=1).wait()
        for plugin in self.plugins:
            (self.plugin_dir / plugin.endpoint).unlink(missing_ok=True)
        self._servers.clear()
