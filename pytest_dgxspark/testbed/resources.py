"""The API resources the simulated server serves and their discovery documents."""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from typing import Any

from pytest_dgxspark.testbed import crdschemas
from pytest_dgxspark.testbed.printing import pod_status_text  # noqa: F401 - kubectl's pod STATUS, used by tests

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
    virtual: bool = False  # a review: created (answered), never stored, listed or read

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
        verbs = ["create"] if self.virtual else list(READ + (WRITE if self.writable else ()))
        entry: dict[str, Any] = {"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                                 "kind": self.kind, "verbs": verbs}
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
    # what `make rke2/argocd/register` writes on the cluster (argocd-manager's ClusterRole and binding)
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", False),
    # and what `make rke2/suite/rbac` writes (the suite's least-privilege identity): stored, never enforced here
    Resource("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True),
    Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "validatingadmissionpolicy",
             "ValidatingAdmissionPolicy", False),
    Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
             "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", False),
    Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview",
             False, virtual=True),
    Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview",
             False, virtual=True),
    Resource("authentication.k8s.io", "v1", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", False,
             virtual=True),
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
        entries.append({"name": "serviceaccounts/token", "singularName": "", "namespaced": True,
                        "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]})
        entries.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]})
        entries.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy", "version": "v1",
                        "kind": "Eviction", "verbs": ["create"]})
    if group_version == "v1":  # the legacy /api/v1 handler writes no apiVersion (measured on kube-apiserver v1.34)
        return {"kind": "APIResourceList", "groupVersion": group_version, "resources": entries}
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}


def crd(r: Resource) -> dict[str, Any]:
    """A CustomResourceDefinition for a non-built-in resource (so `kubectl get crd` lists them): the project's own
    where it is kept (crdschemas.CRD_DIR), as apiextensions-apiserver stores and reports it."""
    sourced = crdschemas.sourced_crd(r.plural, r.group)
    if sourced is not None:
        out = copy.deepcopy(sourced)
    else:
        out = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "spec": {"group": r.group, "names": {"kind": r.kind, "listKind": f"{r.kind}List", "plural": r.plural,
                                                    "singular": r.singular, **({"shortNames": list(r.short)} if r.short else {})},
                        "scope": "Namespaced" if r.namespaced else "Cluster",
                        "versions": [{"name": r.version, "served": True, "storage": True,
                                      "schema": {"openAPIV3Schema": crdschemas.schema(r.plural)},
                                      **({"subresources": {"status": {}}} if r.plural in WITH_STATUS else {})}]}}
    out["metadata"] = {"name": f"{r.plural}.{r.group}", "generation": 1,
                       "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://testbed.dgxspark.io/crds/{r.plural}.{r.group}"))}
    out["spec"].setdefault("conversion", {"strategy": "None"})
    out["status"] = {"acceptedNames": dict(out["spec"]["names"]), "storedVersions": [r.version], "conditions": [
        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
         "message": "the initial names have been accepted"}]}
    return out
