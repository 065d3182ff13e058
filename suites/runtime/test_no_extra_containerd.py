"""Runtime layer: no system containerd is wired to the kubelet (ADR 0001 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.connections import HostTarget
from pytest_dgxspark.parsing import parse_runtime_version
from pytest_dgxspark.checking import require

RKE2_SOCKET = "unix:///run/k3s/containerd/containerd.sock"
SYSTEM_CONTAINERD = "ls -l /usr/bin/containerd /usr/local/bin/containerd /run/containerd/containerd.sock 2>/dev/null; true"


@pytest.mark.rule("ADR-0001.no-extra-containerd")
def test_kubelet_uses_no_system_containerd(
    host_target: HostTarget, host_node: dict[str, Any], kubelet: Any, evidence: Any
) -> None:
    system = evidence.command(host_target, SYSTEM_CONTAINERD)
    evidence.record("system containerd on the host (recorded, not a failure)", system.stdout.strip() or "none")
    raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
    runtime = parse_runtime_version(raw)
    require(kubelet.running or runtime is not None, (
        f"{host_target.where}: neither a kubelet process nor the Node's containerRuntimeVersion ({raw!r}) tells which "
        "containerd the kubelet uses"
    ))
    require("/run/containerd/" not in (kubelet.endpoint or ""), (
        f"{host_target.where}: the kubelet uses the system containerd ({kubelet.endpoint}); it must use {RKE2_SOCKET}"
    ))
    require(runtime is None or runtime.runtime != "containerd" or runtime.k3s, (
        f"{host_target.where}: containerRuntimeVersion {raw!r} is an upstream containerd (no -k3s suffix), not RKE2's"
    ))
