"""`make gpu-check` (testing/gpucheck.py): the comparison of the probed facts and of the Devices the
agent would publish with nvidia-smi's answers, on recorded facts (probes/recorded/) and nvidia-smi
output in its own formats; and the skip on a machine without an NVIDIA driver."""
from __future__ import annotations

import shutil

import pytest

from probes.fake import RecordedBackend, load_document, recorded
from runtime.agent.runner import NodeAgent
from runtime.cli.agent import offline_node
from testing import gpucheck

A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
CSV = f"0, {A10G}, NVIDIA A10G, 23028, 580.159.03, [N/A]\n"
LISTING = f"GPU 0: NVIDIA A10G (UUID: {A10G})\n"
BANNER = "| NVIDIA-SMI 580.159.03             Driver Version: 580.159.03     CUDA Version: 13.0     |\n"


def _facts(stem: str) -> list[dict]:
    return load_document(recorded(stem))["accelerators"]


def test_recorded_a10g_equals_its_nvidia_smi_answers():
    assert gpucheck.compare_facts(_facts("node-a10g"), gpucheck.smi_gpus(CSV), LISTING, BANNER) == []


def test_each_difference_is_named():
    gpus = gpucheck.smi_gpus(CSV.replace("23028", "24564").replace("580.159.03", "580.95.05"))
    assert gpucheck.compare_facts(_facts("node-a10g"), gpus, LISTING + LISTING, BANNER.replace("13.0", "12.8")) == [
        "count: NVML 1, nvidia-smi --query-gpu 1, nvidia-smi -L 2",
        "GPU 0 memory MiB: NVML '23028', nvidia-smi '24564'",
        "GPU 0 driver: NVML '580.159.03', nvidia-smi '580.95.05'",
        "GPU 0 CUDA: NVML '13.0', nvidia-smi '12.8'"]


def test_mig_mode_and_profiles():
    facts = _facts("node-h100-mig-on")
    gpus = gpucheck.smi_gpus("".join(f"{f['index']}, {f['uuid']}, {f['name']}, {f['memoryMib']}, "
                                     f"{f['driverVersion']}, Enabled\n" for f in facts))
    listing = "".join(f"GPU {f['index']}: {f['name']} (UUID: {f['uuid']})\n" for f in facts)
    names = sorted({p["name"].removeprefix("MIG ") for f in facts for p in f["migProfiles"]})
    lgip = "".join(f"|   0  MIG {n}   ...   |\n" for n in names)
    assert gpucheck.compare_facts(facts, gpus, listing, BANNER, lgip) == []
    missing = lgip.replace(f"MIG {names[0]} ", "")
    assert f"GPU 0 MIG profile {names[0]}: not in nvidia-smi mig -lgip" in \
        gpucheck.compare_facts(facts, gpus, listing, BANNER, missing)
    off = gpucheck.smi_gpus("".join(f"{f['index']}, {f['uuid']}, {f['name']}, {f['memoryMib']}, "
                                    f"{f['driverVersion']}, Disabled\n" for f in facts))
    assert "GPU 0 MIG mode: NVML 'Enabled', nvidia-smi 'Disabled'" in \
        gpucheck.compare_facts(facts, off, listing, BANNER, lgip)


def test_the_devices_the_agent_would_publish_are_compared(policy):
    backend = RecordedBackend(recorded("node-a10g"))
    agent = NodeAgent(policy, backend, backend.node, node=offline_node(policy, backend.node, "4", ()))
    devices = agent.reconcile(dry_run=True).devices
    assert gpucheck.compare_devices(devices, gpucheck.smi_gpus(CSV), BANNER) == []
    other = gpucheck.smi_gpus(CSV.replace(A10G, "GPU-0000"))
    assert gpucheck.compare_devices(devices, other, BANNER) == [
        f"Devices accelerators ['{A10G}'] != nvidia-smi UUIDs ['GPU-0000']"]
    assert gpucheck.compare_devices(None, other, BANNER) == ["Devices accelerators [] != nvidia-smi UUIDs ['GPU-0000']"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="an NVIDIA driver is here: gpu-check runs")
def test_no_driver_skips_with_the_reason_and_exit_0(capsys):
    assert gpucheck.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-check: skipped: no NVIDIA driver on this machine: nvidia-smi is not on PATH and NVML "
                          "says: ")
