"""Why a pod is not Ready or did not pass, in plain words: container states, last log lines, events, known floors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.data.yamlload import loads_json

LOG_TAIL = 20
# log lines worth quoting first: the container's own error, not its banner
_ERRORISH = re.compile(r"\b(error|fatal|failed|panic|not supported|exec format|no such file|permission denied)\b", re.I)
# Known version floors (gpu-stack-facts.md §6, F19): evidence that matches names the floor in the finding.
_DEVICE_PLUGIN_GB10 = "error getting device memory: Not Supported"
_DEVICE_PLUGIN_FLOOR = (0, 17, 4)
_EXEC_FORMAT = "exec format error"
_INOTIFY = "too many open files"  # gpu-stack-facts F27, rke2-provisioning-facts: validator pods on RKE2


@dataclass(frozen=True)
class PodStory:
    """What a pod says about itself: phase, plain-words container states, images, logs and events."""

    name: str
    node: str | None
    phase: str | None
    states: tuple[str, ...]
    images: tuple[str, ...]
    logs: Mapping[str, str] = field(default_factory=dict)  # "<container>" / "<container> (previous)" -> tail
    events: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()

    def as_evidence(self) -> dict[str, Any]:
        return {"pod": self.name, "node": self.node, "phase": self.phase, "containers": list(self.states),
                "conditions": list(self.conditions), "images": list(self.images), "logs": dict(self.logs),
                "events": list(self.events)}

    def summary(self) -> str:
        """One sentence: '<pod> is <phase>: <states>; <conditions>; log: '<line>'; events: ...; <floor>'."""
        parts = [f"{self.name} is {self.phase or 'unknown'}"]
        detail = list(self.states) + list(self.conditions)
        if detail:
            parts[0] += ": " + ", ".join(detail)
        line = telling_line(self.logs)
        if line:
            parts.append(f"its log says {line!r}")
        warnings = [e for e in self.events if e.startswith("Warning ")]
        if warnings or self.events:
            parts.append("events: " + "; ".join((warnings or list(self.events))[-3:]))
        parts.extend(known_floors(self))
        return "; ".join(parts)


def in_words(pods: list[Mapping[str, Any]]) -> str:
    """'a is Running: container x waiting CrashLoopBackOff; b is Pending' (no API calls), or 'none'."""
    return "; ".join(f"{(p.get('metadata') or {}).get('name')} is {(p.get('status') or {}).get('phase') or 'unknown'}"
                     + (": " + ", ".join(container_states(p)) if container_states(p) else "") for p in pods) or "none"


def container_states(pod: Mapping[str, Any]) -> list[str]:
    """'container X waiting CrashLoopBackOff (14 restarts, last exit 1 Error: <message>)' for every unhappy container."""
    status = pod.get("status") or {}
    found = []
    for kind, statuses in (("init container", status.get("initContainerStatuses")),
                           ("container", status.get("containerStatuses"))):
        for cs in statuses or []:
            state = cs.get("state") or {}
            restarts = cs.get("restartCount") or 0
            last = (cs.get("lastState") or {}).get("terminated") or {}
            words = []
            if "waiting" in state:
                waiting = state["waiting"] or {}
                words.append(f"waiting {waiting.get('reason') or 'without reason'}")
                if waiting.get("message") and waiting.get("reason") != "CrashLoopBackOff":  # back-off timer only
                    words.append(str(waiting["message"]).strip()[-200:])
            elif "terminated" in state:
                done = state["terminated"] or {}
                if done.get("exitCode") == 0 and kind == "init container":
                    continue
                words.append(f"terminated {done.get('reason') or ''} with exit code {done.get('exitCode')}".replace("  ", " "))
                if done.get("message"):
                    words.append(str(done["message"]).strip()[-200:])
            elif "running" in state and cs.get("ready"):
                continue
            elif "running" in state:
                words.append("running, not ready")
            if restarts:
                words.append(f"{restarts} restarts")
            if last:
                words.append(f"last exit {last.get('exitCode')} {last.get('reason') or ''}".rstrip())
            if words:
                found.append(f"{kind} {cs.get('name')} " + ", ".join(words))
    return found


def pod_conditions(pod: Mapping[str, Any]) -> list[str]:
    """The pod's own reason (UnexpectedAdmissionError, Evicted) and why it is not scheduled (Insufficient nvidia.com/gpu)."""
    status = pod.get("status") or {}
    found = [f"{status['reason']}: {str(status.get('message') or '').strip()}".rstrip(": ")] if status.get("reason") else []
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            found.append(f"not scheduled ({condition.get('reason')}: {condition.get('message')})")
    return found


