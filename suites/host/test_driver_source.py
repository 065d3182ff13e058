"""Host layer: exactly one driver source, the host's or the operator's container (ADR 0002 §5-3, §6-2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.checking import completed, require, timed_out, unreadable
from pytest_dgxspark.data.values import dig
from pytest_dgxspark.kube.objects import pod_summary
from pytest_dgxspark.probes.nvidia_driver import HOST_DRIVER_PROBE, Driver
from pytest_dgxspark.targets.connections import HostTarget

DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."


def _driver_pods(cluster: Any, namespace: str, node: str) -> list[dict[str, Any]]:
    """nvidia-driver-daemonset pods on the node that run or are about to (Running, Pending)."""
    return [
        p for p in cluster.list("pods", namespace=namespace)
        if p["metadata"]["name"].startswith("nvidia-driver-daemonset") and (p.get("spec") or {}).get("nodeName") == node
        and (p.get("status") or {}).get("phase") in ("Running", "Pending")
    ]


@dataclass(frozen=True)
class DriverSources:
    """Where a GPU node's driver can come from: the host's own install and the operator's driver pods."""

    node: str
    module_file: str | None
    host_smi: str | None
    driver_enabled: bool
    label: str | None
    processed: tuple[str, ...]
    driver_pods: tuple[str, ...]
    running_pods: tuple[str, ...]

    @property
    def preinstalled(self) -> bool:
        return bool(self.module_file and self.host_smi)


@pytest.fixture
def driver_source(host_target: HostTarget, nvidia_driver_probe: Driver, host_node: dict[str, Any], cluster: Any,
                  site_values: dict[str, Any], operator_namespace: str, evidence: Any) -> DriverSources:
    """The current GPU host's driver sources, recorded as evidence (both checks of the rule judge the same facts)."""
    probe = nvidia_driver_probe.host_driver
    evidence.record(f"{host_target.name}: {HOST_DRIVER_PROBE}", {"exit_status": probe.rc, "stdout": probe.stdout})
    if timed_out(probe) or probe.rc == 255:  # a probe that never completed says nothing about the driver
        unreadable(f"{host_target.where}: the driver probe did not complete (exit {probe.rc}: "
                   f"{(probe.stderr or '').strip()[-200:] or 'no output'}): which driver the host has cannot be read")
    labels = host_node["metadata"].get("labels") or {}
    pods = _driver_pods(cluster, operator_namespace, host_node["metadata"]["name"])
    # The operator labels a GPU node with nvidia.com/gpu.deploy.<operand> once it manages it; until then (e.g.
    # ClusterPolicy NoGPUNodes) k8s-driver-manager has not run there and cannot have set the driver label.
    found = DriverSources(
        node=host_node["metadata"]["name"],
        module_file=nvidia_driver_probe.host_module_file,
        host_smi=nvidia_driver_probe.host_smi,
        driver_enabled=dig(site_values, "driver.enabled", True) is not False,
        label=labels.get(DRIVER_LABEL),
        processed=tuple(sorted(k for k in labels if k.startswith(DEPLOY_PREFIX) and k != DRIVER_LABEL)),
        driver_pods=tuple(p["metadata"]["name"] for p in pods),
        running_pods=tuple(p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Running"),
    )
    validation = completed(nvidia_driver_probe.driver_ready, host_target)
    evidence.record("driver source", {
        "host_driver_preinstalled": found.preinstalled, "host_nvidia_smi": found.host_smi,
        "host_module": found.module_file, "helm driver.enabled": found.driver_enabled, DRIVER_LABEL: found.label,
        "operator processed the node (nvidia.com/gpu.deploy.* labels)": list(found.processed),
        "driver_pods_on_node": [pod_summary(p) for p in pods],
        "validations/driver-ready": validation.stdout.strip() or None,
    })
    return found


@pytest.mark.rule("ADR-0002.driver-source")
@pytest.mark.gpu_host
def test_exactly_one_driver_source(host_target: HostTarget, driver_source: DriverSources) -> None:
    found = driver_source
    if found.preinstalled:
        require(not found.driver_pods, (
            f"{host_target.where}: two drivers: the host driver ({found.module_file}) and driver pod(s) "
            f"{', '.join(found.driver_pods)} on node {found.node}; with a pre-installed driver k8s-driver-manager must "
            f"label the node {DRIVER_LABEL}=pre-installed (or set driver.enabled=false in the site HelmChart)"
        ))
    else:
        require(found.driver_enabled, (
            f"{host_target.where}: no driver: the host has none (nvidia-smi {found.host_smi or 'not found'}, kernel "
            f"module {found.module_file or 'not found'}) and the site HelmChart sets driver.enabled=false"
        ))
        require(found.running_pods, (
            f"{host_target.where}: no driver: the host has none and no nvidia-driver-daemonset pod runs on node "
            f"{found.node} ({', '.join(found.driver_pods) or 'no driver pod'})"
        ))


@pytest.mark.rule("ADR-0002.driver-source")
@pytest.mark.gpu_host
def test_operator_driver_label_names_the_driver_source(host_target: HostTarget, driver_source: DriverSources) -> None:
    found = driver_source
    if not found.driver_enabled:
        not_applicable(f"driver.enabled=false in the site HelmChart: the GPU Operator manages no driver on {found.node}, "
                       f"so it sets no {DRIVER_LABEL} label to judge")
    if not found.processed:
        not_applicable(f"the GPU Operator has not processed node {found.node} (no {DEPLOY_PREFIX}* label), so "
                       f"k8s-driver-manager has not set {DRIVER_LABEL} yet; operator-running judges why")
    want = "pre-installed" if found.preinstalled else "true"
    source = "the host's pre-installed driver" if found.preinstalled else "the operator's driver container"
    require(found.label == want, (
        f"{host_target.where}: node {found.node} is labelled {DRIVER_LABEL}={found.label or '(unset)'}, but the driver "
        f"source is {source}: k8s-driver-manager must label it {want}"
    ))
