"""Host layer: the NVIDIA kernel driver is loaded (open flavour on GB10) and nvidia-smi answers (ADR 0002 §5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, finding, host_answers, require, timed_out, unreadable
from pytest_dgxspark.probes.nvidia_driver import (
    DRIVER_VERSION_FILE,
    GPU_MODELS,
    KERNEL_LOG_NVRM,
    LSMOD,
    PROC_GPUS,
    SMI_QUERY,
    Driver,
)
from pytest_dgxspark.targets.connections import HostTarget

SMI_NVML_NOT_FOUND = 12
SMI_NOT_INSTALLED = 127  # the shell's "command not found", not an nvidia-smi exit status
# nvidia-smi(1) RETURN VALUE
SMI_EXIT_CODES = {
    2: "a supplied argument or flag is invalid", 3: "the requested operation is not available on the target device",
    4: "the current user does not have permission", 6: "the query was unsuccessful",
    8: "external power cables are not attached", 9: "the NVIDIA driver is not loaded",
    10: "the NVIDIA kernel detected an interrupt issue with a GPU", 12: "NVML shared library couldn't be found or loaded",
    13: "the local NVML does not implement this function", 14: "infoROM is corrupted",
    15: "the GPU has fallen off the bus or has otherwise become inaccessible", 255: "other error or internal driver error",
}


# Blackwell GPUs (GB10 among them) run only on the open kernel modules (gpu-stack-facts §1, F1).
OPEN_ONLY_MODELS = ("GB10", "GB20", "B200", "B100", "BLACKWELL")


def _needs_open_modules(host_target: HostTarget, host_models: str) -> bool:
    product = str(host_target.spec.vars.get("dgxspark_gpu_product", ""))
    model = str(host_target.spec.vars.get("dgxspark_model", ""))
    seen = f"{product} {host_models}".upper()
    return any(m in seen for m in OPEN_ONLY_MODELS) or "spark" in model.lower()


@pytest.mark.rule("ADR-0002.host-driver")
@pytest.mark.gpu_host
def test_nvidia_kernel_module_is_loaded(host_target: HostTarget, nvidia_driver_probe: Driver, evidence: Any) -> None:
    modules = completed(evidence.answer(host_target, LSMOD, nvidia_driver_probe.lsmod), host_target)
    if modules.rc == SMI_NOT_INSTALLED:  # the shell's "command not found": the tool is missing, not the module
        unreadable(f"{host_target.where}: lsmod is not installed (exit 127, command not found): the loaded kernel "
                   "modules cannot be read",
                   fix="Install kmod on the host (apt-get install kmod: it provides lsmod; DGX OS ships it), or "
                       "check PATH for the SSH user's /bin/sh; then rerun. Nothing is known about the driver yet.",
                   fix_ko="호스트에 kmod를 설치한다(apt-get install kmod: lsmod 제공, DGX OS 기본 포함). 또는 SSH 사용자의 "
                          "/bin/sh PATH를 확인하고 다시 실행한다. 드라이버 상태는 아직 알 수 없다.")
    if modules.rc != 0:
        unreadable(f"{host_target.where}: lsmod exited {modules.rc} ({modules.stderr.strip()[-200:]}): the loaded "
                   "kernel modules cannot be read")
    loaded = [m for m in ("nvidia", "nvidia_uvm", "nvidia_modeset") if m in nvidia_driver_probe.loaded_modules]
    evidence.record("nvidia modules loaded", loaded)
    require(
        "nvidia" in loaded,
        f"{host_target.where}: the nvidia kernel module is not loaded (lsmod); load the host driver",
    )


@pytest.mark.rule("ADR-0002.host-driver")
@pytest.mark.gpu_host
def test_driver_version_file_shows_the_right_flavour(host_target: HostTarget, nvidia_driver_probe: Driver,
                                                    evidence: Any) -> None:
    result = completed(nvidia_driver_probe.version_file, host_target)
    evidence.record(DRIVER_VERSION_FILE, {"exit_status": result.rc, "stdout": result.stdout, "stderr": result.stderr})
    require(result.rc == 0, f"{host_target.where}: /proc/driver/nvidia/version is missing: no NVIDIA driver is loaded")
    driver = nvidia_driver_probe.version
    if driver is None:
        unreadable(f"{host_target.where}: /proc/driver/nvidia/version is not an NVRM version line: {result.stdout[:200]!r}")
    evidence.record("driver", {"version": driver.version, "flavour": driver.flavour, "arch": driver.arch})
    models = completed(evidence.answer(host_target, GPU_MODELS, nvidia_driver_probe.gpu_models), host_target).stdout
    needs_open = _needs_open_modules(host_target, models)
    evidence.record("needs the open kernel modules (Blackwell/GB10)", needs_open)
    if needs_open and driver.flavour != "open":
        seen = rm_init_failures(host_target, nvidia_driver_probe, evidence)
        finding((
            f"{host_target.where}: GB10 needs the OPEN kernel modules (nvidia-driver-580-open); loaded is the "
            f"{driver.flavour} module {driver.version}"
            + (f"; the kernel log shows {seen[-1]!r}" if seen else "")
            + "; install nvidia-driver-580-open and reboot"
        ))


def rm_init_failures(host_target: HostTarget, driver: Driver, evidence: Any) -> tuple[str, ...]:
    """NVRM lines of the kernel log saying the driver could not initialise the GPU (RmInitAdapter failed)."""
    completed(evidence.answer(host_target, KERNEL_LOG_NVRM, driver.kernel_log), host_target)
    return driver.rm_init_failures


@pytest.mark.rule("ADR-0002.host-driver")
@pytest.mark.gpu_host
def test_nvidia_smi_answers_in_time(host_target: HostTarget, nvidia_driver_probe: Driver, smi_timeout_s: int,
                                    evidence: Any) -> None:
    result = evidence.answer(host_target, SMI_QUERY, nvidia_driver_probe.smi_query)
    if timed_out(result):
        host_answers(host_target, "nvidia-smi")
        seen = rm_init_failures(host_target, nvidia_driver_probe, evidence)
        finding((
            f"{host_target.where}: nvidia-smi did not answer within {smi_timeout_s} s (killed on the host)"
            + (f"; the kernel log shows {seen[-1]!r}: the driver could not initialise the GPU" if seen
               else "; the kernel log shows no RmInitAdapter failure: look at dmesg and nvidia-persistenced")
        ))
    output = (result.stdout + result.stderr).strip()
    if result.rc == SMI_NVML_NOT_FOUND:
        # nvidia-smi(1): 12 = "NVML Shared Library couldn't be found or loaded": the library, not the kernel driver,
        # is missing (host-nvml judges it). The driver is judged without NVML: its GPUs under /proc/driver/nvidia.
        evidence.record("nvidia-smi exit 12 (NVML library missing; judged by ADR-0002.host-nvml)", output[-400:])
        completed(evidence.answer(host_target, PROC_GPUS, nvidia_driver_probe.proc_gpus), host_target)
        require(nvidia_driver_probe.proc_gpu_ids, (
            f"{host_target.where}: nvidia-smi cannot load NVML (exit 12) and the kernel driver lists no GPU in "
            "/proc/driver/nvidia/gpus"
        ))
    else:
        require(result.rc != SMI_NOT_INSTALLED, (
            f"{host_target.where}: nvidia-smi is not installed (exit 127, command not found): {output[-200:]}; install "
            "the driver's utilities (nvidia-utils-580 with nvidia-driver-580-open on DGX OS)"
        ))
        meaning = SMI_EXIT_CODES.get(result.rc, "not a documented nvidia-smi exit status")
        require(result.rc == 0, f"{host_target.where}: nvidia-smi exited {result.rc} ({meaning}): {output[-400:]}")
        rows = list(nvidia_driver_probe.smi_rows)
        evidence.record("nvidia-smi GPUs", rows)
        require(rows, f"{host_target.where}: nvidia-smi lists no GPU: {result.stdout.strip()!r}")
        nvidia_driver_probe.smi_header  # noqa: B018 - read for provenance (the CUDA version)
