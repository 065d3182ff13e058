"""Controllers and pods of the simulated clusters: RKE2 core, the CNI and Argo CD, and the workload/Job/HelmChart shapes."""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

import yaml

from pytest_dgxspark.testbed import pki
from pytest_dgxspark.testbed.podshape import meta, ts
from pytest_dgxspark.testbed.world import PREVIOUS, Context, World, c, owner_ref, pod, rand_name


def workload(ctx: Context, world: World, kind: str, ns: str, name: str, labels: dict[str, str], inits: list[str],
             mains: list[str], image: str, nodes: list[str], spec: dict[str, Any], node_selector: dict[str, str] | None = None,
             logs: dict[str, str] | None = None, host_network: bool = False, per_node: dict[str, dict[str, Any]] | None = None,
             owner: dict[str, Any] | None = None) -> None:
    """A DaemonSet or Deployment (+ReplicaSet), its pods in `spec.state` (or `per_node[node].state`) and their logs
    (`log`/`logs`, and `previous` of the last crashed instance); `owner` becomes the top object's controller."""
    state = spec.get("state", "running")
    specs = {n: (per_node or {}).get(n, spec) for n in nodes}
    nodes = [n for n in nodes if specs[n].get("state", "running") != "absent"]  # no pod there (its DaemonSet exists)
    template = {"metadata": {"labels": dict(labels)},
                "spec": {"containers": [c(m, spec.get("image", image)) for m in mains],
                         **({"initContainers": [c(i, spec.get("image", image)) for i in inits]} if inits else {}),
                         **({"nodeSelector": node_selector} if node_selector else {})}}
    top = {"apiVersion": "apps/v1", "kind": kind,
           "metadata": meta(name, ns, ctx.created, labels, generation=1, ownerReferences=[owner_ref(owner)] if owner else None),
           "spec": {"selector": {"matchLabels": dict(labels)}, "template": template}}
    count = 0 if state == "absent" else len(nodes)
    ready = 0 if state == "absent" else sum(s.get("state", "running") == "running" for s in specs.values())
    if kind == "DaemonSet":
        top["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
        top["status"] = {"currentNumberScheduled": count, "desiredNumberScheduled": count, "numberMisscheduled": 0,
                         "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": count, "observedGeneration": 1}
        if count - ready:
            top["status"]["numberUnavailable"] = count - ready
        parent = top
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
        parent = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                 "metadata": meta(rs_name, ns, ctx.created, {**labels, "pod-template-hash": rs_hash},
                                  ownerReferences=[owner_ref(top)]),
                 # the deployment controller adds pod-template-hash to the ReplicaSet's template as to its selector
                 "spec": {"replicas": 1, "selector": {"matchLabels": {**labels, "pod-template-hash": rs_hash}},
                          "template": {**template, "metadata": {**(template.get("metadata") or {}), "labels": {
                              **((template.get("metadata") or {}).get("labels") or {}), "pod-template-hash": rs_hash}}}},
                 "status": {"replicas": count, "readyReplicas": ready, "availableReplicas": ready, "fullyLabeledReplicas": count,
                            "observedGeneration": 1}}
        world.add(parent)
        labels = {**labels, "pod-template-hash": rs_hash}
    if state == "absent":
        return
    for node_name in nodes:
        one = specs[node_name]
        pod_name = f"{parent['metadata']['name']}-{rand_name(ctx, 'x')[2:]}"
        status_args = {k: one[k] for k in ("restarts", "init_running", "reason", "message", "exit_code") if k in one}
        made = pod(ctx, pod_name, ns, node_name, copy.deepcopy(template["spec"]["containers"]),
                   init=copy.deepcopy(template["spec"].get("initContainers")), labels=labels, state=one.get("state", "running"),
                   owner=owner_ref(parent), host_network=host_network, **status_args)
        if node_selector:
            made["spec"]["nodeSelector"] = node_selector
        texts = dict(logs or {})
        if one.get("log") is not None:
            texts[mains[0]] = one["log"]
        previous = one.get("previous")
        texts.update({f"{k}{PREVIOUS}": v for k, v in ({mains[0]: previous} if isinstance(previous, str) else previous or {}).items()})
        texts.update(one.get("logs") or {})  # explicit texts win, `<container>#previous` keys included
        world.add(made, texts)


def helm_job_env(name: str, spec: dict[str, Any]) -> list[dict[str, str]]:
    """The helm container's environment helm-controller gives a HelmChart's install Job (k3s-io/helm-controller
    pkg/controllers/chart/chart.go `job`): the chart's name, version, repository and target namespace among them."""
    chart = spec.get("chart", "")
    return [{"name": "NAME", "value": name}, {"name": "VERSION", "value": str(spec.get("version") or "")},
            {"name": "REPO", "value": str(spec.get("repo") or "")}, {"name": "HELM_DRIVER", "value": "secret"},
            {"name": "CHART_NAMESPACE", "value": "kube-system"},
            {"name": "CHART", "value": f"{name}/{chart}" if spec.get("repo") else str(chart)},
            {"name": "HELM_VERSION", "value": ""},
            {"name": "TARGET_NAMESPACE", "value": str(spec.get("targetNamespace") or "kube-system")},
            {"name": "AUTH_PASS_CREDENTIALS", "value": "false"}, {"name": "INSECURE_SKIP_TLS_VERIFY", "value": "false"},
            {"name": "PLAIN_HTTP", "value": "false"}]


