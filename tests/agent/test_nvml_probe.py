"""probes/nvml.py against a stand-in pynvml module (no GPU here): facts shape of docs/agent.md "Probe facts",
MIG profiles with placements, unhealthy devices, library and driver failures."""
from __future__ import annotations

import types

import pytest

from probes.errors import ProbeError
from probes.nvml import NvmlBackend
from runtime.model.facts import parse_facts


class NVMLError_GpuIsLost(Exception):
    pass


class NVMLError_NotSupported(Exception):
    pass


class NVMLError_NotFound(Exception):
    pass


class NVMLError_LibraryNotFound(Exception):
    pass


class NVMLError_DriverNotLoaded(Exception):
    pass


def fake_pynvml(devices, init_error=None):
    """A module with the pynvml functions the probe calls; ``devices`` are dicts of facts."""
    import ctypes

    class Placement(ctypes.Structure):
        _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]

    m = types.SimpleNamespace()
    m.nvmlMemory_v2 = 2
    m.NVML_GPU_INSTANCE_PROFILE_COUNT = 3
    m.c_nvmlGpuInstancePlacement_t = Placement
    m.shutdowns = 0

    def init():
        if init_error:
            raise init_error
    m.nvmlInit = init

    def shutdown():
        m.shutdowns += 1
    m.nvmlShutdown = shutdown
    m.nvmlSystemGetDriverVersion = lambda: b"580.159.03"
    m.nvmlSystemGetCudaDriverVersion = lambda: 13000
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetHandleByIndex = lambda i: devices[i]
    m.nvmlDeviceGetUUID = lambda d: d["uuid"]

    def name(d):
        if d.get("lost"):
            raise NVMLError_GpuIsLost("GPU is lost")
        return d["name"]
    m.nvmlDeviceGetName = name
    m.nvmlDeviceGetMinorNumber = lambda d: d["minor"]
    m.nvmlDeviceGetMemoryInfo = lambda d, version=None: types.SimpleNamespace(total=d["mib"] * 2**20)

    def bus(d):
        if d.get("bus") is None:
            raise NVMLError_NotSupported("not supported")
        return d["bus"]
    m.nvmlDeviceGetMemoryBusWidth = bus
    m.nvmlDeviceGetEccMode = lambda d: [1, 1]
    m.nvmlDeviceGetCudaComputeCapability = lambda d: d["cc"]
    m.nvmlDeviceGetNumGpuCores = lambda d: d["cores"]
    m.nvmlDeviceGetMigMode = lambda d: [1 if d.get("mig") else 0, 0]
    profiles = {0: ("MIG 1g.10gb", 1, 7, 1, list(range(7))), 2: ("MIG 3g.40gb", 3, 2, 4, [0, 4])}

    def profile_info(d, p):
        if p not in profiles:
            raise NVMLError_NotSupported("profile")
        n, slices, count, _, _ = profiles[p]
        return types.SimpleNamespace(id=p + 10, name=n.encode(), memorySizeMB=10240 * slices if p == 0 else 40960,
                                     sliceCount=slices, instanceCount=count)
    m.nvmlDeviceGetGpuInstanceProfileInfo = profile_info

    def placements(d, pid, array, count_ref):
        _, _, _, length, starts = profiles[pid - 10]
        for i, s in enumerate(starts):
            array[i].start, array[i].size = s, length
        count_ref._obj.value = len(starts)
    m.nvmlDeviceGetGpuInstancePossiblePlacements = placements

    # existing MIG devices: d["migDevices"] = {slot: (uuid, gpu instance id, profile id, start, size)}
    m.nvmlDeviceGetMaxMigDeviceCount = lambda d: 7

    def mig_handle(d, slot):
        if slot not in d.get("migDevices", {}):
            raise NVMLError_NotFound("no MIG device")
        return (d, slot)
    m.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    m.nvmlDeviceGetUUID = lambda h: h[0]["migDevices"][h[1]][0] if isinstance(h, tuple) else h["uuid"]
    m.nvmlDeviceGetGpuInstanceId = lambda h: h[0]["migDevices"][h[1]][1]

    def gpu_instance(d, gi):
        return next(v for v in d["migDevices"].values() if v[1] == gi)
    m.nvmlDeviceGetGpuInstanceById = gpu_instance
    m.nvmlGpuInstanceGetInfo = lambda v: types.SimpleNamespace(
        profileId=v[2], placement=types.SimpleNamespace(start=v[3], size=v[4]))
    return m


