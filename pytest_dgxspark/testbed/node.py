"""The Node object of a scenario node, as RKE2 registers it and NFD, GFD and the GPU Operator label it."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from pytest_dgxspark.testbed import hardware
from pytest_dgxspark.testbed.hosts import host_spec
from pytest_dgxspark.testbed.podshape import meta, ts
from pytest_dgxspark.testbed.world import Context, node_uid

RKE2_VERSION = "v1.34.10+rke2r1"
CONTAINERD = "containerd://2.1.5-k3s1"
OS_IMAGE = "Ubuntu 24.04.3 LTS"


def node_kube(ctx: Context, name: str) -> dict[str, Any]:
    return ((ctx.scenario.nodes.get(name) or {}).get("kube")) or {}


def host_metadata(node: dict[str, Any]) -> dict[str, Any]:
    """The RKE2 node-label/node-taint of a node's config.yaml, from the scenario alone: its own `node_labels` and
    `node_taints`; else the hosts' defaults (tirosh-home's labels, as testbed data) on a GPU node, none on others."""
    meta: dict[str, Any] = {}
    if node.get("node_labels") is not None:
        meta["node_labels"] = [str(item) for item in node["node_labels"]]
    elif not node.get("gpu", True):
        meta["node_labels"] = []
    if node.get("node_taints") is not None:
        meta["node_taints"] = [str(item) for item in node["node_taints"]]
    return meta


def host_facts(ctx: Context, name: str) -> dict[str, Any]:
    """The node's host as the host simulator runs it (defaults and config.yaml metadata merged), for the cluster side."""
    spec = ctx.scenario.nodes.get(name) or {}
    return host_spec({**host_metadata(spec), **(spec.get("host") or {})}, name=name, role=spec.get("role", "server"))


def gpu_nodes(ctx: Context) -> list[str]:
    return [n for n, spec in ctx.scenario.nodes.items() if (spec or {}).get("gpu", True)]


def _taint(text: str) -> dict[str, str]:
    """RKE2 `node-taint` `key=value:Effect` (or `key:Effect`) as the Node's taint."""
    body, _, effect = text.rpartition(":")
    key, _, value = body.partition("=")
    return {"key": key, **({"value": value} if value else {}), "effect": effect}


def node(ctx: Context, name: str, *, operator_labels: dict[str, str], gfd_labels: bool, gpus: int,
         replicas: int = 1) -> dict[str, Any]:
    """A Node object: RKE2's labels and the scenario's node-label, NFD's, the operator's and GFD's when they ran,
    `nvidia.com/gpu` in capacity when the device plugin registered `gpus` of them."""
    spec = ctx.scenario.nodes[name] or {}
    kube, host = node_kube(ctx, name), host_facts(ctx, name)
    hw = hardware.facts(host, name=name)
    server, gpu, ip = spec.get("role", "server") == "server", spec.get("gpu", True), ctx.node_ips[name]
    kernel = kube.get("kernel", host.get("kernel"))
    arch = hw.kube_arch
    labels = {"beta.kubernetes.io/arch": arch, "beta.kubernetes.io/instance-type": "rke2", "beta.kubernetes.io/os": "linux",
              "kubernetes.io/arch": arch, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "node.kubernetes.io/instance-type": "rke2"}
    if server:
        labels.update({f"node-role.kubernetes.io/{r}": "true" for r in ("control-plane", "etcd", "master")})
    labels.update(dict(item.split("=", 1) for item in host.get("node_labels") or [] if "=" in item))
    kmaj, kmin = kernel.split(".")[:2]
    labels.update({"feature.node.kubernetes.io/cpu-model.vendor_id": hw.cpu_vendor,
                   "feature.node.kubernetes.io/kernel-version.full": kernel,
                   "feature.node.kubernetes.io/kernel-version.major": kmaj, "feature.node.kubernetes.io/kernel-version.minor": kmin,
                   "feature.node.kubernetes.io/kernel-version.revision": "0", "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                   "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
                   "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "24",
                   "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor": "04"})
    if gpu:
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    if gpu:
        labels.update(operator_labels)
    if gpu and gfd_labels:
        labels.update(_gfd_labels(ctx, kube, host, hw, replicas))
    for key, value in (kube.get("labels") or {}).items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = str(value)
    capacity = {"cpu": str(hw.cpus), "ephemeral-storage": "3771999944Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": f"{hw.memory_kib}Ki", "pods": "110"}
    if hw.arch == "aarch64":  # arm64 kernels with 4k pages also offer 32Mi and 64Ki huge pages
        capacity.update({"hugepages-32Mi": "0", "hugepages-64Ki": "0"})
    allocatable = dict(capacity, **{"ephemeral-storage": "3669421189933"})
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        allocatable["nvidia.com/gpu"] = str(kube.get("allocatable_gpus", gpus))
    ready = kube.get("ready", True)
    taints = [_taint(t) for t in host.get("node_taints") or []] + list(kube.get("taints") or [])
    if not ready:  # the node lifecycle controller's taints (TaintNodesByCondition, k3s#497)
        taints += [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                   {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    now = ts(ctx.now - 30)
    conds = [{"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": ts(ctx.created)}
             for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                             ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                             ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))]
    ready_cond = ({"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"} if ready else
                  {"status": kube.get("ready_status", "False"), "reason": kube.get("ready_reason", "KubeletNotReady"),
                   "message": kube.get("ready_message", "container runtime network not ready: NetworkReady=false "
                                       "reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized")})
    conds.append({"type": "Ready", **ready_cond, "lastHeartbeatTime": now, "lastTransitionTime": ts(ctx.created)})
    if ctx.scenario.cluster.get("cni", "cilium") == "cilium":
        conds.insert(0, {"type": "NetworkUnavailable", "status": "False", "reason": "CiliumIsUp", "message": "Cilium is running on this node",
                         "lastHeartbeatTime": ts(ctx.created), "lastTransitionTime": ts(ctx.created)})
    node_args = ["server" if server else "agent", "--config", "/etc/rancher/rke2/config.yaml"]
    annotations = {"alpha.kubernetes.io/provided-node-ip": ip, "node.alpha.kubernetes.io/ttl": "0",
                   "rke2.io/hostname": name, "rke2.io/internal-ip": ip, "rke2.io/node-args": json.dumps(node_args),
                   "rke2.io/node-config-hash": base64.b32encode(name.encode() * 4).decode()[:52] + "====",
                   "rke2.io/node-env": "{}", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    if gpu:
        annotations["nfd.node.kubernetes.io/feature-labels"] = "cpu-model.vendor_id,kernel-version.full,kernel-version.major," \
            "kernel-version.minor,kernel-version.revision,pci-10de.present,system-os_release.ID,system-os_release.VERSION_ID," \
            "system-os_release.VERSION_ID.major,system-os_release.VERSION_ID.minor"
    body: dict[str, Any] = {"podCIDR": f"10.42.{list(ctx.scenario.nodes).index(name)}.0/24"}
    body["podCIDRs"] = [body["podCIDR"]]
    body["providerID"] = f"rke2://{name}"
    if taints:
        body["taints"] = taints
    if kube.get("unschedulable"):
        body["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {**meta(name, None, ctx.created, labels, annotations=annotations),
                     "uid": node_uid(ctx.scenario.lineage, name)},
        "spec": body,
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "allocatable": allocatable, "capacity": capacity, "conditions": conds,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": arch, "bootID": _uuid(ctx, name + "boot"), "kubeProxyVersion": "",
                         "containerRuntimeVersion": kube.get("container_runtime", CONTAINERD), "kernelVersion": kernel,
                         "kubeletVersion": kube.get("kubelet_version", ctx.scenario.cluster.get("version", RKE2_VERSION)),
                         "machineID": _uuid(ctx, name + "machine").replace("-", ""), "operatingSystem": "linux",
                         "osImage": kube.get("os_image", OS_IMAGE), "systemUUID": _uuid(ctx, name + "system")},
            "images": [], "phase": None,
        },
    }


