"""Write a scenario's world (objects.build_workload) through the real API: CRDs, objects, then their /status; and the
kwok configuration that moves the pods created later (the CUDA sample) and serves every container log."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import yaml

from pytest_dgxspark.testbed import bootstrap, crdschemas, resources, runtime
from pytest_dgxspark.testbed import images as catalogue
from pytest_dgxspark.testbed.kwokrun import EXIT_ANNOTATION
from pytest_dgxspark.testbed.kwokrun import cri_log as _cri_log
from pytest_dgxspark.testbed.realapi import Api, ApiError
from pytest_dgxspark.testbed.world import PREVIOUS, World

CRD_DIR = crdschemas.CRD_DIR
GPU = "nvidia.com/gpu"
# what the server sets on every write; a world object's own values would be refused or ignored
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
              "deletionTimestamp", "deletionGracePeriodSeconds")
# owners before what they own (ownerReferences carry the owner's real uid): custom resources (ClusterPolicy, HelmChart)
# come after the first group, before the workloads
ORDER = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Secret",
         "PriorityClass", "RuntimeClass", "Node", "Lease", "Service", "Endpoints", "*", "Deployment", "DaemonSet",
         "StatefulSet", "ReplicaSet", "Job", "Pod", "Event")
MERGE_PATCH = "application/merge-patch+json"


class WorldError(RuntimeError):
    """The real API refused part of the scenario's world; the message names every object and the server's reason."""


def crds(world: World) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions the scenario serves: ClusterPolicy from the GPU Operator's own CRD (trimmed, see
    controlplane/crds/trim.py), HelmChart/HelmChartConfig with helm-controller's fields (crdschemas.py), CiliumNode open."""
    absent = set(world.settings.get("crds_absent") or [])
    out = []
    for r in resources.RESOURCES:
        if r.builtin or r.plural in absent:
            continue
        crd = crdschemas.sourced_crd(r.plural, r.group) or resources.crd(r)
        crd = {k: v for k, v in crd.items() if k != "status"}
        out.append(crd)
    return out


