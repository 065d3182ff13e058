"""The PATCH bodies kube-apiserver accepts: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch."""

from __future__ import annotations

import copy
import json
from typing import Any

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

# patchMergeKey of the built-in types' lists (k8s.io/api `patchStrategy:"merge" patchMergeKey:"..."` struct tags);
# lists not named here are atomic (replaced whole), like `taints` and `tolerations`
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name", "volumes": "name",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath", "imagePullSecrets": "name", "ownerReferences": "uid",
    "conditions": "type", "addresses": "type", "hostAliases": "ip", "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey", "ports": "containerPort",
}
SERVICE_PORT_KEY = "port"
# primitive lists with patchStrategy merge (union on patch)
MERGED_PRIMITIVES = ("finalizers",)
# the types whose `ports` merge (Container on containerPort, ServiceSpec on port); elsewhere `ports` is atomic
MERGED_PORTS = ("V1Container", "V1EphemeralContainer", "V1ServiceSpec")


class PatchError(ValueError):
    """A patch that cannot be applied; `code` 400 (malformed) or 422 (does not apply to the object)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def decode(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise PatchError(f"error decoding patch: {exc}", 400) from None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'JSON pointer must be empty or start with a "/": {path!r}')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path}: missing value")
    return node


def _get(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f"doc is missing path: {path}: missing value")


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path), parts[-1] if parts else ""
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f"Unable to remove nonexistent key: {last}: missing value")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}: missing value")
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = copy.deepcopy(value)
            else:
                parent.insert(int(last), copy.deepcopy(value))
        else:
            raise PatchError(f"add operation does not apply: doc is missing path: {path}: missing value")
    else:
        raise PatchError(f"doc is missing path: {path}: missing value")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 operations applied in order; any failing one fails the whole patch."""
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError("Unexpected kind: unknown", 400)
        kind, path = op["op"], op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, op.get("value"), replace=True)
        elif kind in ("move", "copy"):
            value = _remove(doc, op.get("from", "")) if kind == "move" else copy.deepcopy(_get(doc, op.get("from", "")))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}", 400)
    return doc


def strategic_merge(target: Any, patch: Any, field: str = "", service: bool = False) -> Any:
    """Strategic merge patch over built-in objects (`service`: a Service, whose ports merge on `port`): maps merge, keyed lists merge by their patchMergeKey, directives
    `$patch: replace|delete`, `$retainKeys`, `$deleteFromPrimitiveList/<f>` and `$setElementOrder/<f>` honoured."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    patch = dict(patch)
    directive = patch.pop("$patch", None)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.pop("$retainKeys", None)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            out[name] = [v for v in out.get(name) or [] if v not in (value or [])]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(out.get(key), value, key, service)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _merge_list(out.get(key), value, key, service)
        else:
            out[key] = value
    if retain is not None:
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(current: Any, patch: list[Any], field: str, service: bool) -> list[Any]:
    current = current if isinstance(current, list) else []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if field in MERGED_PRIMITIVES:
        return list(current) + [v for v in patch if v not in current]
    key = SERVICE_PORT_KEY if field == "ports" and service else MERGE_KEYS.get(field)
    # a list whose items lack the key is another type's atomic list of the same name (Endpoints' addresses and ports)
    if key is None or not all(isinstance(i, dict) and key in i for i in patch):
        return copy.deepcopy(patch)
    out = copy.deepcopy(current)
    for item in patch:
        at = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if at is not None:
                out.pop(at)
        elif at is None:
            out.append(strategic_merge({}, item, field, service))
        else:
            out[at] = strategic_merge(out[at], item, field, service)
    return out
