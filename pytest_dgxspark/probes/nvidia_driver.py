"""Probe of the NVIDIA driver: the loaded kernel module, its version file, nvidia-smi and the kernel log."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pytest_dgxspark.probes import Command, Reading, Settings

NAME = "nvidia_driver"

DRIVER_VERSION_FILE = "cat /proc/driver/nvidia/version"
LSMOD = "lsmod"  # reads /proc/modules; the RKE2 docs' own host check (`lsmod | grep nvidia`)
SMI_QUERY = "nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv"
SMI_HEADER = "nvidia-smi"  # its header names the CUDA version (provenance)
SMI_LIST = "nvidia-smi -L"
SMI_LIST_TIMEOUT_S = 30
PROC_GPUS = "ls -1 /proc/driver/nvidia/gpus 2>/dev/null; true"
GPU_MODELS = "cat /proc/driver/nvidia/gpus/*/information 2>/dev/null | grep -i '^Model:'; true"
KERNEL_LOG_NVRM = "{ dmesg 2>/dev/null || journalctl -k --no-pager 2>/dev/null; } | grep -F 'NVRM' | tail -n 20; true"
HOST_DRIVER_PROBE = "command -v nvidia-smi; modinfo -F filename nvidia 2>/dev/null; modinfo -F version nvidia 2>/dev/null"
DRIVER_READY = "cat /run/nvidia/validations/driver-ready 2>/dev/null || true"


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    """GPU hosts only: a host marked dgxspark_gpu: false has no driver checks."""
    if not spec.gpu:
        return ()
    return (
        Command(DRIVER_VERSION_FILE), Command(LSMOD), Command(PROC_GPUS), Command(GPU_MODELS), Command(KERNEL_LOG_NVRM),
        Command(HOST_DRIVER_PROBE), Command(DRIVER_READY), Command(SMI_LIST, SMI_LIST_TIMEOUT_S),
        Command(SMI_QUERY, settings.smi_timeout_s, keep_limit=True),
        Command(SMI_HEADER, settings.smi_timeout_s, keep_limit=True),
    )


@dataclass(frozen=True)
class DriverVersion:
    """What /proc/driver/nvidia/version says about the loaded kernel module."""

    version: str
    flavour: str  # "open" | "proprietary"
    arch: str | None
    gcc: str | None


_NVRM_OPEN = re.compile(r"NVRM version:\s*NVIDIA UNIX Open Kernel Module(?: for (\S+))?\s+(\d+(?:\.\d+)+)")
# Proprietary: `NVIDIA UNIX x86_64 Kernel Module  X` (x86_64) or `NVIDIA UNIX Kernel Module for aarch64  X` (arm64).
_NVRM_PROP = re.compile(
    r"NVRM version:\s*NVIDIA UNIX(?:\s+(?!Kernel\b)(\S+))?\s+Kernel Module(?:\s+for\s+(\S+))?\s+(\d+(?:\.\d+)+)"
)
_GCC = re.compile(r"GCC version:\s*(.+)")


def parse_proc_driver_version(text: str) -> DriverVersion | None:
    """Parse /proc/driver/nvidia/version of either flavour; None when it is not one."""
    gcc_match = _GCC.search(text or "")
    gcc = gcc_match.group(1).strip() if gcc_match else None
    match = _NVRM_OPEN.search(text or "")
    if match is not None:
        return DriverVersion(match.group(2), "open", match.group(1), gcc)
    match = _NVRM_PROP.search(text or "")
    if match is not None:
        return DriverVersion(match.group(3), "proprietary", match.group(1) or match.group(2), gcc)
    return None


def module_loaded(proc_modules: str, name: str = "nvidia") -> bool:
    """Whether /proc/modules (or lsmod output) lists the module by its exact name."""
    for line in (proc_modules or "").splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return True
    return False


_NOT_AVAILABLE = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", ""}


def parse_nvidia_smi_csv(text: str) -> list[dict[str, str | None]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv`; '[N/A]'-like cells become None.

    Header units ('memory.total [MiB]') are dropped from the keys; a noheader output is keyed 0, 1, ...
    """
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    first = [cell.strip() for cell in reader[0]]
    has_header = any(re.match(r"^[a-z_]+(\.[a-z_]+)+", cell) for cell in first) or "name" in first
    if has_header:
        keys = [re.sub(r"\s*\[.*?\]$", "", cell) for cell in first]
        body = reader[1:]
    else:
        keys = [str(i) for i in range(len(first))]
        body = reader
    rows = []
    for row in body:
        cells = [cell.strip() for cell in row]
        rows.append({k: (None if v.lower() in _NOT_AVAILABLE else v) for k, v in zip(keys, cells, strict=False)})
    return rows


