"""Kubernetes objects of the simulated workload cluster, generated from compact scenario data."""

from __future__ import annotations

import base64
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from pytest_dgxspark.testbed import components, hardware
from pytest_dgxspark.testbed.podshape import container, meta, status_for, suffix, ts
from pytest_dgxspark.testbed.scenario import Scenario

RKE2_VERSION = "v1.34.10+rke2r1"
CONTAINERD = "containerd://2.1.5-k3s1"
KERNEL = "6.17.0-1014-nvidia"
OS_IMAGE = "Ubuntu 24.04.3 LTS"
DRIVER = "580.95.05"


@dataclass
class World:
    """Everything one API server serves: objects, container logs (`ns/pod/container` -> text) and settings."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def add(self, obj: dict[str, Any], logs: dict[str, str] | None = None) -> dict[str, Any]:
        self.objects.append(obj)
        for name, text in (logs or {}).items():
            self.logs[f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}/{name}"] = text
        return obj

    def to_json(self) -> str:
        return json.dumps({"objects": self.objects, "logs": self.logs, "settings": self.settings})


@dataclass(frozen=True)
class Context:
    """What the generators need besides the scenario: site vars, manifests, addresses and a seeded RNG."""

    scenario: Scenario
    site_vars: dict[str, Any]
    site_helmchart: dict[str, Any]
    node_ips: dict[str, str]
    rng: random.Random
    now: float

    @property
    def created(self) -> float:
        return self.now - 2 * 86400


def node_kube(ctx: Context, name: str) -> dict[str, Any]:
    return ((ctx.scenario.nodes.get(name) or {}).get("kube")) or {}


def gpu_nodes(ctx: Context) -> list[str]:
    return [n for n, spec in ctx.scenario.nodes.items() if (spec or {}).get("gpu", True)]


def build_workload(ctx: Context) -> World:
    """The workload (RKE2) cluster: namespaces, nodes, RKE2 core, CNI, GPU Operator, extra objects."""
    world = World()
    cluster = ctx.scenario.cluster
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        world.add(namespace(ctx, ns))
    for name in ctx.scenario.nodes:
        world.add(node(ctx, name))
    components.rke2_core(ctx, world)
    components.cni(ctx, world)
    if (cluster.get("gpu_operator") or {}).get("installed", True):
        components.gpu_operator(ctx, world)
    for obj in list(cluster.get("objects") or []) + _object_files(ctx):
        world.add(complete(ctx, obj))
    world.settings = {"workload": cluster.get("workload") or {}, "version": cluster.get("version", RKE2_VERSION),
                      "node_ips": dict(ctx.node_ips)}
    return world


def build_management(ctx: Context, workload_server: str, workload_ca: bytes, workload_token: str) -> World:
    """The Argo CD (k3s) management cluster: argocd namespace, its pods and the cluster Secret when registered."""
    world = World()
    mgmt = ctx.scenario.management
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease", mgmt.get("namespace", ctx.site_vars.get("argocd_namespace", "argocd"))):
        world.add(namespace(ctx, ns))
    components.argocd(ctx, world, workload_server, workload_ca, workload_token)
    world.settings = {"workload": {}, "version": mgmt.get("version", "v1.34.10+k3s1"), "node_ips": {}}
    return world


def namespace(ctx: Context, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": meta(name, None, ctx.created, {"kubernetes.io/metadata.name": name, **(labels or {})}),
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def rke2_node_labels(scenario: Any, site_vars: dict[str, Any], name: str) -> list[str]:
    """A node's RKE2 `node-label` list: its own `nodes.<name>.node_labels`, else the site's rke2_node_labels on GPU
    nodes (the site's labels describe its GPU nodes, ADR 0001 §5), else none (as the suite expects)."""
    node = scenario.nodes.get(name) or {}
    own = node.get("node_labels")
    if own is not None:
        return [str(item) for item in own]
    if not node.get("gpu", True):
        return []
    return [str(item) for item in site_vars.get("rke2_node_labels") or []]


def site_labels(ctx: Context, name: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in rke2_node_labels(ctx.scenario, ctx.site_vars, name) if "=" in item)


def node(ctx: Context, name: str) -> dict[str, Any]:
    """A Node object as RKE2 + NFD + GFD + the GPU Operator leave it (GB10 on a GPU node)."""
    spec = ctx.scenario.nodes[name] or {}
    kube = node_kube(ctx, name)
    server, gpu, ip = spec.get("role", "server") == "server", spec.get("gpu", True), ctx.node_ips[name]
    kernel = kube.get("kernel", (spec.get("host") or {}).get("kernel", KERNEL))
    driver = kube.get("driver_version", DRIVER)
    hw = hardware.facts((spec.get("host") or {}), name=name)  # arch, CPUs, memory, GPUs from the node's host data
    labels = {"beta.kubernetes.io/arch": hw.kube_arch, "beta.kubernetes.io/instance-type": "rke2", "beta.kubernetes.io/os": "linux",
              "kubernetes.io/arch": hw.kube_arch, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "node.kubernetes.io/instance-type": "rke2"}
    if server:
        labels.update({f"node-role.kubernetes.io/{r}": "true" for r in ("control-plane", "etcd", "master")})
    labels.update(site_labels(ctx, name))
    kmaj, kmin = kernel.split(".")[:2]
    labels.update({"feature.node.kubernetes.io/cpu-model.vendor_id": hw.cpu_vendor, "feature.node.kubernetes.io/kernel-version.full": kernel,
                   "feature.node.kubernetes.io/kernel-version.major": kmaj, "feature.node.kubernetes.io/kernel-version.minor": kmin,
                   "feature.node.kubernetes.io/kernel-version.revision": "0", "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                   "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
                   "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "24",
                   "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor": "04"})
    gpus = kube.get("gpus", len(hw.gpus) if gpu else 0)
    if gpu:
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
        labels.update(_gpu_labels(ctx, kube, driver, gpus, hw))
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
    taints = list(kube.get("taints") or [])
    if not ready:
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
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
    if (ctx.scenario.cluster.get("cni") or ctx.site_vars.get("rke2_cni", "cilium")) == "cilium":
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
        "metadata": meta(name, None, ctx.created, labels, annotations=annotations),
        "spec": body,
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "allocatable": allocatable, "capacity": capacity, "conditions": conds,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": hw.kube_arch, "bootID": _uuid(ctx, name + "boot"), "kubeProxyVersion": "",
                         "containerRuntimeVersion": kube.get("container_runtime", CONTAINERD), "kernelVersion": kernel,
                         "kubeletVersion": kube.get("kubelet_version", ctx.scenario.cluster.get("version", RKE2_VERSION)),
                         "machineID": _uuid(ctx, name + "machine").replace("-", ""), "operatingSystem": "linux",
                         "osImage": kube.get("os_image", OS_IMAGE), "systemUUID": _uuid(ctx, name + "system")},
            "images": [], "phase": None,
        },
    }


