"""Host layer: the NVIDIA kernel driver is loaded (open flavour on GB10) and nvidia-smi answers (ADR 0002 §5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.connections import HostTarget, timed_out
from pytest_dgxspark.parsing import module_loaded, parse_nvidia_smi_csv, parse_proc_driver_version
from pytest_dgxspark.provenance import DRIVER_VERSION_FILE, SMI_HEADER, SMI_TIMEOUT_S

SMI_QUERY = "nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.total --format=csv"


def _needs_open_modules(host_target: HostTarget) -> bool:
    product = str(host_target.spec.vars.get("dgxspark_gpu_product", ""))
    model = str(host_target.spec.vars.get("dgxspark_model", ""))
    return "GB10" in product.upper() or "spark" in model.lower()


@pytest.mark.rule("ADR-0002.host-driver")
def test_nvidia_kernel_module_is_loaded(host_target: HostTarget, evidence: Any) -> None:
    if not host_target.spec.gpu:
        not_applicable(f"{host_target.name} is not a GPU host (dgxspark_gpu: false)")
    # lsmod reads /proc/modules; it is the RKE2 docs' own host check (`lsmod | grep nvidia`).
    modules = evidence.command(host_target, "lsmod")
    assert modules.rc == 0, f"{host_target.where}: lsmod failed ({modules.rc}): {modules.stderr.strip()}"
    loaded = [m for m in ("nvidia", "nvidia_uvm", "nvidia_modeset") if module_loaded(modules.stdout, m)]
    evidence.record("nvidia modules loaded", loaded)
    assert "nvidia" in loaded, f"{host_target.where}: the nvidia kernel module is not loaded (lsmod); load the host driver"


@pytest.mark.rule("ADR-0002.host-driver")
def test_driver_version_file_shows_the_right_flavour(host_target: HostTarget, evidence: Any) -> None:
    if not host_target.spec.gpu:
        not_applicable(f"{host_target.name} is not a GPU host (dgxspark_gpu: false)")
    result = host_target.cached(DRIVER_VERSION_FILE)
    evidence.record(DRIVER_VERSION_FILE, {"exit_status": result.rc, "stdout": result.stdout, "stderr": result.stderr})
    assert result.rc == 0, f"{host_target.where}: /proc/driver/nvidia/version is missing: no NVIDIA driver is loaded"
    driver = parse_proc_driver_version(result.stdout)
    assert driver is not None, f"{host_target.where}: /proc/driver/nvidia/version is not an NVRM version line: {result.stdout[:200]!r}"
    evidence.record("driver", {"version": driver.version, "flavour": driver.flavour, "arch": driver.arch})
    if _needs_open_modules(host_target):
        assert driver.flavour == "open", (
            f"{host_target.where}: GB10 needs the OPEN kernel modules (nvidia-driver-580-open); loaded is the "
            f"{driver.flavour} module {driver.version} (RmInitAdapter failed, nvidia-smi hangs)"
        )


@pytest.mark.rule("ADR-0002.host-driver")
def test_nvidia_smi_answers_in_time(host_target: HostTarget, evidence: Any) -> None:
    if not host_target.spec.gpu:
        not_applicable(f"{host_target.name} is not a GPU host (dgxspark_gpu: false)")
    result = evidence.command(host_target, SMI_QUERY, timeout=SMI_TIMEOUT_S)
    assert not timed_out(result), (
        f"{host_target.where}: nvidia-smi did not answer within {SMI_TIMEOUT_S} s (a hung driver; on GB10 the "
        "proprietary module hangs it): check dmesg for RmInitAdapter"
    )
    assert result.rc == 0, f"{host_target.where}: nvidia-smi exited {result.rc}: {(result.stdout + result.stderr).strip()[-400:]}"
    rows = parse_nvidia_smi_csv(result.stdout)
    evidence.record("nvidia-smi GPUs", rows)
    assert rows, f"{host_target.where}: nvidia-smi lists no GPU: {result.stdout.strip()!r}"
    host_target.cached(SMI_HEADER, timeout=SMI_TIMEOUT_S)  # CUDA version for provenance
