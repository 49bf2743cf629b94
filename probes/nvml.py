"""NVIDIA probe through NVML (pynvml): per-device facts of docs/agent.md "Probe facts".

``NvmlBackend().accelerators()`` returns the ``accelerators`` list of the recorded-facts document;
grouping per (name, memory MiB) is the engine's. pynvml is imported lazily, so this module imports on
machines without the NVIDIA library; a missing library raises
:class:`probes.errors.ProbeError` ``kind="library"``, a failing driver ``kind="driver"``. A device
that fails after enumeration (e.g. ``NVML_ERROR_GPU_IS_LOST``) is reported with ``healthy: false``.
A MIG-enabled device also reports its existing MIG devices (``migDevices``: UUID, profile, placement),
which the agent uses to map kubelet PodResources device IDs (docs/agent.md "The Devices object and its
ledger"). Health facts (``health``, docs/concepts/out-of-service.md "Health"): the volatile uncorrectable ECC
count, pending retired pages, pending and failed row remaps (each left out where the GPU does not support
it), and the critical XIDs the event thread (:mod:`probes.nvmlevents`, :meth:`NvmlBackend.start_events`)
read since the last probe; rules/health.yaml judges them.
"""
from __future__ import annotations

import ctypes
import importlib
import warnings
from typing import Any

from loguru import logger

from probes.errors import ProbeError

