"""Host layer: exactly one driver source, the host's or the operator's container (ADR 0002 §5-3, §6-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.connections import HostTarget
from pytest_dgxspark.parsing import dig, pod_summary
from pytest_dgxspark.checking import require

HOST_DRIVER_PROBE = "command -v nvidia-smi; modinfo -F filename nvidia 2>/dev/null; modinfo -F version nvidia 2>/dev/null"
DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."


def _driver_pods(cluster: Any, namespace: str, node: str) -> list[dict[str, Any]]:
    """nvidia-driver-daemonset pods on the node that run or are about to (Running, Pending)."""
    return [
        p for p in cluster.list("pods", namespace=namespace)
        if p["metadata"]["name"].startswith("nvidia-driver-daemonset") and (p.get("spec") or {}).get("nodeName") == node
        and (p.get("status") or {}).get("phase") in ("Running", "Pending")
    ]


@pytest.mark.rule("ADR-0002.driver-source")
def test_exactly_one_driver_source(
    host_target: HostTarget, host_node: dict[str, Any], cluster: Any, site_values: dict[str, Any],
    operator_namespace: str, evidence: Any,
) -> None:
    if not host_target.spec.gpu:
        not_applicable(f"{host_target.name} is not a GPU host (dgxspark_gpu: false)")
    probe = evidence.command(host_target, HOST_DRIVER_PROBE)
    lines = [line.strip() for line in probe.stdout.splitlines() if line.strip()]
    module_file = next((line for line in lines if line.startswith(("/lib/modules/", "/usr/lib/modules/"))), None)
    host_smi = next((line for line in lines if line.endswith("/nvidia-smi") and not line.startswith("/run/nvidia")), None)
    preinstalled = bool(module_file and host_smi)
    driver_enabled = dig(site_values, "driver.enabled", True) is not False
    node_name = host_node["metadata"]["name"]
    labels = host_node["metadata"].get("labels") or {}
    label = labels.get(DRIVER_LABEL)
    # The operator labels a GPU node with nvidia.com/gpu.deploy.<operand> once it manages it; until then (e.g.
    # ClusterPolicy NoGPUNodes) k8s-driver-manager has not run there and cannot have set the driver label.
    processed = sorted(k for k in labels if k.startswith(DEPLOY_PREFIX) and k != DRIVER_LABEL)
    driver_pods = _driver_pods(cluster, operator_namespace, node_name)
    validation = host_target.run("cat /run/nvidia/validations/driver-ready 2>/dev/null || true")
    evidence.record("driver source", {
        "host_driver_preinstalled": preinstalled, "host_nvidia_smi": host_smi, "host_module": module_file,
        "helm driver.enabled": driver_enabled, DRIVER_LABEL: label,
        "operator processed the node": processed or "no: no nvidia.com/gpu.deploy.* label (only the host side is judged)",
        "driver_pods_on_node": [pod_summary(p) for p in driver_pods],
        "validations/driver-ready": validation.stdout.strip() or None,
    })
    if preinstalled:
        require(driver_pods == [], (
            f"{host_target.where}: two drivers: the host driver ({module_file}) and driver pod(s) "
            f"{[p['metadata']['name'] for p in driver_pods]} on node {node_name}; with a pre-installed driver "
            f"k8s-driver-manager must label the node {DRIVER_LABEL}=pre-installed"
        ))
        if driver_enabled and processed:
            require(label == "pre-installed", (
                f"{host_target.where}: driver.enabled=true with a preinstalled host driver needs node {node_name} "
                f"labelled {DRIVER_LABEL}=pre-installed by k8s-driver-manager; it is {label!r}"
            ))
    else:
        require(driver_enabled, (
            f"{host_target.where}: no driver: the host has none (nvidia-smi {host_smi!r}, module {module_file!r}) "
            "and the site HelmChart sets driver.enabled=false"
        ))
        running = [p for p in driver_pods if (p.get("status") or {}).get("phase") == "Running"]
        require(running, (
            f"{host_target.where}: no driver: the host has none and no nvidia-driver-daemonset pod runs on node {node_name}"
        ))
