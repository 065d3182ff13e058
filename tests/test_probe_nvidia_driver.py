"""The NVIDIA driver probe's parsers: version files, lsmod, nvidia-smi, on the repo's captures."""

from __future__ import annotations

import pytest

from pytest_dgxspark.probes import nvidia_driver as p
from tests.test_parsing import OPEN_AARCH64, PROPRIETARY_X86, _capture


def test_open_module_version_file_is_open_flavour() -> None:
    driver = p.parse_proc_driver_version(OPEN_AARCH64)
    assert driver == p.DriverVersion("580.95.05", "open", "aarch64", "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04.1)")


@pytest.mark.parametrize("version", ["580.126.09", "580.142", "580.173.02"])
def test_open_module_versions_of_any_length_parse(version: str) -> None:
    assert p.parse_proc_driver_version(OPEN_AARCH64.replace("580.95.05", version)).version == version


def test_proprietary_module_version_file_is_proprietary() -> None:
    driver = p.parse_proc_driver_version(PROPRIETARY_X86)
    assert (driver.version, driver.flavour, driver.arch) == ("550.54.15", "proprietary", "x86_64")


@pytest.mark.parametrize(("name", "version"), [("proc-driver-nvidia-version-open-x86_64.txt", "565.57.01"),
                                               ("proc-driver-nvidia-version-open-x86_64-arch.txt", "525.60.11"),
                                               ("proc-driver-nvidia-version-open-aarch64-jetson.txt", "35.3.1")])
def test_captured_open_module_version_files_are_open_flavour(name: str, version: str) -> None:
    driver = p.parse_proc_driver_version(_capture(name))
    arch = "aarch64" if "aarch64" in name else "x86_64"
    assert (driver.version, driver.flavour, driver.arch) == (version, "open", arch)


def test_garbage_is_not_a_driver_version() -> None:
    assert p.parse_proc_driver_version("cat: /proc/driver/nvidia/version: No such file or directory") is None


def test_module_loaded_matches_exact_name() -> None:
    modules = "nvidia_uvm 1994752 0 - Live 0x0\nnvidia_modeset 1597440 0 - Live 0x0\n"
    assert not p.module_loaded(modules, "nvidia")
    assert p.module_loaded(modules + "nvidia 104857600 2 nvidia_uvm, Live 0x0\n", "nvidia")


def test_gb10_csv_memory_not_available_is_none_and_units_dropped() -> None:
    rows = p.parse_nvidia_smi_csv("index, name, memory.total [MiB], memory.used [MiB]\n0, NVIDIA GB10, [N/A], [N/A]\n")
    assert rows == [{"index": "0", "name": "NVIDIA GB10", "memory.total": None, "memory.used": None}]


def test_noheader_csv_is_keyed_by_position() -> None:
    assert p.parse_nvidia_smi_csv("0, NVIDIA GB10, [N/A], [N/A]") == [{"0": "0", "1": "NVIDIA GB10", "2": None, "3": None}]


def test_smi_list_counts_gpus_not_mig_devices() -> None:
    text = _capture("h100-mig-nvidia-smi-L.txt")
    gpus = p.parse_nvidia_smi_list(text)
    assert len(gpus) == 1
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].uuid == "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
    assert gpus[0].mig_devices == ("1g.10gb",) * 7


def test_smi_list_gb10_line() -> None:
    gpus = p.parse_nvidia_smi_list("GPU 0: NVIDIA GB10 (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)\n")
    assert [(g.index, g.name, g.mig_devices) for g in gpus] == [(0, "NVIDIA GB10", ())]


def test_the_proprietary_module_on_aarch64_is_recognised():
    text = ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22)  "
            "Thu Sep 25 17:55:53 UTC 2025\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
    driver = p.parse_proc_driver_version(text)
    assert (driver.version, driver.flavour, driver.arch) == ("580.95.05", "proprietary", "aarch64")
    x86 = p.parse_proc_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024")
    assert (x86.version, x86.flavour, x86.arch) == ("550.54.15", "proprietary", "x86_64")
