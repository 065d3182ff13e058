"""The virtual review resources `kubectl auth can-i` and `kubectl auth whoami` create: answered, never stored.

The testbed has no RBAC: every authenticated client may do everything (like RKE2's `system:admin` in `system:masters`,
and the Argo CD manager's cluster-admin binding), and the reviews say exactly that.
"""

from __future__ import annotations

from typing import Any

from pytest_dgxspark.testbed.reply import Exchange
from pytest_dgxspark.testbed.resources import Resource

ALLOWED_BY = 'RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin"'


def answer(h: Exchange, r: Resource, review: dict[str, Any]) -> None:
    user = h.user
    status: dict[str, Any]
    if r.plural == "selfsubjectaccessreviews":
        status = {"allowed": True, "reason": f'{ALLOWED_BY} to {_subject(user)}'}
    elif r.plural == "selfsubjectrulesreviews":
        status = {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                  "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "incomplete": False}
    else:  # selfsubjectreviews (authentication.k8s.io)
        status = {"userInfo": {"username": user["username"], "groups": user["groups"]}}
    h.send_json(201, {"kind": r.kind, "apiVersion": r.group_version, "metadata": {"creationTimestamp": None},
                      **({"spec": review.get("spec") or {}} if r.plural != "selfsubjectreviews" else {}), "status": status})


def _subject(user: dict[str, Any]) -> str:
    if "system:masters" in user["groups"]:
        return 'Group "system:masters"'
    name = user["username"].rsplit(":", 1)[-1]
    namespace = user["username"].split(":")[2] if user["username"].startswith("system:serviceaccount:") else ""
    return f'ServiceAccount "{name}/{namespace}"' if namespace else f'User "{user["username"]}"'
