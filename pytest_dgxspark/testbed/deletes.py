"""DELETE in its forms: one object (graceful for pods, namespaces and objects with finalizers), a collection, an eviction."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from pytest_dgxspark.testbed import resources
from pytest_dgxspark.testbed.podshape import ts
from pytest_dgxspark.testbed.reply import ApiError, Exchange, bad_request, details, not_found
from pytest_dgxspark.testbed.resources import Resource
from pytest_dgxspark.testbed.writes import dry_run, parse_body

PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
# finalizers of controllers the testbed stands in for (helm-controller's `wrangler.cattle.io/on-helm-chart-remove`):
# they are released after a moment, as the controller does once its cleanup ran; any other finalizer holds the object
CONTROLLER_FINALIZERS = ("wrangler.cattle.io/",)
# DELETE answers the object (registry ReturnDeletedObject) for these; a metav1.Status Success for the others
RETURNS_DELETED = ("pods", "services")


def delete(h: Exchange, r: Resource, namespace: str | None, name: str, query: dict[str, str], body: bytes,
           answer: Any = None) -> None:
    store = h.server.store
    reply_with = answer or (lambda obj: h.send_json(200, obj))
    if r.plural == "namespaces" and name in PROTECTED_NAMESPACES:
        raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted', details(r, name))
    try:
        options = json.loads(body) if body else {}
    except ValueError:
        raise bad_request("the body of the request was in an unknown format - accepted media types include: "
                          "application/json, application/yaml") from None
    grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    rehearse = dry_run(query, options)
    current = store.get(r.key, namespace or "", name)
    if current is None:
        raise not_found(r, name)
    pre = options.get("preconditions") or {}
    if pre.get("uid") and pre["uid"] != current["metadata"].get("uid"):
        raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
                       f"{current['metadata'].get('uid')}", details(r, name))
    if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"].get("resourceVersion"):
        raise ApiError(409, "Conflict", f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                       f"ResourceVersion in object meta: {current['metadata'].get('resourceVersion')}", details(r, name))
    graceful = r.plural in ("pods", "namespaces") or bool(current["metadata"].get("finalizers"))
    now = ts(time.time())

    def mark(obj: dict[str, Any]) -> None:
        if obj["metadata"].get("deletionTimestamp"):
            return
        obj["metadata"]["deletionTimestamp"] = now
        if r.plural == "pods":
            obj["metadata"]["deletionGracePeriodSeconds"] = int(grace) if grace is not None else 30
        elif r.plural == "namespaces":
            obj["status"] = {"phase": "Terminating"}
        else:
            obj["metadata"]["deletionGracePeriodSeconds"] = 0

    if rehearse:
        if graceful:
            mark(current)
        return reply_with(_deleted_answer(r, current, graceful))
    if not graceful:
        gone = store.delete(r.key, namespace or "", name)
        if gone is None:
            raise not_found(r, name)
        return reply_with(_deleted_answer(r, gone, False))
    marked = store.update(r.key, namespace or "", name, mark)
    if marked is None:
        raise not_found(r, name)
    reply_with(marked)
    finalizers = marked["metadata"].get("finalizers") or []
    if r.plural in ("pods", "namespaces") or (finalizers and all(f.startswith(CONTROLLER_FINALIZERS) for f in finalizers)):
        delay = 0.0 if grace is not None and int(grace) == 0 else 0.2
        threading.Thread(target=_finish_delete, args=(h.server, r, namespace or "", name, delay), daemon=True).start()


def delete_collection(h: Exchange, r: Resource, namespace: str | None, query: dict[str, str], body: bytes, match: Any) -> None:
    """DELETE on a collection (deletecollection): each matching object deleted as by DELETE; the answer is the List of
    the objects as listed before (registry Store.DeleteCollection)."""
    items, rv = h.server.store.list(r.key, namespace)
    doomed = [o for o in items if match(o) and not (r.plural == "namespaces" and o["metadata"]["name"] in PROTECTED_NAMESPACES)]
    for obj in doomed:
        try:
            delete(h, r, obj["metadata"].get("namespace"), obj["metadata"]["name"], query, body, answer=lambda _: None)
        except ApiError as error:
            if error.code != 404:  # gone meanwhile: nothing left to delete
                raise
    h.send_json(200, {"kind": f"{r.kind}List", "apiVersion": r.group_version, "metadata": {"resourceVersion": str(rv)},
                      "items": doomed})


def evict(h: Exchange, r: Resource, namespace: str, name: str, body: bytes, query: dict[str, str]) -> None:
    """POST pods/<name>/eviction (policy/v1 Eviction, as `kubectl drain` sends it): a graceful delete of the pod.

    No PodDisruptionBudget exists in the testbed, so every eviction is allowed.
    """
    eviction = parse_body(h, body)
    if (eviction.get("metadata") or {}).get("name") not in (None, "", name):
        raise bad_request("name in URL does not match name in Eviction object")
    options = eviction.get("deleteOptions") or {}
    delete(h, r, namespace, name, query, json.dumps(options).encode(), answer=lambda _: h.send_json(
        201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))


def _deleted_answer(r: Resource, obj: dict[str, Any], graceful: bool) -> dict[str, Any]:
    if graceful or r.plural in RETURNS_DELETED or not r.builtin:
        return obj
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {**details(r, obj["metadata"]["name"]), "uid": obj["metadata"].get("uid", "")}}


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
