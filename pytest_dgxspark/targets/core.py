"""The CUDA sample's few calls to the core and coordination APIs, as plain requests over the official client.

The checks read lists as plain dicts (Cluster.list). The CUDA sample also writes (its namespace, Lease and pods) and
reads logs, one pod and one namespace; those calls used kubernetes.client.CoreV1Api and CoordinationV1Api, whose
import alone costs 0.9 CPU s a run (37.x builds a pydantic validator for each of CoreV1Api's methods, measured
2026-12-03) for a dozen calls. Core keeps their names and arguments (so Cluster.call words a failure as
'cannot create a namespace', see cluster.call_words) and sends the same requests through the same ApiClient
(kubeconfig, TLS, bearer token, User-Agent); answers come back as parsed JSON (a log as text). A non-2xx answer
raises ApiException with the server's status, reason and Status body, as the typed client does.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.data.yamlload import loads_json

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
# what one API answer may hold, a list or one object, for Cluster.list and Core alike (a whole list of a 16-node
# cluster's pods is a few MiB)
API_MAX_BYTES = 512 * 1024 * 1024
# the typed client's query parameter names, in the order its generated methods send them
_QUERY = (("label_selector", "labelSelector"), ("field_selector", "fieldSelector"),
          ("propagation_policy", "propagationPolicy"), ("container", "container"), ("previous", "previous"),
          ("resource_version", "resourceVersion"), ("tail_lines", "tailLines"),
          ("timeout_seconds", "timeoutSeconds"), ("watch", "watch"))
_KNOWN = {name for name, _ in _QUERY} | {"_request_timeout", "_preload_content"}


def _query(params: dict[str, Any]) -> list[tuple[str, str]]:
    unknown = sorted(set(params) - _KNOWN)
    if unknown:  # a misspelt argument would otherwise be dropped silently
        raise TypeError(f"unexpected argument(s) {', '.join(unknown)}")
    out = []
    for name, wire in _QUERY:
        value = params.get(name)
        if value is None:
            continue
        out.append((wire, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


class Core:
    """The calls of CoreV1Api and CoordinationV1Api the suite makes, by the same names, over `api` (an ApiClient)."""

    def __init__(self, api: Any) -> None:
        self.api_client = api

    def _request(self, method: str, path: str, params: dict[str, Any], body: Any = None,
                 content_type: str | None = None, text: bool = False) -> Any:
        # Accept is JSON even for a log, as the typed client sends it (select_header_accept picks the first JSON
        # type): kube-apiserver answers 406 to a pods/log GET that accepts only text/plain, and the log comes as text
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        method, url, headers, body, _ = self.api_client.param_serialize(
            method, path, query_params=_query(params), header_params=headers, body=body,
            auth_settings=["BearerToken"])
        response = self.api_client.call_api(method, url, header_params=headers, body=body,
                                            _request_timeout=params.get("_request_timeout"))
        if not 200 <= response.status <= 299:  # the Status body names a 403's user, verb and resource
            data = response.read()
            raise ApiException(status=response.status, reason=response.reason,
                               body=data.decode("utf-8", errors="replace") if data else None)
        if params.get("_preload_content") is False:  # a watch: kubernetes.watch.Watch reads the lines
            return response.response
        data = response.read()
        if text:
            return data.decode("utf-8", errors="replace") if data else ""
        return loads_json(data, f"{method} {path}", max_bytes=API_MAX_BYTES, max_depth=None) if data else {}

    # --- namespaces ---------------------------------------------------------------------------------------------
    def create_namespace(self, body: dict[str, Any], **params: Any) -> Any:
        return self._request("POST", "/api/v1/namespaces", params, body)

    def read_namespace(self, name: str, **params: Any) -> Any:
        return self._request("GET", f"/api/v1/namespaces/{name}", params)

    def list_namespace(self, **params: Any) -> Any:
        return self._request("GET", "/api/v1/namespaces", params)

    def delete_namespace(self, name: str, **params: Any) -> Any:
        return self._request("DELETE", f"/api/v1/namespaces/{name}", params)

    # --- pods, their logs and events, config maps ---------------------------------------------------------------
    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **params: Any) -> Any:
        return self._request("POST", f"/api/v1/namespaces/{namespace}/pods", params, body)

    def read_namespaced_pod(self, name: str, namespace: str, **params: Any) -> Any:
        return self._request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", params)

    def list_namespaced_pod(self, namespace: str, **params: Any) -> Any:
        """The namespace's pods; with watch=True and _preload_content=False (kubernetes.watch.Watch) the open
        response whose lines are the watch's events."""
        return self._request("GET", f"/api/v1/namespaces/{namespace}/pods", params)

    def read_namespaced_pod_log(self, name: str, namespace: str, **params: Any) -> str:
        return self._request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", params, text=True)

    def list_namespaced_event(self, namespace: str, **params: Any) -> Any:
        return self._request("GET", f"/api/v1/namespaces/{namespace}/events", params)

    def read_namespaced_config_map(self, name: str, namespace: str, **params: Any) -> Any:
        return self._request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}", params)

    # --- the run's Lease (coordination.k8s.io/v1) ---------------------------------------------------------------
    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **params: Any) -> Any:
        return self._request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", params, body)

    def read_namespaced_lease(self, name: str, namespace: str, **params: Any) -> Any:
        return self._request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", params)

    def patch_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any], **params: Any) -> Any:
        return self._request("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", params,
                             body, STRATEGIC_MERGE)
