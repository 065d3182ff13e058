"""Controllers and pods of the simulated clusters: RKE2 core, the CNI, the GPU Operator and Argo CD."""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import TYPE_CHECKING, Any

import yaml

from pytest_dgxspark.testbed import logs as default_logs
from pytest_dgxspark.testbed.podshape import meta, ts

if TYPE_CHECKING:
    from pytest_dgxspark.testbed.objects import Context, World

OPERATOR_VERSION = "v26.3.2"
NFD_IMAGE = "registry.k8s.io/nfd/node-feature-discovery:v0.18.3"
# short name -> (DaemonSet, deploy label, init containers, main containers, image)
GPU_DAEMONSETS = {
    "toolkit": ("nvidia-container-toolkit-daemonset", "container-toolkit", ["driver-validation"], ["nvidia-container-toolkit-ctr"],
                "nvcr.io/nvidia/k8s/container-toolkit:v1.19.1"),
    "device-plugin": ("nvidia-device-plugin-daemonset", "device-plugin", ["toolkit-validation"], ["nvidia-device-plugin"],
                      "nvcr.io/nvidia/k8s-device-plugin:v0.19.2"),
    "gfd": ("gpu-feature-discovery", "gpu-feature-discovery", ["toolkit-validation"], ["gpu-feature-discovery"],
            "nvcr.io/nvidia/k8s-device-plugin:v0.19.2"),
    "dcgm-exporter": ("nvidia-dcgm-exporter", "dcgm-exporter", ["toolkit-validation"], ["nvidia-dcgm-exporter"],
                      "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"),
    "validator": ("nvidia-operator-validator", "operator-validator",
                  ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"], ["nvidia-operator-validator"],
                  "nvcr.io/nvidia/gpu-operator:v26.3.2"),
    "driver": ("nvidia-driver-daemonset", "driver", ["k8s-driver-manager"], ["nvidia-driver-ctr"], "nvcr.io/nvidia/driver:580.126.20"),
    "mig-manager": ("nvidia-mig-manager", "mig-manager", ["toolkit-validation"], ["nvidia-mig-manager"],
                    "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.14.2"),
}


