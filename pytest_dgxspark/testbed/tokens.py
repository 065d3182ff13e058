"""TokenRequest (`POST serviceaccounts/<name>/token`): a bound token for a ServiceAccount, as kube-apiserver mints one.

The token authenticates as `system:serviceaccount:<namespace>:<name>` until it expires; the stand-in has no RBAC,
so what that user may do is checked on the real control plane (tests/test_suite_rbac.py), not here.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from pytest_dgxspark.testbed.reply import ApiError, Exchange, not_found
from pytest_dgxspark.testbed.resources import BY_GROUP_VERSION

DEFAULT_EXPIRATION_S = 3600
MIN_EXPIRATION_S = 600  # kube-apiserver refuses shorter (ValidateTokenRequest)
AUDIENCES = ["https://kubernetes.default.svc.cluster.local", "rke2"]


def _stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def account_identity(namespace: str, name: str) -> dict[str, Any]:
    """Who a ServiceAccount's token authenticates as (its username and groups)."""
    return {"username": f"system:serviceaccount:{namespace}:{name}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]}


def request(h: Exchange, namespace: str, name: str, review: dict[str, Any]) -> None:
    """Mint a token for an existing ServiceAccount; 404 as the API answers for one that does not exist."""
    accounts = BY_GROUP_VERSION["v1"]["serviceaccounts"]
    if h.server.store.get(accounts.key, namespace, name) is None:
        raise not_found(accounts, name)
    spec = dict(review.get("spec") or {})
    seconds = int(spec.get("expirationSeconds") or DEFAULT_EXPIRATION_S)
    if seconds < MIN_EXPIRATION_S:
        raise ApiError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{name}" is invalid: spec.expirationSeconds: '
                       "Invalid value: " + str(seconds) + ": may not specify a duration less than 10 minutes",
                       {"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest"})
    token = secrets.token_urlsafe(48)
    h.server.tokens[token] = account_identity(namespace, name)
    now = time.time()
    h.send_json(201, {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                      "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _stamp(now)},
                      "spec": {"audiences": spec.get("audiences") or AUDIENCES, "expirationSeconds": seconds,
                               "boundObjectRef": spec.get("boundObjectRef")},
                      "status": {"token": token, "expirationTimestamp": _stamp(now + seconds)}})
