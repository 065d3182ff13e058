"""Allocatable layer: capacity and allocatable nvidia.com/gpu equal the host's GPUs (ADR 0002 §5-5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import host_answers, require, timed_out, unreadable
from pytest_dgxspark.probes.nvidia_driver import SMI_LIST_TIMEOUT_S, Driver
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.rule("ADR-0002.allocatable")
@pytest.mark.gpu_host
def test_node_exposes_the_hosts_gpus(host_target: HostTarget, host_node: dict[str, Any], nvidia_driver_probe: Driver,
                                     evidence: Any) -> None:
    status = host_node.get("status") or {}
    capacity = (status.get("capacity") or {}).get("nvidia.com/gpu", "0")
    allocatable = (status.get("allocatable") or {}).get("nvidia.com/gpu", "0")
    listing = nvidia_driver_probe.smi_list
    gpus = nvidia_driver_probe.smi_gpus
    replicas = (host_node["metadata"].get("labels") or {}).get("nvidia.com/gpu.replicas", "1")
    per_gpu = [len(g.mig_devices) or 1 for g in gpus]
    expected = sum(per_gpu) * (int(replicas) if replicas.isdigit() and int(replicas) > 0 else 1)
    evidence.record("nvidia.com/gpu", {"capacity": capacity, "allocatable": allocatable, "host nvidia-smi -L": listing.stdout,
                                       "host GPUs": len(gpus), "replicas": replicas, "expected": expected})
    if timed_out(listing):
        host_answers(host_target, "nvidia-smi -L")
    require(not timed_out(listing), (
        f"{host_target.where}: nvidia-smi -L did not answer within {SMI_LIST_TIMEOUT_S} s (killed on the host)"))
    require(listing.rc == 0, (
        f"{host_target.where}: nvidia-smi -L exited {listing.rc}: {(listing.stderr or listing.stdout).strip()[-200:]}"
    ))
    if not gpus and listing.stdout.strip():
        unreadable(f"{host_target.where}: nvidia-smi -L printed no 'GPU <n>: <name> (UUID: ...)' line: "
                   f"{listing.stdout.strip()[:200]!r}")
    require(gpus, f"{host_target.where}: nvidia-smi -L lists no GPU on the host")
    require(capacity.isdigit() and int(capacity) >= 1, (
        f"{host_target.where}: Node {host_node['metadata']['name']} capacity nvidia.com/gpu is {capacity!r}: the device "
        "plugin has not registered the GPU (do not reinstall RKE2; check the device plugin, toolkit and driver)"
    ))
    require(
        allocatable.isdigit() and int(allocatable) >= 1,
        f"{host_target.where}: allocatable nvidia.com/gpu is {allocatable!r}",
    )
    require(int(capacity) == expected and int(allocatable) == expected, (
        f"{host_target.where}: capacity {capacity} / allocatable {allocatable} nvidia.com/gpu, the host has {expected} "
        f"(nvidia-smi -L: {len(gpus)} GPU(s), replicas {replicas})"
    ))