def _node_ok(ctx: Context, node_name: str, selector: dict[str, str]) -> bool:
    from pytest_dgxspark.testbed.objects import node

    labels = node(ctx, node_name)["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in selector.items())


def _spec(ctx: Context, short: str) -> dict[str, Any]:
    return ((ctx.scenario.cluster.get("gpu_operator") or {}).get("components") or {}).get(short) or {}


def workload(ctx: Context, world: World, kind: str, ns: str, name: str, labels: dict[str, str], inits: list[str],
             mains: list[str], image: str, nodes: list[str], spec: dict[str, Any], node_selector: dict[str, str] | None = None,
             logs: dict[str, str] | None = None, host_network: bool = False) -> None:
    """A DaemonSet or Deployment (+ReplicaSet), its pods in `spec.state` and their logs."""
    from pytest_dgxspark.testbed.objects import c, owner_ref, pod, rand_name

    state = spec.get("state", "running")
    template = {"metadata": {"labels": dict(labels)},
                "spec": {"containers": [c(m, spec.get("image", image)) for m in mains],
                         **({"initContainers": [c(i, spec.get("image", image)) for i in inits]} if inits else {}),
                         **({"nodeSelector": node_selector} if node_selector else {})}}
    top = {"apiVersion": "apps/v1", "kind": kind, "metadata": meta(name, ns, ctx.created, labels, generation=1),
           "spec": {"selector": {"matchLabels": dict(labels)}, "template": template}}
    count = 0 if state == "absent" else len(nodes)
    ready = count if state == "running" else 0
    if kind == "DaemonSet":
        top["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
        top["status"] = {"currentNumberScheduled": count, "desiredNumberScheduled": count, "numberMisscheduled": 0,
                         "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": count, "observedGeneration": 1}
        if count - ready:
            top["status"]["numberUnavailable"] = count - ready
        owner = top
    else:
        top["spec"]["replicas"] = 1
        top["status"] = {"observedGeneration": 1, "replicas": count, "updatedReplicas": count, "readyReplicas": ready,
                         "availableReplicas": ready,
                         "conditions": [{"type": "Available", "status": "True" if ready else "False",
                                         "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
                                         "message": "Deployment has minimum availability." if ready else
                                         "Deployment does not have minimum availability.",
                                         "lastUpdateTime": ts(ctx.created), "lastTransitionTime": ts(ctx.created)}]}
        if not ready:
            top["status"].pop("readyReplicas")
            top["status"].pop("availableReplicas")
            top["status"]["unavailableReplicas"] = count
    world.add(top)
    if kind == "Deployment":
        rs_name = rand_name(ctx, name, rs=True).rsplit("-", 1)[0]
        rs_hash = rs_name.rsplit("-", 1)[1]
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                 "metadata": meta(rs_name, ns, ctx.created, {**labels, "pod-template-hash": rs_hash},
                                  ownerReferences=[owner_ref(top)]),
                 "spec": {"replicas": 1, "selector": {"matchLabels": {**labels, "pod-template-hash": rs_hash}}, "template": template},
                 "status": {"replicas": count, "readyReplicas": ready, "availableReplicas": ready, "fullyLabeledReplicas": count,
                            "observedGeneration": 1}}
        world.add(owner)
        labels = {**labels, "pod-template-hash": rs_hash}
    if state == "absent":
        return
    for node_name in nodes:
        pod_name = (f"{owner['metadata']['name']}-{rand_name(ctx, 'x')[2:]}")
        status_args = {k: spec[k] for k in ("restarts", "init_running", "reason", "message", "exit_code") if k in spec}
        made = pod(ctx, pod_name, ns, node_name, copy.deepcopy(template["spec"]["containers"]),
                   init=copy.deepcopy(template["spec"].get("initContainers")), labels=labels, state=state,
                   owner=owner_ref(owner), host_network=host_network, **status_args)
        if node_selector:
            made["spec"]["nodeSelector"] = node_selector
        texts = dict(logs or {})
        if spec.get("log") is not None:
            texts[mains[0]] = spec["log"]
        texts.update(spec.get("logs") or {})
        world.add(made, texts)


def job(ctx: Context, world: World, ns: str, name: str, image: str, node_name: str, state: str, log: str) -> dict[str, Any]:
    """A Job (Complete, Failed or running) and its pod."""
    from pytest_dgxspark.testbed.objects import c, owner_ref, pod, rand_name

    done = ts(ctx.created + 60)
    conds = {"complete": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}],
             "failed": [{"type": "FailureTarget", "status": "True"},
                        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                         "message": "Job has reached the specified backoff limit"}]}.get(state, [])
    for cond in conds:
        cond.update({"lastProbeTime": done, "lastTransitionTime": done})
    status: dict[str, Any] = {"startTime": ts(ctx.created), "conditions": conds, "ready": 0, "terminating": 0,
                              "uncountedTerminatedPods": {}}
    status.update({"complete": {"succeeded": 1, "completionTime": done}, "failed": {"failed": 1}}.get(state, {"active": 1}))
    top = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, ns, ctx.created, {"helmcharts.helm.cattle.io/chart": name.removeprefix("helm-install-")}, generation=1),
           "spec": {"backoffLimit": 1000, "completions": 1, "parallelism": 1,
                    "template": {"spec": {"containers": [c("helm", image)], "restartPolicy": "OnFailure"}}},
           "status": {k: v for k, v in status.items() if v != []}}
    world.add(top)
    pod_state = {"complete": "completed", "failed": "failed"}.get(state, "running")
    world.add(pod(ctx, rand_name(ctx, name), ns, node_name, [c("helm", image)], state=pod_state, owner=owner_ref(top),
                  labels={"batch.kubernetes.io/job-name": name, "job-name": name}), {"helm": log})
    return top


