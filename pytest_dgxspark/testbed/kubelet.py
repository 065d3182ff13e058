"""The simulated scheduler and kubelet: bind created pods to nodes and walk them through their phases."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

from pytest_dgxspark.testbed import images as catalogue
from pytest_dgxspark.testbed import runtime
from pytest_dgxspark.testbed.podshape import conditions, running_status, terminated_status, ts, waiting_status
from pytest_dgxspark.testbed.runtime import DONE_PHASES, GPU, gpu_request
from pytest_dgxspark.testbed.store import Store


def tolerates(pod: dict[str, Any], taint: dict[str, Any]) -> bool:
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint.get("key")):
            return True
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


class Kubelet:
    """Scheduler plus one kubelet per node, all in the API server process; changes go through the store."""

    def __init__(self, store: Store, workload: dict[str, Any], logs: dict[str, str], step_s: float | None = None) -> None:
        self.store, self.workload, self.logs = store, workload or {}, logs
        self.step = float(step_s if step_s is not None else self.workload.get("step_s", 0.15))
        self.images: dict[str, dict[str, Any]] = self.workload.get("images") or catalogue.catalogue(None, [])
        self.devices: dict[str, dict[str, Any]] = self.workload.get("devices") or {}
        self.allocated: dict[str, tuple[str, list[str]]] = {}  # pod key -> (node, the GPU UUIDs the device plugin gave it)
        self._lock = threading.Lock()

    # --- scheduler -------------------------------------------------------------------------------------------
    def admit(self, pod: dict[str, Any]) -> None:
        """Called once for each pod created through the API."""
        threading.Thread(target=self._run, args=(pod,), daemon=True).start()

    def _fit(self, pod: dict[str, Any]) -> tuple[str | None, str]:
        nodes, _ = self.store.list("/nodes")
        pods, _ = self.store.list("/pods")
        want = gpu_request(pod)
        reasons: dict[str, int] = {}
        preempt: dict[str, int] = {}
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        for node in nodes:
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            why = None
            if (node.get("spec") or {}).get("unschedulable"):
                why = "node(s) were unschedulable"
            for taint in (node.get("spec") or {}).get("taints") or []:
                if why is None and taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
                    why = f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
            if why is None and any(labels.get(k) != v for k, v in selector.items()):
                why = "node(s) didn't match Node's node affinity/selector"
            if why is None and want:
                free = int(str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0")))
                used = sum(gpu_request(p) for p in pods if (p.get("spec") or {}).get("nodeName") == name
                           and (p.get("status") or {}).get("phase") not in DONE_PHASES)
                if want > free - used:
                    why = f"Insufficient {GPU}"
            if why is None:
                return name, ""
            reasons[why] = reasons.get(why, 0) + 1
            victim = "No preemption victims found for incoming pod" if why.startswith("Insufficient") else \
                "Preemption is not helpful for scheduling"
            preempt[victim] = preempt.get(victim, 0) + 1
        total = len(nodes)
        first = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        second = ", ".join(f"{n} {r}" for r, n in sorted(preempt.items()))
        return None, f"0/{total} nodes are available: {first}. preemption: 0/{total} nodes are available: {second}."

    # --- events ----------------------------------------------------------------------------------------------
    def event(self, pod: dict[str, Any], kind: str, reason: str, message: str, component: str, host: str | None = None) -> None:
        md, now = pod["metadata"], ts(time.time())
        source: dict[str, Any] = {"component": component}
        if host:
            source["host"] = host
        self.store.put("/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md['name']}.{time.time_ns():x}", "namespace": md.get("namespace", "default"),
                         "uid": str(uuid.uuid4())},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": md["name"], "namespace": md.get("namespace", "default"),
                               "uid": md["uid"], "resourceVersion": md.get("resourceVersion", ""),
                               **({"fieldPath": f"spec.containers{{{pod['spec']['containers'][0]['name']}}}"}
                                  if component == "kubelet" and reason not in ("FailedCreatePodSandBox", "UnexpectedAdmissionError") else {})},
            "reason": reason, "message": message, "source": source, "type": kind, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "eventTime": None,
            "reportingComponent": component, "reportingInstance": host or "",
        })

    # --- lifecycle -------------------------------------------------------------------------------------------
    def _update(self, pod: dict[str, Any], change: Any) -> dict[str, Any] | None:
        md = pod["metadata"]
        return self.store.update("/pods", md.get("namespace", "default"), md["name"], change)

    def _run(self, pod: dict[str, Any]) -> None:
        try:
            self._lifecycle(pod)
        except Exception as exc:  # noqa: BLE001 - a kubelet thread must never take the server down
            print(f"kubelet: pod {pod['metadata'].get('name')}: {exc!r}", flush=True)

    def _lifecycle(self, pod: dict[str, Any]) -> None:
        md, spec = pod["metadata"], pod["spec"]
        created = time.time()
        time.sleep(self.step / 3)
        node_name = self._schedule(pod, created)
        if node_name is None:
            return
        self.event(pod, "Normal", "Scheduled", f"Successfully assigned {md.get('namespace', 'default')}/{md['name']} to {node_name}",
                   "default-scheduler")
        node = self.store.get("/nodes", "", node_name) or {}
        ip = next((a["address"] for a in (node.get("status") or {}).get("addresses") or [] if a["type"] == "InternalIP"), "")
        failure = runtime.failure_of(self.workload, gpu_request(pod) > 0)
        key = f"{md.get('namespace', 'default')}/{md['name']}"
        base = {"hostIP": ip, "hostIPs": [{"ip": ip}], "startTime": ts(created), "qosClass": "BestEffort"}
        mains = spec["containers"]
        if failure.get("reason") == "UnexpectedAdmissionError":
            time.sleep(self.step)
            self._set(pod, {**base, "phase": "Failed", "reason": failure["reason"], "message": failure["message"]})
            self.event(pod, "Warning", failure["reason"], failure["message"].removeprefix("Pod was rejected: "), "kubelet", node_name)
            return
        time.sleep(self.step)
        if failure.get("event") == "FailedCreatePodSandBox":
            self._set(pod, {**base, "phase": "Pending", "conditions": self._conds(pod, created, False),
                            "containerStatuses": [waiting_status(c, "ContainerCreating") for c in mains]})
            self.event(pod, "Warning", "FailedCreatePodSandBox", failure["message"], "kubelet", node_name)
            return
        entries = [self.images.get(catalogue.normalize(c["image"])) for c in mains]
        for c, entry in zip(mains, entries):
            self.event(pod, "Normal", "Pulling", f'Pulling image "{c["image"]}"', "kubelet", node_name)
            if entry is None:
                return self._pull_fails(pod, base, created, c, node_name)
            self.event(pod, "Normal", "Pulled", f'Successfully pulled image "{c["image"]}" in 812ms (812ms including waiting). '
                       "Image size: 35682418 bytes.", "kubelet", node_name)
        time.sleep(self.step)
        arch = ((node.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/arch", "")
        end = runtime.ending(pod, arch, self.workload, self.images, self.devices.get(node_name) or {},
                             self.allocated.get(key, ("", []))[1])
        if end is None:  # a create error of the scenario (its image was found): the container never starts
            self._set(pod, {**base, "phase": "Pending", "conditions": self._conds(pod, created, False),
                            "containerStatuses": [waiting_status(c, failure["waiting"], failure["message"]) for c in mains]})
            self.event(pod, "Warning", "Failed", f"Error: {failure['message']}", "kubelet", node_name)
            return
        for c in mains:
            self.event(pod, "Normal", "Created", f"Created container: {c['name']}", "kubelet", node_name)
            self.event(pod, "Normal", "Started", f"Started container {c['name']}", "kubelet", node_name)
        started = time.time()
        ready = self._set(pod, {**base, "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                                "conditions": self._conds(pod, created, True),
                                "containerStatuses": [running_status(c, started) for c in mains]})
        if ready is None or end.outcome == "running":
            return
        time.sleep(float(self.workload.get("run_s", self.step * 2)))
        for c in mains:
            self.logs[f"{key}/{c['name']}"] = end.log
        exit_code, failed = end.exit_code, end.failed
        reason = "Error" if failed else "Completed"
        finished = time.time()
        policy = spec.get("restartPolicy", "Always")
        if policy == "Never" or (policy == "OnFailure" and not failed):
            self._set(pod, {**base, "phase": "Failed" if failed else "Succeeded", "podIP": ip, "podIPs": [{"ip": ip}],
                            "conditions": self._conds(pod, created, False, completed=True),
                            "containerStatuses": [terminated_status(c, started, finished, exit_code, reason) for c in mains]})
            return
        last = {"exitCode": exit_code, "reason": reason, "startedAt": ts(started), "finishedAt": ts(finished)}
        back_off = [waiting_status(c, "CrashLoopBackOff", f"back-off 10s restarting failed container={c['name']} pod={md['name']}_"
                                   f"{md.get('namespace', 'default')}({md['uid']})", 1, last) for c in mains]
        self._set(pod, {**base, "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                        "conditions": self._conds(pod, created, False), "containerStatuses": back_off})
        self.event(pod, "Warning", "BackOff", f"Back-off restarting failed container {mains[0]['name']} in pod "
                   f"{md['name']}_{md.get('namespace', 'default')}({md['uid']})", "kubelet", node_name)

    def _schedule(self, pod: dict[str, Any], created: float) -> str | None:
        """Bind the pod to a node it fits. While none fits it stays Pending (PodScheduled False, Unschedulable, one
        FailedScheduling event) and is tried again whenever a pod finishes or goes or a node changes, as
        kube-scheduler's queue moves an unschedulable pod back on those cluster events (so a second CUDA sample
        waiting for the one GPU runs once the first is done); None once the pod is gone."""
        md = pod["metadata"]
        key = (md.get("namespace", "default"), md["name"])
        told = False
        while True:
            with self._lock:  # scheduling decisions one at a time, so two pods never get the same GPU
                seen = self.store.resource_version  # before the fit: a change after it wakes the wait below
                node_name = pod["spec"].get("nodeName")
                message = ""
                if not node_name:
                    node_name, message = self._fit(pod)
                if node_name is not None:
                    def bind(o: dict[str, Any]) -> None:
                        o["spec"]["nodeName"] = node_name
                        o["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                                      "lastTransitionTime": ts(created)}]
                    if self._update(pod, bind) is None:
                        return None
                    self._allocate(pod, node_name)
                    return node_name
                if not told:
                    def unschedulable(o: dict[str, Any]) -> None:
                        o["status"]["conditions"] = conditions(created, False, False, False, unschedulable_message=message)
                    if self._update(pod, unschedulable) is None:
                        return None
                    self.event(pod, "Warning", "FailedScheduling", message, "default-scheduler")
                    told = True
            if not self._room_may_have_freed(key, seen):
                return None

    def _room_may_have_freed(self, key: tuple[str, str], seen: int) -> bool:
        """Wait (watching the store) for a cluster event after `seen` that can make room: a pod finished or deleted,
        a node added or changed. False once the pod `key` is deleted or being deleted."""
        while True:
            changes, too_old = self.store.events_since(seen, timeout=30.0)
            if too_old:
                return self.store.get("/pods", *key) is not None
            for rv, resource, kind, obj in changes:
                seen = max(seen, rv)
                omd = obj.get("metadata") or {}
                if resource == "/pods" and (omd.get("namespace", "default"), omd.get("name")) == key and (
                        kind == "DELETED" or omd.get("deletionTimestamp")):
                    return False
            if any(resource == "/nodes" or (resource == "/pods" and (kind == "DELETED" or (
                    (obj.get("status") or {}).get("phase") in DONE_PHASES))) for _, resource, kind, obj in changes):
                return True
            if not changes and self.store.get("/pods", *key) is None:
                return False

    def _allocate(self, pod: dict[str, Any], node_name: str) -> None:
        """The device plugin's allocation: the pod's nvidia.com/gpu as GPU UUIDs of the node that no live pod holds."""
        if not gpu_request(pod):
            return
        md = pod["metadata"]
        live = {f"{(p['metadata'].get('namespace') or 'default')}/{p['metadata']['name']}" for p in self.store.list("/pods")[0]
                if (p.get("status") or {}).get("phase") not in DONE_PHASES}
        held = Counter(u for k, (n, uuids) in self.allocated.items() if n == node_name and k in live for u in uuids)
        self.allocated[f"{md.get('namespace', 'default')}/{md['name']}"] = (
            node_name, runtime.allocate(pod, self.devices.get(node_name) or {}, held))

    def _pull_fails(self, pod: dict[str, Any], base: dict[str, Any], created: float, c: dict[str, Any], node_name: str) -> None:
        """ErrImagePull, then ImagePullBackOff, with the events the kubelet writes for a reference not found."""
        mains, error = pod["spec"]["containers"], catalogue.pull_error(c["image"])
        time.sleep(self.step)
        self._set(pod, {**base, "phase": "Pending", "conditions": self._conds(pod, created, False),
                        "containerStatuses": [waiting_status(m, "ErrImagePull", error) if m is c else
                                              waiting_status(m, "ContainerCreating") for m in mains]})
        self.event(pod, "Warning", "Failed", f'Failed to pull image "{c["image"]}": {error}', "kubelet", node_name)
        self.event(pod, "Warning", "Failed", "Error: ErrImagePull", "kubelet", node_name)
        time.sleep(self.step)
        back_off = f'Back-off pulling image "{c["image"]}"'
        self._set(pod, {**base, "phase": "Pending", "conditions": self._conds(pod, created, False),
                        "containerStatuses": [waiting_status(m, "ImagePullBackOff", back_off) if m is c else
                                              waiting_status(m, "ContainerCreating") for m in mains]})
        self.event(pod, "Normal", "BackOff", back_off, "kubelet", node_name)
        self.event(pod, "Warning", "Failed", "Error: ImagePullBackOff", "kubelet", node_name)

    @staticmethod
    def _conds(pod: dict[str, Any], created: float, ready: bool, completed: bool = False) -> list[dict[str, Any]]:
        return conditions(created, True, True, ready, completed=completed)

    def _set(self, pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        def change(o: dict[str, Any]) -> None:
            if o["metadata"].get("deletionTimestamp"):
                return
            kept = {k: v for k, v in o.get("status", {}).items() if k == "qosClass"}
            o["status"] = {**status, **kept}
        return self._update(pod, change)
