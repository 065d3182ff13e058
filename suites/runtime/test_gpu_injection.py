"""Runtime layer: GPUs are injected through RKE2's containerd, by NRI/CDI or the legacy runtime (ADR 0002 §5-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.connections import HostTarget
from pytest_dgxspark.parsing import dig, parse_containerd_config, parse_runtime_version, pod_ready, pod_summary
from pytest_dgxspark.checking import require

# CDI specs declaring NVIDIA device kinds: the toolkit's management.nvidia.com/gpu and the device plugin's
# k8s.device-plugin.nvidia.com/gpu (/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json), any file name.
CDI_SPECS = ("grep -l -E '\"?kind\"?[[:space:]]*:[[:space:]]*\"?[A-Za-z0-9.-]*nvidia\\.com/gpu' "
             "/var/run/cdi/*.yaml /var/run/cdi/*.json /etc/cdi/*.yaml /etc/cdi/*.json 2>/dev/null; true")
RKE2_CONTAINERD_CONFIG = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
NRI_SOCKET = "/var/run/nri/nri.sock"  # containerd 2.x serves it when NRI is enabled (the default)
NRI_MIN_CONTAINERD = (2, 1)  # RKE2 docs: "NRI requires containerd 2.1"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi", "/run/cdi")
DOCKER_SOCKETS = ("docker.sock", "cri-dockerd.sock", "dockershim.sock")


def _toolkit_pods(cluster: Any, namespace: str, node: str) -> list[dict[str, Any]]:
    return [
        p for p in cluster.list("pods", namespace=namespace)
        if p["metadata"]["name"].startswith("nvidia-container-toolkit-daemonset") and (p.get("spec") or {}).get("nodeName") == node
    ]


@pytest.mark.rule("ADR-0002.gpu-injection")
def test_gpu_injection_goes_through_rke2_containerd(
    host_target: HostTarget, host_node: dict[str, Any], kubelet: Any, cluster: Any, site_values: dict[str, Any],
    operator_namespace: str, evidence: Any,
) -> None:
    if not host_target.spec.gpu:
        not_applicable(f"{host_target.name} is not a GPU host (dgxspark_gpu: false)")
    node_name = host_node["metadata"]["name"]
    nri_mode = dig(site_values, "cdi.nriPluginEnabled") is True
    evidence.record("mode", "NRI plugin + CDI" if nri_mode else "legacy nvidia runtime in RKE2's containerd config")
    daemon_json = host_target.run("cat /etc/docker/daemon.json 2>/dev/null; true")
    evidence.record("Docker daemon.json (never the Kubernetes path; recorded only)", daemon_json.stdout.strip() or None)
    config_file = evidence.command(host_target, f"cat {RKE2_CONTAINERD_CONFIG}")
    cri = parse_containerd_config(config_file.stdout) if config_file.rc == 0 else None
    evidence.record("RKE2 containerd CRI config", None if cri is None else {
        "version": cri.version, "enable_cdi": cri.enable_cdi, "cdi_enabled": cri.cdi_enabled,
        "cdi_spec_dirs": cri.cdi_spec_dirs, "runtimes": list(cri.runtimes)})
    toolkit = _toolkit_pods(cluster, operator_namespace, node_name)
    evidence.record("toolkit pods on the node", [pod_summary(p) for p in toolkit] or
                    "none: the operator has not scheduled the toolkit here (operator-components judges that)")
    require(not any(s in (kubelet.endpoint or "") for s in DOCKER_SOCKETS), (
        f"{host_target.where}: the kubelet reaches its runtime through Docker ({kubelet.endpoint}); GPUs must be "
        "injected by RKE2's containerd, never by an nvidia runtime wired into Docker"
    ))
    if nri_mode:
        raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
        runtime = parse_runtime_version(raw)
        nri_socket = evidence.command(host_target, f"test -S {NRI_SOCKET}")
        live_nri = [dig(p, "spec.cdi.nriPluginEnabled") for p in cluster.list("clusterpolicies")]
        evidence.record("NRI", {"containerRuntimeVersion": raw, "nri.sock": nri_socket.rc == 0,
                                "ClusterPolicy spec.cdi.nriPluginEnabled (recorded)": live_nri})
        require(runtime is not None and runtime.runtime == "containerd" and runtime.version[:2] >= NRI_MIN_CONTAINERD, (
            f"{host_target.where}: the NRI plugin needs RKE2's containerd >= 2.1 (RKE2 docs: \"NRI requires containerd "
            f"2.1\"); Node {node_name} runs {raw!r}"
        ))
        require(nri_socket.rc == 0, (
            f"{host_target.where}: {NRI_SOCKET} is not a socket: RKE2's containerd does not serve NRI, so the toolkit's "
            "NRI plugin cannot inject GPUs (F14: failed to connect to NRI service)"
        ))
        require(cri is not None, (
            f"{host_target.where}: {RKE2_CONTAINERD_CONFIG} could not be read as containerd TOML (exit {config_file.rc}): "
            "RKE2 generates it at every start; without it CDI injection cannot be judged"
        ))
        if cri is not None:
            dirs = cri.cdi_spec_dirs
            require(cri.cdi_enabled, f"{host_target.where}: {RKE2_CONTAINERD_CONFIG} disables CDI (enable_cdi = false)")
            require(dirs is None or any(d.rstrip("/") in CDI_DIRS for d in dirs), (
                f"{host_target.where}: {RKE2_CONTAINERD_CONFIG} cdi_spec_dirs {list(dirs or [])} name neither /etc/cdi "
                "nor /var/run/cdi, where the toolkit and device plugin write their specs"
            ))
        if toolkit:
            specs = evidence.command(host_target, CDI_SPECS)
            require(all(pod_ready(p) for p in toolkit), (
                f"{host_target.where}: the NRI plugin runs in the toolkit DaemonSet; its pod on {node_name} is not Ready: "
                f"{[pod_summary(p) for p in toolkit]}"
            ))
            require(specs.stdout.strip(), (
                f"{host_target.where}: the toolkit runs but there is no NVIDIA CDI spec in /var/run/cdi or /etc/cdi "
                "(no spec of kind *nvidia.com/gpu; the toolkit and device plugin write them)"
            ))
    else:
        require(config_file.rc == 0, (
            f"{host_target.where}: legacy mode needs an nvidia runtime in RKE2's generated {RKE2_CONTAINERD_CONFIG}, "
            f"which cannot be read: {config_file.stderr.strip()[-200:]}"
        ))
        runtimes = list(cri.runtimes) if cri is not None else []
        named = any(r.startswith("nvidia") for r in runtimes) or (cri is None and "nvidia" in config_file.stdout)
        require(named, (
            f"{host_target.where}: legacy mode needs an nvidia runtime in RKE2's generated {RKE2_CONTAINERD_CONFIG}; "
            f"its runtimes are {runtimes or 'unparsable'} (Docker's daemon.json does not count)"
        ))
