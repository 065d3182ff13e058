"""A request's authorization attributes as kube-apiserver derives them, and the 403 its authorizer answers.

The attributes follow k8s.io/apiserver's RequestInfoFactory (endpoints/request/requestinfo.go): verb from the
method (get without a name is list, or watch with ?watch; delete without a name is deletecollection), API group,
resource and subresource, namespace and name. The Status of a denial is responsewriters.Forbidden's, word for word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_dgxspark.testbed.reply import status_body

_METHOD_VERB = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class RequestInfo:
    """What RBAC matches a request on; `resource` is None for a non-resource path (/version, /healthz...)."""

    verb: str
    path: str
    group: str = ""
    version: str = ""
    resource: str | None = None
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def resource_path(self) -> str | None:
        """'pods' or 'pods/log': how an RBAC rule names the resource (None for a non-resource path)."""
        if self.resource is None:
            return None
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def request_info(method: str, path: str, query: dict[str, Any]) -> RequestInfo:
    """The attributes of one request (`query` as first values per key)."""
    verb = _METHOD_VERB.get(method.upper(), method.lower())
    parts = [p for p in path.strip("/").split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return RequestInfo(verb, path)
    if not rest:
        return RequestInfo(verb, path)  # discovery (/api/v1, /apis/apps/v1): a non-resource request
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if str(query.get("watch", "")).lower() in ("true", "1") else "list"
        selector = str(query.get("fieldSelector", ""))
        if selector.startswith("metadata.name=") and "," not in selector:
            name = selector.removeprefix("metadata.name=").lstrip("=")
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb, path, group, version, resource, subresource, namespace, name)


def forbidden_message(user: str, info: RequestInfo) -> str:
    """responsewriters.forbiddenMessage wrapped by apierrors.NewForbidden: the whole Status message."""
    if info.resource is None:
        return f'forbidden: User "{user}" cannot {info.verb} path "{info.path}"'
    qualified = f"{info.resource}.{info.group}" if info.group else info.resource
    if info.namespace:
        scope = f'in the namespace "{info.namespace}"'
    else:
        scope = "at the cluster scope"
    said = f'User "{user}" cannot {info.verb} resource "{info.resource_path}" in API group "{info.group}" {scope}'
    subject = f'{qualified} "{info.name}"' if info.name else qualified
    return f"{subject} is forbidden: {said}"


def forbidden_body(user: str, info: RequestInfo) -> dict[str, Any]:
    """The metav1.Status kube-apiserver answers with HTTP 403 when no authorizer allows the request."""
    details: dict[str, Any] = {}
    if info.resource is not None:
        details = {**({"name": info.name} if info.name else {}), **({"group": info.group} if info.group else {}),
                   "kind": info.resource}
    return status_body(403, "Forbidden", forbidden_message(user, info), details)
