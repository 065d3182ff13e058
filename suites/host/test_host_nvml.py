"""Host layer: libnvidia-ml resolves and NVML initialises on the host (ADR 0002 §3)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, host_answers, require, timed_out, unreadable
from pytest_dgxspark.probes.nvml import LDCONFIG, NVML_TIMEOUT_S, Nvml
from pytest_dgxspark.targets.connections import HostTarget

NVML_NOT_SUPPORTED = 3
PYTHON_NOT_INSTALLED = 127


@pytest.mark.rule("ADR-0002.host-nvml")
@pytest.mark.gpu_host
def test_libnvidia_ml_resolves(host_target: HostTarget, nvml_probe: Nvml, evidence: Any) -> None:
    result = completed(evidence.answer(host_target, LDCONFIG, nvml_probe.ldconfig), host_target)
    if result.rc != 0:
        unreadable(f"{host_target.where}: `ldconfig -p` exited {result.rc} ({result.stderr.strip()[-200:]}): the "
                   "linker cache that says where libnvidia-ml.so.1 is cannot be read")
    paths = list(nvml_probe.library_paths)
    evidence.record("libnvidia-ml.so.1", paths)
    require(
        paths,
        f"{host_target.where}: libnvidia-ml.so.1 does not resolve (ldconfig -p); install the driver's NVML library",
    )


@pytest.mark.rule("ADR-0002.host-nvml")
@pytest.mark.gpu_host
def test_nvml_initialises_and_counts_gpus(host_target: HostTarget, nvml_probe: Nvml, evidence: Any) -> None:
    result = nvml_probe.probe
    evidence.record("NVML probe", {"exit_status": result.rc, "stdout": result.stdout[-2000:], "stderr": result.stderr[-2000:]})
    if timed_out(result):
        host_answers(host_target, "the NVML probe")
    require(not timed_out(result), (
        f"{host_target.where}: nvmlInit_v2 and the device queries did not return within {NVML_TIMEOUT_S} s (killed on "
        "the host): the driver does not answer NVML; look at dmesg for NVRM errors"
    ))
    if result.rc == PYTHON_NOT_INSTALLED:
        unreadable(f"{host_target.where}: python3 is not installed (exit 127), so the NVML probe (python3 + ctypes) "
                   "cannot run; NVML initialisation is not verifiable on this host")
    require(result.rc == 0, (
        f"{host_target.where}: the NVML probe (python3 + ctypes) crashed with exit {result.rc} while calling NVML: "
        f"{result.stderr.strip()[-300:]}"
    ))
    try:
        probe = nvml_probe.result
    except ValueError as error:
        unreadable(f"{host_target.where}: {error}")
    require(
        "load_error" not in probe,
        f"{host_target.where}: libnvidia-ml.so.1 cannot be loaded: {probe.get('load_error')}",
    )
    require(
        probe.get("init") == 0,
        f"{host_target.where}: nvmlInit_v2 failed: {probe.get('init_error')} ({probe.get('init')})",
    )
    require(probe.get("count_rc") == 0 and probe.get("count", 0) >= 1, (
        f"{host_target.where}: NVML counts {probe.get('count')} GPUs (nvmlDeviceGetCount_v2 rc {probe.get('count_rc')}); expected >= 1"
    ))
    devices = probe.get("devices") or []
    for device in devices:
        if device.get("memory_rc") == NVML_NOT_SUPPORTED:
            evidence.record(f"GPU {device['index']} memory", "not applicable on unified memory (NVML_ERROR_NOT_SUPPORTED)")
    broken = [d for d in devices if d.get("memory_rc") not in (0, NVML_NOT_SUPPORTED) or d.get("name_rc") != 0]
    require(broken == [], f"{host_target.where}: NVML device queries failed: " + "; ".join(
        f"GPU {d.get('index')}: nvmlDeviceGetName rc {d.get('name_rc')}, nvmlDeviceGetMemoryInfo rc {d.get('memory_rc')}"
        + (f" ({d['memory_error']})" if d.get("memory_error") else "") for d in broken))
    expected = host_target.spec.vars.get("dgxspark_gpu_product")
    names = [d.get("name") for d in devices]
    evidence.record("NVML", {"driver": probe.get("driver"), "count": probe.get("count"), "names": names})
    if expected:
        require(all(name == expected for name in names), (
            f"{host_target.where}: NVML names the GPUs {', '.join(map(str, names))}; the inventory's dgxspark_gpu_product is "
            f"{expected!r}"
        ))