A10G = dict(uuid="GPU-1", name=b"NVIDIA A10G", minor=0, mib=23028, bus=384, cc=(8, 6), cores=10240)
H100 = dict(uuid="GPU-2", name="NVIDIA H100 80GB HBM3", minor=1, mib=81559, bus=5120, cc=(9, 0), cores=16896, mig=True)


def test_device_facts_have_the_recorded_shape():
    nv = fake_pynvml([A10G, H100])
    accs = NvmlBackend(nv).accelerators()
    assert nv.shutdowns == 1
    assert accs[0] == {"manufacturer": "nvidia", "uuid": "GPU-1", "index": 0, "name": "NVIDIA A10G",
                       "memoryMib": 23028, "driverVersion": "580.159.03", "cudaDriverVersion": 13000,
                       "healthy": True, "minor": 0, "memoryBusWidth": 384, "eccEnabled": True,
                       "computeCapability": [8, 6], "cores": 10240, "migEnabled": False}
    assert accs[1]["migProfiles"] == [
        {"name": "MIG 1g.10gb", "memoryMib": 10240, "computeSlices": 1, "memorySlices": 1, "count": 7,
         "placements": [{"start": s, "length": 1} for s in range(7)]},
        {"name": "MIG 3g.40gb", "memoryMib": 40960, "computeSlices": 3, "memorySlices": 4, "count": 2,
         "placements": [{"start": 0, "length": 4}, {"start": 4, "length": 4}]}]
    parse_facts({"accelerators": accs}, "nvml")     # validates against the facts model (docs/agent.md "Probe facts")


def test_existing_mig_devices_are_reported_with_profile_and_placement():
    # slot 0: a 3g.40gb instance (profile id 12) at slices 4-7; slot 3: a 1g.10gb (id 10) at slice 1
    h100 = dict(H100, migDevices={0: ("MIG-aaaa", 5, 12, 4, 4), 3: ("MIG-bbbb", 9, 10, 1, 1)})
    accs = NvmlBackend(fake_pynvml([A10G, h100])).accelerators()
    assert "migDevices" not in accs[0]
    assert accs[1]["migDevices"] == [
        {"uuid": "MIG-aaaa", "profile": "MIG 3g.40gb", "placement": {"start": 4, "length": 4}},
        {"uuid": "MIG-bbbb", "profile": "MIG 1g.10gb", "placement": {"start": 1, "length": 1}}]
    facts = parse_facts({"accelerators": accs}, "nvml")
    assert facts.accelerators[1].migDevices[0].placement.start == 4


def test_unsupported_bus_width_reads_as_zero():
    accs = NvmlBackend(fake_pynvml([dict(A10G, bus=None)])).accelerators()
    assert accs[0]["memoryBusWidth"] == 0 and accs[0]["healthy"] is True


def test_a_lost_gpu_is_reported_unhealthy():
    accs = NvmlBackend(fake_pynvml([A10G, dict(H100, lost=True)])).accelerators()
    assert [a["healthy"] for a in accs] == [True, False]
    assert accs[1]["uuid"] == "GPU-2"


@pytest.mark.parametrize("error, kind", [(NVMLError_LibraryNotFound("no lib"), "library"),
                                         (NVMLError_DriverNotLoaded("no driver"), "driver")])
def test_init_failures_are_probe_errors_with_a_cause(error, kind):
    with pytest.raises(ProbeError) as info:
        NvmlBackend(fake_pynvml([], init_error=error)).accelerators()
    assert info.value.kind == kind and info.value.cause is error


def test_module_imports_without_the_library(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_pynvml(name, *a, **kw):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    import importlib
    monkeypatch.setattr(importlib, "import_module", lambda name: no_pynvml(name))
    with pytest.raises(ProbeError) as info:
        NvmlBackend().accelerators()
    assert info.value.kind == "library"
