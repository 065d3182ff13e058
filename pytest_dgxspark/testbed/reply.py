"""What the REST verbs need from one HTTP exchange, and the metav1.Status bodies of the API's errors."""

from __future__ import annotations

from typing import Any, Protocol

from pytest_dgxspark.testbed.resources import Resource


class Exchange(Protocol):
    """One request being answered (the apiserver's Handler): its headers, its server, and the ways to reply."""

    headers: Any
    server: Any
    user: dict[str, Any]  # {"username", "groups"} of the authenticated client

    def send_json(self, code: int, body: dict[str, Any], content_type: str = "application/json") -> None: ...

    def send_text(self, code: int, text: str) -> None: ...

    def send_bytes(self, code: int, data: bytes, content_type: str) -> None: ...

    def start_stream(self) -> None: ...

    def chunk(self, data: bytes) -> None: ...


class ApiError(Exception):
    """An answer other than success: the HTTP code and its metav1.Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.body = code, status_body(code, reason, message, details)


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A metav1.Status, the body of every API error."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                            "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return body


def qualified(r: Resource) -> str:
    """`helmcharts.helm.cattle.io`, or `nodes` for the core group: how the API names a resource in messages."""
    return f"{r.plural}.{r.group}" if r.group else r.plural


def details(r: Resource, name: str) -> dict[str, Any]:
    return {"name": name, **({"group": r.group} if r.group else {}), "kind": r.plural}


def not_found(r: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(r)} "{name}" not found', details(r, name))


def no_route() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def conflict(r: Resource, name: str) -> ApiError:
    """The optimistic-concurrency failure of apiserver's storage (a stale metadata.resourceVersion)."""
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(r)} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again", details(r, name))


def invalid(r: Resource, name: str, field: str, reason: str, cause: str) -> ApiError:
    """422 Invalid with one cause, worded like apimachinery's field.ErrorList."""
    return ApiError(422, "Invalid", f'{r.kind}{"." + r.group if r.group else ""} "{name}" is invalid: {field}: {cause}',
                    {"name": name, **({"group": r.group} if r.group else {}), "kind": r.kind,
                     "causes": [{"reason": reason, "message": cause, "field": field}]})


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})
