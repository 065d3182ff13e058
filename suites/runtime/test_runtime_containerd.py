"""Runtime layer: the kubelet runs on RKE2's own containerd (ADR 0001 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, finding, host_answers, require, timed_out
from pytest_dgxspark.probes.containerd import CRICTL, CRICTL_TIMEOUT_S, Runtime, parse_runtime_version
from pytest_dgxspark.probes.containerd import RKE2_SOCKET as RKE2_SOCKET_TEST
from pytest_dgxspark.targets.connections import HostTarget

RKE2_SOCKET = "unix:///run/k3s/containerd/containerd.sock"


@pytest.mark.rule("ADR-0001.runtime-rke2-containerd")
def test_node_runtime_is_rke2_containerd(host_target: HostTarget, host_node: dict[str, Any], evidence: Any) -> None:
    raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
    runtime = parse_runtime_version(raw)
    evidence.record("containerRuntimeVersion", raw)
    require(runtime is not None and runtime.runtime == "containerd" and runtime.k3s, (
        f"{host_target.where}: Node {host_node['metadata']['name']} containerRuntimeVersion is {raw!r}; RKE2's containerd "
        "reports containerd://<version>-k3s<N>"
    ))


@pytest.mark.rule("ADR-0001.runtime-rke2-containerd")
def test_kubelet_uses_the_rke2_containerd_socket(host_target: HostTarget, kubelet: Any, evidence: Any) -> None:
    require(kubelet.running, f"{host_target.where}: no kubelet process found (pgrep -x kubelet); is rke2 running?")
    require(kubelet.endpoint == RKE2_SOCKET, (
        f"{host_target.where}: the kubelet's container runtime endpoint is {kubelet.endpoint!r} "
        f"(from {list(kubelet.config_files) or 'its flags'}); ADR 0001 requires {RKE2_SOCKET}"
    ))


@pytest.mark.rule("ADR-0001.runtime-rke2-containerd")
def test_rke2_containerd_socket_answers(host_target: HostTarget, containerd_probe: Runtime, evidence: Any) -> None:
    socket = completed(evidence.answer(host_target, RKE2_SOCKET_TEST, containerd_probe.rke2_socket), host_target)
    require(socket.rc == 0, f"{host_target.where}: /run/k3s/containerd/containerd.sock is not a socket")
    version = evidence.answer(host_target, CRICTL, containerd_probe.crictl)
    if timed_out(version):
        host_answers(host_target, "crictl version")
        finding(f"{host_target.where}: crictl version over RKE2's socket did not answer within {CRICTL_TIMEOUT_S} s: "
                "RKE2's containerd accepts connections but does not serve CRI; see journalctl -u rke2-server "
                "(containerd.log)")
    require(
        version.rc == 0,
        f"{host_target.where}: crictl version over RKE2's socket failed ({version.rc}): {version.stderr.strip()[-300:]}",
    )
    require("RuntimeName:" in version.stdout and "containerd" in version.stdout, (
        f"{host_target.where}: crictl version did not report containerd: {version.stdout.strip()!r}"
    ))
