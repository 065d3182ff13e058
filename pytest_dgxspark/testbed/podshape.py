"""Shapes of Pod objects and their status in each phase a real kubelet reports (Running, CrashLoopBackOff, Init:n/m, Completed...)."""

from __future__ import annotations

import datetime
import random
import uuid
from typing import Any

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def ts(when: float) -> str:
    """RFC 3339 seconds, as the API server writes timestamps."""
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice(SUFFIX_ALPHABET) for _ in range(length))


def meta(name: str, namespace: str | None, created: float, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """ObjectMeta with a uid and creationTimestamp (resourceVersion comes from the store)."""
    out: dict[str, Any] = {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": ts(created)}
    if namespace is not None:
        out["namespace"] = namespace
    if labels:
        out["labels"] = dict(labels)
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def container(name: str, image: str, **extra: Any) -> dict[str, Any]:
    out = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "resources": {},
           "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    out.update(extra)
    return out


def _image_id(image: str) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_URL, image).hex * 2
    return f"{image.split(':')[0]}@sha256:{digest}"


def _cid() -> str:
    return "containerd://" + uuid.uuid4().hex + uuid.uuid4().hex


def running_status(c: dict[str, Any], started: float, restarts: int = 0) -> dict[str, Any]:
    return {"name": c["name"], "image": c["image"], "imageID": _image_id(c["image"]), "containerID": _cid(),
            "ready": True, "started": True, "restartCount": restarts, "state": {"running": {"startedAt": ts(started)}}}


def terminated_status(c: dict[str, Any], started: float, finished: float, exit_code: int = 0, reason: str = "Completed",
                      restarts: int = 0, message: str | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": exit_code, "reason": reason, "startedAt": ts(started), "finishedAt": ts(finished),
                            "containerID": _cid()}
    if message:
        term["message"] = message
    return {"name": c["name"], "image": c["image"], "imageID": _image_id(c["image"]), "containerID": term["containerID"],
            "ready": False, "started": False, "restartCount": restarts, "state": {"terminated": term}}


def waiting_status(c: dict[str, Any], reason: str, message: str | None = None, restarts: int = 0,
                   last: dict[str, Any] | None = None) -> dict[str, Any]:
    waiting: dict[str, Any] = {"reason": reason}
    if message:
        waiting["message"] = message
    out: dict[str, Any] = {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "started": False,
                           "restartCount": restarts, "state": {"waiting": waiting}}
    if last:
        out["lastState"] = {"terminated": last}
        out["imageID"] = _image_id(c["image"])
        out["containerID"] = last.get("containerID", "")
    return out


def conditions(created: float, scheduled: bool, initialized: bool, ready: bool, *, completed: bool = False,
               unschedulable_message: str | None = None) -> list[dict[str, Any]]:
    """PodScheduled/Initialized/ContainersReady/Ready (+PodReadyToStartContainers) the way the kubelet writes them."""
    when = ts(created)
    if not scheduled:
        return [{"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": when,
                 "reason": "Unschedulable", "message": unschedulable_message or ""}]

    def cond(kind: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": when}
        if not ok and reason:
            out["reason"] = reason
        return out

    not_ready = "PodCompleted" if completed else "ContainersNotReady"
    return [
        cond("PodReadyToStartContainers", not completed),
        cond("Initialized", initialized, "ContainersNotInitialized") if not completed else cond("Initialized", True),
        cond("Ready", ready, not_ready),
        cond("ContainersReady", ready, not_ready),
        cond("PodScheduled", True),
    ]


def status_for(pod: dict[str, Any], state: str, node_ip: str, created: float, *, restarts: int = 0, init_running: int = 0,
               reason: str | None = None, message: str | None = None, exit_code: int = 1) -> dict[str, Any]:
    """A complete `status` for a scheduled pod in one of: running, crashloop, init, init-crashloop, completed, failed, error,
    image-pull, creating, pending (unschedulable)."""
    spec = pod["spec"]
    inits, mains = spec.get("initContainers") or [], spec.get("containers") or []
    started, host_net = created + 2, spec.get("hostNetwork", False)
    base: dict[str, Any] = {"hostIP": node_ip, "hostIPs": [{"ip": node_ip}], "qosClass": qos_class(mains), "startTime": ts(created)}
    pod_ip = node_ip if host_net else _pod_ip(pod)
    base.update({"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]})
    done_inits = [terminated_status(c, started, started + 1) for c in inits]
    if state == "pending":
        return {"phase": "Pending", "qosClass": base["qosClass"],
                "conditions": conditions(created, False, False, False, unschedulable_message=message)}
    if state == "running":
        out = {"phase": "Running", "conditions": conditions(created, True, True, True),
               "containerStatuses": [running_status(c, started + 2, restarts) for c in mains]}
    elif state == "crashloop":
        last = {"exitCode": exit_code, "reason": "Error", "startedAt": ts(created + 60), "finishedAt": ts(created + 61),
                "containerID": _cid()}
        if message:
            last["message"] = message
        statuses = [waiting_status(c, "CrashLoopBackOff",
                                   f"back-off 5m0s restarting failed container={c['name']} pod={pod['metadata']['name']}"
                                   f"_{pod['metadata'].get('namespace', 'default')}({pod['metadata']['uid']})",
                                   restarts or 5, last) if i == 0 else running_status(c, started + 2)
                    for i, c in enumerate(mains)]
        out = {"phase": "Running", "conditions": conditions(created, True, True, False), "containerStatuses": statuses}
    elif state in ("init", "init-crashloop"):
        init_statuses = []
        for i, c in enumerate(inits):
            if i < init_running:
                init_statuses.append(terminated_status(c, started, started + 1))
            elif i == init_running and state == "init-crashloop":  # the init container exits non-zero and is restarted
                last = {"exitCode": exit_code, "reason": "Error", "startedAt": ts(created + 60), "finishedAt": ts(created + 211),
                        "containerID": _cid()}
                init_statuses.append(waiting_status(
                    c, "CrashLoopBackOff", f"back-off 5m0s restarting failed container={c['name']} pod={pod['metadata']['name']}"
                    f"_{pod['metadata'].get('namespace', 'default')}({pod['metadata']['uid']})", restarts or 5, last))
            elif i == init_running:
                status = running_status(c, started + 1)
                status["ready"] = False
                init_statuses.append(status)
            else:
                init_statuses.append(waiting_status(c, "PodInitializing"))
        out = {"phase": "Pending", "conditions": conditions(created, True, False, False),
               "initContainerStatuses": init_statuses,
               "containerStatuses": [waiting_status(c, "PodInitializing") for c in mains]}
        return {**base, **out}
    elif state == "completed":
        out = {"phase": "Succeeded", "conditions": conditions(created, True, True, False, completed=True),
               "containerStatuses": [terminated_status(c, started + 2, started + 4) for c in mains]}
    elif state in ("failed", "error"):
        out = {"phase": "Failed", "conditions": conditions(created, True, True, False, completed=True),
               "containerStatuses": [terminated_status(c, started + 2, started + 3, exit_code, "Error", message=message)
                                     for c in mains]}
    elif state in ("image-pull", "creating"):
        why = reason or ("ImagePullBackOff" if state == "image-pull" else "ContainerCreating")
        out = {"phase": "Pending", "conditions": conditions(created, True, True, False),
               "containerStatuses": [waiting_status(c, why, message) for c in mains]}
        if state == "creating":
            out["conditions"][0]["status"] = "False"
    else:
        raise ValueError(f"pod state {state!r}: expected running, crashloop, init, init-crashloop, completed, failed, image-pull, creating or pending")
    if inits:
        out["initContainerStatuses"] = done_inits
    return {**base, **out}


def qos_class(containers: list[dict[str, Any]]) -> str:
    """The pod's QoS class as kube-apiserver computes it (core/helper/qos): from cpu and memory only (an extended
    resource such as nvidia.com/gpu never counts); requests default to limits first, as the API's defaulting does."""
    requests: list[dict[str, Any]] = []
    limits: list[dict[str, Any]] = []
    for c in containers:
        res = c.get("resources") or {}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        req = {**lim, **{k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}}
        requests.append(req)
        limits.append(lim)
    if not any(requests) and not any(limits):
        return "BestEffort"
    if all(set(lim) == {"cpu", "memory"} and lim == req for lim, req in zip(limits, requests)):
        return "Guaranteed"
    return "Burstable"



def _pod_ip(pod: dict[str, Any]) -> str:
    n = uuid.UUID(pod["metadata"]["uid"]).int
    return f"10.42.0.{2 + n % 250}"
