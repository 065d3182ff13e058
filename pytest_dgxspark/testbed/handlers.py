"""REST routing and the reading verbs of the simulated API server: discovery, get, list (in chunks), watch, pod logs."""

from __future__ import annotations

import json
import time
import traceback
from typing import Any

from pytest_dgxspark.testbed import deletes, openapi, paging, printing, resources, reviews, tokens, writes
from pytest_dgxspark.testbed.reply import (
    ApiError,
    Exchange,
    bad_request,
    method_not_allowed,
    no_route,
    not_found,
    status_body,
)
from pytest_dgxspark.testbed.resources import Resource
from pytest_dgxspark.testbed.store import SelectorError, field_value, parse_fields, parse_labels

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def dispatch(h: Exchange, method: str, path: str, query: dict[str, str], body: bytes) -> None:
    """Answer one authenticated request; every refusal is an ApiError answered with its Status."""
    try:
        _route(h, method, path, query, body)
    except ApiError as error:
        h.send_json(error.code, error.body)
    except (BrokenPipeError, ConnectionResetError):
        raise
    except Exception as exc:  # noqa: BLE001 - a testbed bug answers 500 as kube-apiserver's panic handler does, never a hang
        traceback.print_exc()
        if getattr(h, "status_sent", None) is None:
            h.send_json(500, status_body(500, "InternalError", f"Internal error occurred: {type(exc).__name__}: {exc}"))


def _route(h: Exchange, method: str, path: str, query: dict[str, str], body: bytes) -> None:
    path = path.rstrip("/") or "/"
    if method == "GET" and _discovery(h, path):
        return
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        gv, rest = parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise no_route()
    known = resources.BY_GROUP_VERSION.get(gv)
    if not known or not rest:
        raise no_route()
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] in known and known[rest[2]].namespaced:
        namespace, rest = rest[1], rest[2:]
    r = known.get(rest[0])
    if r is None or (namespace is not None and not r.namespaced) \
            or r.plural in (h.server.settings.get("crds_absent") or ()):  # its CRD is not installed: no route
        raise no_route()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3 or sub not in ("", "log", "status", "eviction", "token") \
            or (sub == "status" and not writes.has_status(r)) \
            or (sub in ("log", "eviction") and r.plural != "pods") or (sub == "token" and r.plural != "serviceaccounts"):
        raise no_route()
    if sub == "log" and method != "GET" or sub in ("eviction", "token") and method != "POST":
        raise method_not_allowed()
    if sub == "token":
        return tokens.request(h, namespace or "", name or "", writes.parse_body(h, body))
    if sub == "eviction":
        return deletes.evict(h, r, namespace or "", name or "", body, query)
    if r.virtual:
        if method != "POST" or name:
            raise method_not_allowed()
        return reviews.answer(h, r, writes.parse_body(h, body))
    if method == "GET" and sub == "log":
        return _pod_log(h, namespace or "", name or "", query)
    if method == "GET" and name:
        return _get(h, r, namespace, name)
    if method == "GET":
        return (_watch if query.get("watch") in ("true", "1") else _list)(h, r, namespace, query)
    if not r.writable or (r.namespaced and namespace is None and not name and method in ("POST", "DELETE")):
        raise method_not_allowed()
    if method == "POST" and not name:
        return writes.create(h, r, namespace, body, query)
    if method == "PUT" and name:
        return writes.replace(h, r, namespace, name, body, query, sub)
    if method == "PATCH" and name:
        return writes.patch(h, r, namespace, name, body, query, sub)
    if method == "DELETE" and name and not sub:
        return deletes.delete(h, r, namespace, name, query, body)
    if method == "DELETE" and not name:
        try:
            match = _matcher(r, query)
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        return deletes.delete_collection(h, r, namespace, query, body, match)
    raise method_not_allowed()


