"""What a real control plane keeps by itself: the `default/kubernetes` Service and Endpoints, node heartbeat and leader
Leases, controllers' marks (Job selectors, mirror pods, operand owners), and the testbed's identity on every Node."""

from __future__ import annotations

import calendar
import hashlib
import time
import uuid
from typing import Any

from pytest_dgxspark.testbed.podshape import ts

SCENARIO_ANNOTATION = "testbed.dgxspark.io/scenario"
SERVICE_IP = "10.43.0.1"  # first address of RKE2's default service CIDR 10.43.0.0/16
LEADERS = ("kube-controller-manager", "kube-scheduler", "cloud-controller-manager")


def _meta(name: str, namespace: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "creationTimestamp": ts(time.time() - 2 * 86400)}
    if labels:
        md["labels"] = labels
    md.update(extra)
    return md


def kubernetes_service(server_ip: str, port: int) -> list[dict[str, Any]]:
    """What kube-apiserver's bootstrap controller reconciles: Service and Endpoints `default/kubernetes`."""
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": _meta("kubernetes", "default", {"component": "apiserver", "provider": "kubernetes"}),
               "spec": {"clusterIP": SERVICE_IP, "clusterIPs": [SERVICE_IP], "internalTrafficPolicy": "Cluster",
                        "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                        "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                        "sessionAffinity": "None", "type": "ClusterIP"},
               "status": {"loadBalancer": {}}}
    endpoints = {"apiVersion": "v1", "kind": "Endpoints",
                 "metadata": _meta("kubernetes", "default", {"endpointslice.kubernetes.io/skip-mirror": "true"}),
                 "subsets": [{"addresses": [{"ip": server_ip}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}
    return [service, endpoints]


def control_plane_configmaps(started: float, ca_pem: str = "") -> list[dict[str, Any]]:
    """What kube-apiserver writes into kube-system on start: the authentication ConfigMap its clients read (the client
    and request-header CAs: the testbed's own) and the date the legacy token tracking began (this server's start)."""
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta("extension-apiserver-authentication", "kube-system"),
             "data": {"client-ca-file": ca_pem, "requestheader-allowed-names": '["front-proxy-client"]',
                      "requestheader-client-ca-file": ca_pem, "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
                      "requestheader-group-headers": '["X-Remote-Group"]', "requestheader-username-headers": '["X-Remote-User"]'}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": _meta("kube-apiserver-legacy-service-account-token-tracking", "kube-system"),
             "data": {"since": time.strftime("%Y-%m-%d", time.gmtime(started))}}]  # kube-apiserver's start


def leases(nodes: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The kubelets' heartbeats (`kube-node-lease/<node>`, owned by the Node) and kube-system's leader leases."""
    out = []
    for node in nodes:
        md = node["metadata"]
        renewed = now if kubelet_alive(node) else (_stamp(_ready(node).get("lastHeartbeatTime")) or now - 2 * 86400)
        out.append({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": _meta(md["name"], "kube-node-lease", ownerReferences=[
                        {"apiVersion": "v1", "kind": "Node", "name": md["name"], "uid": md.get("uid", "")}]),
                    "spec": {"holderIdentity": md["name"], "leaseDurationSeconds": 40, "renewTime": _micro(renewed)}})
    holder = nodes[0]["metadata"]["name"] if nodes else ""
    for name in LEADERS:
        out.append({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": _meta(name, "kube-system"),
                    "spec": {"holderIdentity": f"{holder}_{uuid.uuid4()}", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                             "acquireTime": _micro(now - 2 * 86400), "renewTime": _micro(now)}})
    return out


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})


def kubelet_alive(node: dict[str, Any]) -> bool:
    """Whether the node's kubelet still reports (Ready is True or False, not Unknown: "Kubelet stopped posting")."""
    return _ready(node).get("status", "True") != "Unknown"


def _stamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def renew_node_leases(store: Any, stop: Any, every_s: float = 10.0) -> None:
    """The kubelets' heartbeat: renew `kube-node-lease/<node>` every 10 s for each node whose kubelet is alive."""
    while not stop.wait(every_s):
        nodes, _ = store.list("/nodes")
        for node in nodes:
            if kubelet_alive(node):
                now = _micro(time.time())
                store.update("coordination.k8s.io/leases", "kube-node-lease", node["metadata"]["name"],
                             lambda lease, now=now: lease.setdefault("spec", {}).update({"renewTime": now}))


def _micro(when: float) -> str:
    """metav1.MicroTime, the format of Lease times."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int(when * 1e6) % 1000000:06d}Z"


def identify(node: dict[str, Any], scenario: str) -> None:
    """Mark a Node as the testbed's: the annotation a run reads to stamp itself SIMULATED."""
    node.setdefault("metadata", {}).setdefault("annotations", {})[SCENARIO_ANNOTATION] = scenario


def controller_marks(objects: list[dict[str, Any]]) -> None:
    """What controllers write that a generated world may lack: the Job strategy's selector and the pods' controller-uid
    labels (so `kubectl logs job/<name>` finds the Job's own pod), and the GPU Operator's controller reference from
    its operand DaemonSets to the ClusterPolicy (controllerutil.SetControllerReference)."""
    jobs = {o["metadata"].get("uid"): o for o in objects if o.get("kind") == "Job" and (o.get("metadata") or {}).get("uid")}
    for job in jobs.values():
        spec, md = job.setdefault("spec", {}), job["metadata"]
        if spec.get("selector") or spec.get("manualSelector"):
            continue
        uid, name = md["uid"], md["name"]
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template = spec.setdefault("template", {}).setdefault("metadata", {})
        template["labels"] = {**(template.get("labels") or {}), **_job_labels(uid, name)}
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        _mirror(obj)
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("controller") and ref.get("uid") in jobs:
                md = obj["metadata"]
                md["labels"] = {**_job_labels(ref["uid"], ref["name"]), **(md.get("labels") or {})}
    policy = next((o for o in objects if o.get("kind") == "ClusterPolicy"), None)
    if policy is None or not (policy.get("metadata") or {}).get("uid"):
        return
    owner = {"apiVersion": policy.get("apiVersion", "nvidia.com/v1"), "kind": "ClusterPolicy", "name": policy["metadata"]["name"],
             "uid": policy["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    # the operator creates its operands in its own namespace only; a look-alike elsewhere stays a stranger
    operator_ns = next(((o.get("metadata") or {}).get("namespace") for o in objects if o.get("kind") == "Deployment"
                        and ((o.get("metadata") or {}).get("labels") or {}).get("app") == "gpu-operator"), None)
    for obj in objects:
        md = obj.get("metadata") or {}
        if obj.get("kind") == "DaemonSet" and (md.get("labels") or {}).get("app.kubernetes.io/managed-by") == "gpu-operator" \
                and md.get("namespace") == operator_ns and not md.get("ownerReferences"):
            md["ownerReferences"] = [dict(owner)]


def _mirror(pod: dict[str, Any]) -> None:
    """A static pod's API object is the kubelet's mirror pod: owned by its Node and annotated so (`kubectl drain` skips it)."""
    md = pod.get("metadata") or {}
    if not any(ref.get("kind") == "Node" and ref.get("controller") for ref in md.get("ownerReferences") or []):
        return
    pod.get("spec", {}).pop("serviceAccountName", None)  # a mirror pod may not reference a service account (admission)
    digest = hashlib.md5(f"{md.get('namespace')}/{md.get('name')}".encode()).hexdigest()  # noqa: S324 - a name, not security
    md["annotations"] = {"kubernetes.io/config.hash": digest, "kubernetes.io/config.mirror": digest,
                         "kubernetes.io/config.seen": ts(time.time() - 2 * 86400), "kubernetes.io/config.source": "file",
                         **(md.get("annotations") or {})}


def _job_labels(uid: str, name: str) -> dict[str, str]:
    return {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name, "controller-uid": uid,
            "job-name": name}
