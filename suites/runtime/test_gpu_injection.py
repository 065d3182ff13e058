"""Runtime layer: GPUs are injected through RKE2's containerd, by NRI/CDI or the legacy runtime (ADR 0002 §5-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.data.values import dig
from pytest_dgxspark.kube.objects import pod_ready, pod_summary
from pytest_dgxspark.probes.containerd import CDI_SPECS, Runtime, parse_runtime_version
from pytest_dgxspark.probes.containerd import NRI_SOCKET as NRI_SOCKET_TEST
from pytest_dgxspark.probes.containerd import NRI_SOCKET_PATH as NRI_SOCKET
from pytest_dgxspark.probes.containerd import RKE2_CONTAINERD_CONFIG_FILE as RKE2_CONTAINERD_CONFIG
from pytest_dgxspark.targets.cluster import CrdNotServed
from pytest_dgxspark.targets.connections import HostTarget

# CDI specs declaring NVIDIA device kinds: the toolkit's management.nvidia.com/gpu and the device plugin's
# k8s.device-plugin.nvidia.com/gpu (/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json), any file name.
NRI_MIN_CONTAINERD = (2, 1)  # RKE2 docs: "NRI requires containerd 2.1"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi", "/run/cdi")
DOCKER_SOCKETS = ("docker.sock", "cri-dockerd.sock", "dockershim.sock")


def _toolkit_pods(cluster: Any, namespace: str, node: str) -> list[dict[str, Any]]:
    return [
        p for p in cluster.list("pods", namespace=namespace)
        if p["metadata"]["name"].startswith("nvidia-container-toolkit-daemonset") and (p.get("spec") or {}).get("nodeName") == node
    ]


def _containerd_config(host_target: HostTarget, runtime: Runtime, evidence: Any) -> Any:
    """RKE2's generated containerd config.toml as CRI settings; a missing file is a finding, unparsable TOML an error."""
    config_file = completed(runtime.containerd_config, host_target)
    evidence.record(RKE2_CONTAINERD_CONFIG, {"exit_status": config_file.rc, "content": config_file.stdout[-4000:],
                                             "stderr": config_file.stderr[-400:]})
    require(config_file.rc == 0, (
        f"{host_target.where}: RKE2's containerd config {RKE2_CONTAINERD_CONFIG} cannot be read "
        f"({config_file.stderr.strip()[-200:] or f'exit {config_file.rc}'}): RKE2 generates it at every start, so its "
        "containerd is not the one running GPU workloads; restart rke2 and look at its log"
    ))
    cri = runtime.cri
    if cri is None:
        unreadable(f"{host_target.where}: {RKE2_CONTAINERD_CONFIG} is not valid TOML, so how containerd injects GPUs "
                   f"cannot be read: {config_file.stdout[:200]!r}")
    evidence.record("RKE2 containerd CRI config", {
        "version": cri.version, "enable_cdi": cri.enable_cdi, "cdi_enabled": cri.cdi_enabled,
        "cdi_spec_dirs": cri.cdi_spec_dirs, "runtimes": list(cri.runtimes)})
    return cri


