"""Workload layer: a CUDA sample pod with nvidia.com/gpu: 1 runs and passes on every GPU node (ADR 0002 §5-5)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.parsing import node_taints

TERMINAL = ("Succeeded", "Failed")


def cuda_pod(name: str, image: str, node: dict[str, Any]) -> dict[str, Any]:
    """The CUDA sample pod for one node: limits nvidia.com/gpu: 1, pinned by hostname, tolerating the node's taints."""
    hostname = (node["metadata"].get("labels") or {}).get("kubernetes.io/hostname", node["metadata"]["name"])
    tolerations = [
        {"key": t.key, "operator": "Equal" if t.value else "Exists", **({"value": t.value} if t.value else {}), "effect": t.effect}
        for t in node_taints(node) if t.effect in ("NoSchedule", "NoExecute") and not t.key.startswith("node.kubernetes.io/")
    ] + [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "pytest-dgxspark", "app": "cuda-vectoradd"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": hostname},
            "tolerations": tolerations,
            "containers": [{
                "name": "cuda-vectoradd", "image": image,
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                "securityContext": {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}},
            }],
        },
    }


def watch_until_done(core: Any, namespace: str, names: set[str], timeout_s: int) -> dict[str, str]:
    """Watch the namespace's pods until every named pod is Succeeded/Failed or the timeout; returns name -> phase."""
    phases: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(phases.get(n) in TERMINAL for n in names):
        listing = core.list_namespaced_pod(namespace, _request_timeout=(10, 30))
        phases.update({p.metadata.name: p.status.phase for p in listing.items})
        if all(phases.get(n) in TERMINAL for n in names):
            break
        remaining = max(1, int(deadline - time.monotonic()))
        stream = watch.Watch()
        try:
            for event in stream.stream(core.list_namespaced_pod, namespace, resource_version=listing.metadata.resource_version,
                                       timeout_seconds=min(remaining, 60), _request_timeout=(10, min(remaining, 60) + 10)):
                pod = event["object"]
                phases[pod.metadata.name] = pod.status.phase
                if all(phases.get(n) in TERMINAL for n in names):
                    stream.stop()
        except ApiException as error:
            if error.status != 410:  # 410 Gone: the resource version expired; list again
                raise
    return phases


def pod_diagnostics(core: Any, namespace: str, name: str) -> dict[str, Any]:
    """The pod's status, its events and last log lines, for the evidence."""
    found: dict[str, Any] = {}
    try:
        pod = core.read_namespaced_pod(name, namespace, _request_timeout=(10, 30))
        found["status"] = core.api_client.sanitize_for_serialization(pod.status)
    except ApiException as error:
        found["status"] = f"unreadable: HTTP {error.status}"
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}", _request_timeout=(10, 30))
    found["events"] = [f"{e.type} {e.reason}: {e.message}" for e in events.items]
    try:
        found["log"] = core.read_namespaced_pod_log(name, namespace, tail_lines=40, _request_timeout=(10, 30))
    except ApiException as error:
        found["log"] = f"no log: HTTP {error.status}"
    return found


@pytest.mark.rule("ADR-0002.cuda-sample")
def test_cuda_sample_pod_passes_on_every_gpu_node(
    gpu_nodes: list[Any], site: Any, cluster: Any, cuda_namespace: Any, cuda_timeout_s: int, evidence: Any
) -> None:
    nodes = [g for g in gpu_nodes if g.node is not None]
    assert gpu_nodes and nodes == gpu_nodes, (
        f"{cluster.where}: every GPU host needs a Node to run the CUDA sample on; missing {[g.spec.name for g in gpu_nodes if g.node is None] or 'all (no GPU host)'}"
    )
    core = cluster.core
    image = site.cuda_sample_image
    pods = {f"cuda-vectoradd-{i}": g for i, g in enumerate(nodes)}
    evidence.record("CUDA sample", {"image": image, "namespace": cuda_namespace.name, "timeout_s": cuda_timeout_s,
                                    "pods": {name: g.name for name, g in pods.items()}})
    try:
        cuda_namespace.create()
        for name, gpu in pods.items():
            core.create_namespaced_pod(cuda_namespace.name, cuda_pod(name, image, gpu.node), _request_timeout=(10, 30))
        phases = watch_until_done(core, cuda_namespace.name, set(pods), cuda_timeout_s)
        results = {}
        for name, gpu in pods.items():
            log = ""
            if phases.get(name) in TERMINAL:
                log = core.read_namespaced_pod_log(name, cuda_namespace.name, tail_lines=40, _request_timeout=(10, 30))
            passed = phases.get(name) == "Succeeded" and "Test PASSED" in log
            results[name] = {"node": gpu.name, "phase": phases.get(name), "passed": passed, "log": log}
            if not passed:
                results[name]["diagnostics"] = pod_diagnostics(core, cuda_namespace.name, name)
        evidence.record("CUDA sample results", results)
    finally:
        cuda_namespace.delete()
    failed = {r["node"]: r["phase"] or "not started" for r in results.values() if not r["passed"]}
    assert failed == {}, (
        f"{cluster.where}: the CUDA sample ({image}) did not print 'Test PASSED' within {cuda_timeout_s} s on {failed}; "
        "the evidence holds each pod's events and last log lines"
    )