def rke2_core(ctx: Context, world: World) -> None:
    """Static control-plane pods (`<component>-<node>`), kube-proxy per node, coredns, metrics-server, RKE2 helm jobs."""
    from pytest_dgxspark.testbed.objects import c, pod

    cluster = ctx.scenario.cluster
    kube_proxy = cluster.get("kube_proxy", not ctx.site_vars.get("rke2_disable_kube_proxy", False))
    version = cluster.get("version", "v1.34.10+rke2r1").split("+")[0]
    servers = [n for n, s in ctx.scenario.nodes.items() if (s or {}).get("role", "server") == "server"]
    for node_name in ctx.scenario.nodes:
        statics = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "cloud-controller-manager"] \
            if node_name in servers else []
        statics += ["kube-proxy"] if kube_proxy else []
        for comp in statics:
            image = "rancher/hardened-etcd:v3.6.4-k3s3-build20250908" if comp == "etcd" else \
                f"rancher/hardened-kubernetes:{version}-rke2r1-build20250910"
            node_uid = next(o["metadata"]["uid"] for o in world.objects if o["kind"] == "Node" and o["metadata"]["name"] == node_name)
            owner = {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
            world.add(pod(ctx, f"{comp}-{node_name}", "kube-system", node_name, [c(comp, image)],
                          labels={"component": comp, "tier": "control-plane"}, owner=owner, host_network=True,
                          annotations={"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": ctx.rng.randbytes(16).hex()}))
    first = servers[0]
    workload(ctx, world, "Deployment", "kube-system", "rke2-coredns-rke2-coredns", {"k8s-app": "kube-dns"}, [], ["coredns"],
             "rancher/hardened-coredns:v1.12.3-build20250909", [first], {})
    workload(ctx, world, "Deployment", "kube-system", "rke2-metrics-server", {"app": "rke2-metrics-server"}, [], ["metrics-server"],
             "rancher/hardened-k8s-metrics-server:v0.8.0-build20250909", [first], {})
    for chart in ("rke2-coredns", "rke2-metrics-server"):
        job(ctx, world, "kube-system", f"helm-install-{chart}", "rancher/klipper-helm:v0.9.8-build20250709", first, "complete",
            "Installing helm chart\n")


def helmchart(ctx: Context, name: str, spec: dict[str, Any], state: str = "complete") -> dict[str, Any]:
    conds = [{"type": "JobCreated", "status": "True", "reason": "Job created", "message": f"Applying HelmChart using Job kube-system/helm-install-{name}"}]
    if state == "failed":
        conds.append({"type": "Failed", "status": "True", "reason": "Error",
                      "message": f"Job kube-system/helm-install-{name} has failed: Job has reached the specified backoff limit"})
    return {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": meta(name, "kube-system", ctx.created, generation=1,
                             annotations={"helmcharts.cattle.io/managed-by": "helm-controller"}, finalizers=["wrangler.cattle.io/on-helm-chart-remove"]),
            "spec": spec, "status": {"jobName": f"helm-install-{name}", "conditions": conds}}


