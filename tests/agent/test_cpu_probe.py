"""CPU probe and gKey (docs/agent.md "Probe facts" and "Normalization"): every worked example of the gKey table."""
from __future__ import annotations

import pytest

from probes.cpu import parse_cpuinfo, read_cpu
from runtime.engine.devices.nodefacts import cores_from_capacity, cpu_vendor, gkey
from runtime.model.facts import CpuFacts

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz
stepping\t: 7

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Something Else
"""

ARM = """processor\t: 0
BogoMIPS\t: 243.75
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd0c

processor\t: 1
CPU implementer\t: 0x48
"""


def test_x86_cpuinfo_first_processor(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(X86)
    assert read_cpu(path) == {"vendorId": "GenuineIntel", "implementer": "",
                              "modelName": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
                              "family": "6", "model": "85"}


def test_arm64_cpuinfo_has_implementer_only():
    assert parse_cpuinfo(ARM) == {"vendorId": "", "implementer": "0x41", "modelName": "", "family": "", "model": ""}


def test_unreadable_cpuinfo_names_the_path(tmp_path):
    with pytest.raises(OSError, match="nope"):
        read_cpu(tmp_path / "nope")


@pytest.mark.parametrize("capacity, cores", [("4", 4), ("48", 48), ("3500m", 4), ("16", 16), (2, 2)])
def test_cores_round_up(capacity, cores):
    assert cores_from_capacity(capacity) == cores


@pytest.mark.parametrize("vendor_id, implementer, vendor", [
    ("GenuineIntel", "", "Intel"), ("AuthenticAMD", "", "AMD"), ("HygonGenuine", "", "Hygon"),
    ("CentaurHauls", "", "VIA"), ("Weird", "", ""),
    ("", "0x41", "ARM"), ("", "0xc0", "Ampere"), ("", "0x48", "HiSilicon"), ("", "0x4e", "NVIDIA"), ("", "0x99", ""),
])
def test_vendor_mapping(policy, vendor_id, implementer, vendor):
    assert cpu_vendor(policy, CpuFacts(vendorId=vendor_id, implementer=implementer)) == vendor


VENDOR_ID = {"Intel": "GenuineIntel", "AMD": "AuthenticAMD", "": ""}


@pytest.mark.parametrize("vendor, model_name, family_model, expected", [
    ("Intel", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "", "intel-xeon-platinum-8259cl"),
    ("AMD", "AMD EPYC 7R13 Processor", "", "amd-epyc-7r13"),
    ("AMD", "AMD EPYC 7R32", "", "amd-epyc-7r32"),
    ("AMD", "AMD EPYC 7763 64-Core Processor", "", "amd-epyc-7763"),
    ("AMD", "", "25/1", "amd-25-1"),
    ("Intel", "12th Gen Intel(R) Core(TM) i7-12700H", "", "intel-core-i7-12700h"),
    ("", "", "", "generic"),
])
def test_gkey_worked_examples(policy, vendor, model_name, family_model, expected):
    family, _, model = family_model.partition("/")
    cpu = CpuFacts(vendorId=VENDOR_ID[vendor], modelName=model_name, family=family, model=model)
    assert gkey(policy, cpu) == expected


def test_gkey_arm64_falls_back_to_family_model_or_vendor(policy):
    assert gkey(policy, CpuFacts(implementer="0xc0")) == "ampere"
    assert gkey(policy, CpuFacts(implementer="0x41", family="8", model="3340")) == "arm-8-3340"


def test_gkey_model_name_starting_with_at_is_ignored(policy):
    assert gkey(policy, CpuFacts(vendorId="AuthenticAMD", modelName="@ 3.0GHz", family="25", model="1")) == "amd-25-1"


def test_gkey_respects_the_budget(policy):
    long = "AMD " + "X" * 100
    key = gkey(policy, CpuFacts(vendorId="AuthenticAMD", modelName=long))
    # <gKey>.capacity stays within 63 characters (decision 13)
    assert len(key) + len(".capacity") == 63
