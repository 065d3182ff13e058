"""Server-side printing: the meta.k8s.io/v1 Tables kubectl asks for, with the columns of kube's own printers."""

from __future__ import annotations

import datetime
from typing import Any


def age(stamp: str | None, now: float) -> str:
    """kubectl's human duration of the time since `stamp`."""
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    s = max(0, int(now - then))
    if s < 120:
        return f"{s}s"
    m, h, d = s // 60, s // 3600, s // 86400
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d" if d < 730 else f"{d // 365}y"


def pod_status_text(pod: dict[str, Any]) -> tuple[str, str, int]:
    """(READY, STATUS, RESTARTS) the way `kubectl get pods` shows them."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    inits = status.get("initContainerStatuses") or []
    total_init = len((pod.get("spec") or {}).get("initContainers") or [])
    restarts = 0
    initializing = False
    for i, cs in enumerate(inits):
        restarts += cs.get("restartCount", 0)
        state = cs.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "terminated" in state:
            reason = "Init:" + (state["terminated"].get("reason") or f"ExitCode:{state['terminated'].get('exitCode')}")
        elif "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{total_init}"
        initializing = True
        break
    ready = 0
    containers = status.get("containerStatuses") or []
    for cs in containers:
        restarts += cs.get("restartCount", 0)
        ready += bool(cs.get("ready"))
        if initializing:
            continue
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}")
    if not initializing and reason == "Completed" and status.get("phase") == "Running":
        reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{ready}/{total}", reason, restarts


def _cols(*names: tuple[str, str, int]) -> list[dict[str, Any]]:
    return [{"name": n, "type": t, "format": "name" if n == "Name" else "", "description": "", "priority": p} for n, t, p in names]


def table(plural: str, items: list[dict[str, Any]], rv: int, now: float) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table, as kubectl asks for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`)."""
    name_age = (("Name", "string", 0),)
    if plural == "pods":
        columns = _cols(*name_age, ("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0), ("Age", "string", 0),
                        ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1))
    elif plural == "nodes":
        columns = _cols(*name_age, ("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0), ("Version", "string", 0),
                        ("Internal-IP", "string", 1), ("External-IP", "string", 1), ("OS-Image", "string", 1),
                        ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1))
    elif plural == "namespaces":
        columns = _cols(*name_age, ("Status", "string", 0), ("Age", "string", 0))
    elif plural == "helmcharts":
        columns = _cols(*name_age, ("Job", "string", 0), ("Chart", "string", 0), ("TargetNamespace", "string", 0),
                        ("Version", "string", 0), ("Repo", "string", 0), ("HelmVersion", "string", 0), ("Bootstrap", "string", 0))
    elif plural == "clusterpolicies":
        columns = _cols(*name_age, ("Status", "string", 0), ("Age", "date", 0))
    elif plural == "daemonsets":
        columns = _cols(*name_age, ("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                        ("Up-to-date", "integer", 0), ("Available", "integer", 0), ("Node Selector", "string", 0), ("Age", "string", 0))
    elif plural == "deployments":
        columns = _cols(*name_age, ("Ready", "string", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0), ("Age", "string", 0))
    elif plural in EXTRA_COLUMNS:
        columns = _cols(*EXTRA_COLUMNS[plural])
    else:
        columns = _cols(*name_age, ("Age", "string", 0))
    rows = [{"cells": _cells(plural, o, now), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                      "metadata": o.get("metadata", {})}} for o in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": columns, "rows": rows}


def _cells(plural: str, o: dict[str, Any], now: float) -> list[Any]:
    md, spec, st = o.get("metadata", {}), o.get("spec") or {}, o.get("status") or {}
    name, when = md.get("name", ""), age(md.get("creationTimestamp"), now)
    if plural == "pods":
        ready, status, restarts = pod_status_text(o)
        return [name, ready, status, restarts, when, st.get("podIP") or "<none>", spec.get("nodeName") or "<none>", "<none>", "<none>"]
    if plural == "nodes":
        cond = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
        status = "Ready" if cond.get("status") == "True" else "NotReady"
        if spec.get("unschedulable"):
            status += ",SchedulingDisabled"
        roles = sorted(k.split("/", 1)[1] for k in md.get("labels", {}) if k.startswith("node-role.kubernetes.io/"))
        info = st.get("nodeInfo") or {}
        ip = next((a["address"] for a in st.get("addresses") or [] if a["type"] == "InternalIP"), "<none>")
        return [name, status, ",".join(roles) or "<none>", when, info.get("kubeletVersion", ""), ip, "<none>",
                info.get("osImage", ""), info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")]
    if plural == "namespaces":
        return [name, st.get("phase", "Active"), when]
    if plural == "helmcharts":
        return [name, st.get("jobName", ""), spec.get("chart", ""), spec.get("targetNamespace", ""), spec.get("version", ""),
                spec.get("repo", ""), spec.get("helmVersion", ""), spec.get("bootstrap", "")]
    if plural == "clusterpolicies":
        return [name, st.get("state", ""), md.get("creationTimestamp", "")]
    if plural == "daemonsets":
        sel = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        return [name, st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0), st.get("numberReady", 0),
                st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
                ",".join(f"{k}={v}" for k, v in sel.items()) or "<none>", when]
    if plural == "deployments":
        return [name, f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", st.get("updatedReplicas", 0),
                st.get("availableReplicas", 0), when]
    if plural in EXTRA_CELLS:
        return EXTRA_CELLS[plural](o, name, when, now)
    return [name, when]


# kubernetes/pkg/printers/internalversion/printers.go, column by column
EXTRA_COLUMNS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "events": (("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0), ("Object", "string", 0),
               ("Subobject", "string", 1), ("Source", "string", 1), ("Message", "string", 0), ("First Seen", "string", 1),
               ("Count", "string", 1), ("Name", "string", 1)),
    "jobs": (("Name", "string", 0), ("Status", "string", 0), ("Completions", "string", 0), ("Duration", "string", 0),
             ("Age", "string", 0), ("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1)),
    "leases": (("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)),
    "services": (("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0), ("External-IP", "string", 0),
                 ("Port(s)", "string", 0), ("Age", "string", 0), ("Selector", "string", 1)),
    "endpoints": (("Name", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)),
    "configmaps": (("Name", "string", 0), ("Data", "string", 0), ("Age", "string", 0)),
    "secrets": (("Name", "string", 0), ("Type", "string", 0), ("Data", "string", 0), ("Age", "string", 0)),
}


def _parse(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()


def _event(o: dict[str, Any], name: str, when: str, now: float) -> list[Any]:
    inv, src = o.get("involvedObject") or {}, o.get("source") or {}
    last = o.get("lastTimestamp") or o.get("eventTime") or (o.get("metadata") or {}).get("creationTimestamp")
    first = o.get("firstTimestamp") or o.get("eventTime") or (o.get("metadata") or {}).get("creationTimestamp")
    source = ", ".join(p for p in (src.get("component") or o.get("reportingComponent"), src.get("host")) if p) or "<unknown>"
    return [age(str(last)[:19] + "Z" if last else None, now), o.get("type", ""), o.get("reason", ""),
            f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}", inv.get("fieldPath", ""), source, o.get("message", ""),
            age(str(first)[:19] + "Z" if first else None, now), int(o.get("count") or 1), name]


def _job(o: dict[str, Any], name: str, when: str, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    kinds = {c.get("type") for c in st.get("conditions") or [] if c.get("status") == "True"}
    status = next((label for cond, label in (("Complete", "Complete"), ("Failed", "Failed")) if cond in kinds), None)
    if status is None and (o.get("metadata") or {}).get("deletionTimestamp"):
        status = "Terminating"
    status = status or next((c for c in ("Suspended", "FailureTarget", "SuccessCriteriaMet") if c in kinds), "Running")
    completions = spec.get("completions")
    done = f"{st.get('succeeded', 0)}/{completions}" if completions is not None else \
        f"{st.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}"
    start, end = _parse(st.get("startTime")), _parse(st.get("completionTime"))
    duration = "" if start is None else _duration((end or now) - start)
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    selector = ",".join(f"{k}={v}" for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items()) or "<none>"
    return [name, status, done, duration, when, ",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers), selector]


def _duration(seconds: float) -> str:
    """duration.HumanDuration, as the Job printer shows DURATION."""
    return age(datetime.datetime.fromtimestamp(0, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), max(0.0, seconds))


def _service(o: dict[str, Any], name: str, when: str, now: float) -> list[Any]:
    spec = o.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" if not p.get("nodePort") else
                     f"{p.get('port')}:{p['nodePort']}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in (spec.get("selector") or {}).items()) or "<none>"
    return [name, spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>", "<none>", ports, when, selector]


def _endpoints(o: dict[str, Any], name: str, when: str, now: float) -> list[Any]:
    pairs = [f"{a['ip']}:{p['port']}" for s in o.get("subsets") or [] for a in s.get("addresses") or [] for p in s.get("ports") or []]
    return [name, ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "") or "<none>", when]


EXTRA_CELLS: dict[str, Any] = {
    "events": _event,
    "jobs": _job,
    "leases": lambda o, name, when, now: [name, (o.get("spec") or {}).get("holderIdentity", ""), when],
    "services": _service,
    "endpoints": _endpoints,
    "configmaps": lambda o, name, when, now: [name, len(o.get("data") or {}) + len(o.get("binaryData") or {}), when],
    "secrets": lambda o, name, when, now: [name, o.get("type", "Opaque"), len(o.get("data") or {}), when],
}