def _gpu_labels(ctx: Context, kube: dict[str, Any], driver: str, gpus: int, hw: hardware.NodeFacts) -> dict[str, str]:
    labels: dict[str, str] = {}
    operator = ctx.scenario.cluster.get("gpu_operator") or {}
    if operator.get("installed", True) and kube.get("operator_labels", True):
        labels["nvidia.com/gpu.present"] = "true"
        labels.update({f"nvidia.com/gpu.deploy.{c}": "true" for c in (
            "container-toolkit", "dcgm", "dcgm-exporter", "device-plugin", "gpu-feature-discovery", "node-status-exporter",
            "operator-validator")})
        labels["nvidia.com/gpu.deploy.driver"] = kube.get("driver_deploy", "pre-installed")
    if operator.get("installed", True) and kube.get("gfd_labels", True):
        major, minor, rev = (driver.split(".") + ["", ""])[:3]
        cuda = kube.get("cuda_version", "13.0")
        labels.update({
            "nvidia.com/cuda.driver-version.full": driver, "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor, "nvidia.com/cuda.driver-version.revision": rev,
            "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor, "nvidia.com/cuda.driver.rev": rev,
            "nvidia.com/cuda.runtime-version.full": cuda, "nvidia.com/cuda.runtime-version.major": cuda.split(".")[0],
            "nvidia.com/cuda.runtime-version.minor": cuda.split(".")[1], "nvidia.com/cuda.runtime.major": cuda.split(".")[0],
            "nvidia.com/cuda.runtime.minor": cuda.split(".")[1], "nvidia.com/gfd.timestamp": str(int(ctx.created) + 120),
            "nvidia.com/gpu.compute.major": (hw.compute or ("12", "1"))[0], "nvidia.com/gpu.compute.minor": (hw.compute or ("12", "1"))[1],
            "nvidia.com/gpu.count": str(gpus or 1), "nvidia.com/gpu.family": hw.family or "blackwell",
            "nvidia.com/gpu.product": kube.get("gpu_product", hw.gfd_product or "NVIDIA-GB10"),
            "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/mig.capable": "true" if hw.mig_capable else "false",
            "nvidia.com/mps.capable": "false"})
        if hw.gpus and hw.gpus[0].get("memory") not in (None, "not-supported"):  # GFD omits it on unified memory
            labels["nvidia.com/gpu.memory"] = str(hw.gpus[0]["memory"])
        if kube.get("gpu_machine"):
            labels["nvidia.com/gpu.machine"] = str(kube["gpu_machine"])
    return labels


