"""Workload layer, beyond the ADRs: GPU isolation between pods (CNCF AI Conformance secure_accelerator_access).

A probe pod per GPU node, in the CUDA sample's image (a CUDA image: NVIDIA_VISIBLE_DEVICES=all) and in a namespace of
the CUDA sample's machinery, lists the /dev/nvidia* nodes it was given and runs nvidia-smi -L: without a GPU request
it must see none; with nvidia.com/gpu: 1 exactly one GPU, one of the node's, through that GPU's own device node; where
the site time-slices GPUs, as many such pods at once as the node offers replicas, each seeing one of its GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.kube.cudarun import CudaRun, per_pod, requests_at_once
from pytest_dgxspark.kube.isolation import PROBE_COMMAND, PodView, parse_probe
from pytest_dgxspark.kube.podrun import (
    TERMINAL,
    create_pod,
    pinned_pod,
    pod_diagnostics,
    read_log,
    watch_until_done,
)
from pytest_dgxspark.kube.podstate import PodStory
from pytest_dgxspark.kube.sharing import CONFIG_LABEL, site_sharing
from pytest_dgxspark.probes import nvidia_driver


def per_node(app: str, nodes: list[Any], copies: dict[str, int] | None = None) -> dict[str, Any]:
    """Probe pod names -> their node: one per node (`<app>-<node>`), or `copies[node]` of them (`<app>-<node>-<i>`)."""
    if copies is None:
        return {f"{app}-{g.name}"[:63].rstrip("-."): g for g in nodes}  # named by node: a pod's log says where it ran
    return {f"{app}-{g.name}"[:58].rstrip("-.") + f"-{i}": g for g in nodes for i in range(copies.get(g.name, 0))}


def run_probes(cluster: Any, namespace: CudaRun, pods: dict[str, Any], image: str, gpus: int | None, timeout_s: int,
               evidence: Any, app: str) -> dict[str, dict[str, Any]]:
    """The probe pods (name -> node) in `namespace`, all at once (created here, deleted before returning): name -> what
    each showed."""
    evidence.record(f"{app} pods", {"image": image, "namespace": namespace.name, "nvidia.com/gpu": gpus,
                                    "command": PROBE_COMMAND, "pods": {name: g.name for name, g in pods.items()}})
    results: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        namespace.create()
        bodies = [pinned_pod(name, image, g.node, app=app, gpus=gpus, command=PROBE_COMMAND) for name, g in pods.items()]
        for body in bodies:
            body["metadata"]["labels"].update(namespace.labels)
        at_once = requests_at_once(cluster)
        per_pod(lambda body: create_pod(cluster, namespace.name, body), bodies, at_once)
        phases = watch_until_done(cluster, namespace.name, set(pods), timeout_s)
        logs = per_pod(lambda name: read_log(cluster, namespace.name, name) if phases.get(name) in TERMINAL
                       else ("", None), pods, at_once)
        for (name, gpu), (log, missing_log) in zip(pods.items(), logs):
            results[name] = {"pod": name, "node": gpu.name, "host": gpu.spec.name, "phase": phases.get(name),
                             "log": missing_log or log, "view": parse_probe(log),
                             "seconds": round(time.monotonic() - started, 1)}
        unran = [name for name, r in results.items() if not r["view"].ran]
        for name, story in zip(unran, per_pod(lambda name: pod_diagnostics(cluster, namespace.name, name), unran,
                                              at_once)):
            results[name]["story"] = story
        evidence.record(f"{app} results", {name: {k: _evidence(v) for k, v in r.items()} for name, r in results.items()})
    finally:
        namespace.delete()
    return results


def _evidence(value: Any) -> Any:
    if isinstance(value, PodStory):
        return value.as_evidence()
    if isinstance(value, PodView):
        return {"devices": list(value.devices), "ls_exit": value.ls_exit, "nvidia_smi_exit": value.smi_exit,
                "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid} for g in value.gpus]}
    return value


def _probe_nodes(gpu_nodes: list[Any], cluster: Any) -> list[Any]:
    missing = [g.spec.name for g in gpu_nodes if g.node is None]
    require(gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true) to run the isolation probe on")
    require(not missing, f"{cluster.where}: GPU hosts without a Node to run the isolation probe on: {', '.join(missing)}")
    return [g for g in gpu_nodes if g.node is not None]


def _require_ran(results: dict[str, dict[str, Any]], cluster: Any, image: str) -> None:
    """A probe that did not run to its end says nothing about isolation: the check cannot judge (error)."""
    unran = [r for r in results.values() if not r["view"].ran]
    if unran:
        unreadable(f"{cluster.where}: the isolation probe ({image}, /bin/sh -c) did not run to its end, so what the pod "
                   "sees of the GPUs cannot be read: " + " | ".join(
                       f"on {r['node']}: pod {r['pod']} {r['phase'] or 'never seen'}"
                       + (f" ({r['story'].summary()})" if isinstance(r.get("story"), PodStory) else
                          f": {r.get('story') or r['log'][-200:]!r}") for r in unran))


def host_gpus(gpu_hosts: list[Any], connections: Any, evidence: Any) -> dict[str, list[str]]:
    """Inventory host -> the UUIDs of its GPUs, as nvidia-smi -L on the host lists them (the node's own GPUs)."""
    node_gpus: dict[str, list[str]] = {}
    for target in gpu_hosts:
        driver = nvidia_driver.read(target, connections.probe_settings)
        completed(driver.smi_list, target)
        node_gpus[target.spec.name] = [g.uuid for g in driver.smi_gpus if g.uuid]
    evidence.record("the nodes' GPUs (nvidia-smi -L on each host)", node_gpus)
    return node_gpus


@pytest.mark.rule("SPARK.gpu-isolation-unrequested")
def test_a_pod_without_a_gpu_request_sees_no_gpu(
    gpu_nodes: list[Any], site: Any, cluster: Any, check_namespace: Callable[[str], CudaRun], cuda_timeout_s: int,
    evidence: Any,
) -> None:
    nodes = _probe_nodes(gpu_nodes, cluster)
    image = site.cuda_sample_image
    results = run_probes(cluster, check_namespace("nogpu"), per_node("gpu-none", nodes), image, None, cuda_timeout_s,
                         evidence, "gpu-none")
    _require_ran(results, cluster, image)
    given = [r for r in results.values() if r["view"].devices or r["view"].gpus or r["view"].smi_exit == 0]
    require(given == [], (
        f"{cluster.where}: a pod that requests no nvidia.com/gpu was given GPUs (image {image}; CUDA base images set "
        "NVIDIA_VISIBLE_DEVICES=all): " + " | ".join(f"on {r['node']}: {r['view'].in_words()}" for r in given)
        + "; the injection path is wider than the device plugin's allocation"
    ))


@pytest.mark.rule("SPARK.gpu-isolation-allocated")
def test_a_pod_with_one_gpu_sees_exactly_that_gpu(
    gpu_nodes: list[Any], gpu_hosts: list[Any], connections: Any, site: Any, cluster: Any,
    check_namespace: Callable[[str], CudaRun], cuda_timeout_s: int, evidence: Any,
) -> None:
    nodes = _probe_nodes(gpu_nodes, cluster)
    image = site.cuda_sample_image
    node_gpus = host_gpus(gpu_hosts, connections, evidence)
    results = run_probes(cluster, check_namespace("onegpu"), per_node("gpu-one", nodes), image, 1, cuda_timeout_s,
                         evidence, "gpu-one")
    _require_ran(results, cluster, image)
    wrong = [problem for r in results.values() if (problem := one_gpu_problem(r, node_gpus.get(r["host"], [])))]
    require(wrong == [], f"{cluster.where}: a pod with nvidia.com/gpu: 1 does not see exactly its GPU: " + " | ".join(wrong))


def one_gpu_problem(result: dict[str, Any], own: list[str]) -> str | None:
    """What is wrong with a probe pod given one nvidia.com/gpu (None: it sees one GPU of its node, by one node)."""
    view = result["view"]
    uuids = [g.uuid for g in view.gpus]
    if len(uuids) != 1:
        return f"on {result['node']}: nvidia-smi -L lists {len(uuids)} GPUs, not the one allocated ({view.in_words()})"
    if uuids[0] not in own:
        return (f"on {result['node']}: the pod sees {uuids[0]}, which is none of the node's GPUs "
                f"({', '.join(own) or 'none listed'})")
    if len(view.gpu_minors) != 1:  # one GPU's node; its minor need not be nvidia-smi's index
        return (f"on {result['node']}: the pod sees {uuids[0]} but holds the GPU device nodes "
                f"{', '.join(view.devices) or 'none'}, not one /dev/nvidia<N> alone")
    return None


@pytest.mark.rule("SPARK.gpu-sharing-replicas")
def test_time_slicing_gives_each_replica_the_shared_gpu(
    gpu_nodes: list[Any], gpu_hosts: list[Any], connections: Any, site: Any, site_values: dict[str, Any],
    operator_namespace: str, cluster: Any, check_namespace: Callable[[str], CudaRun], cuda_timeout_s: int,
    evidence: Any,
) -> None:
    helmchart = f"{site.root}/rke2/gpu-operator.helmchart.yaml"
    declared = site_sharing(site_values)
    if declared is not None and not declared.replicas and declared.configmap:  # a ConfigMap made apart from the chart
        configmap = cluster.call(cluster.core.read_namespaced_config_map, declared.configmap, operator_namespace,
                                 _request_timeout=(10, 30))
        declared = site_sharing(site_values, dict(configmap.get("data") or {}))
    evidence.record("declared GPU sharing (devicePlugin.config)", None if declared is None else {
        "configmap": declared.configmap, "default": declared.default, "replicas": declared.replicas,
        "problems": list(declared.problems)})
    if declared is None or not declared.configured:
        not_applicable(f"{helmchart}: devicePlugin.config configures no GPU sharing (no time-slicing replicas of "
                       "nvidia.com/gpu), so each nvidia.com/gpu is one whole GPU; SPARK.gpu-isolation-allocated judges it")
    if declared.problems:
        unreadable(f"{helmchart}: the device plugin configs cannot be read: " + "; ".join(declared.problems))
    nodes = _probe_nodes(gpu_nodes, cluster)
    node_gpus = host_gpus(gpu_hosts, connections, evidence)
    wanted = {g.name: declared.for_node(g.labels) for g in nodes}
    evidence.record("the config each node runs (its nvidia.com/device-plugin.config label, else the default)",
                    {name: {"config": cfg, "replicas": n} for name, (cfg, n) in wanted.items()})
    unapplied = [name for name, (cfg, _) in wanted.items() if cfg is None]
    require(not unapplied, (
        f"{helmchart}: devicePlugin.config {declared.configmap!r} declares time-slicing "
        f"({', '.join(f'{k}: {v} replicas' for k, v in declared.replicas.items() if v > 1)}) but no config applies to "
        f"{', '.join(unapplied)}: devicePlugin.config.default is {declared.default or 'unset'} and the node has no "
        f"{CONFIG_LABEL} label, so its device plugin shares nothing"
    ))
    wrong = []
    for g in nodes:
        cfg, replicas = wanted[g.name]
        gpus = len(node_gpus.get(g.spec.name, []))
        offered = g.allocatable.get("nvidia.com/gpu", "0")
        if offered != str(gpus * replicas):
            wrong.append(f"Node {g.name} offers nvidia.com/gpu {offered}, not {gpus} GPU(s) x {replicas} replicas of "
                         f"config {cfg!r}")
        labels = {k: g.labels.get(f"nvidia.com/gpu.{k}") for k in ("replicas", "sharing-strategy")}
        if labels != {"replicas": str(replicas), "sharing-strategy": "time-slicing"}:
            wrong.append(f"Node {g.name} GFD labels gpu.replicas={labels['replicas']}, gpu.sharing-strategy="
                         f"{labels['sharing-strategy']}, not {replicas} and time-slicing")
    require(wrong == [], f"{cluster.where}: time-slicing is not in effect as declared: " + " | ".join(wrong))
    image = site.cuda_sample_image
    pods = per_node("gpu-shared", nodes, {name: n for name, (_, n) in wanted.items()})
    results = run_probes(cluster, check_namespace("sharing"), pods, image, 1, cuda_timeout_s, evidence, "gpu-shared")
    _require_ran(results, cluster, image)
    wrong = [problem for r in results.values() if (problem := one_gpu_problem(r, node_gpus.get(r["host"], [])))]
    require(wrong == [], f"{cluster.where}: the time-sliced replicas, one nvidia.com/gpu each and all at once, do not "
                         "each see one GPU of their node: " + " | ".join(wrong))
