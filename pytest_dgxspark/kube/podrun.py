"""Pods the workload checks run on GPU nodes: pinned by hostname, watched until done, their logs and stories read."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.kube.objects import node_taints
from pytest_dgxspark.kube.podstate import PodStory, pod_story, status_message
from pytest_dgxspark.targets.connections import transient

TERMINAL = ("Succeeded", "Failed")


def cuda_pod(name: str, image: str, node: dict[str, Any]) -> dict[str, Any]:
    """The CUDA sample pod for one node: limits nvidia.com/gpu: 1, pinned by hostname, tolerating the node's taints."""
    return pinned_pod(name, image, node, app="cuda-vectoradd", gpus=1)


def pinned_pod(name: str, image: str, node: dict[str, Any], *, app: str, gpus: int | None,
               command: list[str] | None = None) -> dict[str, Any]:
    """A pod of the suite for one node: pinned by hostname, tolerating the node's taints, `restartPolicy: Never`;
    limits nvidia.com/gpu: `gpus` (None: no GPU request at all); `command` replaces the image's entrypoint."""
    hostname = (node["metadata"].get("labels") or {}).get("kubernetes.io/hostname", node["metadata"]["name"])
    tolerations = [
        {"key": t.key, "operator": "Equal" if t.value else "Exists", **({"value": t.value} if t.value else {}), "effect": t.effect}
        for t in node_taints(node) if t.effect in ("NoSchedule", "NoExecute") and not t.key.startswith("node.kubernetes.io/")
    ] + [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "pytest-dgxspark", "app": app}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": hostname},
            "tolerations": tolerations,
            "containers": [{
                "name": app, "image": image,
                **({"command": list(command)} if command else {}),
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus is not None else {},
                "securityContext": {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}},
            }],
        },
    }


# Waiting reasons a pod does not leave by itself: the sample has failed, waiting out the timeout tells nothing more
STUCK = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CrashLoopBackOff",
                   "CreateContainerError", "CreateContainerConfigError", "RunContainerError"})


def _stuck_reason(pod: dict[str, Any]) -> str | None:
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK:
            return str(waiting["reason"])
    return None


def _done(pod: dict[str, Any]) -> bool:
    return bool(pod.get("status")) and ((pod.get("status") or {}).get("phase") in TERMINAL or _stuck_reason(pod) is not None)


def watch_until_done(cluster: Any, namespace: str, names: set[str], timeout_s: int) -> dict[str, str]:
    """Watch the namespace's pods until every named pod is Succeeded/Failed, stuck (ErrImagePull, CrashLoopBackOff...)
    or the timeout; returns name -> phase (or 'Pending/<reason>' for a stuck pod).

    Lists and watches retry transient API errors; a watch cut short (410 Gone, a 5xx) lists again.
    """
    core = cluster.core
    phases: dict[str, str] = {}
    done: set[str] = set()

    def seen(pod: dict[str, Any]) -> None:
        reason = _stuck_reason(pod)
        name, phase = pod["metadata"]["name"], (pod.get("status") or {}).get("phase")
        phases[name] = phase if reason is None or phase in TERMINAL else f"{phase} ({reason})"
        if _done(pod):
            done.add(name)
        else:
            done.discard(name)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not names <= done:
        listing = cluster.call(core.list_namespaced_pod, namespace, _request_timeout=(10, 30))
        for pod in listing.get("items") or []:
            seen(pod)
        remaining = int(deadline - time.monotonic())
        if names <= done or remaining < 1:
            break
        stream = watch.Watch()
        try:
            # Core's methods name no model type, so each event's object is the pod's JSON, as the list's items are
            for event in stream.stream(core.list_namespaced_pod, namespace,
                                       resource_version=(listing.get("metadata") or {}).get("resourceVersion"),
                                       timeout_seconds=min(remaining, 60), _request_timeout=(10, min(remaining, 60) + 10)):
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and isinstance(event.get("object"), dict):
                    seen(event["object"])
                if names <= done:
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
        return "", f"no log: HTTP {error.status}: {status_message(error)}"


def pod_diagnostics(cluster: Any, namespace: str, name: str) -> PodStory | str:
    """The pod's story (phase, container states, logs current and previous, events), or why it cannot be read."""
    try:
        pod = cluster.call(cluster.core.read_namespaced_pod, name, namespace, _request_timeout=(10, 30))
    except ApiException as error:
        return f"pod {name} unreadable: HTTP {error.status}: {status_message(error)}"
    return pod_story(cluster, pod)


def why_not_passed(result: dict[str, Any], timeout_s: int) -> str:
    """What was seen of one sample pod that did not pass, in plain words."""
    story = result.get("story")
    phase = result.get("phase")
    if phase == "Succeeded":
        return (f"pod {result['pod']} Succeeded but its log has no 'Test PASSED'; last lines: "
                f"{result.get('log', '')[-300:]!r}")
    if not isinstance(story, PodStory):
        return f"pod {result['pod']} {phase or 'never seen'}: {story}"
    if phase in TERMINAL or (phase or "").endswith(")"):
        return f"pod {story.summary()} (seen {result.get('seconds')} s after its creation)"
    return f"pod {story.summary()} (still not done after the {timeout_s} s timeout)"


def create_pod(cluster: Any, namespace: str, body: dict[str, Any]) -> None:
    """Create the sample pod, retrying transient errors; 409 means an attempt whose answer was lost created it."""
    try:
        cluster.call(cluster.core.create_namespaced_pod, namespace, body, _request_timeout=(10, 30))
    except ApiException as error:
        if error.status != 409:
            raise
