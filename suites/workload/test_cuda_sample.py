"""Workload layer: a CUDA sample pod with nvidia.com/gpu: 1 runs and passes on every GPU node (ADR 0002 §5-5)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.connections import transient
from pytest_dgxspark.parsing import node_taints
from pytest_dgxspark.checking import require

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


def watch_until_done(cluster: Any, namespace: str, names: set[str], timeout_s: int) -> dict[str, str]:
    """Watch the namespace's pods until every named pod is Succeeded/Failed or the timeout; returns name -> phase.

    Lists and watches retry transient API errors; a watch cut short (410 Gone, a 5xx) lists again.
    """
    core = cluster.core
    phases: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(phases.get(n) in TERMINAL for n in names):
        listing = cluster.call(core.list_namespaced_pod, namespace, _request_timeout=(10, 30))
        phases.update({p.metadata.name: p.status.phase for p in listing.items})
        remaining = int(deadline - time.monotonic())
        if all(phases.get(n) in TERMINAL for n in names) or remaining < 1:
            break
        stream = watch.Watch()
        try:
            for event in stream.stream(core.list_namespaced_pod, namespace, resource_version=listing.metadata.resource_version,
                                       timeout_seconds=min(remaining, 60), _request_timeout=(10, min(remaining, 60) + 10)):
                pod = event["object"]
                phases[pod.metadata.name] = pod.status.phase
                if all(phases.get(n) in TERMINAL for n in names):
                    stream.stop()
        except ApiException as error:
            if error.status != 410 and not transient(error):  # 410 Gone: the resource version expired; list again
                raise
    return phases


def read_log(cluster: Any, namespace: str, name: str) -> tuple[str, str | None]:
    """(log, None), or ('', 'no log: <why>') when the API has none (a container that never started answers 400)."""
    try:
        return cluster.call(cluster.core.read_namespaced_pod_log, name, namespace, tail_lines=40, _request_timeout=(10, 30)), None
    except ApiException as error:
        return "", f"no log: HTTP {error.status}: {_status_message(error)}"


def _status_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def pod_diagnostics(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    """The pod's status (phase, reason, message, conditions, container states), its events and last log lines."""
    core = cluster.core
    found: dict[str, Any] = {}
    try:
        pod = cluster.call(core.read_namespaced_pod, name, namespace, _request_timeout=(10, 30))
        found["status"] = core.api_client.sanitize_for_serialization(pod.status)
    except ApiException as error:
        found["status"] = f"unreadable: HTTP {error.status}: {_status_message(error)}"
    try:
        events = cluster.call(core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={name}",
                              _request_timeout=(10, 30))
        found["events"] = [f"{e.type} {e.reason}: {e.message}" for e in events.items]
    except ApiException as error:
        found["events"] = [f"unreadable: HTTP {error.status}: {_status_message(error)}"]
    log, missing = read_log(cluster, namespace, name)
    found["log"] = missing or log
    return found


def why_not_passed(result: dict[str, Any]) -> str:
    """One line per pod: phase, the pod's status reason/message (or why it is not scheduled), events, log."""
    diagnostics = result.get("diagnostics") or {}
    status = diagnostics.get("status") if isinstance(diagnostics.get("status"), dict) else {}
    parts = [result.get("phase") or "not started"]
    if status.get("reason") or status.get("message"):
        parts.append(f"{status.get('reason')}: {status.get('message')}")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            parts.append(f"PodScheduled=False {condition.get('reason')}: {condition.get('message')}")
    for cs in (status.get("init_container_statuses") or []) + (status.get("container_statuses") or []):
        for kind in ("waiting", "terminated"):
            state = (cs.get("state") or {}).get(kind)
            if state and state.get("reason") not in (None, "Completed"):
                parts.append(f"container {cs.get('name')} {kind} {state.get('reason')}: {state.get('message') or ''}".rstrip(": "))
    if diagnostics.get("events"):
        parts.append(f"events {diagnostics['events'][-5:]}")
    if result.get("passed") is False and result.get("phase") == "Succeeded":
        parts.append(f"log without 'Test PASSED': {result.get('log', '')[-300:]!r}")
    elif isinstance(diagnostics.get("log"), str) and diagnostics["log"].startswith("no log:"):
        parts.append(diagnostics["log"])
    return "; ".join(parts)


@pytest.mark.rule("ADR-0002.cuda-sample")
def test_cuda_sample_pod_passes_on_every_gpu_node(
    gpu_nodes: list[Any], site: Any, cluster: Any, cuda_namespace: Any, cuda_timeout_s: int, evidence: Any
) -> None:
    nodes = [g for g in gpu_nodes if g.node is not None]
    require(gpu_nodes and nodes == gpu_nodes, (
        f"{cluster.where}: every GPU host needs a Node to run the CUDA sample on; missing {[g.spec.name for g in gpu_nodes if g.node is None] or 'all (no GPU host)'}"
    ))
    image = site.cuda_sample_image
    pods = {f"cuda-vectoradd-{i}": g for i, g in enumerate(nodes)}
    evidence.record("CUDA sample", {"image": image, "namespace": cuda_namespace.name, "timeout_s": cuda_timeout_s,
                                    "pods": {name: g.name for name, g in pods.items()}})
    results: dict[str, dict[str, Any]] = {}
    try:
        cuda_namespace.create()
        for name, gpu in pods.items():
            create_pod(cluster, cuda_namespace.name, cuda_pod(name, image, gpu.node))
        phases = watch_until_done(cluster, cuda_namespace.name, set(pods), cuda_timeout_s)
        for name, gpu in pods.items():
            log, missing = read_log(cluster, cuda_namespace.name, name) if phases.get(name) in TERMINAL else ("", None)
            passed = phases.get(name) == "Succeeded" and "Test PASSED" in log
            results[name] = {"node": gpu.name, "phase": phases.get(name), "passed": passed, "log": missing or log}
            if not passed:
                results[name]["diagnostics"] = pod_diagnostics(cluster, cuda_namespace.name, name)
        evidence.record("CUDA sample results", results)
    finally:
        cuda_namespace.delete()
    failed = {r["node"]: why_not_passed(r) for r in results.values() if not r["passed"]}
    require(failed == {}, (
        f"{cluster.where}: the CUDA sample ({image}) did not print 'Test PASSED' within {cuda_timeout_s} s: {failed}"
    ))


def create_pod(cluster: Any, namespace: str, body: dict[str, Any]) -> None:
    """Create the sample pod, retrying transient errors; 409 means an attempt whose answer was lost created it."""
    try:
        cluster.call(cluster.core.create_namespaced_pod, namespace, body, _request_timeout=(10, 30))
    except ApiException as error:
        if error.status != 409:
            raise
