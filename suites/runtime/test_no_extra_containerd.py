"""Runtime layer: no system containerd is wired to the kubelet (ADR 0001 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.probes.containerd import SYSTEM_CONTAINERD, Runtime, parse_runtime_version
from pytest_dgxspark.targets.connections import HostTarget

RKE2_SOCKET = "unix:///run/k3s/containerd/containerd.sock"


@pytest.mark.rule("ADR-0001.no-extra-containerd")
def test_kubelet_uses_no_system_containerd(
    host_target: HostTarget, host_node: dict[str, Any], containerd_probe: Runtime, kubelet: Any, evidence: Any
) -> None:
    system = completed(evidence.answer(host_target, SYSTEM_CONTAINERD, containerd_probe.system_containerd), host_target)
    evidence.record("system containerd on the host (recorded, not a failure)", system.stdout.strip() or "none")
    raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
    runtime = parse_runtime_version(raw)
    if runtime is None:
        unreadable(f"{host_target.where}: Node {host_node['metadata']['name']} containerRuntimeVersion {raw!r} is not "
                   "<runtime>://<version>: whether it is RKE2's containerd cannot be read")
    kubelet.require_running(host_target.where)
    endpoint = kubelet.effective_endpoint
    require("/run/containerd/" not in endpoint, (
        f"{host_target.where}: the kubelet uses the system containerd ({endpoint}"
        + ("" if kubelet.endpoint else ", the kubelet's default: nothing sets containerRuntimeEndpoint")
        + f"); it must use {RKE2_SOCKET}"
    ))
    require(runtime.runtime != "containerd" or runtime.k3s, (
        f"{host_target.where}: containerRuntimeVersion {raw!r} is an upstream containerd (no -k3s suffix), not RKE2's"
    ))
