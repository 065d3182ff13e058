"""The two simulated clusters' objects, built from the scenario alone (never from the site under test)."""

from __future__ import annotations

import json
from typing import Any

from pytest_dgxspark.testbed import components, containers, gpuoperator, images
from pytest_dgxspark.testbed.node import RKE2_VERSION, node
from pytest_dgxspark.testbed.node import host_facts as node_host
from pytest_dgxspark.testbed.podshape import meta, status_for
from pytest_dgxspark.testbed.world import Context, World, namespace


def build_workload(ctx: Context) -> World:
    """The workload (RKE2) cluster: namespaces, nodes, RKE2 core, CNI, GPU Operator, extra objects."""
    world = World()
    cluster = ctx.scenario.cluster
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        world.add(namespace(ctx, ns))
    plan = gpuoperator.plan(ctx)
    for name in ctx.scenario.nodes:
        on = plan.nodes.get(name)
        world.add(node(ctx, name, operator_labels=on.labels if on else {}, gfd_labels=bool(on and on.gfd_labels),
                       gpus=on.gpus if on else 0, replicas=on.replicas if on else 1))
    components.rke2_core(ctx, world)
    components.cni(ctx, world)
    if plan.installed:
        gpuoperator.install(ctx, world, plan)
    for obj in list(cluster.get("objects") or []) + ctx.scenario.objects():
        world.add(complete(ctx, obj))
    running = [c.get("image", "") for o in world.objects if o["kind"] == "Pod"
               for c in (o.get("spec") or {}).get("containers", []) + (o.get("spec") or {}).get("initContainers", [])]
    devices = {name: containers.node_devices(node_host(ctx, name), plan.nodes[name].gpus if name in plan.nodes else 0)
               for name in ctx.scenario.nodes}
    workload = {**(cluster.get("workload") or {}), "images": images.catalogue(cluster.get("images"), running),
                "devices": devices}
    world.settings = {"workload": workload, "version": cluster.get("version", RKE2_VERSION), "node_ips": dict(ctx.node_ips),
                      "crds_absent": list(cluster.get("crds_absent") or [])}
    return world


def build_management(ctx: Context, workload_server: str, workload_ca: bytes, workload_token: str) -> World:
    """The Argo CD (k3s) management cluster: argocd namespace, its pods and the cluster Secret when registered."""
    world = World()
    mgmt = ctx.scenario.management
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease", mgmt.get("namespace", "argocd")):
        world.add(namespace(ctx, ns, cluster="management"))
    components.argocd(ctx, world, workload_server, workload_ca, workload_token)
    world.settings = {"workload": {}, "version": mgmt.get("version", "v1.34.10+k3s1"), "node_ips": {}}
    return world


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
