"""The container side of kwok's nodes on the real control plane: what each pod created after bring-up prints and how it
exits, decided by runtime.py as the stand-in's kubelet decides it (the GPU isolation probe's `sh -c` with the GPUs the
pod holds, an exec format error, the scenario's failure, the CUDA sample's log).

kwok moves pods through their phases (realworld.kwok_config's stages) but runs nothing; this process watches the pods
through the API as a kubelet would, and once a pod is bound to a node writes its log as a CRI log file with a kwok
`Logs` object naming it (kwok --enable-crds=Logs serves it to `kubectl logs`), then annotates the pod with the exit
code (EXIT_ANNOTATION), which the stages that end a container wait for. A pod that never starts (rejected, no
sandbox, image not found, a create error) or runs until deleted is left to kwok's stages.

    python -m pytest_dgxspark.testbed.kwokrun --kubeconfig admin.kubeconfig --world workload-world.json --logs DIR
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pytest_dgxspark.testbed import runtime

EXIT_ANNOTATION = "testbed.dgxspark.io/exit-code"
LOGS_API = ("kwok.x-k8s.io", "v1alpha1", "logs")
WATCH_S = 300  # one watch request's length; the loop watches again from the last resourceVersion


def cri_log(text: str, when: str = "2026-01-01T00:00:00.000000000Z") -> str:
    """A CRI log file (what the kubelet serves): `<time> stdout F <line>` per line."""
    return "".join(f"{when} stdout F {line}\n" for line in text.splitlines())


class Runner:
    """The decisions for one cluster: `world` is the testbed's workload-world.json (objects and settings)."""

    def __init__(self, world: dict[str, Any], logs_dir: Path) -> None:
        settings = world.get("settings") or {}
        self.workload: dict[str, Any] = settings.get("workload") or {}
        self.images: dict[str, Any] = self.workload.get("images") or {}
        self.devices: dict[str, Any] = self.workload.get("devices") or {}
        objects = world.get("objects") or []
        self.arch = {o["metadata"]["name"]: ((o["metadata"].get("labels") or {}).get("kubernetes.io/arch", ""))
                     for o in objects if o.get("kind") == "Node"}
        # the world's own pods are in their state already, with their logs (realworld.log_objects)
        self.scenario_pods = {_key(o) for o in objects if o.get("kind") == "Pod"}
        self.logs_dir = logs_dir
        self.allocated: dict[str, tuple[str, list[str]]] = {}  # live pod -> (node, GPU UUIDs)
        self.done: set[str] = set()  # pods decided (annotated, or left to kwok)

    def decide(self, pod: dict[str, Any]) -> tuple[runtime.Ending, list[str]] | None:
        """(ending, its containers) once a new pod is bound to a node; None while it is not, or when it was decided."""
        key = _key(pod)
        md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if md.get("deletionTimestamp") or status.get("phase") in runtime.DONE_PHASES:
            self.allocated.pop(key, None)
            return None
        node = spec.get("nodeName")
        if not node or key in self.scenario_pods or key in self.done:
            return None
        devices = self.devices.get(node) or {}
        if key not in self.allocated:  # once: a decision tried again (an API error) keeps its GPUs
            held = Counter(u for k, (n, uuids) in self.allocated.items() if n == node for u in uuids)
            self.allocated[key] = (node, runtime.allocate(pod, devices, held))
        end = runtime.ending(pod, self.arch.get(node, ""), self.workload, self.images, devices, self.allocated[key][1])
        if end is None or end.outcome == "running" or (md.get("annotations") or {}).get(EXIT_ANNOTATION) is not None:
            self.done.add(key)
            return None
        return end, [c["name"] for c in spec.get("containers") or []]

    def decided(self, pod: dict[str, Any]) -> None:
        """The pod's log and exit code are written: it is not decided again."""
        self.done.add(_key(pod))

    def forget(self, pod: dict[str, Any]) -> None:
        self.allocated.pop(_key(pod), None)

    def log_body(self, pod: dict[str, Any], end: runtime.Ending, names: list[str]) -> dict[str, Any]:
        """The log file written, and the kwok Logs object that serves it for every container of the pod."""
        md = pod["metadata"]
        path = self.logs_dir / f"run-{md.get('namespace', 'default')}_{md['name']}.log"
        path.write_text(cri_log(end.log))
        return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": md["name"], "namespace": md.get("namespace", "default")},
                "spec": {"logs": [{"containers": names, "logsFile": str(path), "previousLogsFile": str(path)}]}}


def _key(obj: dict[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or 'default'}/{md.get('name')}"


def serve(kubeconfig: Path, world_path: Path, logs_dir: Path) -> None:
    """Watch every pod until SIGTERM; decide each as it is bound."""
    from pytest_dgxspark.testbed.realapi import Api, ApiError

    api = Api.from_kubeconfig(kubeconfig)
    runner = Runner(json.loads(world_path.read_text()), logs_dir)
    group, version, plural = LOGS_API

    def handle(pod: dict[str, Any], kind: str) -> None:
        if kind == "DELETED":
            runner.forget(pod)
            return
        decided = runner.decide(pod)
        if decided is None:
            return
        end, names = decided
        md = pod["metadata"]
        ns = md.get("namespace", "default")
        body = runner.log_body(pod, end, names)
        logs = f"/apis/{group}/{version}/namespaces/{ns}/{plural}"
        status, _ = api.request("POST", logs, body)
        if status == 409:  # a pod of the same name before it: its log is replaced
            current = api.call("GET", f"{logs}/{md['name']}")
            api.call("PUT", f"{logs}/{md['name']}", {**body, "metadata": {
                **body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})
        elif status != 201:
            raise ApiError("POST", logs, status, "the Logs object was refused")
        api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{md['name']}",
                 {"metadata": {"annotations": {EXIT_ANNOTATION: str(end.exit_code)}}},
                 ok=(200, 404), content_type="application/merge-patch+json")  # 404: deleted meanwhile
        runner.decided(pod)
        print(f"kwokrun: {ns}/{md['name']}: exit {end.exit_code} ({end.outcome}), {len(end.log.splitlines())} log lines",
              flush=True)

    while True:
        try:
            listing = api.call("GET", "/api/v1/pods")
            for pod in listing.get("items") or []:
                handle(pod, "ADDED")
            for event in api.watch("/api/v1/pods", listing["metadata"]["resourceVersion"], WATCH_S):
                handle(event["object"], event["type"])
        except ApiError as exc:  # 410 Gone: list again; anything else once more after a breath
            if exc.status != 410:
                print(f"kwokrun: {exc}", flush=True)
                time.sleep(0.5)
        except (OSError, ValueError) as exc:  # a dropped connection: watch again
            print(f"kwokrun: watch ended: {exc!r}", flush=True)
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kwokrun", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--world", type=Path, required=True, help="the testbed's workload-world.json")
    parser.add_argument("--logs", type=Path, required=True, help="where the CRI log files go")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    args.logs.mkdir(parents=True, exist_ok=True)
    serve(args.kubeconfig, args.world, args.logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
