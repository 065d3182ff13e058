"""The GPU Operator's and helm-controller's status writes on the real control plane, from what the API holds, as the
real controllers compute them: the world is written as a cluster whose controllers have settled (each status already
what they would write), and this process keeps it so when the objects they read change through the API.

- GPU Operator (controllers/clusterpolicy_controller.go, clusterpolicy-status.txt): while its Deployment has an
  available replica, `cluster-policy`'s status is `ready`/NoGPUNodes when no node carries NFD's
  `feature.node.kubernetes.io/pci-10de.present=true`, `notReady`/OperandNotReady naming every state (in reconcile
  order) whose DaemonSet has unavailable pods, else `ready`/Reconciled. A stopped operator writes nothing.
- helm-controller (k3s-io/helm-controller pkg/controllers/chart/chart.go): each HelmChart's `status.jobName` is
  `helm-install-<name>` with a JobCreated condition once that Job exists, and a Failed condition while the Job has
  failed (its retries spent).

Each kind is listed once and watched from there (a thread per watch); a change reconciles what reads it. The writes
are `/status` PUTs on the version read (a 409 reads again), as this process's own user (controllers.kubeconfig).

    python -m pytest_dgxspark.testbed.controllers --kubeconfig controllers.kubeconfig --ready DIR/controllers.ready
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pytest_dgxspark.testbed.logs import clusterpolicy_message
from pytest_dgxspark.testbed.operands import OPERANDS
from pytest_dgxspark.testbed.realapi import Api, ApiError

WATCH_S = 300
NFD_GPU = "feature.node.kubernetes.io/pci-10de.present"
# kind -> the list/watch path of every object of it
PATHS = {"clusterpolicies": "/apis/nvidia.com/v1/clusterpolicies", "daemonsets": "/apis/apps/v1/daemonsets",
         "deployments": "/apis/apps/v1/deployments", "nodes": "/api/v1/nodes",
         "helmcharts": "/apis/helm.cattle.io/v1/helmcharts", "jobs": "/apis/batch/v1/jobs"}
STATES = [(ds, state) for ds, _deploy, _key, _inits, _mains, state in OPERANDS.values()]  # reconcile order
HELM_FAILED = {"type": "Failed", "status": "True", "reason": "Job failed",
               "message": "Job has reached configured number of retries without succeeding"}

Objects = dict[str, dict[tuple[str, str], dict[str, Any]]]  # kind -> (namespace, name) -> object


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(old: list[dict[str, Any]], new: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    """`new` with each condition's lastTransitionTime kept from `old` where its status did not change
    (apimachinery's meta.SetStatusCondition)."""
    before = {c.get("type"): c for c in old or []}
    out = []
    for cond in new:
        prev = before.get(cond["type"])
        when = prev.get("lastTransitionTime") if prev and prev.get("status") == cond["status"] else now
        out.append({**cond, "lastTransitionTime": when or now})
    return out


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Equal but for the conditions' lastTransitionTime (what a controller leaves alone when nothing changed)."""
    def strip(status: dict[str, Any]) -> dict[str, Any]:
        return {**status, "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                                         for c in status.get("conditions") or []]}
    return strip(old or {}) == strip(new)


def operator_namespace(objects: Objects) -> str | None:
    """The namespace of the GPU Operator's Deployment while a replica of it is available; None while none is."""
    for (ns, name), dep in sorted(objects.get("deployments", {}).items()):
        if name == "gpu-operator" and int((dep.get("status") or {}).get("availableReplicas") or 0) >= 1:
            return ns
    return None


def clusterpolicy_status(policy: dict[str, Any], objects: Objects, now: str) -> dict[str, Any] | None:
    """The status the operator writes on `policy`; None while the operator is not running (it writes nothing)."""
    ns = operator_namespace(objects)
    if ns is None:
        return None
    found = any((n.get("metadata") or {}).get("labels", {}).get(NFD_GPU) == "true" for n in objects.get("nodes", {}).values())
    daemonsets = objects.get("daemonsets", {})
    not_ready = [state for ds, state in STATES
                 if int(((daemonsets.get((ns, ds)) or {}).get("status") or {}).get("numberUnavailable") or 0) > 0]
    if not found:
        state, reason = "ready", "NoGPUNodes"
    elif not_ready:
        state, reason = "notReady", "OperandNotReady"
    else:
        state, reason = "ready", "Reconciled"
    message = clusterpolicy_message(reason, not_ready)
    ready = state == "ready"
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "reason": reason, "message": message},
                  {"type": "Error", "status": "False" if ready else "True", "reason": "Ready" if ready else reason,
                   "message": "" if ready else message}]
    old = policy.get("status") or {}
    return {**old, "namespace": ns, "state": state, "conditions": _conditions(old.get("conditions") or [], conditions, now)}