class Discovery:
    """apiVersion/kind -> (path prefix, plural, namespaced, has /status), read from the real server's discovery."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._by_gv: dict[str, dict[str, tuple[str, bool, bool]]] = {}

    def _load(self, group_version: str) -> dict[str, tuple[str, bool, bool]]:
        if group_version not in self._by_gv:
            base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            listing = self.api.call("GET", base)
            names = {r["name"] for r in listing.get("resources", [])}
            self._by_gv[group_version] = {r["kind"]: (r["name"], r["namespaced"], f"{r['name']}/status" in names)
                                          for r in listing.get("resources", []) if "/" not in r["name"]}
        return self._by_gv[group_version]

    def forget(self, group_version: str) -> None:
        self._by_gv.pop(group_version, None)

    def paths(self, obj: dict[str, Any]) -> tuple[str, str, bool]:
        """(collection path, object path, has /status) of a world object."""
        gv, kind = obj["apiVersion"], obj["kind"]
        found = self._load(gv).get(kind)
        if found is None:
            raise WorldError(f"{kind} {obj['metadata'].get('name')}: the real API serves no {kind} in {gv}")
        plural, namespaced, status = found
        base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        ns = obj["metadata"].get("namespace") or ("default" if namespaced else None)
        collection = f"{base}/namespaces/{ns}/{plural}" if namespaced else f"{base}/{plural}"
        return collection, f"{collection}/{obj['metadata']['name']}", status


def _rank(obj: dict[str, Any]) -> int:
    kind = obj.get("kind", "")
    return ORDER.index(kind if kind in ORDER else "*")


def _for_create(obj: dict[str, Any], uids: dict[str, str]) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    body.pop("status", None)
    md = body.setdefault("metadata", {})
    for key in SERVER_SET:
        md.pop(key, None)
    for ref in md.get("ownerReferences") or []:
        ref["uid"] = uids.get(ref.get("uid", ""), ref.get("uid", ""))
    if body.get("kind") == "Event" and "involvedObject" in body:
        inv = body["involvedObject"]
        inv["uid"] = uids.get(inv.get("uid", ""), inv.get("uid", ""))
        inv.pop("resourceVersion", None)
    spec = body.get("spec") or {}
    if body.get("kind") == "Pod":
        labels = md.get("labels") or {}
        for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):  # a Job's pod names the Job's real uid
            if key in labels:
                labels[key] = uids.get(labels[key], labels[key])
        spec.pop("priority", None)  # the Priority admission computes it from priorityClassName
        spec.pop("preemptionPolicy", None)
    if body.get("kind") == "Job":  # the server generates the selector and the template's controller-uid labels
        spec.pop("selector", None)
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        for key in ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"):
            labels.pop(key, None)
    return body


def _status_body(created: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(created)
    status = copy.deepcopy(obj["status"])
    if obj.get("kind") == "Pod":
        status.pop("qosClass", None)  # computed by the server from the resources; immutable
        status["qosClass"] = (created.get("status") or {}).get("qosClass", "BestEffort")
    body["status"] = status
    return body


def write(api: Api, world: World, scenario: str) -> dict[str, str]:
    """CRDs (until Established), then every object, then its /status; returns world uid -> real uid.
    What the stand-in adds when it serves the world is added here too (bootstrap.controller_marks: mirror-pod and Job
    labels; the scenario's annotation on every Node). WorldError lists every object the server refused."""
    discovery = Discovery(api)
    objects = copy.deepcopy(world.objects)
    bootstrap.controller_marks(objects)
    for obj in objects:
        if obj.get("kind") == "Node":
            bootstrap.identify(obj, scenario)
    for crd in crds(world):
        api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    _wait_established(api, [c["metadata"]["name"] for c in crds(world)])
    uids: dict[str, str] = {}
    problems: list[str] = []
    accounts: set[tuple[str, str]] = set()
    for obj in sorted(objects, key=_rank):
        md = obj.get("metadata") or {}
        where = f"{obj.get('kind')} {md.get('namespace', '') + '/' if md.get('namespace') else ''}{md.get('name')}"
        try:
            if obj.get("kind") == "Pod":
                _ensure_account(api, md.get("namespace", "default"), (obj.get("spec") or {}).get("serviceAccountName")
                                or "default", accounts)
            created = _create(api, discovery, obj, uids)
            if md.get("uid"):
                uids[md["uid"]] = created["metadata"]["uid"]
            _, path, has_status = discovery.paths(obj)
            if obj.get("status") and has_status and obj.get("kind") != "Namespace":
                _put_status(api, path, created, obj)
        except (ApiError, WorldError) as exc:
            problems.append(f"{where}: {exc}")
    if problems:
        raise WorldError("the real API server refused part of the scenario's world:\n  " + "\n  ".join(problems))
    return uids


def _put_status(api: Api, path: str, created: dict[str, Any], obj: dict[str, Any], attempts: int = 5) -> None:
    """PUT the object's /status; on 409 (a controller changed it since: the node lifecycle controller's taints on a
    kept plane, whose controller manager runs while the world is written) again on its latest version."""
    current = created
    for attempt in range(attempts):
        status, answer = api.request("PUT", f"{path}/status", _status_body(current, obj))
        if status in (200, 201):
            return
        if status != 409 or attempt == attempts - 1:
            message = answer.get("message", answer) if isinstance(answer, dict) else answer
            raise ApiError("PUT", f"{path}/status", status, str(message)[:1500])
        current = api.call("GET", path)


def wait_nodes_settled(api: Api, world: World, timeout_s: float = 30.0) -> None:
    """The node lifecycle controller has taken the not-ready taint (NodeTaint admission's) off every Node the world
    says is Ready, as a kubelet's first Ready status makes it do on a real cluster."""
    ready = {o["metadata"]["name"] for o in world.objects if o.get("kind") == "Node"
             and any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in (o.get("status") or {}).get("conditions") or [])}
    declared = {o["metadata"]["name"]: {(t.get("key"), t.get("effect")) for t in (o.get("spec") or {}).get("taints") or []}
                for o in world.objects if o.get("kind") == "Node"}
    deadline = time.monotonic() + timeout_s
    while True:
        tainted = sorted(n["metadata"]["name"] for n in api.call("GET", "/api/v1/nodes").get("items") or []
                         if n["metadata"]["name"] in ready
                         and any(t.get("key") == "node.kubernetes.io/not-ready"
                                 and (t.get("key"), t.get("effect")) not in declared.get(n["metadata"]["name"], set())
                                 for t in (n.get("spec") or {}).get("taints") or []))
        if not tainted:
            return
        if time.monotonic() > deadline:
            raise WorldError(f"the node lifecycle controller left the not-ready taint on Ready nodes {', '.join(tainted)} "
                             f"for {timeout_s:.0f} s; see kube-controller-manager.log")
        time.sleep(0.1)


