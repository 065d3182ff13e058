"""RKE2 forecast (catalog/beyond.yaml SPARK.gb10-memory-headroom): on a GB10 the CPU and the GPU share one memory pool;
with no kubelet reservation or eviction threshold and GPU pods without memory limits, a pod that grows takes the host
with it, a silent whole-host wedge with no OOM kill (NVIDIA/open-gpu-kernel-modules#1358). Advisory: it never fails
the run (unless the site sets forecast: enforce)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed
from pytest_dgxspark.judge.upkeep import gpu_pods_without_memory_limit, memory_headroom, unified_memory
from pytest_dgxspark.probes.nvml import Nvml
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.gpu_host
@pytest.mark.forecast("SPARK.gb10-memory-headroom")
def test_a_unified_memory_gpu_node_keeps_memory_back_from_its_pods(host_target: HostTarget, nvml_probe: Nvml,
                                                                     rke2_config: Any, cluster: Any, evidence: Any,
                                                                     forecast: Any) -> None:
    completed(nvml_probe.probe, host_target)
    if not unified_memory(nvml_probe.result):
        pytest.skip(f"{host_target.where}: the GPU has its own memory (NVML gives its memory info): no shared pool")
    if rke2_config.error is not None:
        raise AssertionError(rke2_config.error)
    headroom = memory_headroom(rke2_config.merged)
    node = str(rke2_config.merged.get("node-name") or host_target.spec.name)
    unlimited = gpu_pods_without_memory_limit(cluster.list("pods"), node)
    evidence.record("kubelet memory reservations and eviction (config.yaml kubelet-arg)", headroom)
    evidence.record("GPU pods without a memory limit", unlimited)
    found = []
    if not headroom:
        found.append("config.yaml sets no kubelet-arg system-reserved/kube-reserved memory or memory eviction threshold")
    if unlimited:
        found.append(f"{len(unlimited)} pod(s) requesting nvidia.com/gpu have no memory limit: {', '.join(unlimited)}")
    if found:
        forecast.advise(f"{host_target.where}: the GPU shares the host's memory (NVML memory info: Not Supported) and "
                        + "; ".join(found) + ": a pod that grows wedges the whole host, with no OOM kill",
                        target=f"ssh:{host_target.spec.name}", due="at the first pod that fills the memory")
