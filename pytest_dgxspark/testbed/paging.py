"""LIST in chunks as kube-apiserver's etcd3 storage serves them: `limit`, `continue` tokens, `remainingItemCount`."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Callable

from pytest_dgxspark.testbed.reply import ApiError, bad_request
from pytest_dgxspark.testbed.store import Store

# apiserver's own wording (staging/src/k8s.io/apiserver/pkg/storage/errors.go, etcd3 store)
EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start a new list "
           "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
           "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
           "modified, or deleted between the time the first chunk was returned and now may show up in the list.")


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: int
    token: str = ""
    remaining: int | None = None

    def list_meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if self.token:
            meta["continue"] = self.token
        if self.remaining is not None:
            meta["remainingItemCount"] = self.remaining
        return meta


def encode(rv: int, start: str) -> str:
    """The token of storage.EncodeContinue: base64url (no padding) of {"v","rv","start"}; `start` is the next key."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str) -> tuple[int, str]:
    """(resourceVersion, start key) of a token; a 400 as `invalid continue token` when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError(f"got version {data.get('v')!r}, expected meta.k8s.io/v1")
        rv, start = int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise bad_request(f"invalid continue token: continue key is not valid: {exc}") from None
    if rv <= 0:
        raise bad_request("invalid continue token: continue key is not valid: incorrect encoded start resourceVersion "
                          "(version meta.k8s.io/v1)")
    return rv, start


def key_of(obj: dict[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md['namespace']}/{md['name']}" if md.get("namespace") else md.get("name", "")


def list_page(store: Store, resource: str, namespace: str | None, query: dict[str, str],
              match: Callable[[dict[str, Any]], bool], filtered: bool) -> Page:
    """One LIST answer: everything, or up to `limit` matching objects after the token's start key, at the token's rv."""
    limit_text = query.get("limit") or ""
    try:
        limit = int(limit_text) if limit_text else 0
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{limit_text}": invalid syntax') from None
    token = query.get("continue") or ""
    if token:
        rv, start = decode(token)
        items = store.list_at(resource, namespace, rv)
        if items is None:
            _, now = store.list(resource, namespace)
            raise _expired(now, start)
    else:
        items, rv = store.list(resource, namespace)
        start = ""
    # etcd orders by the key string (`ns/name`), which is not the order of (ns, name) tuples: "a-b/x" < "a/x"
    items = sorted((o for o in items if key_of(o) >= start and match(o)), key=key_of)
    if limit <= 0 or len(items) <= limit:
        return Page(items, rv)
    page, rest = items[:limit], items[limit:]
    return Page(page, rv, encode(rv, key_of(page[-1]) + "\x00"), None if filtered else len(rest))


def _expired(now: int, start: str) -> ApiError:
    """410 with a fresh token from which a client may continue inconsistently, as the real server offers."""
    error = ApiError(410, "Expired", EXPIRED, None)
    error.body["metadata"] = {"continue": encode(now, start)}
    return error
