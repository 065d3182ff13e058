"""GPU Operator layer: every operand DaemonSet has a Ready pod on every GPU node (ADR 0002 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.parsing import dig, pod_summary

# DaemonSet -> the chart value that can disable it (None: always deployed)
COMPONENTS = {
    "nvidia-container-toolkit-daemonset": "toolkit.enabled",
    "nvidia-device-plugin-daemonset": "devicePlugin.enabled",
    "gpu-feature-discovery": "gfd.enabled",
    "nvidia-dcgm-exporter": "dcgmExporter.enabled",
    "nvidia-operator-validator": None,
}


@pytest.mark.rule("ADR-0002.operator-components")
def test_operands_are_ready_on_every_gpu_node(
    gpu_nodes: list[Any], operator_pods: Any, site_values: dict[str, Any], evidence: Any, cluster: Any
) -> None:
    wanted = [ds for ds, key in COMPONENTS.items() if key is None or dig(site_values, key, True) is not False]
    missing_nodes = [g.spec.name for g in gpu_nodes if g.node is None]
    problems: dict[str, list[str]] = {}
    seen: dict[str, dict[str, Any]] = {}
    for gpu in (g for g in gpu_nodes if g.node is not None):
        for ds in wanted:
            pods = operator_pods.of_daemonset(ds, gpu.name)
            seen.setdefault(gpu.name, {})[ds] = [pod_summary(p) for p in pods]
            if not operator_pods.ready(pods):
                problems.setdefault(gpu.name, []).append(
                    f"{ds}: " + (", ".join(f"{p['name']} {p['phase']} {p['waiting']}" for p in seen[gpu.name][ds]) or "no pod")
                )
    evidence.record("operands per GPU node", seen)
    assert gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true)"
    assert missing_nodes == [], f"{cluster.where}: GPU hosts without a Node: {missing_nodes}"
    assert problems == {}, f"{cluster.where}: operand pods not Ready on GPU nodes: {problems}"