@dataclass(frozen=True)
class SmiGpu:
    """One GPU line of `nvidia-smi -L`, with its MIG devices."""

    index: int
    name: str
    uuid: str | None
    mig_devices: tuple[str, ...] = ()


_SMI_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)]+)\))?\s*$")
_SMI_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+\d+:")


def parse_nvidia_smi_list(text: str) -> list[SmiGpu]:
    """GPUs of `nvidia-smi -L` (MIG lines are attached to their GPU, not counted as GPUs)."""
    gpus: list[SmiGpu] = []
    for line in (text or "").splitlines():
        gpu = _SMI_GPU.match(line.strip()) if not line[:1].isspace() else None
        if gpu is not None:
            gpus.append(SmiGpu(int(gpu.group(1)), gpu.group(2), gpu.group(3)))
            continue
        mig = _SMI_MIG.match(line)
        if mig is not None and gpus:
            last = gpus[-1]
            gpus[-1] = SmiGpu(last.index, last.name, last.uuid, last.mig_devices + (mig.group(1),))
    return gpus


class Driver(Reading):
    """The NVIDIA driver of one host: each command's answer and what it says, parsed once."""

    @property
    def lsmod(self) -> Any:
        return self.answer(LSMOD)

    @cached_property
    def loaded_modules(self) -> frozenset[str]:
        """The NVIDIA kernel modules lsmod lists (by exact name)."""
        return frozenset(m for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")
                         if module_loaded(self.lsmod.stdout, m))

    @property
    def version_file(self) -> Any:
        return self.answer(DRIVER_VERSION_FILE)

    @cached_property
    def version(self) -> DriverVersion | None:
        """/proc/driver/nvidia/version parsed; None when it is not an NVRM version line."""
        return parse_proc_driver_version(self.version_file.stdout)

    @property
    def gpu_models(self) -> Any:
        return self.answer(GPU_MODELS)

    @property
    def kernel_log(self) -> Any:
        return self.answer(KERNEL_LOG_NVRM)

    @cached_property
    def rm_init_failures(self) -> tuple[str, ...]:
        """NVRM lines of the kernel log saying the driver could not initialise the GPU (RmInitAdapter failed), from
        NVRM on (dmesg's [seconds] and journalctl's date/host prefixes vary)."""
        return tuple(line[line.index("NVRM"):].strip() for line in self.kernel_log.stdout.splitlines()
                     if "RmInitAdapter failed" in line)

    @property
    def smi_query(self) -> Any:
        return self.answer(SMI_QUERY, self.settings.smi_timeout_s, keep_limit=True)

    @cached_property
    def smi_rows(self) -> tuple[dict[str, str | None], ...]:
        """The GPUs of `nvidia-smi --query-gpu=... --format=csv`."""
        return tuple(parse_nvidia_smi_csv(self.smi_query.stdout))

    @property
    def smi_header(self) -> Any:
        return self.answer(SMI_HEADER, self.settings.smi_timeout_s, keep_limit=True)

    @property
    def smi_list(self) -> Any:
        return self.answer(SMI_LIST, SMI_LIST_TIMEOUT_S)

    @cached_property
    def smi_gpus(self) -> tuple[SmiGpu, ...]:
        """The GPUs of `nvidia-smi -L` (none when it did not exit 0)."""
        return tuple(parse_nvidia_smi_list(self.smi_list.stdout)) if self.smi_list.rc == 0 else ()

    @property
    def proc_gpus(self) -> Any:
        return self.answer(PROC_GPUS)

    @cached_property
    def proc_gpu_ids(self) -> tuple[str, ...]:
        """The GPUs the kernel driver lists under /proc/driver/nvidia/gpus."""
        return tuple(line.strip() for line in self.proc_gpus.stdout.splitlines() if line.strip())

    @property
    def host_driver(self) -> Any:
        return self.answer(HOST_DRIVER_PROBE)

    @cached_property
    def host_module_file(self) -> str | None:
        """The nvidia module file modinfo names under /lib/modules (a driver installed on the host)."""
        return next((ln for ln in self._host_driver_lines if ln.startswith(("/lib/modules/", "/usr/lib/modules/"))), None)

    @cached_property
    def host_smi(self) -> str | None:
        """The host's own nvidia-smi (not the driver container's under /run/nvidia)."""
        return next((ln for ln in self._host_driver_lines if ln.endswith("/nvidia-smi") and not ln.startswith("/run/nvidia")),
                    None)

    @cached_property
    def _host_driver_lines(self) -> tuple[str, ...]:
        return tuple(line.strip() for line in self.host_driver.stdout.splitlines() if line.strip())

    @property
    def driver_ready(self) -> Any:
        return self.answer(DRIVER_READY)


def read(target: Any, settings: Settings) -> Driver:
    """The NVIDIA driver probe of one host."""
    return Driver(target, settings)