@pytest.mark.rule("ADR-0002.gpu-injection")
@pytest.mark.gpu_host
def test_gpu_injection_goes_through_rke2_containerd(
    host_target: HostTarget, host_node: dict[str, Any], containerd_probe: Runtime, kubelet: Any, cluster: Any,
    site_values: dict[str, Any], evidence: Any,
) -> None:
    node_name = host_node["metadata"]["name"]
    nri_mode = dig(site_values, "cdi.nriPluginEnabled") is True
    evidence.record("mode", "NRI plugin + CDI" if nri_mode else "legacy nvidia runtime in RKE2's containerd config")
    daemon_json = completed(containerd_probe.docker_daemon_json, host_target)
    evidence.record("Docker daemon.json (never the Kubernetes path; recorded only)", daemon_json.stdout.strip() or None)
    kubelet.require_running(host_target.where)
    require(not any(s in kubelet.effective_endpoint for s in DOCKER_SOCKETS), (
        f"{host_target.where}: the kubelet reaches its runtime through Docker ({kubelet.effective_endpoint}); GPUs must "
        "be injected by RKE2's containerd, never by an nvidia runtime wired into Docker"
    ))
    cri = _containerd_config(host_target, containerd_probe, evidence)
    if nri_mode:
        raw = (host_node.get("status") or {}).get("nodeInfo", {}).get("containerRuntimeVersion", "")
        runtime = parse_runtime_version(raw)
        nri_socket = completed(evidence.answer(host_target, NRI_SOCKET_TEST, containerd_probe.nri_socket), host_target)
        try:  # recorded only: the ClusterPolicy's own state is operator-running's subject
            live_nri: Any = [dig(p, "spec.cdi.nriPluginEnabled") for p in cluster.list("clusterpolicies")]
        except CrdNotServed as not_served:
            live_nri = f"not served: {not_served}"
        evidence.record("NRI", {"containerRuntimeVersion": raw, "nri.sock": nri_socket.rc == 0,
                                "ClusterPolicy spec.cdi.nriPluginEnabled (recorded)": live_nri})
        if runtime is None:
            unreadable(f"{host_target.where}: Node {node_name} containerRuntimeVersion {raw!r} is not "
                       "<runtime>://<version>: whether containerd can serve NRI cannot be read")
        require(runtime.runtime == "containerd" and runtime.version[:2] >= NRI_MIN_CONTAINERD, (
            f"{host_target.where}: the NRI plugin needs RKE2's containerd 2.1 or later (RKE2 docs: \"NRI requires "
            f"containerd 2.1\"); Node {node_name} runs {raw}"
        ))
        require(nri_socket.rc == 0, (
            f"{host_target.where}: {NRI_SOCKET} is not a socket: RKE2's containerd does not serve NRI, so the toolkit's "
            "NRI plugin cannot inject GPUs (F14: failed to connect to NRI service)"
        ))
        require(cri.cdi_enabled, f"{host_target.where}: {RKE2_CONTAINERD_CONFIG} disables CDI (enable_cdi = false)")
        dirs = cri.cdi_spec_dirs
        require(dirs is None or any(d.rstrip("/") in CDI_DIRS for d in dirs), (
            f"{host_target.where}: {RKE2_CONTAINERD_CONFIG} cdi_spec_dirs {', '.join(dirs or [])} name neither /etc/cdi "
            "nor /var/run/cdi, where the toolkit and device plugin write their specs"
        ))
    else:
        nvidia = [r for r in cri.runtimes if r.startswith("nvidia")]
        require(nvidia, (
            f"{host_target.where}: legacy mode (cdi.nriPluginEnabled is not true) needs an nvidia runtime in RKE2's "
            f"generated {RKE2_CONTAINERD_CONFIG}; its runtimes are {', '.join(cri.runtimes) or 'none'} "
            "(Docker's daemon.json does not count)"
        ))


def _past_init(pod: dict[str, Any]) -> bool:
    """Every init container of the pod has completed (exit 0): its main container runs or has run."""
    inits = (pod.get("status") or {}).get("initContainerStatuses") or []
    return all(((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0 for s in inits)


@pytest.mark.rule("ADR-0002.gpu-injection")
@pytest.mark.gpu_host
def test_toolkit_nri_plugin_and_cdi_specs_serve_the_node(
    host_target: HostTarget, host_node: dict[str, Any], containerd_probe: Runtime, cluster: Any,
    site_values: dict[str, Any], operator_namespace: str, evidence: Any,
) -> None:
    if dig(site_values, "cdi.nriPluginEnabled") is not True:
        not_applicable("legacy mode (cdi.nriPluginEnabled is not true): the nvidia runtime in RKE2's containerd config "
                       "injects GPUs; no NRI plugin or CDI spec is used")
    node_name = host_node["metadata"]["name"]
    toolkit = _toolkit_pods(cluster, operator_namespace, node_name)
    evidence.record("toolkit pods on the node", [pod_summary(p) for p in toolkit])
    if not toolkit:
        not_applicable(f"no nvidia-container-toolkit-daemonset pod is scheduled on node {node_name}, so the NRI plugin "
                       "and the CDI specs it writes cannot be judged here; operator-components judges the missing pod")
    started = [p for p in toolkit if _past_init(p)]
    if not started:
        not_applicable(f"the toolkit pod on node {node_name} still waits in its init containers (driver-validation): "
                       "its NRI plugin has not started; the driver's layers (host-driver, driver-source) judge the wait")
    specs = completed(evidence.answer(host_target, CDI_SPECS, containerd_probe.cdi_specs), host_target)
    not_ready = [pod_summary(p) for p in started if not pod_ready(p)]
    require(not not_ready, (
        f"{host_target.where}: the NRI plugin runs in the toolkit DaemonSet; its pod on {node_name} is not Ready: "
        + "; ".join(f"{p['name']} {p['phase']} {' '.join(p.get('waiting') or [])}".rstrip() for p in not_ready)
    ))
    require(specs.stdout.strip(), (
        f"{host_target.where}: the toolkit runs but there is no NVIDIA CDI spec in /var/run/cdi or /etc/cdi "
        "(no spec of kind *nvidia.com/gpu; the toolkit and device plugin write them)"
    ))
