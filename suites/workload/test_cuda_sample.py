"""Workload layer: a CUDA sample pod with nvidia.com/gpu: 1 runs and passes on every GPU node (ADR 0002 §5-5)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.kube.cudarun import per_pod, requests_at_once
from pytest_dgxspark.kube.podrun import (
    TERMINAL,
    create_pod,
    cuda_pod,
    pod_diagnostics,
    read_log,
    watch_until_done,
    why_not_passed,
)
from pytest_dgxspark.kube.podstate import PodStory


@pytest.mark.rule("ADR-0002.cuda-sample")
def test_cuda_sample_pod_passes_on_every_gpu_node(
    gpu_nodes: list[Any], site: Any, cluster: Any, cuda_namespace: Any, cuda_timeout_s: int, evidence: Any
) -> None:
    nodes = [g for g in gpu_nodes if g.node is not None]
    missing = [g.spec.name for g in gpu_nodes if g.node is None]
    require(gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true) to run the CUDA sample on")
    require(not missing, f"{cluster.where}: GPU hosts without a Node to run the CUDA sample on: {', '.join(missing)}")
    image = site.cuda_sample_image
    pods = {f"cuda-vectoradd-{i}": g for i, g in enumerate(nodes)}
    evidence.record("CUDA sample", {"image": image, "namespace": cuda_namespace.name, "timeout_s": cuda_timeout_s,
                                    "pods": {name: g.name for name, g in pods.items()}})
    results: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        cuda_namespace.create()
        bodies = [cuda_pod(name, image, gpu.node) for name, gpu in pods.items()]
        for body in bodies:
            body["metadata"]["labels"].update(cuda_namespace.labels)  # the run id, as on the namespace
        at_once = requests_at_once(cluster)
        per_pod(lambda body: create_pod(cluster, cuda_namespace.name, body), bodies, at_once)
        phases = watch_until_done(cluster, cuda_namespace.name, set(pods), cuda_timeout_s)
        elapsed = round(time.monotonic() - started, 1)
        logs = per_pod(lambda name: read_log(cluster, cuda_namespace.name, name) if phases.get(name) in TERMINAL
                       else ("", None), pods, at_once)
        for (name, gpu), (log, missing_log) in zip(pods.items(), logs):
            passed = phases.get(name) == "Succeeded" and "Test PASSED" in log
            results[name] = {"pod": name, "node": gpu.name, "phase": phases.get(name), "passed": passed,
                             "log": missing_log or log, "seconds": elapsed}
        failing = [name for name, r in results.items() if not r["passed"]]
        for name, story in zip(failing, per_pod(lambda name: pod_diagnostics(cluster, cuda_namespace.name, name),
                                                failing, at_once)):
            results[name]["story"] = story
        evidence.record("CUDA sample results", {
            name: {k: (v.as_evidence() if isinstance(v, PodStory) else v) for k, v in r.items()}
            for name, r in results.items()})
    finally:
        cuda_namespace.delete()
    failed = [f"on {r['node']}: {why_not_passed(r, cuda_timeout_s)}" for r in results.values() if not r["passed"]]
    require(failed == [], (
        f"{cluster.where}: the CUDA sample ({image}) did not pass: " + " | ".join(failed)
    ))