def job(ctx: Context, world: World, ns: str, name: str, image: str, node_name: str, state: str, log: str,
        env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Job (Complete, Failed or running) and its pod; `env`: its container's environment."""
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
    container = c("helm", image, **({"env": env} if env else {}))
    top = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, ns, ctx.created, {"helmcharts.helm.cattle.io/chart": name.removeprefix("helm-install-")}, generation=1),
           "spec": {"backoffLimit": 1000, "completions": 1, "parallelism": 1,
                    "template": {"spec": {"containers": [container], "restartPolicy": "OnFailure"}}},
           "status": {k: v for k, v in status.items() if v != []}}
    world.add(top)
    pod_state = {"complete": "completed", "failed": "failed"}.get(state, "running")
    world.add(pod(ctx, rand_name(ctx, name), ns, node_name, [copy.deepcopy(container)], state=pod_state, owner=owner_ref(top),
                  labels={"batch.kubernetes.io/job-name": name, "job-name": name}), {"helm": log})
    return top


def rke2_core(ctx: Context, world: World) -> None:
    """Static control-plane pods (`<component>-<node>`), kube-proxy per node, coredns, metrics-server, RKE2 helm jobs."""
    cluster = ctx.scenario.cluster
    kube_proxy = bool(cluster.get("kube_proxy", True))
    version = cluster.get("version", "v1.34.10+rke2r1").split("+")[0]
    servers = [n for n, s in ctx.scenario.nodes.items() if (s or {}).get("role", "server") == "server"]
    for node_name in ctx.scenario.nodes:
        statics = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "cloud-controller-manager"] \
            if node_name in servers else []
        statics += ["kube-proxy"] if kube_proxy else []
        for comp in statics:
            image = "rancher/hardened-etcd:v3.6.4-k3s3-build20250908" if comp == "etcd" else \
                f"rancher/hardened-kubernetes:{version}-rke2r1-build20250910"
            node_uid = world.find("Node", node_name)["metadata"]["uid"]
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
        # k3s-io/helm-controller chart.go OnChange, once the Job has failed
        conds.append({"type": "Failed", "status": "True", "reason": "Job failed",
                      "message": "Job has reached configured number of retries without succeeding"})
    return {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": meta(name, "kube-system", ctx.created, generation=1,
                             annotations={"helmcharts.cattle.io/managed-by": "helm-controller"}, finalizers=["wrangler.cattle.io/on-helm-chart-remove"]),
            "spec": spec, "status": {"jobName": f"helm-install-{name}", "conditions": conds}}


def cni(ctx: Context, world: World) -> None:
    """Cilium (HelmChart, the scenario's rke2-cilium HelmChartConfig values, DaemonSet, operator, CiliumNodes) or Canal."""
    cluster = ctx.scenario.cluster
    kind = cluster.get("cni", "cilium")
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
    values = cluster.get("cilium_values")  # valuesContent of kube-system/rke2-cilium as applied; absent: no HelmChartConfig
    if values is not None:
        world.add({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
                   "metadata": meta("rke2-cilium", "kube-system", ctx.created - 60, generation=1),
                   "spec": {"valuesContent": yaml.safe_dump(values, sort_keys=False).rstrip()}})
    values = values or {}
    hubble = bool((values.get("hubble") or {}).get("enabled", False))
    encryption = values.get("encryption") or {}
    # the agent's effective configuration, rendered by the chart (cluster.cilium_effective overrides keys: drift)
    effective = {"enable-hubble": str(hubble).lower(),
                 "kube-proxy-replacement": str(bool(values.get("kubeProxyReplacement", False))).lower(),
                 "enable-wireguard": str(bool(encryption.get("enabled")) and encryption.get("type") == "wireguard").lower(),
                 "cluster-name": "default", "ipam": "kubernetes", "routing-mode": "tunnel", "tunnel-protocol": "vxlan",
                 **{k: str(v) for k, v in (cluster.get("cilium_effective") or {}).items()}}
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


def argocd(ctx: Context, world: World, server: str, ca: bytes, token: str) -> None:
    """Argo CD pods on the k3s management cluster and, when registered, the declarative cluster Secret."""
    mgmt = ctx.scenario.management
    ns = mgmt.get("namespace", "argocd")
    node_name = mgmt.get("node", "argocd-mgmt")
    ctx.node_ips.setdefault(node_name, mgmt.get("ip", ""))
    for name in ("argocd-server", "argocd-repo-server", "argocd-redis", "argocd-applicationset-controller"):
        workload(ctx, world, "Deployment", ns, name, {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "argocd"}, [],
                 [name.removeprefix("argocd-")], "quay.io/argoproj/argocd:v3.1.8", [node_name], {})
    safe = re.sub(r"[^a-z0-9-]+", "-", str(mgmt.get("cluster_name", "gpu")).lower()).strip("-")
    registered = mgmt.get("registered", True)
    for extra in mgmt.get("other_clusters") or []:
        world.add(_cluster_secret(ctx, ns, extra["name"], extra["server"], {"bearerToken": "x", "tlsClientConfig": {"insecure": True}}))
    if registered:
        # stale: what a registration written before the cluster was reinstalled holds (a token it never issued,
        # the CA it had then)
        if mgmt.get("registered_token") == "stale":
            token = pki.new_token()
        if mgmt.get("registered_ca") == "stale":
            ca = pki.make_ca(f"rke2-server-ca@{int(ctx.created)}").cert
        config = {"bearerToken": token, "tlsClientConfig": {"insecure": False, "caData": base64.b64encode(ca).decode()}}
        world.add(_cluster_secret(ctx, ns, safe, mgmt.get("registered_server", server), config))


def _cluster_secret(ctx: Context, ns: str, name: str, server: str, config: dict[str, Any]) -> dict[str, Any]:
    data = {"name": name, "server": server, "config": json.dumps(config)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": meta(f"cluster-{name}", ns, ctx.created, {"argocd.argoproj.io/secret-type": "cluster"}),
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
