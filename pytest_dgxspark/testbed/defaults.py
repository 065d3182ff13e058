"""What kube-apiserver's create path adds to an object, so the stand-in serves what the real server stores.

Found by the differential test (docs/differential.md) against kube-apiserver v1.34.4: the real server runs every
object of a scenario's world through its defaulting and admission when the testbed writes it, the stand-in serves the
world as written. Each function names the upstream code whose result it reproduces:
- pods: the ServiceAccount admission plugin (the `kube-api-access-<5>` projected volume and its mount in every
  container, `spec.serviceAccount`; never on a mirror pod or with automountServiceAccountToken false),
  DefaultTolerationSeconds (not-ready and unreachable, NoExecute, 300 s), the kubelet's `lastState: {}`;
- pod templates of DaemonSets, Deployments, ReplicaSets and Jobs: SetDefaults_PodSpec (dnsPolicy, restartPolicy,
  schedulerName, securityContext, terminationGracePeriodSeconds);
- DaemonSet, Deployment and Job specs: their SetDefaults_* (revisionHistoryLimit, strategy, progressDeadlineSeconds,
  completionMode, podReplacementPolicy, suspend, manualSelector), and DaemonSet's template-generation annotation;
- omitempty: an empty env value, a Node's empty image list and null phase, zero DaemonSet counters that are
  `omitempty` in apps/v1 (numberAvailable, numberUnavailable, updatedNumberScheduled) are not serialised;
- ValidatingAdmissionPolicy: SetDefaults_MatchResources (matchPolicy Equivalent, empty selectors, scope `*`);
- custom resources: the structural schema's `default` values (the CRD defaulting of apiextensions-apiserver).
"""

from __future__ import annotations

import copy
import random
import string
from typing import Any

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TOLERATION_SECONDS = 300
_SUFFIX = string.ascii_lowercase + string.digits
_TEMPLATED = ("DaemonSet", "Deployment", "ReplicaSet", "StatefulSet", "Job")
_DS_OMITEMPTY = ("numberAvailable", "numberUnavailable", "updatedNumberScheduled", "observedGeneration", "collisionCount")


def apply(obj: dict[str, Any], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """`obj` with what the real server's create path adds (in place; returned for chaining). `schema` is a custom
    resource's openAPIV3Schema, whose defaults are applied."""
    kind = obj.get("kind")
    if kind == "Pod":
        pod(obj)
    elif kind in _TEMPLATED:
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec")
        if isinstance(template, dict):
            pod_spec(template, restart="OnFailure" if kind == "Job" else "Always")
        workload(obj)
    elif kind == "Node":
        status = obj.get("status") or {}
        if status.get("images") == []:
            del status["images"]
        if "phase" in status and not status["phase"]:
            del status["phase"]
    elif kind == "ValidatingAdmissionPolicy":
        admission_policy(obj)
    if schema is not None:
        schema_defaults(obj, schema)
    return obj


def pod_spec(spec: dict[str, Any], restart: str = "Always") -> None:
    """SetDefaults_PodSpec's fields (a pod's or a template's), and omitempty env values."""
    for key, value in (("dnsPolicy", "ClusterFirst"), ("restartPolicy", restart), ("schedulerName", "default-scheduler"),
                       ("securityContext", {}), ("terminationGracePeriodSeconds", 30)):
        spec.setdefault(key, value)
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        for env in container.get("env") or []:
            if env.get("value") == "":
                del env["value"]


def is_mirror(obj: dict[str, Any]) -> bool:
    md = obj.get("metadata") or {}
    return any(ref.get("kind") == "Node" and ref.get("controller") for ref in md.get("ownerReferences") or []) or \
        "kubernetes.io/config.mirror" in (md.get("annotations") or {})


def pod(obj: dict[str, Any]) -> None:
    """ServiceAccount admission, DefaultTolerationSeconds and the kubelet's lastState, on a pod as the server stores it."""
    spec = obj.setdefault("spec", {})
    pod_spec(spec, restart=spec.get("restartPolicy") or "Always")
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key or (t.get("operator") == "Exists" and not t.get("key")) for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": TOLERATION_SECONDS})
    if not is_mirror(obj):
        service_account(spec)
    for key in ("containerStatuses", "initContainerStatuses"):
        for status in (obj.get("status") or {}).get(key) or []:
            status.setdefault("lastState", {})


def service_account(spec: dict[str, Any]) -> None:
    """plugin/pkg/admission/serviceaccount: the default service account and its token volume, mounted read-only."""
    account = spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec["serviceAccount"] = account
    if spec.get("automountServiceAccountToken") is False:
        return
    containers = spec.get("containers", []) + spec.get("initContainers", [])
    if any(m.get("mountPath") == SA_MOUNT for c in containers for m in c.get("volumeMounts") or []):
        return
    volumes = spec.setdefault("volumes", [])
    name = next((v["name"] for v in volumes if v.get("name", "").startswith("kube-api-access-")), None)
    if name is None:
        name = "kube-api-access-" + "".join(random.choice(_SUFFIX) for _ in range(5))
        volumes.append({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                        "path": "namespace"}]}}]}})
    for container in containers:
        container.setdefault("volumeMounts", []).append({"name": name, "readOnly": True, "mountPath": SA_MOUNT})


def workload(obj: dict[str, Any]) -> None:
    """apps/v1 and batch/v1 SetDefaults_* of the controllers' specs the suite lists."""
    kind, spec = obj.get("kind"), obj.setdefault("spec", {})
    if kind in ("DaemonSet", "Deployment", "StatefulSet"):
        spec.setdefault("revisionHistoryLimit", 10)
    if kind == "DaemonSet":
        annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
        annotations.setdefault("deprecated.daemonset.template.generation", "1")
        status = obj.get("status") or {}
        for key in _DS_OMITEMPTY:
            if status.get(key) == 0:
                del status[key]
    elif kind == "Deployment":
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    elif kind == "Job":
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec.setdefault("suspend", False)
        spec.setdefault("manualSelector", False)


def admission_policy(obj: dict[str, Any]) -> None:
    """admissionregistration/v1 SetDefaults_MatchResources and SetDefaults_NamedRuleWithOperations."""
    match = (obj.get("spec") or {}).get("matchConstraints")
    if isinstance(match, dict):
        match.setdefault("matchPolicy", "Equivalent")
        match.setdefault("namespaceSelector", {})
        match.setdefault("objectSelector", {})
        for rule in match.get("resourceRules") or []:
            rule.setdefault("scope", "*")
    obj.setdefault("status", {})


def schema_defaults(value: Any, node: dict[str, Any]) -> None:
    """A structural schema's `default`s, where the object has the parent and not the field (apiextensions defaulting)."""
    if isinstance(value, dict):
        for key, child in (node.get("properties") or {}).items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                schema_defaults(value[key], child)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for item in value:
            schema_defaults(item, node["items"])
