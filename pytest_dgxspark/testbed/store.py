"""The simulated API server's object store: resourceVersions, selectors and a watch history."""

from __future__ import annotations

import copy
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from pytest_dgxspark.testbed.podshape import ts

HISTORY = 20000

FIELD_LABELS: dict[str, frozenset[str]] = {
    "pods": frozenset({"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                       "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}),
    "events": frozenset({"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                         "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
                         "reason", "reportingComponent", "source", "type"}),
    "nodes": frozenset({"spec.unschedulable"}),
    "namespaces": frozenset({"status.phase"}),
    "secrets": frozenset({"type"}),
    "jobs": frozenset({"status.successful"}),
    "replicasets": frozenset({"status.replicas"}),
}


class SelectorError(ValueError):
    """A label or field selector the API server would answer 400 for."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        has, value = self.key in labels, labels.get(self.key)
        if self.op == "=":
            return has and value == self.values[0]
        if self.op == "!=":
            return not has or value != self.values[0]
        if self.op == "in":
            return has and value in self.values
        if self.op == "notin":
            return not has or value not in self.values
        return has if self.op == "exists" else not has


_TERM = re.compile(r"^\s*(?:(?P<not>!)\s*(?P<nkey>[^\s=!,()]+)|(?P<key>[^\s=!,()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<val>[^\s,()]*)"
                   r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?)\s*$")


def parse_labels(text: str) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h`."""
    terms, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    out = []
    for term in terms:
        if not term.strip():
            continue
        m = _TERM.match(term)
        if not m:
            raise SelectorError(f"unable to parse requirement: {term.strip()!r}")
        if m["not"]:
            out.append(Requirement(m["nkey"], "!exists"))
        elif m["setop"]:
            out.append(Requirement(m["key"], m["setop"], tuple(v.strip() for v in m["set"].split(",") if v.strip())))
        elif m["op"]:
            out.append(Requirement(m["key"], "!=" if m["op"] == "!=" else "=", (m["val"],)))
        else:
            out.append(Requirement(m["key"], "exists"))
    return out


def parse_fields(text: str, plural: str) -> list[tuple[str, str, str]]:
    """Parse `a=b,c!=d` and check each field is supported for the resource."""
    allowed = FIELD_LABELS.get(plural, frozenset()) | {"metadata.name", "metadata.namespace"}
    out = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", term)
        if not m:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        if m[1] not in allowed:
            raise SelectorError(f'field label not supported: {m[1]}')
        out.append((m[1], "!=" if m[2] == "!=" else "=", m[3]))
    return out


def field_value(obj: dict[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        current = current.get(part) if isinstance(current, dict) else None
    if path == "source" and isinstance(current, dict):
        current = current.get("component")
    if isinstance(current, bool):
        return str(current).lower()
    return "" if current is None else str(current)


class Store:
    """Objects keyed by (resource, namespace, name); every change bumps one global resourceVersion."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 1000
        # (resourceVersion, resource, event type, object after, object before): watches and consistent list pages
        self._history: deque[tuple[int, str, str, dict[str, Any], dict[str, Any] | None]] = deque(maxlen=HISTORY)
        self.cond = threading.Condition()

    @property
    def resource_version(self) -> int:
        return self._rv

    def _record(self, resource: str, kind: str, obj: dict[str, Any], before: dict[str, Any] | None = None) -> None:
        self._history.append((self._rv, resource, kind, copy.deepcopy(obj), before))
        self.cond.notify_all()

    def put(self, resource: str, obj: dict[str, Any], *, event: bool = True) -> dict[str, Any]:
        """Create or replace an object, assigning resourceVersion (and creationTimestamp when missing)."""
        md = obj.setdefault("metadata", {})
        key = (resource, md.get("namespace", ""), md["name"])
        with self.cond:
            before = self._objects.get(key)
            existed = before is not None
            self._rv += 1
            md["resourceVersion"] = str(self._rv)
            md.setdefault("creationTimestamp", ts(time.time()))
            self._objects[key] = obj
            if event:
                self._record(resource, "MODIFIED" if existed else "ADDED", obj, copy.deepcopy(before))
            return copy.deepcopy(obj)

    def update(self, resource: str, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
        """Apply `change` to the stored object under the lock; None when it is gone."""
        with self.cond:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                return None
            before = copy.deepcopy(obj)
            change(obj)
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._record(resource, "MODIFIED", obj, before)
            return copy.deepcopy(obj)

    def replace(self, resource: str, namespace: str, name: str,
                compute: Callable[[dict[str, Any]], dict[str, Any] | None]) -> tuple[dict[str, Any] | None, bool]:
        """Swap the stored object for `compute(copy)` under the lock: (the object now stored, whether it changed).

        `compute` may raise to refuse; returning None (or an equal object) writes nothing and keeps the resourceVersion,
        as etcd3's GuaranteedUpdate skips a no-op write. (None, False) when the object is gone.
        """
        with self.cond:
            old = self._objects.get((resource, namespace, name))
            if old is None:
                return None, False
            new = compute(copy.deepcopy(old))
            if new is None or new == old:
                return copy.deepcopy(old), False
            self._rv += 1
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[(resource, namespace, name)] = new
            self._record(resource, "MODIFIED", new, copy.deepcopy(old))
            return copy.deepcopy(new), True

    def delete(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self._objects.pop((resource, namespace, name), None)
            if obj is None:
                return None
            before = copy.deepcopy(obj)
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._record(resource, "DELETED", obj, before)
            return copy.deepcopy(obj)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self._objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, resource: str, namespace: str | None = None) -> tuple[list[dict[str, Any]], int]:
        with self.cond:
            items = [copy.deepcopy(o) for (r, ns, _), o in sorted(self._objects.items(), key=lambda kv: kv[0])
                     if r == resource and (namespace is None or ns == namespace)]
            return items, self._rv

    def list_at(self, resource: str, namespace: str | None, rv: int) -> list[dict[str, Any]] | None:
        """The objects of `resource` as they were at resourceVersion `rv` (a list continued from a token), sorted by key;
        None when the history no longer reaches back that far (the API answers 410 Expired)."""
        with self.cond:
            if rv > self._rv:
                return None
            oldest = self._history[0][0] if self._history else self._rv + 1
            if len(self._history) == HISTORY and rv < oldest - 1:
                return None
            state = {key: obj for key, obj in self._objects.items() if key[0] == resource}
            for event_rv, res, kind, obj, before in reversed(self._history):
                if event_rv <= rv:
                    break
                if res != resource:
                    continue
                key = (resource, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                if kind == "ADDED" or before is None:
                    state.pop(key, None)
                else:
                    state[key] = before
            return [copy.deepcopy(o) for k, o in sorted(state.items(), key=lambda kv: kv[0])
                    if namespace is None or k[1] == namespace]

    def events_since(self, rv: int, timeout: float) -> tuple[list[tuple[int, str, str, dict[str, Any]]], bool]:
        """History entries newer than `rv` (waiting up to `timeout`); the flag says `rv` is too old to serve."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if self._history and rv < self._history[0][0] - 1 and len(self._history) == HISTORY:
                    return [], True
                newer = [e[:4] for e in self._history if e[0] > rv]
                left = deadline - time.monotonic()
                if newer or left <= 0:
                    return newer, False
                self.cond.wait(min(left, 1.0))
