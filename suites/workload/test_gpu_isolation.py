"""Workload layer, beyond the ADRs: GPU isolation between pods (CNCF AI Conformance secure_accelerator_access).

A probe pod per GPU node, in the CUDA sample's image (a CUDA image: NVIDIA_VISIBLE_DEVICES=all) and in a namespace of
the CUDA sample's machinery, lists the /dev/nvidia* nodes it was given and runs nvidia-smi -L: without a GPU request
it must see none; with nvidia.com/gpu: 1 exactly one GPU, one of the node's, through that GPU's own device node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

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
from pytest_dgxspark.probes import nvidia_driver


def run_probes(cluster: Any, namespace: CudaRun, nodes: list[Any], image: str, gpus: int | None, timeout_s: int,
               evidence: Any, app: str) -> dict[str, dict[str, Any]]:
    """One probe pod per node in `namespace` (created here, deleted before returning): name -> what it showed."""
    pods = {f"{app}-{g.name}"[:63].rstrip("-."): g for g in nodes}  # named by node: a pod's log says where it ran
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


@pytest.mark.rule("SPARK.gpu-isolation-unrequested")
def test_a_pod_without_a_gpu_request_sees_no_gpu(
    gpu_nodes: list[Any], site: Any, cluster: Any, check_namespace: Callable[[str], CudaRun], cuda_timeout_s: int,
    evidence: Any,
) -> None:
    nodes = _probe_nodes(gpu_nodes, cluster)
    image = site.cuda_sample_image
    results = run_probes(cluster, check_namespace("nogpu"), nodes, image, None, cuda_timeout_s, evidence, "gpu-none")
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
    node_gpus: dict[str, list[str]] = {}
    for target in gpu_hosts:  # the node's own GPUs, as nvidia-smi -L on the host lists them
        driver = nvidia_driver.read(target, connections.probe_settings)
        completed(driver.smi_list, target)
        node_gpus[target.spec.name] = [g.uuid for g in driver.smi_gpus if g.uuid]
    evidence.record("the nodes' GPUs (nvidia-smi -L on each host)", node_gpus)
    results = run_probes(cluster, check_namespace("onegpu"), nodes, image, 1, cuda_timeout_s, evidence, "gpu-one")
    _require_ran(results, cluster, image)
    wrong = []
    for r in results.values():
        view, own = r["view"], node_gpus.get(r["host"], [])
        uuids = [g.uuid for g in view.gpus]
        if len(uuids) != 1:
            wrong.append(f"on {r['node']}: nvidia-smi -L lists {len(uuids)} GPUs, not the one allocated ({view.in_words()})")
        elif uuids[0] not in own:
            wrong.append(f"on {r['node']}: the pod sees {uuids[0]}, which is none of the node's GPUs "
                         f"({', '.join(own) or 'none listed'})")
        elif len(view.gpu_minors) != 1:  # one GPU's node; its minor need not be nvidia-smi's index
            wrong.append(f"on {r['node']}: the pod sees {uuids[0]} but holds the GPU device nodes "
                         f"{', '.join(view.devices) or 'none'}, not one /dev/nvidia<N> alone")
    require(wrong == [], f"{cluster.where}: a pod with nvidia.com/gpu: 1 does not see exactly its GPU: " + " | ".join(wrong))