def _create(api: Api, discovery: Discovery, obj: dict[str, Any], uids: dict[str, str]) -> dict[str, Any]:
    collection, path, _ = discovery.paths(obj)
    body = _for_create(obj, uids)
    status, answer = api.request("POST", collection, body)
    if status == 409 and obj.get("kind") in ("Namespace", "ServiceAccount"):  # made by the server or a controller
        md = body["metadata"]
        patch = {"metadata": {k: md[k] for k in ("labels", "annotations") if md.get(k)}}
        return api.call("PATCH", path, patch, content_type=MERGE_PATCH)
    if status not in (200, 201):
        message = answer.get("message", answer) if isinstance(answer, dict) else answer
        raise ApiError("POST", collection, status, str(message)[:1500])
    return answer


def _ensure_account(api: Api, namespace: str, name: str, done: set[tuple[str, str]]) -> None:
    """The pod's ServiceAccount (its chart made it on a real cluster; the ServiceAccount admission needs it)."""
    if (namespace, name) in done:
        return
    api.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}, ok=(201, 409))
    done.add((namespace, name))


def _wait_established(api: Api, names: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            crd = api.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                pending.discard(name)
        if pending:
            time.sleep(0.2)
    if pending:
        raise WorldError(f"CRDs not Established within {timeout_s:.0f} s: {', '.join(sorted(pending))}")


def wait_controller_manager(api: Api, timeout_s: float = 60.0) -> None:
    """The controller manager acts once its namespace controller has its own ServiceAccount (it runs each controller
    under one: --use-service-account-credentials)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _ = api.request("GET", "/api/v1/namespaces/kube-system/serviceaccounts/namespace-controller")
        if status == 200:
            return
        time.sleep(0.3)
    raise WorldError(f"kube-controller-manager made no kube-system/namespace-controller ServiceAccount within {timeout_s:.0f} s; "
                     "see kube-controller-manager.log")


# --- kwok: container logs and the stages of pods created after bring-up ---------------------------------------------

def _aliases(reference: str) -> list[str]:
    """Every spelling of an image reference a pod may use (busybox:1.36, library/busybox:1.36, docker.io/...)."""
    full = catalogue.normalize(reference)
    out = {reference, full}
    if full.startswith("docker.io/"):
        short = full.removeprefix("docker.io/")
        out.add(short)
        if short.startswith("library/"):
            out.add(short.removeprefix("library/"))
    return sorted(out)


def _expr(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": values} if values is not None else {})}


FRESH = [_expr(".metadata.deletionTimestamp", "DoesNotExist"), _expr(".status.phase", "In", ["Pending"]),
         _expr(".spec.nodeName", "Exists"), _expr(".status.containerStatuses", "DoesNotExist")]
GPU_KEY = '.spec.containers.[].resources.limits["nvidia.com/gpu"]'
_CONDITIONS = """conditions:
      - {{type: PodReadyToStartContainers, status: "True", lastProbeTime: null, lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: Initialized, status: "True", lastProbeTime: null, lastTransitionTime: {{{{ $now | Quote }}}}}}
      - {{type: Ready, status: "{ready}", lastProbeTime: null, lastTransitionTime: {{{{ $now | Quote }}}}{extra}}}
      - {{type: ContainersReady, status: "{ready}", lastProbeTime: null, lastTransitionTime: {{{{ $now | Quote }}}}{extra}}}
      - {{type: PodScheduled, status: "True", lastProbeTime: null, lastTransitionTime: {{{{ $now | Quote }}}}}}"""


def _status(phase: str, containers: str, ready: bool, extra: str = "", completed: bool = False) -> str:
    reason = ', reason: PodCompleted' if completed else (', reason: ContainersNotReady' if not ready else "")
    return ("{{ $now := Now }}\n"
            f"phase: {phase}\n"
            "hostIP: {{ NodeIPWith .spec.nodeName | Quote }}\nhostIPs: [{ip: {{ NodeIPWith .spec.nodeName | Quote }}}]\n"
            "podIP: {{ NodeIPWith .spec.nodeName | Quote }}\npodIPs: [{ip: {{ NodeIPWith .spec.nodeName | Quote }}}]\n"
            "startTime: {{ $now | Quote }}\n"
            + _CONDITIONS.replace("\n      ", "\n").format(ready="True" if ready else "False", extra=reason) + "\n"
            + extra + "containerStatuses:\n{{ range .spec.containers }}\n- name: {{ .name | Quote }}\n"
            "  image: {{ .image | Quote }}\n  imageID: {{ .image | Quote }}\n" + containers + "{{ end }}\n")


RUNNING = ('  containerID: "containerd://{{ .name }}"\n  ready: true\n  started: true\n  restartCount: 0\n'
           "  state: {running: {startedAt: {{ $now | Quote }}}}\n")


def _terminated(code: str, reason: str) -> str:
    return ('  containerID: "containerd://{{ .name }}"\n  ready: false\n  started: false\n  restartCount: 0\n'
            f"  state: {{terminated: {{exitCode: {code}, reason: {reason}, startedAt: {{{{ $now | Quote }}}}, "
            "finishedAt: {{ $now | Quote }}}}\n")


def _waiting(reason: str, message: str = "") -> str:
    msg = f", message: {yaml.safe_dump(message, default_style=chr(39)).strip()}" if message else ""
    return f"  ready: false\n  started: false\n  restartCount: 0\n  state: {{waiting: {{reason: {reason}{msg}}}}}\n"


def _stage(name: str, selector: list[dict[str, Any]], status: str | None, event: tuple[str, str, str] | None = None,
           delay_ms: int = 300, delete: bool = False) -> dict[str, Any]:
    nxt: dict[str, Any] = {"delete": delete}
    if status is not None:
        nxt["statusTemplate"] = status
    if event is not None:
        nxt["event"] = {"type": event[0], "reason": event[1], "message": event[2]}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"}, "selector": {"matchExpressions": selector},
                     "delay": {"durationMilliseconds": delay_ms}, "next": nxt}}


def _lifecycle(tag: str, group: list[dict[str, Any]], failure: dict[str, Any]) -> list[dict[str, Any]]:
    """The stages of one kind of pod (GPU or not, image known) up to its start, as kubelet.Kubelet walks it on the
    stand-in; how it ends is _ending_stages'."""
    fresh = FRESH + group
    if failure.get("reason") == "UnexpectedAdmissionError":
        status = ("{{ $now := Now }}\nphase: Failed\nreason: UnexpectedAdmissionError\n"
                  f"message: {yaml.safe_dump(failure['message'], default_style=chr(39)).strip()}\nstartTime: {{{{ $now | Quote }}}}\n")
        return [_stage(f"{tag}-admission-error", fresh, status,
                       ("Warning", "UnexpectedAdmissionError", failure["message"].removeprefix("Pod was rejected: ")))]
    if failure.get("event") == "FailedCreatePodSandBox":
        return [_stage(f"{tag}-sandbox-error", fresh, _status("Pending", _waiting("ContainerCreating"), False),
                       ("Warning", "FailedCreatePodSandBox", failure["message"]))]
    if failure.get("waiting"):
        return [_stage(f"{tag}-create-error", fresh, _status("Pending", _waiting(failure["waiting"], failure["message"]), False),
                       ("Warning", "Failed", f"Error: {failure['message']}"))]
    return [_stage(f"{tag}-start", fresh, _status("Running", RUNNING, True), ("Normal", "Started", "Started container"))]


def _ending_stages(run_ms: int) -> list[dict[str, Any]]:
    """How a started container ends, once kwokrun.py has annotated its pod with the exit code it decided
    (runtime.ending): Succeeded or Failed where the pod is not restarted, CrashLoopBackOff where it is."""
    code = f'{{{{ index .metadata.annotations "{EXIT_ANNOTATION}" }}}}'
    running = [_expr(".metadata.deletionTimestamp", "DoesNotExist"), _expr(".status.phase", "In", ["Running"]),
               _expr(".status.containerStatuses.[].state.running.startedAt", "Exists")]
    exit_key = f'.metadata.annotations["{EXIT_ANNOTATION}"]'
    ok, failed = [_expr(exit_key, "In", ["0"])], [_expr(exit_key, "Exists"), _expr(exit_key, "NotIn", ["0"])]
    policy = ".spec.restartPolicy"
    stages = [
        _stage("run-succeeded", running + ok + [_expr(policy, "In", ["Never", "OnFailure"])],
               _status("Succeeded", _terminated("0", "Completed"), False, completed=True), delay_ms=run_ms),
        _stage("run-failed", running + failed + [_expr(policy, "In", ["Never"])],
               _status("Failed", _terminated(code, "Error"), False, completed=True), delay_ms=run_ms)]
    for name, when, reason in (("run-restarted-completed", ok + [_expr(policy, "In", ["Always"])], "Completed"),
                               ("run-restarted-error", failed + [_expr(policy, "In", ["Always", "OnFailure"])], "Error")):
        back_off = ('  ready: false\n  started: false\n  restartCount: 1\n'
                    "  state: {waiting: {reason: CrashLoopBackOff, message: back-off 10s restarting failed container}}\n"
                    f"  lastState: {{terminated: {{exitCode: {code}, reason: {reason}, startedAt: {{{{ $now | Quote }}}}, "
                    "finishedAt: {{ $now | Quote }}}}\n")
        stages.append(_stage(name, running + when, _status("Running", back_off, False),
                             ("Warning", "BackOff", "Back-off restarting failed container"), delay_ms=run_ms))
    return stages


def kwok_config(world: World, directory: Path) -> Path:
    """directory/controlplane/kwok.yaml: the pod stages the scenario's workload settings call for and, for a pod created
    later that kwokrun.py gave no log of its own, an empty one (the scenario's pods' logs: log_objects)."""
    workload = world.settings.get("workload") or {}
    known = workload.get("images") or {}
    logs_dir = directory / "controlplane" / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    docs: list[dict[str, Any]] = []
    step_ms = int(float(workload.get("step_s", 0.15)) * 1000)
    run_ms = int(float(workload.get("run_s", workload.get("step_s", 0.15) * 2)) * 1000)
    aliases = sorted({a for ref in known for a in _aliases(ref)})
    for tag, group, failure in (("gpu", [_expr(GPU_KEY, "Exists")], runtime.failure_of(workload, True)),
                                ("cpu", [_expr(GPU_KEY, "DoesNotExist")], runtime.failure_of(workload, False))):
        image_ok = [_expr(".spec.containers.[0].image", "In", aliases)] if aliases else []
        for stage in _lifecycle(tag, group + image_ok, failure):
            stage["spec"]["delay"]["durationMilliseconds"] = max(stage["spec"]["delay"]["durationMilliseconds"], step_ms)
            docs.append(stage)
        if aliases:  # a reference the registry does not know: ErrImagePull (kubelet.Kubelet._pull_fails)
            unknown = FRESH + group + [_expr(".spec.containers.[0].image", "NotIn", aliases)]
            docs.append(_stage(f"{tag}-pull-error", unknown,
                               _status("Pending", _waiting("ErrImagePull", "failed to pull and unpack image: not found"), False),
                               ("Warning", "Failed", "Error: ErrImagePull")))
    docs += _ending_stages(max(run_ms, step_ms))
    # kwok manages nodes only through a node stage; the scenario's Node status is the testbed's, so this one never
    # matches (no kwok heartbeat rewrites the conditions; kwok's node lease says the node lives)
    docs.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "node-as-written"},
                 "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"}, "selector": {"matchExpressions": [
                     _expr('.metadata.annotations["testbed.dgxspark.io/kwok-never"]', "Exists")]},
                          "next": {"statusTemplate": "{}"}}})
    docs.append(_stage("pod-delete", [_expr(".metadata.deletionTimestamp", "Exists"), _expr(".metadata.finalizers", "DoesNotExist")],
                       None, delete=True, delay_ms=200))
    # a pod kwokrun.py gave no log (not started yet, never started, running until deleted) shows none, as the
    # stand-in's kubelet serves it; kwokrun.py's Logs object names each container's log once it is decided
    (logs_dir / "later.log").write_text("")
    docs.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "later"},
                 "spec": {"logs": [{"logsFile": str(logs_dir / "later.log"), "previousLogsFile": str(logs_dir / "later.log")}]}})
    path = directory / "controlplane" / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False, width=200))
    return path


