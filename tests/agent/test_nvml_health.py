"""Health facts from NVML (docs/concepts/out-of-service.md "Health") against a stand-in pynvml module (no GPU
here): the ECC, retired-page and row-remap counters the probe reads, the critical-XID event set the agent's
own thread registers and waits on with a timeout, and `make gpu-check`'s health part on the same stand-in.
"""
from __future__ import annotations

import queue
import time
import types

from probes.nvml import NvmlBackend
from probes.nvmlevents import XidEvents
from runtime.model.facts import parse_facts
from testing import gpucheck
from tests.agent.test_nvml_probe import A10G, H100, NVMLError_NotSupported, fake_pynvml


class NVMLError_Timeout(Exception):
    pass


def health_pynvml(devices, events: "queue.Queue | None" = None, unsupported_events=()):
    """fake_pynvml plus the health counters (each device dict's ``ecc``, ``pages``, ``rows``: a missing key
    is NVML_ERROR_NOT_SUPPORTED) and an event set fed from ``events`` ((uuid, xid) pairs)."""
    m = fake_pynvml(devices)
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0
    m.nvmlEventTypeXidCriticalError = 0x8
    m.calls = []

    def counter(key):
        def read(d, *args):
            m.calls.append((key, args))
            if key not in d:
                raise NVMLError_NotSupported(key)
            return d[key]
        return read
    m.nvmlDeviceGetTotalEccErrors = counter("ecc")
    m.nvmlDeviceGetRetiredPagesPendingStatus = counter("pages")
    m.nvmlDeviceGetRemappedRows = counter("rows")
    m.registered = []
    m.freed = 0
    m.nvmlEventSetCreate = lambda: "event-set"

    def register(handle, kinds, event_set):
        if handle["uuid"] in unsupported_events:
            raise NVMLError_NotSupported("events")
        m.registered.append((handle["uuid"], kinds, event_set))
    m.nvmlDeviceRegisterEvents = register
    by_uuid = {d["uuid"]: d for d in devices}
    m.waits = []

    def wait(event_set, timeout_ms):
        m.waits.append(timeout_ms)
        try:
            uuid, xid = (events or queue.Queue()).get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError_Timeout("Timeout") from None
        return types.SimpleNamespace(device=by_uuid[uuid], eventType=0x8, eventData=xid)
    m.nvmlEventSetWait_v2 = wait

    def free(event_set):
        m.freed += 1
    m.nvmlEventSetFree = free
    return m


A10G_ECC = dict(A10G, ecc=2, pages=0, rows=(0, 0, 1, 0))
T4 = dict(uuid="GPU-3", name="Tesla T4", minor=2, mib=15360, bus=256, cc=(7, 5), cores=2560, ecc=0, pages=1)


def test_the_probe_reads_the_counters_each_gpu_supports():
    nv = health_pynvml([A10G_ECC, T4, H100])
    accs = NvmlBackend(nv).accelerators()
    assert accs[0]["health"] == {"eccUncorrectableVolatile": 2, "retiredPagesPending": False,
                                 "remappedRowsPending": True, "remappedRowsFailure": False}
    assert accs[1]["health"] == {"eccUncorrectableVolatile": 0, "retiredPagesPending": True}   # no row remapper
    assert "health" not in accs[2]                                                            # none supported
    assert ("ecc", (1, 0)) in nv.calls          # uncorrected, volatile
    parse_facts({"node": "n", "accelerators": accs})


def test_the_event_thread_registers_every_gpu_and_hands_each_xid_once():
    events = queue.Queue()
    nv = health_pynvml([A10G_ECC, T4], events, unsupported_events=("GPU-3",))
    backend = NvmlBackend(nv)
    assert backend.start_events(wait_ms=20) is True
    try:
        assert [(u, k) for u, k, _ in nv.registered] == [("GPU-1", 0x8)]
        assert backend.events.unregistered == {"GPU-3": "events"}
        events.put(("GPU-1", 79))
        events.put(("GPU-1", 13))
        deadline = time.monotonic() + 5
        while events.qsize() and time.monotonic() < deadline:   # the thread took both
            time.sleep(0.01)
        time.sleep(0.1)
        accs = backend.accelerators()
        assert accs[0]["health"]["xids"] == [79, 13]
        assert "xids" not in accs[1].get("health", {})
        assert "xids" not in backend.accelerators()[0]["health"]      # read once
    finally:
        backend.stop_events()
    assert nv.freed == 1 and set(nv.waits) == {20}                   # waited with the timeout, freed


def test_no_nvml_means_no_event_thread():
    from tests.agent.test_nvml_probe import NVMLError_LibraryNotFound
    nv = health_pynvml([A10G])
    nv.nvmlInit = lambda: (_ for _ in ()).throw(NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found"))
    events = XidEvents(nv, 20)
    assert events.start() is False
    assert events.error == "nvmlInit failed: libnvidia-ml.so.1 not found"


def test_gpu_check_reports_each_gpus_health_and_what_did_not_read():
    nv = health_pynvml([A10G_ECC, T4], unsupported_events=("GPU-3",))
    facts = NvmlBackend(nv).accelerators()
    registered, unregistered, error = gpucheck.event_check(nv, wait_ms=10)
    assert (registered, unregistered, error) == (["GPU-1"], {"GPU-3": "events"}, None)
    lines, problems = gpucheck.health_problems(facts, registered, unregistered, error)
    assert lines == [
        "GPU 0 health: eccUncorrectableVolatile=2 retiredPagesPending=False remappedRowsPending=True "
        "remappedRowsFailure=False; critical XID events registered",
        "GPU 1 health: eccUncorrectableVolatile=0 retiredPagesPending=True; critical XID events not registered"]
    assert problems == ["GPU 1 XID events not registered: events"]
    no_rows = [dict(facts[0], health={"eccUncorrectableVolatile": 0})]
    assert gpucheck.health_problems(no_rows, ["GPU-1"], {}, None)[1] == [
        "GPU 0 row-remap counters did not read (compute capability >= 8.0)"]
    assert gpucheck.health_problems(no_rows, [], {}, "nvmlInit failed: x")[1] == [
        "XID event set: nvmlInit failed: x", "GPU 0 row-remap counters did not read (compute capability >= 8.0)"]
