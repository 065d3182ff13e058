"""REST routing and verbs of the simulated API server: discovery, get/list/watch, create/delete, pod logs."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from pytest_dgxspark.testbed import resources
from pytest_dgxspark.testbed.podshape import SUFFIX_ALPHABET, ts
from pytest_dgxspark.testbed.resources import Resource
from pytest_dgxspark.testbed.store import SelectorError, field_value, parse_fields, parse_labels

if TYPE_CHECKING:
    from pytest_dgxspark.testbed.apiserver import Handler

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    from pytest_dgxspark.testbed.apiserver import status_body

    return status_body(code, reason, message, details)


def _not_found(h: Handler) -> None:
    h.send_json(404, _status(404, "NotFound", "the server could not find the requested resource", {}))


def _qualified(r: Resource) -> str:
    return f"{r.plural}.{r.group}" if r.group else r.plural


def _details(r: Resource, name: str) -> dict[str, Any]:
    return {"name": name, **({"group": r.group} if r.group else {}), "kind": r.plural}


def dispatch(h: Handler, method: str, path: str, query: dict[str, str], body: bytes) -> None:
    path = path.rstrip("/") or "/"
    if method == "GET":
        doc = _discovery(h, path)
        if doc is not None:
            return
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        gv, rest = parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        return _not_found(h)
    known = resources.BY_GROUP_VERSION.get(gv)
    if not known or not rest:
        return _not_found(h)
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] in known and known[rest[2]].namespaced:
        namespace, rest = rest[1], rest[2:]
    r = known.get(rest[0])
    if r is None or (namespace is not None and not r.namespaced):
        return _not_found(h)
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3 or (sub and not (sub == "log" and r.plural == "pods" and method == "GET")):
        return _not_found(h)
    if method == "GET" and sub == "log":
        return _pod_log(h, namespace or "", name or "", query)
    if method == "GET" and name:
        return _get(h, r, namespace, name)
    if method == "GET":
        return (_watch if query.get("watch") in ("true", "1") else _list)(h, r, namespace, query)
    if method == "POST" and not name and r.writable:
        return _create(h, r, namespace, body)
    if method == "DELETE" and name and r.writable:
        return _delete(h, r, namespace, name, query, body)
    h.send_json(405, _status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}))


def _discovery(h: Handler, path: str) -> bool | None:
    settings = h.server.settings
    if path == "/version":
        version = settings.get("version", "v1.34.10+rke2r1")
        major, minor = version.lstrip("v").split(".")[:2]
        h.send_json(200, {"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
                          "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1), "gitVersion": version,
                          "gitCommit": "3f2b9c7a1d0e5b6c8a4f2e1d9c0b7a6e5d4c3b2a", "gitTreeState": "clean",
                          "buildDate": "2025-09-10T18:29:41Z", "goVersion": "go1.24.6 X:boringcrypto", "compiler": "gc",
                          "platform": "linux/arm64"})
    elif path in ("/healthz", "/readyz", "/livez"):
        h.send_text(200, "ok")
    elif path == "/api":
        h.send_json(200, resources.api_versions())
    elif path == "/apis":
        h.send_json(200, resources.group_list())
    elif path == "/api/v1" or (path.startswith("/apis/") and path.count("/") == 3):
        doc = resources.resource_list(path.removeprefix("/api/").removeprefix("/apis/"))
        if doc is None:
            _not_found(h)
        else:
            h.send_json(200, doc)
    elif path.startswith("/apis/") and path.count("/") == 2:
        doc = resources.group(path.split("/")[2])
        if doc is None:
            _not_found(h)
        else:
            h.send_json(200, doc)
    else:
        return None
    return True


def _wants_table(h: Handler) -> bool:
    return "as=Table" in (h.headers.get("Accept") or "")


def _full(r: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": r.group_version, "kind": r.kind, **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}


def _get(h: Handler, r: Resource, namespace: str | None, name: str) -> None:
    obj = h.server.store.get(r.key, namespace or "", name)
    if obj is None:
        h.send_json(404, _status(404, "NotFound", f'{_qualified(r)} "{name}" not found', _details(r, name)))
    elif _wants_table(h):
        h.send_json(200, resources.table(r, [obj], h.server.store.resource_version, time.time()),
                    "application/json;as=Table;v=v1;g=meta.k8s.io")
    else:
        h.send_json(200, _full(r, obj))


def _matcher(r: Resource, query: dict[str, str]) -> Any:
    labels = parse_labels(query.get("labelSelector", ""))
    fields = parse_fields(query.get("fieldSelector", ""), r.plural)

    def match(obj: dict[str, Any]) -> bool:
        have = (obj.get("metadata") or {}).get("labels") or {}
        if not all(req.matches(have) for req in labels):
            return False
        return all((field_value(obj, f) == v) == (op == "=") for f, op, v in fields)

    return match


def _list(h: Handler, r: Resource, namespace: str | None, query: dict[str, str]) -> None:
    try:
        match = _matcher(r, query)
    except SelectorError as exc:
        return h.send_json(400, _status(400, "BadRequest", str(exc)))
    items, rv = h.server.store.list(r.key, namespace)
    items = [o for o in items if match(o)]
    if _wants_table(h):
        return h.send_json(200, resources.table(r, items, rv, time.time()), "application/json;as=Table;v=v1;g=meta.k8s.io")
    if r.builtin:
        items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
    else:
        items = [_full(r, o) for o in items]
    h.send_json(200, {"kind": f"{r.kind}List", "apiVersion": r.group_version, "metadata": {"resourceVersion": str(rv)},
                      "items": items})


def _watch(h: Handler, r: Resource, namespace: str | None, query: dict[str, str]) -> None:
    try:
        match = _matcher(r, query)
    except SelectorError as exc:
        return h.send_json(400, _status(400, "BadRequest", str(exc)))
    store = h.server.store
    deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
    start_rv = query.get("resourceVersion", "")
    h.start_stream()

    def send(kind: str, obj: dict[str, Any]) -> None:
        h.chunk(json.dumps({"type": kind, "object": _full(r, obj)}).encode() + b"\n")

    if start_rv in ("", "0"):
        items, rv = store.list(r.key, namespace)
        for obj in items:
            if match(obj):
                send("ADDED", obj)
    else:
        rv = int(start_rv)
    while time.monotonic() < deadline:
        events, gone = store.events_since(rv, min(1.0, max(0.0, deadline - time.monotonic())))
        if gone:
            h.chunk(json.dumps({"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {rv} "
                                                                    f"({store.resource_version})")}).encode() + b"\n")
            break
        for event_rv, key, kind, obj in events:
            rv = event_rv
            if key == r.key and (namespace is None or obj["metadata"].get("namespace") == namespace) and match(obj):
                send(kind, obj)
    h.chunk(b"")


def _admission(h: Handler, r: Resource, namespace: str | None, obj: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    store, md = h.server.store, obj.setdefault("metadata", {})
    if not md.get("name") and md.get("generateName"):
        md["name"] = md["generateName"] + "".join(random.choice(SUFFIX_ALPHABET) for _ in range(5))
    if not md.get("name"):
        return 422, _status(422, "Invalid", f'{r.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
                            {"kind": r.kind, "causes": [{"reason": "FieldValueRequired", "message": "Required value: name or "
                                                         "generateName is required", "field": "metadata.name"}]})
    name = md["name"]
    if namespace is not None:
        ns = store.get("/namespaces", "", namespace)
        if ns is None:
            return 404, _status(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"})
        if ns.get("status", {}).get("phase") == "Terminating":
            return 403, _status(403, "Forbidden", f'{r.plural} "{name}" is forbidden: unable to create new content in namespace '
                                f"{namespace} because it is being terminated", _details(r, name))
        md["namespace"] = namespace
    runtime_class = (obj.get("spec") or {}).get("runtimeClassName")
    if r.plural == "pods" and runtime_class and store.get("node.k8s.io/runtimeclasses", "", runtime_class) is None:
        return 403, _status(403, "Forbidden", f'pods "{name}" is forbidden: pod rejected: RuntimeClass "{runtime_class}" not found',
                            _details(r, name))
    if store.get(r.key, namespace or "", name) is not None:
        return 409, _status(409, "AlreadyExists", f'{_qualified(r)} "{name}" already exists', _details(r, name))
    return None


def _create(h: Handler, r: Resource, namespace: str | None, body: bytes) -> None:
    try:
        obj = json.loads(body or b"{}")
    except ValueError as exc:
        return h.send_json(400, _status(400, "BadRequest", f"the object provided is unrecognized: {exc}"))
    refused = _admission(h, r, namespace, obj)
    if refused:
        return h.send_json(*refused)
    md = obj["metadata"]
    md.update({"uid": str(uuid.uuid4()), "creationTimestamp": ts(time.time())})
    obj.update({"apiVersion": r.group_version, "kind": r.kind})
    if r.plural == "namespaces":
        md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
        obj["spec"], obj["status"] = {"finalizers": ["kubernetes"]}, {"phase": "Active"}
    elif r.plural == "pods":
        _pod_defaults(obj)
    created = h.server.store.put(r.key, obj)
    h.send_json(201, created)
    if r.plural == "pods":
        h.server.kubelet.admit(created)


def _pod_defaults(pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    for key, value in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"), ("schedulerName", "default-scheduler"),
                       ("terminationGracePeriodSeconds", 30), ("serviceAccountName", "default"), ("serviceAccount", "default"),
                       ("priority", 0), ("enableServiceLinks", True), ("preemptionPolicy", "PreemptLowerPriority"),
                       ("securityContext", {})):
        spec.setdefault(key, value)
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        c.setdefault("imagePullPolicy", "Always" if c.get("image", "").endswith(":latest") or ":" not in c.get("image", "") else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})
    limits = [c["resources"].get("limits") for c in spec.get("containers", [])]
    qos = "Guaranteed" if limits and all(limits) else ("Burstable" if any(c["resources"] for c in spec.get("containers", [])) else "BestEffort")
    pod["status"] = {"phase": "Pending", "qosClass": qos}


def _delete(h: Handler, r: Resource, namespace: str | None, name: str, query: dict[str, str], body: bytes) -> None:
    store = h.server.store
    if r.plural == "namespaces" and name in PROTECTED_NAMESPACES:
        return h.send_json(403, _status(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                                        _details(r, name)))
    try:
        options = json.loads(body) if body else {}
    except ValueError:
        options = {}
    grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    now = ts(time.time())

    def mark(obj: dict[str, Any]) -> None:
        obj["metadata"]["deletionTimestamp"] = now
        if r.plural == "pods":
            obj["metadata"]["deletionGracePeriodSeconds"] = int(grace) if grace is not None else 30
        else:
            obj["status"] = {"phase": "Terminating"}

    marked = store.update(r.key, namespace or "", name, mark)
    if marked is None:
        return h.send_json(404, _status(404, "NotFound", f'{_qualified(r)} "{name}" not found', _details(r, name)))
    h.send_json(200, marked)
    delay = 0.0 if grace is not None and int(grace) == 0 else 0.2
    threading.Thread(target=_finish_delete, args=(h.server, r, namespace or "", name, delay), daemon=True).start()


def _finish_delete(server: Any, r: Resource, namespace: str, name: str, delay: float) -> None:
    time.sleep(delay)
    store = server.store
    if r.plural == "namespaces":
        for other in resources.RESOURCES:
            if other.namespaced:
                items, _ = store.list(other.key, name)
                for obj in items:
                    store.delete(other.key, name, obj["metadata"]["name"])
        time.sleep(0.1)
    store.delete(r.key, namespace, name)


def _pod_log(h: Handler, namespace: str, name: str, query: dict[str, str]) -> None:
    pod = h.server.store.get("/pods", namespace, name)
    if pod is None:
        return h.send_json(404, _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    mains = [c["name"] for c in spec.get("containers") or []]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    container = query.get("container") or ""
    if not container:
        if len(mains) != 1:
            extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
            return h.send_json(400, _status(400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: "
                                            f"[{' '.join(mains)}]{extra}"))
        container = mains[0]
    if container not in mains + inits:
        return h.send_json(400, _status(400, "BadRequest", f"container {container} is not valid for pod {name}"))
    if not spec.get("nodeName"):  # kube-apiserver pod/strategy.go LogLocation: nowhere to proxy the log from
        return h.send_json(400, _status(400, "BadRequest", f"pod {name} does not have a host assigned"))
    statuses = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    state = next((s.get("state") or {} for s in statuses if s.get("name") == container), {})
    if not state or ("waiting" in state and not next((s for s in statuses if s.get("name") == container), {}).get("lastState")):
        why = (state.get("waiting") or {}).get("reason", "ContainerCreating")
        kind = "initializing" if why == "PodInitializing" else "waiting to start"
        return h.send_json(400, _status(400, "BadRequest", f'container "{container}" in pod "{name}" is {kind}: {why}'))
    text = h.server.logs.get(f"{namespace}/{name}/{container}", "")
    tail = query.get("tailLines")
    if tail not in (None, ""):
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail):]) if int(tail) > 0 else ""
    h.send_text(200, text)