LOGS_CRD = CRD_DIR / "logs.kwok.x-k8s.io.yaml"  # kwok's own (kwok --enable-crds=Logs watches these objects)


def log_objects(world: World, directory: Path) -> list[dict[str, Any]]:
    """kwok Logs objects serving every scenario pod's container logs (current and previous), each written to
    directory/controlplane/logs as a CRI log file."""
    logs_dir = directory / "controlplane" / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    (logs_dir / "empty.log").write_text("")
    docs: list[dict[str, Any]] = []
    per_pod: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for key, text in sorted(world.logs.items()):
        previous = key.endswith(PREVIOUS)
        ns, pod, container = key.removesuffix(PREVIOUS).split("/", 2)
        path = logs_dir / (key.replace("/", "_").replace("#", "-") + ".log")
        path.write_text(_cri_log(text))
        entries = per_pod.setdefault((ns, pod), [])
        entry = next((e for e in entries if e["containers"] == [container]), None)
        if entry is None:
            entry = {"containers": [container]}
            entries.append(entry)
        entry["previousLogsFile" if previous else "logsFile"] = str(path)
    for (ns, pod), entries in per_pod.items():
        for entry in entries:
            entry.setdefault("logsFile", str(logs_dir / "empty.log"))
        docs.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod, "namespace": ns},
                     "spec": {"logs": entries}})
    return docs


def install_logs_crd(api: Api) -> None:
    """kwok's Logs CRD, until Established."""
    crd = yaml.safe_load(LOGS_CRD.read_text())
    api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))
    _wait_established(api, [crd["metadata"]["name"]])


def write_logs(api: Api, world: World, directory: Path, *, crd: bool = True) -> None:
    """kwok's Logs CRD (unless `crd` is False: a kept plane has it), then the scenario pods' Logs objects."""
    if crd:
        install_logs_crd(api)
    problems = []
    for doc in log_objects(world, directory):
        md = doc["metadata"]
        try:
            api.call("POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{md['namespace']}/logs", doc)
        except ApiError as exc:
            problems.append(f"Logs {md['namespace']}/{md['name']}: {exc}")
    if problems:
        raise WorldError("the real API server refused the scenario pods' logs:\n  " + "\n  ".join(problems))
