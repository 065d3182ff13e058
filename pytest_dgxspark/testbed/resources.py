"""The API resources the simulated server serves: discovery documents and server-side printing (Tables)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

READ = ("get", "list", "watch")
# kinds with a status subresource (writes to the main resource keep the stored status; /status writes only it)
WITH_STATUS = ("nodes", "pods", "namespaces", "services", "daemonsets", "deployments", "replicasets", "jobs", "helmcharts",
               "clusterpolicies", "ciliumnodes")
WRITE = ("create", "delete", "deletecollection", "patch", "update")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short: tuple[str, ...] = ()
    writable: bool = True

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def builtin(self) -> bool:
        return "." not in self.group or self.group.endswith(".k8s.io")

    def discovery(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                                 "kind": self.kind, "verbs": list(READ + (WRITE if self.writable else ()))}
        if self.short:
            entry["shortNames"] = list(self.short)
        if self.plural in ("pods", "daemonsets", "deployments", "replicasets", "jobs", "services"):
            entry["categories"] = ["all"]
        return entry


RESOURCES = (
    Resource("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",)),
    Resource("", "v1", "nodes", "node", "Node", False, ("no",)),
    Resource("", "v1", "pods", "pod", "Pod", True, ("po",)),
    Resource("", "v1", "events", "event", "Event", True, ("ev",)),
    Resource("", "v1", "services", "service", "Service", True, ("svc",)),
    Resource("", "v1", "endpoints", "endpoints", "Endpoints", True, ("ep",)),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "secrets", "secret", "Secret", True),
    Resource("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",)),
    Resource("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True, ("ds",)),
    Resource("apps", "v1", "deployments", "deployment", "Deployment", True, ("deploy",)),
    Resource("apps", "v1", "replicasets", "replicaset", "ReplicaSet", True, ("rs",)),
    Resource("batch", "v1", "jobs", "job", "Job", True),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    Resource("node.k8s.io", "v1", "runtimeclasses", "runtimeclass", "RuntimeClass", False),
    # read-only: a CRD created here would not make its resource served, so the testbed refuses rather than pretends
    Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
             "CustomResourceDefinition", False, ("crd", "crds"), writable=False),
    Resource("helm.cattle.io", "v1", "helmcharts", "helmchart", "HelmChart", True),
    Resource("helm.cattle.io", "v1", "helmchartconfigs", "helmchartconfig", "HelmChartConfig", True),
    Resource("nvidia.com", "v1", "clusterpolicies", "clusterpolicy", "ClusterPolicy", False),
    Resource("cilium.io", "v2", "ciliumnodes", "ciliumnode", "CiliumNode", False, ("cn", "ciliumn")),
)
BY_GROUP_VERSION: dict[str, dict[str, Resource]] = {}
for _r in RESOURCES:
    BY_GROUP_VERSION.setdefault(_r.group_version, {})[_r.plural] = _r
BY_KIND: dict[tuple[str, str], Resource] = {(r.group_version, r.kind): r for r in RESOURCES}


def for_object(obj: dict[str, Any]) -> Resource | None:
    return BY_KIND.get((obj.get("apiVersion", ""), obj.get("kind", "")))


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}


def group_list() -> dict[str, Any]:
    groups: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group and r.version not in groups.setdefault(r.group, []):
            groups[r.group].append(r.version)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
         "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}} for g, vs in groups.items()]}


def group(name: str) -> dict[str, Any] | None:
    for g in group_list()["groups"]:
        if g["name"] == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def resource_list(group_version: str) -> dict[str, Any] | None:
    found = BY_GROUP_VERSION.get(group_version)
    if found is None:
        return None
    entries = [r.discovery() for r in found.values()]
    entries += [{"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                 "verbs": ["get", "patch", "update"]} for r in found.values() if r.plural in WITH_STATUS]
    if group_version == "v1":
        entries.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}


def crd(r: Resource) -> dict[str, Any]:
    """A CustomResourceDefinition for a non-built-in resource (so `kubectl get crd` lists them)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{r.plural}.{r.group}"},
            "spec": {"group": r.group, "names": {"kind": r.kind, "listKind": f"{r.kind}List", "plural": r.plural,
                                                 "singular": r.singular, **({"shortNames": list(r.short)} if r.short else {})},
                     "scope": "Namespaced" if r.namespaced else "Cluster",
                     "versions": [{"name": r.version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
            "status": {"acceptedNames": {"kind": r.kind, "plural": r.plural},
                       "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}],
                       "storedVersions": [r.version]}}


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


def table(r: Resource, items: list[dict[str, Any]], rv: int, now: float) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table, as kubectl asks for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`)."""
    name_age = (("Name", "string", 0),)
    if r.plural == "pods":
        columns = _cols(*name_age, ("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0), ("Age", "string", 0),
                        ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1))
    elif r.plural == "nodes":
        columns = _cols(*name_age, ("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0), ("Version", "string", 0),
                        ("Internal-IP", "string", 1), ("External-IP", "string", 1), ("OS-Image", "string", 1),
                        ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1))
    elif r.plural == "namespaces":
        columns = _cols(*name_age, ("Status", "string", 0), ("Age", "string", 0))
    elif r.plural == "helmcharts":
        columns = _cols(*name_age, ("Job", "string", 0), ("Chart", "string", 0), ("TargetNamespace", "string", 0),
                        ("Version", "string", 0), ("Repo", "string", 0), ("HelmVersion", "string", 0), ("Bootstrap", "string", 0))
    elif r.plural == "clusterpolicies":
        columns = _cols(*name_age, ("Status", "string", 0), ("Age", "date", 0))
    elif r.plural == "daemonsets":
        columns = _cols(*name_age, ("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                        ("Up-to-date", "integer", 0), ("Available", "integer", 0), ("Node Selector", "string", 0), ("Age", "string", 0))
    elif r.plural == "deployments":
        columns = _cols(*name_age, ("Ready", "string", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0), ("Age", "string", 0))
    else:
        columns = _cols(*name_age, ("Age", "string", 0))
    rows = [{"cells": _cells(r, o, now), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                      "metadata": o.get("metadata", {})}} for o in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": columns, "rows": rows}


def _cells(r: Resource, o: dict[str, Any], now: float) -> list[Any]:
    md, spec, st = o.get("metadata", {}), o.get("spec") or {}, o.get("status") or {}
    name, when = md.get("name", ""), age(md.get("creationTimestamp"), now)
    if r.plural == "pods":
        ready, status, restarts = pod_status_text(o)
        return [name, ready, status, restarts, when, st.get("podIP") or "<none>", spec.get("nodeName") or "<none>", "<none>", "<none>"]
    if r.plural == "nodes":
        cond = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
        status = "Ready" if cond.get("status") == "True" else "NotReady"
        if spec.get("unschedulable"):
            status += ",SchedulingDisabled"
        roles = sorted(k.split("/", 1)[1] for k in md.get("labels", {}) if k.startswith("node-role.kubernetes.io/"))
        info = st.get("nodeInfo") or {}
        ip = next((a["address"] for a in st.get("addresses") or [] if a["type"] == "InternalIP"), "<none>")
        return [name, status, ",".join(roles) or "<none>", when, info.get("kubeletVersion", ""), ip, "<none>",
                info.get("osImage", ""), info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")]
    if r.plural == "namespaces":
        return [name, st.get("phase", "Active"), when]
    if r.plural == "helmcharts":
        return [name, st.get("jobName", ""), spec.get("chart", ""), spec.get("targetNamespace", ""), spec.get("version", ""),
                spec.get("repo", ""), spec.get("helmVersion", ""), spec.get("bootstrap", "")]
    if r.plural == "clusterpolicies":
        return [name, st.get("state", ""), md.get("creationTimestamp", "")]
    if r.plural == "daemonsets":
        sel = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        return [name, st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0), st.get("numberReady", 0),
                st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
                ",".join(f"{k}={v}" for k, v in sel.items()) or "<none>", when]
    if r.plural == "deployments":
        return [name, f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", st.get("updatedReplicas", 0),
                st.get("availableReplicas", 0), when]
    return [name, when]