def _gfd_labels(ctx: Context, kube: dict[str, Any], host: dict[str, Any], hw: hardware.NodeFacts,
                replicas: int = 1) -> dict[str, str]:
    """GPU Feature Discovery's labels, from the host's driver and GPUs."""
    driver = str(kube.get("driver_version", (host.get("driver") or {}).get("version", "580.95.05")))
    major, minor, rev = (driver.split(".") + ["", ""])[:3]
    cuda = str(kube.get("cuda_version", host.get("cuda_version", "13.0")))
    cmaj, cmin = hw.compute or ("12", "1")
    labels = {
        "nvidia.com/cuda.driver-version.full": driver, "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor, "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor, "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.full": cuda, "nvidia.com/cuda.runtime-version.major": cuda.split(".")[0],
        "nvidia.com/cuda.runtime-version.minor": cuda.split(".")[1], "nvidia.com/cuda.runtime.major": cuda.split(".")[0],
        "nvidia.com/cuda.runtime.minor": cuda.split(".")[1], "nvidia.com/gfd.timestamp": str(int(ctx.created) + 120),
        "nvidia.com/gpu.compute.major": cmaj, "nvidia.com/gpu.compute.minor": cmin, "nvidia.com/gpu.count": str(len(hw.gpus) or 1),
        "nvidia.com/gpu.family": hw.family or "blackwell",
        "nvidia.com/gpu.product": str(kube.get("gpu_product", hw.gfd_product or "NVIDIA-GB10")),
        "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if hw.mig_capable else "false", "nvidia.com/mps.capable": "false"}
    if replicas > 1:  # time-slicing with renameByDefault false: GFD says so and appends -SHARED to the product
        labels.update({"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.sharing-strategy": "time-slicing",
                       "nvidia.com/gpu.product": labels["nvidia.com/gpu.product"] + "-SHARED"})
    if hw.gpus and hw.gpus[0].get("memory") not in (None, "not-supported"):  # GFD omits it on unified memory (GB10)
        labels["nvidia.com/gpu.memory"] = str(hw.gpus[0]["memory"])
    if kube.get("gpu_machine"):
        labels["nvidia.com/gpu.machine"] = str(kube["gpu_machine"])
    return labels


def _uuid(ctx: Context, seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{ctx.scenario.name}.{seed}"))
