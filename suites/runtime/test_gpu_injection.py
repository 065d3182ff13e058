"""Runtime layer: GPUs are injected through RKE2's containerd, by NRI/CDI or the legacy runtime (ADR 0002 §5-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.connections import HostTarget
from pytest_dgxspark.parsing import dig, parse_runtime_version, pod_ready, pod_summary

# CDI specs declaring NVIDIA device kinds: the toolkit's management.nvidia.com/gpu and the device plugin's
# k8s.device-plugin.nvidia.com/gpu (/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json), any file name.
CDI_SPECS = ("grep -l -E '\"?kind\"?[[:space:]]*:[[:space:]]*\"?[A-Za-z0-9.-]*nvidia\\.com/gpu' "
             "/var/run/cdi/*.yaml /var/run/cdi/*.json /etc/cdi/*.yaml /etc/cdi/*.json 2>/dev/null; true")
RKE2_CONTAINERD_CONFIG = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
NRI_MIN_CONTAINERD = (2, 1)


def _toolkit_pods(cluster: Any, namespace: str, node: str) -> list[dict[str, Any]]:
    return [
        p for p in cluster.list("pods", namespace=namespace)
        if p["metadata"]["name"].startswith("nvidia-container-toolkit-daemonset") and (p.get("spec") or {}).get("nodeName") == node
    ]


@pytest.mark.rule("ADR-0002.gpu-injection")
def test_gpu_injection_goes_through_rke2_containerd(
    host_target: HostTarget, host_node: dict[str, Any], cluster: Any, site_values: dict[str, Any],
    operator_namespace: str, evidence: Any,
) -> None:
    if not host_target.spec.gpu:
        not_applicable(f"{host_target.name} is not a GPU host (dgxspark_gpu: false)")
    node_name = host_node["metadata"]["name"]
    nri_mode = dig(site_values, "cdi.nriPluginEnabled") is True
    daemon_json = host_target.run("cat /etc/docker/daemon.json 2>/dev/null; true")
    evidence.record("Docker daemon.json (never the Kubernetes path; recorded only)", daemon_json.stdout.strip() or None)
    evidence.record("mode", "NRI plugin + CDI" if nri_mode else "legacy nvidia runtime in RKE2's containerd config")
    toolkit = _toolkit_pods(cluster, operator_namespace, node_name)
    evidence.record("toolkit pods", [pod_summary(p) for p in toolkit])
    if nri_mode:
        raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
        runtime = parse_runtime_version(raw)
        policies = cluster.list("clusterpolicies")
        live_nri = [dig(p, "spec.cdi.nriPluginEnabled") for p in policies]
        specs = evidence.command(host_target, CDI_SPECS)
        nri_socket = evidence.command(host_target, "test -S /var/run/nri/nri.sock && echo present || echo absent")
        runtime_classes = [r["metadata"]["name"] for r in cluster.list("runtimeclasses")]
        evidence.record("NRI", {"containerRuntimeVersion": raw, "ClusterPolicy spec.cdi.nriPluginEnabled": live_nri,
                                "nri.sock": nri_socket.stdout.strip(), "RuntimeClasses (none needed)": runtime_classes})
        assert runtime is not None and runtime.version[:2] >= NRI_MIN_CONTAINERD, (
            f"{host_target.where}: the NRI plugin needs containerd >= 2.1 (RKE2 docs); the node runs {raw!r}"
        )
        assert live_nri and all(v is True for v in live_nri), (
            f"{cluster.where}: ClusterPolicy spec.cdi.nriPluginEnabled is {live_nri or 'absent (no ClusterPolicy)'}, the site asks true"
        )
        assert toolkit and all(pod_ready(p) for p in toolkit), (
            f"{host_target.where}: the NRI plugin runs in the toolkit DaemonSet; its pod on {node_name} is not Ready: "
            f"{[pod_summary(p) for p in toolkit] or 'no pod'}"
        )
        assert specs.stdout.strip(), f"{host_target.where}: no NVIDIA CDI spec in /var/run/cdi or /etc/cdi (no spec of kind *nvidia.com/gpu; the toolkit and device plugin write them)"
    else:
        grep = evidence.command(host_target, f"grep -n nvidia {RKE2_CONTAINERD_CONFIG}; true")
        assert "nvidia" in grep.stdout, (
            f"{host_target.where}: legacy mode needs an nvidia runtime in RKE2's generated {RKE2_CONTAINERD_CONFIG}; none found "
            "(Docker's daemon.json does not count)"
        )