def cni(ctx: Context, world: World) -> None:
    """Cilium (HelmChart, HelmChartConfig from the site's rke2_cilium, DaemonSet, operator, CiliumNodes) or Canal."""
    kind = ctx.scenario.cluster.get("cni") or ctx.site_vars.get("rke2_cni", "cilium")
    nodes, first = list(ctx.scenario.nodes), list(ctx.scenario.nodes)[0]
    base_set = {"global.clusterCIDR": "10.42.0.0/16", "global.clusterCIDRv4": "10.42.0.0/16", "global.clusterDNS": "10.43.0.10",
                "global.rke2DataDir": "/var/lib/rancher/rke2", "global.serviceCIDR": "10.43.0.0/16", "global.systemDefaultRegistry": ""}
    chart = f"rke2-{kind}"
    world.add(helmchart(ctx, chart, {"bootstrap": True, "chartContent": "", "set": base_set}))
    job(ctx, world, "kube-system", f"helm-install-{chart}", "rancher/klipper-helm:v0.9.8-build20250709", first, "complete",
        "Installing helm chart\n")
    if kind != "cilium":
        workload(ctx, world, "DaemonSet", "kube-system", "rke2-canal", {"k8s-app": "canal"}, ["install-cni", "flexvol-driver"],
                 ["calico-node", "kube-flannel"], "rancher/hardened-calico:v3.30.3-build20250909", nodes, {}, host_network=True)
        return
    settings = dict(ctx.site_vars.get("rke2_cilium") or {}, **(ctx.scenario.cluster.get("cilium") or {}))
    values: dict[str, Any] = {"kubeProxyReplacement": bool(settings.get("kube_proxy_replacement", False))}
    if values["kubeProxyReplacement"]:
        values.update({"k8sServiceHost": "localhost", "k8sServicePort": "6443"})
    hubble = bool(settings.get("hubble_enabled", False))
    values["hubble"] = {"enabled": hubble, "relay": {"enabled": hubble}, "ui": {"enabled": hubble}}
    values["encryption"] = {"enabled": bool(settings.get("wireguard_enabled", False)), "type": "wireguard"}
    if ctx.scenario.cluster.get("cilium_config", True):
        world.add({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
                   "metadata": meta("rke2-cilium", "kube-system", ctx.created - 60, generation=1),
                   "spec": {"valuesContent": yaml.safe_dump(values, sort_keys=False).rstrip()}})
    # the agent's effective configuration, rendered by the chart (cluster.cilium_effective overrides keys: drift)
    effective = {"enable-hubble": str(hubble).lower(),
                 "kube-proxy-replacement": str(values["kubeProxyReplacement"]).lower(),
                 "enable-wireguard": str(values["encryption"]["enabled"]).lower(),
                 "cluster-name": "default", "ipam": "kubernetes", "routing-mode": "tunnel", "tunnel-protocol": "vxlan",
                 **{k: str(v) for k, v in (ctx.scenario.cluster.get("cilium_effective") or {}).items()}}
    world.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cilium-config", "kube-system", ctx.created - 50),
               "data": effective})
    image = "rancher/mirrored-cilium-cilium:v1.18.2"
    workload(ctx, world, "DaemonSet", "kube-system", "cilium", {"k8s-app": "cilium", "app.kubernetes.io/name": "cilium-agent"},
             ["config", "mount-cgroup", "apply-sysctl-overwrites", "mount-bpf-fs", "clean-cilium-state", "install-cni-binaries"],
             ["cilium-agent"], image, nodes, {}, host_network=True,
             logs={"cilium-agent": "level=info msg=\"Daemon initialization completed\" subsys=daemon\n"})
    workload(ctx, world, "Deployment", "kube-system", "cilium-operator", {"name": "cilium-operator", "io.cilium/app": "operator"},
             [], ["cilium-operator"], "rancher/mirrored-cilium-operator-generic:v1.18.2", [first], {}, host_network=True)
    if hubble:
        workload(ctx, world, "Deployment", "kube-system", "hubble-relay", {"k8s-app": "hubble-relay"}, [], ["hubble-relay"],
                 "rancher/mirrored-cilium-hubble-relay:v1.18.2", [first], {})
    for index, node_name in enumerate(nodes):
        world.add({"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
                   "metadata": meta(node_name, None, ctx.created, {"kubernetes.io/hostname": node_name}),
                   "spec": {"addresses": [{"type": "InternalIP", "ip": ctx.node_ips[node_name]},
                                          {"type": "CiliumInternalIP", "ip": f"10.42.{index}.1"}],
                            "encryption": {}, "eni": {}, "health": {"ipv4": f"10.42.{index}.2"},
                            "ipam": {"podCIDRs": [f"10.42.{index}.0/24"]}},
                   "status": {"ipam": {"operator-status": {}}}})