def _discovery(h: Exchange, path: str) -> bool:
    settings = h.server.settings
    if path == "/version":
        version = settings.get("version", "v1.34.10+rke2r1")
        major, minor = version.lstrip("v").split(".")[:2]
        h.send_json(200, {"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
                          "minCompatibilityMajor": major, "minCompatibilityMinor": str(int(minor) - 1), "gitVersion": version,
                          "gitCommit": "3f2b9c7a1d0e5b6c8a4f2e1d9c0b7a6e5d4c3b2a", "gitTreeState": "clean",
                          "buildDate": "2025-09-10T18:29:41Z", "goVersion": "go1.24.6 X:boringcrypto", "compiler": "gc",
                          "platform": "linux/arm64"})
    elif path == "/openapi/v2":
        accept = h.headers.get("Accept") or "application/json"
        if "json" not in accept and "*/*" not in accept:  # the protobuf encoding of the document is not served
            raise ApiError(406, "NotAcceptable", "only the following media types are accepted: application/json")
        h.send_bytes(200, openapi.v2_document(_version(h)).encode(), "application/json")
    elif path == "/openapi/v3":
        h.send_json(200, openapi.v3_root(_version(h)))
    elif path.startswith("/openapi/v3/"):
        text = openapi.v3_document(path.removeprefix("/openapi/v3/"), _version(h))
        if text is None:
            raise no_route()
        h.send_bytes(200, text.encode(), "application/json")
    elif path in ("/healthz", "/readyz", "/livez"):
        h.send_text(200, "ok")
    elif path == "/api":
        h.send_json(200, resources.api_versions())
    elif path == "/apis":
        h.send_json(200, resources.group_list())
    elif path == "/api/v1" or (path.startswith("/apis/") and path.count("/") == 3):
        doc = resources.resource_list(path.removeprefix("/api/").removeprefix("/apis/"))
        if doc is None:
            raise no_route()
        h.send_json(200, doc)
    elif path.startswith("/apis/") and path.count("/") == 2:
        doc = resources.group(path.split("/")[2])
        if doc is None:
            raise no_route()
        h.send_json(200, doc)
    else:
        return False
    return True


def _version(h: Exchange) -> str:
    return str(h.server.settings.get("version", "v1.34.10+rke2r1"))


def _wants_table(h: Exchange) -> bool:
    return "as=Table" in (h.headers.get("Accept") or "")


def _full(r: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": r.group_version, "kind": r.kind, **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}


def _get(h: Exchange, r: Resource, namespace: str | None, name: str) -> None:
    obj = h.server.store.get(r.key, namespace or "", name)
    if obj is None:
        raise not_found(r, name)
    if _wants_table(h):
        return h.send_json(200, printing.table(r.plural, [obj], h.server.store.resource_version, time.time()), TABLE)
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


def _list(h: Exchange, r: Resource, namespace: str | None, query: dict[str, str]) -> None:
    try:
        match = _matcher(r, query)
    except SelectorError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None
    filtered = bool(query.get("labelSelector") or query.get("fieldSelector"))
    if query.get("resourceVersionMatch") == "Exact" and query.get("resourceVersion") and not query.get("continue"):
        page = _exact(h, r, namespace, query, match)
    else:
        page = paging.list_page(h.server.store, r.key, namespace, query, match, filtered)
    if _wants_table(h):
        table = printing.table(r.plural, page.items, page.resource_version, time.time())
        table["metadata"] = page.list_meta()
        return h.send_json(200, table, TABLE)
    if r.builtin:
        items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in page.items]
    else:
        items = [_full(r, o) for o in page.items]
    meta = page.list_meta()
    if not r.builtin:  # apiextensions-apiserver's unstructured list always carries the token, empty on the last page
        meta.setdefault("continue", "")
    h.send_json(200, {"kind": f"{r.kind}List", "apiVersion": r.group_version, "metadata": meta, "items": items})


