"""What a simulated container does once it runs: its exit status and its log, decided once for both simulations of the
node (the stand-in's kubelet.py and, on the real control plane, kwokrun.py beside kwok) from the scenario's workload
settings, the image catalogue and the GPUs the node gives the container (containers.py).

The order is the kubelet's: a workload failure of the scenario (logs.FAILURES) wins; an image without a variant for
the node's architecture fails at its entrypoint (exec format error, 255); a `sh -c` of plain commands (the GPU isolation
probe) ends with its own status; anything else ends as the scenario's workload says (the CUDA sample's log)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pytest_dgxspark.testbed import containers
from pytest_dgxspark.testbed import images as catalogue
from pytest_dgxspark.testbed import logs as texts

GPU = "nvidia.com/gpu"
DONE_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Ending:
    """How a started container ends: `outcome` succeeded, failed or running (until deleted); its exit code and log."""

    outcome: str
    exit_code: int
    log: str

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"


def gpu_request(pod: dict[str, Any]) -> int:
    """nvidia.com/gpu asked for by the pod (limits or requests; the max over init containers and the sum of containers)."""
    spec = pod.get("spec") or {}

    def one(c: dict[str, Any]) -> int:
        res = c.get("resources") or {}
        return int(str((res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU) or 0))

    return max(sum(one(c) for c in spec.get("containers") or []), max((one(c) for c in spec.get("initContainers") or []), default=0))


def failure_of(workload: dict[str, Any], gpu: bool) -> dict[str, Any]:
    """The scenario's failure for a pod with a GPU (`outcome`) or without (`cpu_outcome`), {} when none."""
    outcome = workload.get("outcome", "succeeded") if gpu else workload.get("cpu_outcome", "running")
    return dict(texts.FAILURES.get(workload.get("failure") or "", {})) if outcome == "failed" else {}


def allocate(pod: dict[str, Any], devices: dict[str, Any], held: Counter[str]) -> list[str]:
    """The device plugin's allocation: the pod's nvidia.com/gpu as UUIDs of the node's GPUs that no live pod holds
    (`held`: UUID -> how many live pods hold it; with time-slicing each GPU is `replicas` devices of one UUID)."""
    want = gpu_request(pod)
    free: list[str] = []
    for g in devices.get("gpus") or []:
        free += [g["uuid"]] * max(0, int(devices.get("replicas", 1)) - held[g["uuid"]])
    return free[:want] if want else []


def ending(pod: dict[str, Any], arch: str, workload: dict[str, Any], images: dict[str, Any], devices: dict[str, Any],
           allocated: list[str]) -> Ending | None:
    """How the pod's containers end once started on a node of `arch` holding the `allocated` GPU UUIDs; None when they
    never start (rejected at admission, no sandbox, an image the registry lacks, a create error)."""
    spec = pod.get("spec") or {}
    mains = spec.get("containers") or []
    gpu = gpu_request(pod) > 0
    outcome = workload.get("outcome", "succeeded") if gpu else workload.get("cpu_outcome", "running")
    failure = failure_of(workload, gpu)
    if failure.get("reason") == "UnexpectedAdmissionError" or failure.get("event") == "FailedCreatePodSandBox":
        return None
    entries = [images.get(catalogue.normalize(c.get("image", ""))) for c in mains]
    if not mains or any(e is None for e in entries):
        return None
    foreign = next((e for e in entries if arch not in (e or {}).get("arch", [arch])), None)
    if foreign is not None and not failure:  # the image has no variant for this node: its entrypoint cannot run
        outcome, failure = "failed", {"exit_code": 255, "log": catalogue.exec_format_error(foreign)}
    if failure.get("waiting"):
        return None
    ran = None
    if not failure and len(mains) == 1:
        ran = containers.run_shell(mains[0], entries[0] or {}, containers.visible(devices, allocated, mains[0], entries[0] or {}))
    if ran is not None:  # a `sh -c` the simulation runs: it ends with its own exit status, whatever the outcome
        return Ending("succeeded" if ran[1] == 0 else "failed", ran[1], ran[0])
    if outcome == "running":
        return Ending("running", 0, "")
    if failure:
        return Ending("failed", int(failure.get("exit_code", 1)), failure.get("log") or "")
    return Ending("succeeded", 0, workload.get("log", (entries[0] or {}).get("log", "")) or "")