def pod_story(cluster: Any, pod: Mapping[str, Any], events: list[Mapping[str, Any]] | None = None) -> PodStory:
    """The pod's story; logs (current and previous) of its unhappy containers are read through the API."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    logs: dict[str, str] = {}
    unhappy = [cs for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
               if not cs.get("ready") and not ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == 0]
    for cs in unhappy:
        container = cs.get("name", "")
        logs[container] = read_log(cluster, namespace, name, container, previous=False)
        if cs.get("restartCount") or (cs.get("lastState") or {}).get("terminated"):
            logs[f"{container} (previous)"] = read_log(cluster, namespace, name, container, previous=True)
    if events is None:
        events = list_events(cluster, namespace, name)
    said = tuple(
        f"{e.get('type')} {e.get('reason')}: {str(e.get('message') or '').strip()}"
        for e in events if (e.get("involvedObject") or {}).get("name") == name
    )
    images = tuple(c.get("image", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or []))
    return PodStory(name, spec.get("nodeName"), status.get("phase"), tuple(container_states(pod)), images, logs,
                    said, tuple(pod_conditions(pod)))


def read_log(cluster: Any, namespace: str, name: str, container: str, previous: bool) -> str:
    """The container's last log lines, or 'no log: <why the API says so>'."""
    try:
        text = cluster.call(cluster.core.read_namespaced_pod_log, name, namespace, container=container,
                            previous=previous, tail_lines=LOG_TAIL, _request_timeout=(10, 30))
    except ApiException as error:
        return f"no log: HTTP {error.status}: {status_message(error)}"
    return text if isinstance(text, str) else str(text)


def list_events(cluster: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    """The events of one object, as plain dicts (an unreadable event list is said, not hidden)."""
    try:
        found = cluster.call(cluster.core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={name}",
                             _request_timeout=(10, 30))
    except ApiException as error:
        return [{"type": "Unknown", "reason": "EventsUnreadable", "involvedObject": {"name": name},
                 "message": f"HTTP {error.status}: {status_message(error)}"}]
    return list(found.get("items") or [])


def status_message(error: ApiException) -> str:
    try:
        return str(loads_json(error.body or "{}", "an API error's Status").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def telling_line(logs: Mapping[str, str]) -> str | None:
    """The log line that says most: the last error-like line of any container's log, else the last line."""
    lines = [ln.strip() for text in logs.values() if not text.startswith("no log:") for ln in text.splitlines()
             if ln.strip()]
    errors = [ln for ln in lines if _ERRORISH.search(ln)]
    chosen = (errors or lines or [None])[-1]
    return chosen[-240:] if chosen else None


def image_version(image: str) -> tuple[int, ...] | None:
    """'nvcr.io/nvidia/k8s-device-plugin:v0.17.1' -> (0, 17, 1); None without a version tag."""
    tag = image.rsplit("/", 1)[-1].partition(":")[2].split("@")[0]
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", tag)
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def known_floors(story: PodStory) -> list[str]:
    """Known floors and causes from ../shared/reference named when the evidence matches them."""
    text = "\n".join(list(story.logs.values()) + list(story.states) + list(story.events))
    found = []
    if _DEVICE_PLUGIN_GB10 in text:
        plugin = next((i for i in story.images if "k8s-device-plugin" in i), None)
        version = image_version(plugin) if plugin else None
        runs = f", the pod runs {plugin}" if plugin else ""
        if version is None or version < _DEVICE_PLUGIN_FLOOR:
            found.append(f"GB10 needs device plugin v0.17.4 or later{runs} (older ones crash with 'error getting device "
                         "memory: Not Supported', gpu-stack-facts F19): drop the devicePlugin.version override and use "
                         "the image GPU Operator v26.3.2 ships")
    if _INOTIFY in text and "fsnotify" in text:
        found.append("'failed to create fsnotify watcher: too many open files': the node's inotify limits are "
                     "exhausted; set fs.inotify.max_user_instances=8192 and fs.inotify.max_user_watches=524288 in "
                     "/etc/sysctl.d/99-inotify.conf (RKE2 docs, gpu-stack-facts F27)")
    if _EXEC_FORMAT in text:
        found.append(f"'exec format error': the image {', '.join(story.images)} has no build for this node's "
                     "architecture (a DGX Spark is arm64); use a multi-arch or arm64 image (gpu-stack-facts F25)")
    return found