def _exact(h: Exchange, r: Resource, namespace: str | None, query: dict[str, str], match: Any) -> paging.Page:
    """resourceVersionMatch=Exact: the list as it was at that resourceVersion (410 when the history is gone)."""
    text = query["resourceVersion"]
    if not text.isdigit():
        raise bad_request(f'resourceVersion: Invalid value: "{text}": must be a non-negative integer')
    items = h.server.store.list_at(r.key, namespace, int(text))
    if items is None:
        raise ApiError(410, "Expired", f"too old resource version: {text} ({h.server.store.resource_version})")
    items = sorted((o for o in items if match(o)), key=paging.key_of)
    return paging.Page(items, int(text))


def _watch(h: Exchange, r: Resource, namespace: str | None, query: dict[str, str]) -> None:
    try:
        match = _matcher(r, query)
    except SelectorError as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None
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
            h.chunk(json.dumps({"type": "ERROR", "object": status_body(410, "Expired", f"too old resource version: {rv} "
                                                                    f"({store.resource_version})")}).encode() + b"\n")
            break
        for event_rv, key, kind, obj in events:
            rv = event_rv
            if key == r.key and (namespace is None or obj["metadata"].get("namespace") == namespace) and match(obj):
                send(kind, obj)
    h.chunk(b"")


PREVIOUS = "#previous"  # logs key suffix of a container's previous (terminated) instance: `ns/pod/container#previous`


def _pod_log(h: Exchange, namespace: str, name: str, query: dict[str, str]) -> None:
    """GET pods/log as kube-apiserver proxies it to the kubelet: per container, `previous`, `tailLines`, `limitBytes`."""
    accept = (h.headers.get("Accept") or "*/*").lower()
    if not any(kind in accept for kind in ("json", "yaml", "protobuf", "cbor", "*/*")):  # text/plain alone: 406
        raise ApiError(406, "NotAcceptable", "only the following media types are accepted: application/json, "
                       "application/yaml, application/vnd.kubernetes.protobuf")
    pod = h.server.store.get("/pods", namespace, name)
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    mains = [c["name"] for c in spec.get("containers") or []]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    container = query.get("container") or ""
    if not container:
        if len(mains) != 1:
            extra = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
            raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(mains)}]{extra}")
        container = mains[0]
    if container not in mains + inits:
        raise bad_request(f"container {container} is not valid for pod {name}")
    if not spec.get("nodeName"):  # kube-apiserver pod/strategy.go LogLocation: nowhere to proxy the log from
        raise bad_request(f"pod {name} does not have a host assigned")
    statuses = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    mine = next((s for s in statuses if s.get("name") == container), {})
    state = mine.get("state") or {}
    key = f"{namespace}/{name}/{container}"
    if query.get("previous") in ("true", "1"):  # the kubelet keeps the last terminated instance's log
        text = h.server.logs.get(key + PREVIOUS)
        if not (mine.get("lastState") or {}).get("terminated") or text is None:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    else:
        if not state or ("waiting" in state and not mine.get("lastState")):
            why = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            kind = "initializing" if why == "PodInitializing" else "waiting to start"
            raise bad_request(f'container "{container}" in pod "{name}" is {kind}: {why}')
        text = h.server.logs.get(key, "")
    h.send_text(200, _trim(text, query))


def _trim(text: str, query: dict[str, str]) -> str:
    for param in ("tailLines", "limitBytes"):
        value = query.get(param)
        if value not in (None, "") and not str(value).lstrip("-").isdigit():
            raise bad_request(f'{param}: Invalid value: "{value}": must be an integer')
    tail = query.get("tailLines")
    if tail not in (None, ""):
        if int(tail) < 0:
            raise ApiError(422, "Invalid", f'PodLogOptions "" is invalid: tailLines: Invalid value: {tail}: must be greater than or equal to 0')
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-int(tail):]) if int(tail) > 0 else ""
    limit = query.get("limitBytes")
    if limit not in (None, ""):
        if int(limit) < 1:
            raise ApiError(422, "Invalid", f'PodLogOptions "" is invalid: limitBytes: Invalid value: {limit}: must be greater than 0')
        text = text.encode()[: int(limit)].decode(errors="ignore")
    return text
