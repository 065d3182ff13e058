"""Provenance of a run (what software was checked), built from data the run already fetched."""

from __future__ import annotations

import re
from typing import Any

from pytest_dgxspark.catalog.releases import running_operands
from pytest_dgxspark.data.values import image_tag
from pytest_dgxspark.probes.nvidia_driver import DRIVER_VERSION_FILE, SMI_HEADER, parse_proc_driver_version
from pytest_dgxspark.probes.system import ARCH, DGX_RELEASE, KERNEL, OS_RELEASE, parse_os_release
from pytest_dgxspark.probes.system import PROVENANCE_TIMEOUT_S as SMI_TIMEOUT_S

# Host facts: the probes' own command strings, so the gathering step has already answered them (gather.py).

# The machine's identity from its firmware tables (DMI/SMBIOS; product_serial is readable by root only): one line
# `<name>=<value>` per file, empty when the file is missing or unreadable.
DMI_FILES = ("sys_vendor", "product_name", "product_serial", "bios_version", "bios_date")
MACHINE = ("for f in " + " ".join(DMI_FILES) + "; do printf '%s=' \"$f\"; "
           "cat /sys/class/dmi/id/\"$f\" 2>/dev/null || echo; done")
HOST_FACTS = (OS_RELEASE, DGX_RELEASE, KERNEL, ARCH, DRIVER_VERSION_FILE, MACHINE)
CLUSTER_KINDS = ("nodes", "namespaces", "daemonsets", "deployments", "helmcharts")

# Each GPU Operator operand's image tag under its own key (a rehearsal's drift names each one's old and new version);
# the operator's and the device plugin's keep the names baselines already carry.
OPERAND_KEYS = {"operator": "gpu_operator_image", "device-plugin": "device_plugin_version", "driver": "driver_image_version"}

_CUDA = re.compile(r"CUDA (?:UMD )?Version:\s*([0-9.]+)")  # R610+ prints "CUDA UMD Version" (captures/b200-nvidia-smi.txt)


def prefetch(hosts: list[Any], cluster: Any | None) -> None:
    """Fetch provenance facts over connections already open; never opens one, never raises."""
    for target in hosts:
        if not getattr(target, "connected", False):
            continue
        for cmd in HOST_FACTS:
            try:
                target.cached(cmd, timeout=SMI_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - provenance is best effort at session end
                break
    if cluster is not None:
        from pytest_dgxspark.targets.cluster import CrdNotServed

        for kind in CLUSTER_KINDS:
            try:
                cluster.list(kind)
            except CrdNotServed:  # not installed: the checks that need it say so; provenance records none
                continue
            except Exception:  # noqa: BLE001
                break


def _stdout(target: Any, cmd: str) -> str | None:
    result = target.cached_result(cmd)
    if result is None or result.rc != 0:
        return None
    return result.stdout


def parse_machine(text: str) -> dict[str, str | None]:
    """DMI_FILES -> value (None when empty) from MACHINE's output."""
    found: dict[str, str | None] = {name: None for name in DMI_FILES}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name in found:
            found[name] = value.strip() or None
    return found


def host_facts(target: Any) -> dict[str, Any]:
    """What the run learned about one host (None for what it never fetched)."""
    os_release = parse_os_release(_stdout(target, OS_RELEASE) or "")
    dgx = parse_os_release(_stdout(target, DGX_RELEASE) or "")
    driver = parse_proc_driver_version(_stdout(target, DRIVER_VERSION_FILE) or "")
    smi = _stdout(target, SMI_HEADER) or ""
    cuda = _CUDA.search(smi)
    return {
        "address": target.spec.address,
        "os": os_release.get("PRETTY_NAME"),
        "dgx_os": dgx.get("DGX_SWBUILD_VERSION") or dgx.get("DGX_OTA_VERSION") or dgx.get("DGX_PRETTY_NAME"),
        "kernel": (_stdout(target, KERNEL) or "").strip() or None,
        "arch": (_stdout(target, ARCH) or "").strip() or None,
        "nvidia_driver": driver.version if driver else None,
        "nvidia_driver_flavour": driver.flavour if driver else None,
        "cuda_version": cuda.group(1) if cuda else None,
        **parse_machine(_stdout(target, MACHINE) or ""),
    }


def _first_image_tag(items: list[dict[str, Any]], name: str, container_hint: str = "") -> str | None:
    for item in items:
        if item["metadata"]["name"] != name:
            continue
        containers = ((item.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
        for container in containers:
            if container_hint in container.get("image", ""):
                return image_tag(container.get("image", ""))
    return None


def cluster_facts(cluster: Any) -> dict[str, Any]:
    """What the run learned about the cluster (None for what it never fetched)."""
    nodes = cluster.cached("nodes") or []
    namespaces = cluster.cached("namespaces") or []
    daemonsets = cluster.cached("daemonsets") or []
    deployments = cluster.cached("deployments") or []
    helmcharts = cluster.cached("helmcharts") or []
    kube_system = next((n for n in namespaces if n["metadata"]["name"] == "kube-system"), None)
    chart = next((h for h in helmcharts if h["metadata"]["name"] == "gpu-operator"), None)
    operator_tag = _first_image_tag(deployments, "gpu-operator", "gpu-operator")
    per_node = {}
    for node in nodes:
        info = (node.get("status") or {}).get("nodeInfo") or {}
        labels = node["metadata"].get("labels") or {}
        per_node[node["metadata"]["name"]] = {
            "uid": node["metadata"].get("uid"),
            "os_image": info.get("osImage"),
            "kernel": info.get("kernelVersion"),
            "arch": info.get("architecture"),
            "rke2_version": info.get("kubeletVersion"),
            "containerd_version": info.get("containerRuntimeVersion"),
            "nvidia_driver": labels.get("nvidia.com/cuda.driver-version.full"),
            "cuda_version": labels.get("nvidia.com/cuda.runtime-version.full"),
            "gpu_product": labels.get("nvidia.com/gpu.product"),
        }
    operands = {OPERAND_KEYS.get(name, name.replace("-", "_") + "_version"): found.tag for name, found in
                running_operands({"DaemonSet": daemonsets, "Deployment": deployments}).items()}
    return {
        **operands,
        "cluster_uid": kube_system["metadata"].get("uid") if kube_system else None,
        "server": getattr(cluster, "_api", None) and cluster.api.configuration.host,
        "gpu_operator_chart_version": ((chart or {}).get("spec") or {}).get("version") or operator_tag,
        "gpu_operator_image": operator_tag,
        "device_plugin_version": _first_image_tag(daemonsets, "nvidia-device-plugin-daemonset", "device-plugin"),
        "cilium_version": _first_image_tag(daemonsets, "cilium", "cilium"),
        "nodes": per_node,
    }


def collect(hosts: list[Any], cluster: Any | None) -> dict[str, Any]:
    """Provenance: per host (OS, DGX OS, kernel, arch, driver and flavour, CUDA) and per cluster/node."""
    result: dict[str, Any] = {"hosts": {t.name: host_facts(t) for t in hosts}}
    result["cluster"] = cluster_facts(cluster) if cluster is not None else None
    return result