def _uuid(ctx: Context, seed: str) -> str:
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{ctx.scenario.name}.{seed}"))


def pod(ctx: Context, name: str, namespace_: str, node_name: str, containers: list[dict[str, Any]], *,
        labels: dict[str, str] | None = None, init: list[dict[str, Any]] | None = None, state: str = "running",
        owner: dict[str, Any] | None = None, host_network: bool = False, created: float | None = None,
        annotations: dict[str, str] | None = None, **status_args: Any) -> dict[str, Any]:
    """A scheduled Pod with a kubelet-shaped status for `state` (see podshape.status_for)."""
    made = created if created is not None else ctx.created
    spec: dict[str, Any] = {"containers": containers, "nodeName": node_name, "restartPolicy": "Always",
                            "schedulerName": "default-scheduler", "serviceAccountName": "default",
                            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "enableServiceLinks": True,
                            "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "securityContext": {}}
    if init:
        spec["initContainers"] = init
    if host_network:
        spec["hostNetwork"] = True
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": meta(name, namespace_, made, labels, annotations=annotations,
                            ownerReferences=[owner] if owner else None),
           "spec": spec}
    obj["status"] = status_for(obj, state, ctx.node_ips.get(node_name, ""), made, **status_args)
    return obj


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def complete(ctx: Context, obj: dict[str, Any]) -> dict[str, Any]:
    """Fill metadata (uid, creationTimestamp) of an extra object; give a Pod without status a kubelet-shaped one."""
    obj = json.loads(json.dumps(obj))
    md = obj.setdefault("metadata", {})
    filled = meta(md.get("name", "unnamed"), md.get("namespace"), ctx.now - 3600)
    for key, value in filled.items():
        md.setdefault(key, value)
    if obj.get("kind") == "Pod" and "status" not in obj:
        spec = obj.setdefault("spec", {})
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            c.setdefault("imagePullPolicy", "IfNotPresent")
        md.setdefault("namespace", "default")
        node_name = spec.get("nodeName", "")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        obj["status"] = status_for(obj, "running" if node_name else "pending", ctx.node_ips.get(node_name, ""), ctx.now - 3600)
    return obj


def _object_files(ctx: Context) -> list[dict[str, Any]]:
    found = []
    for path in ctx.scenario.object_files():
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def make_context(scenario: Scenario, site_vars: dict[str, Any], site_helmchart: dict[str, Any],
                 node_ips: dict[str, str]) -> Context:
    return Context(scenario, site_vars, site_helmchart, node_ips, random.Random(scenario.name), time.time())


def rand_name(ctx: Context, prefix: str, rs: bool = False) -> str:
    """`prefix-xxxxx`, or `prefix-<rs hash>-xxxxx` for Deployment pods."""
    return f"{prefix}-{suffix(ctx.rng, 10 if rs else 5)[:9 if rs else 5]}" + (f"-{suffix(ctx.rng)}" if rs else "")


def c(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return container(name, image, **extra)