MANUFACTURER = "nvidia"  # the manufacturer id this probe reports (rules/manufacturers.yaml)
_PLACEMENT_SLOTS = 32    # room for possible placements per profile (an H100 has at most 8 slices)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """Real NVML. ``module`` lets tests inject a stand-in for ``pynvml``."""

    name = "real"

    def __init__(self, module: Any = None):
        self._module = module
        self.events = None   # probes.nvmlevents.XidEvents once start_events() ran

    def start_events(self, wait_ms: int = 1000) -> bool:
        """Start the agent's own XID event thread (:class:`probes.nvmlevents.XidEvents`); False when it
        cannot (no NVML, no event set: logged), the probe then reads no XID."""
        from probes.nvmlevents import XidEvents

        try:
            nv = self._nvml()
        except ProbeError as exc:
            logger.info("NVML critical XID events not read: {}", exc)
            return False
        self.events = XidEvents(nv, wait_ms)
        started = self.events.start()
        if not started:
            logger.warning("NVML critical XID events not read: {}", self.events.error)
        return started

    def stop_events(self) -> None:
        """Stop the XID event thread (when started)."""
        if self.events is not None:
            self.events.stop()

    def _nvml(self) -> Any:
        if self._module is None:
            try:
                with warnings.catch_warnings():  # the pynvml wrapper package warns that it is deprecated
                    warnings.simplefilter("ignore", FutureWarning)
                    self._module = importlib.import_module("pynvml")
            except ImportError as exc:
                raise ProbeError("library", f"pynvml is not importable: {exc}", exc) from exc
        return self._module

    def cpu(self) -> dict[str, str] | None:
        """NVML knows nothing about the CPU: None (the agent reads /proc/cpuinfo)."""
        return None

    def accelerators(self) -> list[dict[str, Any]]:
        """Probe every NVIDIA device. Raises ProbeError (library/driver); see module docstring."""
        nv = self._nvml()
        try:
            nv.nvmlInit()
        except Exception as exc:  # pynvml raises NVMLError subclasses built at runtime
            kind = "library" if type(exc).__name__ == "NVMLError_LibraryNotFound" else "driver"
            raise ProbeError(kind, f"nvmlInit failed: {exc}", exc) from exc
        try:
            try:
                driver = _text(nv.nvmlSystemGetDriverVersion())
                cuda = int(nv.nvmlSystemGetCudaDriverVersion())
                count = int(nv.nvmlDeviceGetCount())
            except Exception as exc:
                raise ProbeError("driver", f"NVML system query failed: {exc}", exc) from exc
            out = []
            xids = self.events.drain() if self.events is not None else {}
            for index in range(count):
                device = self._device(nv, index, driver, cuda)
                if device is not None:
                    if xids.get(device["uuid"]):
                        device.setdefault("health", {})["xids"] = xids[device["uuid"]]
                    out.append(device)
            return out
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:  # shutting down a half-initialised NVML is best effort
                pass

    def _device(self, nv: Any, index: int, driver: str, cuda: int) -> dict[str, Any] | None:
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
        except Exception as exc:
            logger.warning("NVML device {}: no handle or UUID, not reported: {}", index, exc)
            return None
        facts: dict[str, Any] = {"manufacturer": MANUFACTURER, "uuid": uuid, "index": index, "name": "",
                                 "memoryMib": 0, "driverVersion": driver, "cudaDriverVersion": cuda,
                                 "healthy": True}
        try:
            facts["name"] = _text(nv.nvmlDeviceGetName(handle))
            facts["minor"] = int(nv.nvmlDeviceGetMinorNumber(handle))
            facts["memoryMib"] = self._memory_mib(nv, handle)
            facts["memoryBusWidth"] = self._optional(nv.nvmlDeviceGetMemoryBusWidth, handle, 0)
            ecc = self._optional(nv.nvmlDeviceGetEccMode, handle, [0, 0])
            facts["eccEnabled"] = bool(ecc[0])
            facts["computeCapability"] = list(nv.nvmlDeviceGetCudaComputeCapability(handle))
            facts["cores"] = self._optional(nv.nvmlDeviceGetNumGpuCores, handle, 0)
            mig = self._optional(nv.nvmlDeviceGetMigMode, handle, [0, 0])
            facts["migEnabled"] = bool(mig[0])
            if facts["migEnabled"]:
                infos = self._profile_infos(nv, handle)
                facts["migProfiles"] = self._profiles(nv, handle, infos)
                facts["migDevices"] = self._mig_devices(nv, handle, uuid,
                                                        {int(i.id): _text(i.name) for i in infos})
            health = self._health(nv, handle)
            if health:
                facts["health"] = health
        except Exception as exc:
            logger.warning("NVML device {} ({}): probe failed, reported unhealthy: {}", index, uuid, exc)
            facts["healthy"] = False
            facts["name"] = facts["name"] or uuid
        return facts

    @staticmethod
    def _optional(fn: Any, handle: Any, default: Any) -> Any:
        """Queries a device may not support (NVML_ERROR_NOT_SUPPORTED) read as ``default``."""
        try:
            return fn(handle)
        except Exception as exc:
            if type(exc).__name__ == "NVMLError_NotSupported":
                return default
            raise

    @staticmethod
    def _health(nv: Any, handle: Any) -> dict[str, Any]:
        """The health counters this device supports: volatile uncorrectable ECC errors, pending retired pages,
        pending and failed row remaps. One that does not read (not supported, or failing) is left out: the
        rules then have no fact of it."""
        out: dict[str, Any] = {}
        reads = (("eccUncorrectableVolatile", lambda: int(nv.nvmlDeviceGetTotalEccErrors(
                     handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC))),
                 ("retiredPagesPending", lambda: bool(nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))))
        for name, read in reads:
            try:
                out[name] = read()
            except Exception:  # NVML_ERROR_NOT_SUPPORTED (no ECC, no page retirement on Ampere+), or absent
                continue
        try:
            _, _, pending, failure = nv.nvmlDeviceGetRemappedRows(handle)
            out["remappedRowsPending"], out["remappedRowsFailure"] = bool(pending), bool(failure)
        except Exception:  # before Ampere: no row remapper
            pass
        return out

    @staticmethod
    def _memory_mib(nv: Any, handle: Any) -> int:
        try:
            info = nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2)
        except Exception:
            info = nv.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total) // 2**20

    @staticmethod
    def _profile_infos(nv: Any, handle: Any) -> list[Any]:
        """The GPU-instance profile infos this device offers (``id``, ``name``, sizes, ``instanceCount``)."""
        out = []
        for profile in range(int(nv.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                out.append(nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile))
            except Exception:  # profile not offered by this device
                continue
        return out

    def _profiles(self, nv: Any, handle: Any, infos: list[Any]) -> list[dict[str, Any]]:
        """GPU-instance profiles with their possible placements (the fact ``migProfiles``)."""
        out = []
        for info in infos:
            placements = self._placements(nv, handle, int(info.id), int(info.instanceCount))
            out.append({"name": _text(info.name), "memoryMib": int(info.memorySizeMB),
                        "computeSlices": int(info.sliceCount),
                        "memorySlices": placements[0]["length"] if placements else 0,
                        "count": int(info.instanceCount), "placements": placements})
        return out

    @staticmethod
    def _mig_devices(nv: Any, handle: Any, parent: str, names: dict[int, str]) -> list[dict[str, Any]]:
        """The existing MIG devices of a MIG-enabled device (the fact ``migDevices``): per MIG device its
        UUID (what kubelet's PodResources reports), its GPU instance's profile name (vendor spelling) and
        placement. Empty slots are skipped; a device that cannot be read is logged and left out (the agent
        then falls back to the Pod's profile request)."""
        try:
            slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))
        except Exception as exc:
            logger.warning("NVML device {}: cannot list MIG devices: {}", parent, exc)
            return []
        out = []
        for slot in range(slots):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except Exception:  # NVML_ERROR_NOT_FOUND: no MIG device in this slot
                continue
            try:
                uuid = _text(nv.nvmlDeviceGetUUID(mig))
                instance = nv.nvmlDeviceGetGpuInstanceById(handle, int(nv.nvmlDeviceGetGpuInstanceId(mig)))
                info = nv.nvmlGpuInstanceGetInfo(instance)
            except Exception as exc:
                logger.warning("NVML device {} MIG slot {}: not reported: {}", parent, slot, exc)
                continue
            name = names.get(int(info.profileId))
            if name is None:
                logger.warning("NVML device {} MIG device {}: unknown GPU-instance profile id {}", parent,
                               uuid, info.profileId)
                continue
            out.append({"uuid": uuid, "profile": name,
                        "placement": {"start": int(info.placement.start),
                                      "length": int(info.placement.size)}})
        return out

    @staticmethod
    def _placements(nv: Any, handle: Any, profile_id: int, capacity: int) -> list[dict[str, int]]:
        if capacity <= 0:
            return []
        size = max(capacity, _PLACEMENT_SLOTS)
        array = (nv.c_nvmlGpuInstancePlacement_t * size)()
        count = ctypes.c_uint(size)
        try:
            nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
        except Exception as exc:
            logger.warning("NVML profile {}: no placements: {}", profile_id, exc)
            return []
        return [{"start": int(array[i].start), "length": int(array[i].size)} for i in range(count.value)]