def helmchart_status(chart: dict[str, Any], objects: Objects, now: str) -> dict[str, Any] | None:
    """The status helm-controller writes on `chart`; None until its install Job exists."""
    md = chart.get("metadata") or {}
    ns, job_name = md.get("namespace", "default"), f"helm-install-{md.get('name')}"
    job = objects.get("jobs", {}).get((ns, job_name))
    if job is None:
        return None
    conditions = [{"type": "JobCreated", "status": "True", "reason": "Job created",
                   "message": f"Applying HelmChart using Job {ns}/{job_name}"}]
    if any(c.get("type") == "Failed" and c.get("status") == "True" for c in (job.get("status") or {}).get("conditions") or []):
        conditions.append(dict(HELM_FAILED))
    old = chart.get("status") or {}
    kept = [c for c in old.get("conditions") or [] if c.get("type") not in ("JobCreated", "Failed")]
    return {**old, "jobName": job_name,
            "conditions": _conditions(old.get("conditions") or [], conditions, now) + kept}


def wanted(objects: Objects, now: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(kind, object, the status to write) for every object whose status differs from what its controller computes."""
    out = []
    for kind, compute in (("clusterpolicies", clusterpolicy_status), ("helmcharts", helmchart_status)):
        for obj in objects.get(kind, {}).values():
            status = compute(obj, objects, now)
            if status is not None and not _same(obj.get("status") or {}, status):
                out.append((kind, obj, status))
    return out


def _object_path(kind: str, obj: dict[str, Any]) -> str:
    md = obj["metadata"]
    base = PATHS[kind]
    if md.get("namespace"):
        group_base, plural = base.rsplit("/", 1)
        return f"{group_base}/namespaces/{md['namespace']}/{plural}/{md['name']}"
    return f"{base}/{md['name']}"


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return md.get("namespace", ""), md.get("name", "")


class Controllers:
    """The objects each watch holds, and the reconcile loop over them."""

    def __init__(self, kubeconfig: Path, ready: Path | None) -> None:
        self.kubeconfig, self.ready = kubeconfig, ready
        self.objects: Objects = {kind: {} for kind in PATHS}
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.listed: set[str] = set()

    def _watch(self, kind: str) -> None:
        api = Api.from_kubeconfig(self.kubeconfig)
        path = PATHS[kind]
        while True:
            try:
                listing = api.call("GET", path, ok=(200, 404))
                if "items" not in listing:  # 404: its CRD is not served (a scenario without it); look again later
                    with self.lock:
                        self.objects[kind] = {}
                        self.listed.add(kind)
                    self.changed.set()
                    time.sleep(5)
                    continue
                with self.lock:
                    self.objects[kind] = {_key(o): o for o in listing.get("items") or []}
                    self.listed.add(kind)
                self.changed.set()
                for event in api.watch(path, listing["metadata"]["resourceVersion"], WATCH_S):
                    obj = event["object"]
                    with self.lock:
                        if event["type"] == "DELETED":
                            self.objects[kind].pop(_key(obj), None)
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self.objects[kind][_key(obj)] = obj
                    self.changed.set()
            except ApiError as exc:  # 410 Gone: list again; anything else once more after a breath
                if exc.status != 410:
                    print(f"controllers: {kind}: {exc}", flush=True)
                    time.sleep(0.5)
            except (OSError, ValueError) as exc:  # a dropped connection: list and watch again
                print(f"controllers: {kind}: watch ended: {exc!r}", flush=True)
                time.sleep(0.5)

    def _write(self, api: Api, kind: str, obj: dict[str, Any], status: dict[str, Any]) -> None:
        path = _object_path(kind, obj) + "/status"
        answer, body = api.request("PUT", path, {**obj, "status": status})
        if answer == 409:  # our copy is older than the server's: the watch brings the newer one and we compute again
            return
        if answer == 404:  # deleted meanwhile
            return
        if answer != 200:
            raise ApiError("PUT", path, answer, str(body)[:500])
        print(f"controllers: {kind} {_key(obj)[0]}/{_key(obj)[1]}: status {status.get('state') or status.get('jobName')} "
              f"({'; '.join(c['reason'] for c in status.get('conditions') or [])})", flush=True)
        with self.lock:  # the answer is the newest version we know of until the watch brings a newer one
            current = self.objects[kind].get(_key(obj))
            if isinstance(body, dict) and current is not None and \
                    int(body["metadata"]["resourceVersion"]) > int(current["metadata"]["resourceVersion"]):
                self.objects[kind][_key(obj)] = body

    def serve(self) -> None:
        for kind in PATHS:
            threading.Thread(target=self._watch, args=(kind,), name=f"watch-{kind}", daemon=True).start()
        api = Api.from_kubeconfig(self.kubeconfig)
        while True:
            self.changed.wait()
            time.sleep(0.05)  # a burst of events (a world's writes) reconciles once
            self.changed.clear()
            with self.lock:
                if len(self.listed) < len(PATHS):
                    continue
                todo = wanted({k: dict(v) for k, v in self.objects.items()}, _now())
            for kind, obj, status in todo:
                try:
                    self._write(api, kind, obj, status)
                except (ApiError, OSError) as exc:
                    print(f"controllers: {kind} {_key(obj)}: {exc}", flush=True)
                    self.changed.set()
                    time.sleep(0.5)
            if self.ready is not None and not self.ready.exists():
                self.ready.write_text(f"{time.time()}\n")  # every kind listed and reconciled once


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="controllers", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--ready", type=Path, help="a file written once every kind is listed and reconciled")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Controllers(args.kubeconfig, args.ready).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