def gpu_operator(ctx: Context, world: World) -> None:
    """The GPU Operator as installed by the site's HelmChart in NRI mode on pre-installed-driver nodes."""
    from pytest_dgxspark.testbed.objects import gpu_nodes, namespace

    op = ctx.scenario.cluster.get("gpu_operator") or {}
    first = list(ctx.scenario.nodes)[0]
    spec = copy.deepcopy(ctx.site_helmchart.get("spec") or {})
    spec.update(op.get("helmchart_spec") or {})
    helm_state = op.get("helm_job", "complete")
    world.add(helmchart(ctx, "gpu-operator", spec, helm_state))
    job(ctx, world, "kube-system", "helm-install-gpu-operator", "rancher/klipper-helm:v0.9.8-build20250709", first, helm_state,
        default_logs.HELM_INSTALL if helm_state == "complete" else "Error: context deadline exceeded\n")
    if helm_state != "complete" and op.get("operands_without_chart") is not True:
        return
    ns = spec.get("targetNamespace", "gpu-operator")
    world.add(namespace(ctx, ns, {"pod-security.kubernetes.io/enforce": "privileged"}))
    release = {"app.kubernetes.io/instance": "gpu-operator", "app.kubernetes.io/managed-by": "Helm"}
    workload(ctx, world, "Deployment", ns, "gpu-operator", {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator", **release},
             [], ["gpu-operator"], f"nvcr.io/nvidia/gpu-operator:{OPERATOR_VERSION}", [first], _spec(ctx, "operator"),
             logs={"gpu-operator": default_logs.operator(op)})
    nfd = {"app.kubernetes.io/name": "node-feature-discovery", **release}
    for role in ("master", "gc"):
        workload(ctx, world, "Deployment", ns, f"gpu-operator-node-feature-discovery-{role}", {**nfd, "role": role}, [],
                 [role if role == "master" else "gc"], NFD_IMAGE, [first], _spec(ctx, f"nfd-{role}"))
    workload(ctx, world, "DaemonSet", ns, "gpu-operator-node-feature-discovery-worker", {**nfd, "role": "worker"}, [], ["worker"],
             NFD_IMAGE, list(ctx.scenario.nodes), _spec(ctx, "nfd-worker"))
    gnodes = gpu_nodes(ctx)
    for short, (ds, deploy, inits, mains, image) in GPU_DAEMONSETS.items():
        selector = {f"nvidia.com/gpu.deploy.{deploy}": "true"}
        targets = [n for n in gnodes if _node_ok(ctx, n, selector)]
        workload(ctx, world, "DaemonSet", ns, ds, {"app": ds, "app.kubernetes.io/managed-by": "gpu-operator"}, inits, mains, image,
                 targets, _spec(ctx, short), node_selector=selector, logs=default_logs.component(short), host_network=False)
    validator = op.get("cuda_validator", "completed")
    if validator != "absent":
        for node_name in gnodes:
            world.add(_cuda_validator(ctx, ns, node_name, validator))
    if op.get("runtimeclass_nvidia", False):
        world.add({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "nvidia",
                   "metadata": meta("nvidia", None, ctx.created, {"app.kubernetes.io/component": "gpu-operator"})})
    world.add(_clusterpolicy(ctx, spec, op))


def _cuda_validator(ctx: Context, ns: str, node_name: str, state: str) -> dict[str, Any]:
    from pytest_dgxspark.testbed.objects import c, pod, rand_name

    image = f"nvcr.io/nvidia/gpu-operator:{OPERATOR_VERSION}"
    init = [c("cuda-validation", image, command=["sh", "-c"], args=["vectorAdd"],
              env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], securityContext={"privileged": True})]
    made = pod(ctx, rand_name(ctx, "nvidia-cuda-validator"), ns, node_name,
               [c("nvidia-cuda-validator", image, command=["sh", "-c"], args=["echo cuda workload validation is successful"])],
               init=init, labels={"app": "nvidia-cuda-validator"}, state=state,
               annotations={"nvidia.cdi.k8s.io/container.cuda-validation": "management.nvidia.com/gpu=all"})
    made["spec"]["restartPolicy"] = "OnFailure"
    made["spec"]["serviceAccountName"] = "nvidia-operator-validator"
    made["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return made


def _clusterpolicy(ctx: Context, helm_spec: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    values = yaml.safe_load(helm_spec.get("valuesContent") or "") or {}
    cdi = dict(values.get("cdi") or {})
    cp = op.get("clusterpolicy") or {}
    state, reason = cp.get("state", "ready"), cp.get("reason", "Reconciled")
    message = cp.get("message", default_logs.CLUSTERPOLICY_MESSAGES.get(reason, ""))
    when = ts(ctx.created + 300)
    ready = {"type": "Ready", "status": "True" if state == "ready" else "False", "reason": reason, "message": message,
             "lastTransitionTime": when}
    error = {"type": "Error", "status": "False" if state == "ready" else "True", "reason": "Ready" if state == "ready" else reason,
             "message": "" if state == "ready" else message, "lastTransitionTime": when}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
            "metadata": meta("cluster-policy", None, ctx.created + 30, {"app.kubernetes.io/component": "gpu-operator", "app.kubernetes.io/managed-by": "Helm"}, generation=1),
            "spec": {"operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
                     "driver": {"enabled": bool((values.get("driver") or {}).get("enabled", True)), "kernelModuleType": "auto",
                                "version": "580.126.20"},
                     "toolkit": {"enabled": True, "version": "v1.19.1"},
                     "cdi": {"enabled": bool(cdi.get("enabled", True)), "nriPluginEnabled": bool(cdi.get("nriPluginEnabled", False))},
                     "devicePlugin": {"enabled": True, "version": "v0.19.2"}, "gfd": {"enabled": True, "version": "v0.19.2"},
                     "dcgmExporter": {"enabled": True}, "migManager": {"enabled": True}, "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}}},
            "status": {"namespace": helm_spec.get("targetNamespace", "gpu-operator"), "state": state, "conditions": [ready, error]}}


def argocd(ctx: Context, world: World, server: str, ca: bytes, token: str) -> None:
    """Argo CD pods on the k3s management cluster and, when registered, the declarative cluster Secret."""
    mgmt = ctx.scenario.management
    ns = mgmt.get("namespace", ctx.site_vars.get("argocd_namespace", "argocd"))
    node_name = mgmt.get("node", "argocd-mgmt")
    ctx.node_ips.setdefault(node_name, mgmt.get("ip", ""))
    for name in ("argocd-server", "argocd-repo-server", "argocd-redis", "argocd-applicationset-controller"):
        workload(ctx, world, "Deployment", ns, name, {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "argocd"}, [],
                 [name.removeprefix("argocd-")], "quay.io/argoproj/argocd:v3.1.8", [node_name], {})
    context = ctx.site_vars.get("rke2_context_name", "tirosh-home/rke2/gpu")
    safe = re.sub(r"[^a-z0-9-]+", "-", context.lower()).strip("-")
    registered = mgmt.get("registered", True)
    for extra in mgmt.get("other_clusters") or []:
        world.add(_cluster_secret(ctx, ns, extra["name"], extra["server"], {"bearerToken": "x", "tlsClientConfig": {"insecure": True}}))
    if registered:
        config = {"bearerToken": token, "tlsClientConfig": {"insecure": False, "caData": base64.b64encode(ca).decode()}}
        world.add(_cluster_secret(ctx, ns, safe, mgmt.get("registered_server", server), config))


def _cluster_secret(ctx: Context, ns: str, name: str, server: str, config: dict[str, Any]) -> dict[str, Any]:
    data = {"name": name, "server": server, "config": json.dumps(config)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": meta(f"cluster-{name}", ns, ctx.created, {"argocd.argoproj.io/secret-type": "cluster"}),
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
