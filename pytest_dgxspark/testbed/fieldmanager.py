"""metadata.managedFields and server-side apply: who owns which field, apply conflicts, fields an applier dropped.

Fields are tracked down to map keys; lists are atomic (one field), which the real server does only for lists
without `x-kubernetes-list-type: map` (it tracks `containers` per `k:{"name":...}`; here a list is owned whole).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from pytest_dgxspark.testbed.podshape import ts

Path = tuple[str, ...]
# server-set metadata that no manager owns
SYSTEM = {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "name", "namespace",
          "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}
MAPS = {"labels", "annotations", "data", "stringData", "binaryData", "nodeSelector", "matchLabels", "capacity",
        "allocatable", "limits", "requests"}


class ApplyConflict(Exception):
    """Fields of the applied configuration owned by other managers with other values (409 unless force=true)."""

    def __init__(self, conflicts: list[tuple[str, Path]], version: str) -> None:
        self.conflicts, self.version = conflicts, version
        if len(conflicts) == 1:
            manager, path = conflicts[0]
            message = f'Apply failed with 1 conflict: conflict with "{manager}" using {version}: {dotted(path)}'
        else:
            by: dict[str, list[Path]] = {}
            for manager, path in conflicts:
                by.setdefault(manager, []).append(path)
            lines = [f'conflicts with "{m}" using {version}:\n' + "\n".join(f"- {dotted(p)}" for p in ps) for m, ps in by.items()]
            message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
        super().__init__(message)

    def causes(self) -> list[dict[str, str]]:
        return [{"reason": "FieldManagerConflict", "message": f'conflict with "{m}" using {self.version}', "field": dotted(p)}
                for m, p in self.conflicts]


def dotted(path: Path) -> str:
    return "".join(f".{p}" for p in path)


def leaves(obj: dict[str, Any], status: bool = False) -> dict[Path, Any]:
    """Every owned field of an object (path -> value), leaving out apiVersion, kind, system metadata and status."""
    out: dict[Path, Any] = {}

    def walk(node: Any, path: Path) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, path + (key,))
        else:
            out[path] = node

    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and not status):
            continue
        if key == "metadata":
            for mkey, mvalue in (value or {}).items():
                if mkey not in SYSTEM:
                    walk(mvalue, ("metadata", mkey))
        else:
            walk(value, (key,))
    return out


def to_fields_v1(paths: set[Path], dots: bool = True) -> dict[str, Any]:
    """The FieldsV1 tree of a set of paths (`f:<key>` nodes). `dots`: an Update also owns the maps it set (`.`);
    an Apply owns only the leaves of its configuration."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for i, part in enumerate(path):
            node = node.setdefault(f"f:{part}", {})
            if dots and part in MAPS and i < len(path) - 1:
                node.setdefault(".", {})
    return root


def from_fields_v1(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, sub in (tree or {}).items():
        if key == "." or not key.startswith("f:"):
            continue
        path = prefix + (key[2:],)
        inner = {k: v for k, v in (sub or {}).items() if k != "."}
        if inner:
            out |= from_fields_v1(inner, path)
        else:
            out.add(path)
    return out


def _entries(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _owned(entry: dict[str, Any]) -> set[Path]:
    return from_fields_v1(entry.get("fieldsV1") or {})


def _write(obj: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    kept = [e for e in entries if e.get("fieldsV1")]
    md = obj.setdefault("metadata", {})
    if kept:
        md["managedFields"] = kept
    else:
        md.pop("managedFields", None)


def _entry(manager: str, operation: str, version: str, paths: set[Path], subresource: str = "") -> dict[str, Any]:
    entry = {"manager": manager, "operation": operation, "apiVersion": version, "time": ts(time.time()),
             "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(paths, operation == "Update")}
    if subresource:
        entry["subresource"] = subresource
    return entry


def record_update(old: dict[str, Any] | None, new: dict[str, Any], manager: str, version: str, subresource: str = "") -> None:
    """After a create, PUT or non-apply PATCH: `manager` takes the fields it set or changed (ownership moves, no conflict)."""
    before = leaves(old, subresource == "status") if old else {}
    after = leaves(new, subresource == "status")
    changed = {p for p, v in after.items() if before.get(p, object()) != v}
    if old is not None and not changed and set(before) == set(after):  # a no-op: nothing to record, nothing to write
        _write(new, _entries(old))
        return
    entries = []
    mine: set[Path] = set()
    for entry in _entries(old or {}) if old else []:
        owned = {p for p in _owned(entry) if p in after or any(q[:len(p)] == p for q in after)}
        if entry.get("manager") == manager and entry.get("operation") == "Update" and entry.get("subresource", "") == subresource:
            mine |= owned
            continue
        owned -= changed
        entries.append({**entry, "fieldsV1": to_fields_v1(owned, entry.get("operation") == "Update")}
                       if owned != _owned(entry) else entry)
    mine |= changed
    if mine:
        entries.append(_entry(manager, "Update", version, mine, subresource))
    _write(new, entries)


def apply(live: dict[str, Any] | None, config: dict[str, Any], manager: str, version: str, force: bool,
          merge: Any, default: Any = None) -> dict[str, Any]:
    """Server-side apply of `config` by `manager` over `live` (None: create); raises ApplyConflict. `default(obj)`
    gives what the server's defaulting adds, so that applying the same configuration again is known as a no-op."""
    applied = leaves(config)
    current = copy.deepcopy(live) if live is not None else {"metadata": {}}
    values = leaves(current)
    entries = _entries(current)
    conflicts: list[tuple[str, Path]] = []
    previously: set[Path] = set()
    for entry in entries:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            previously = _owned(entry)
            continue
        for path in sorted(_owned(entry) & set(applied)):
            if values.get(path, object()) != applied[path]:
                conflicts.append((entry.get("manager", ""), path))
    if conflicts and not force:
        raise ApplyConflict(conflicts, version)
    others = set().union(*(_owned(e) for e in entries if not (e.get("manager") == manager and e.get("operation") == "Apply")))
    result = merge(current, config)
    for path, value in applied.items():  # lists are owned whole here, so an applied list is set as applied
        if isinstance(value, list):
            _set(result, path, copy.deepcopy(value))
    for path in sorted(previously - set(applied) - others, key=len, reverse=True):
        _drop(result, path)
    kept = []
    taken = {p for _, p in conflicts}
    for entry in entries:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            continue
        owned = _owned(entry) - taken
        kept.append({**entry, "fieldsV1": to_fields_v1(owned, entry.get("operation") == "Update")})
    if default is not None:
        default(result)
    if live is not None and set(applied) == previously and not taken and _content(result) == _content(live):
        _write(result, entries)  # the same configuration applied again: a no-op keeps the entries and their times
        return result
    kept.append(_entry(manager, "Apply", version, set(applied)))
    _write(result, kept)
    return result


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}}


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    node: Any = obj
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _drop(obj: dict[str, Any], path: Path) -> None:
    node: Any = obj
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)
