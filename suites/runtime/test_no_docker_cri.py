"""Runtime layer: Docker is never the Kubernetes runtime (ADR 0001 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.probes.containerd import CRI_DOCKERD, DOCKER, Runtime, parse_runtime_version
from pytest_dgxspark.targets.connections import HostTarget

DOCKER_SOCKETS = ("docker.sock", "cri-dockerd.sock", "dockershim.sock")


@pytest.mark.rule("ADR-0001.no-docker-cri")
def test_kubelet_is_not_wired_to_docker(
    host_target: HostTarget, host_node: dict[str, Any], containerd_probe: Runtime, kubelet: Any, evidence: Any
) -> None:
    raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
    cri_dockerd = completed(evidence.answer(host_target, CRI_DOCKERD, containerd_probe.cri_dockerd), host_target)
    docker = completed(evidence.answer(host_target, DOCKER, containerd_probe.docker), host_target)
    evidence.record("docker on the host (recorded, not a failure)", docker.stdout.strip() or "not installed")
    if parse_runtime_version(raw) is None:
        unreadable(f"{host_target.where}: Node {host_node['metadata']['name']} containerRuntimeVersion {raw!r} is not "
                   "<runtime>://<version>: which runtime the Node runs on cannot be read")
    kubelet.require_running(host_target.where)
    require(not raw.startswith("docker://"), f"{host_target.where}: containerRuntimeVersion is {raw!r}: Docker is the CRI")
    require(not any(s in kubelet.effective_endpoint for s in DOCKER_SOCKETS), (
        f"{host_target.where}: the kubelet's runtime endpoint is {kubelet.effective_endpoint} (Docker/cri-dockerd)"
    ))
    require(cri_dockerd.stdout.strip() == "", f"{host_target.where}: cri-dockerd runs: {cri_dockerd.stdout.strip()}")
