"""A Kubernetes cluster over the official client: each kind listed once per run, retries, clear errors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from pytest_dgxspark.checking import Finding, TargetError
from pytest_dgxspark.data.yamlload import loads_json
from pytest_dgxspark.targets.causes import API_CAUSES, api_cause, for_management, is_transport_error, observed_status
from pytest_dgxspark.targets.core import API_MAX_BYTES, Core

REQUEST_TIMEOUT = (10, 60)
RETRY_ATTEMPTS = 4
T = TypeVar("T")

# kind -> (API path prefix, resource, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "nodes": ("/api/v1", "nodes", False),
    "namespaces": ("/api/v1", "namespaces", False),
    "pods": ("/api/v1", "pods", True),
    "events": ("/api/v1", "events", True),
    "secrets": ("/api/v1", "secrets", True),
    "configmaps": ("/api/v1", "configmaps", True),
    "daemonsets": ("/apis/apps/v1", "daemonsets", True),
    "deployments": ("/apis/apps/v1", "deployments", True),
    "jobs": ("/apis/batch/v1", "jobs", True),
    "runtimeclasses": ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    "helmcharts": ("/apis/helm.cattle.io/v1", "helmcharts", True),
    "helmchartconfigs": ("/apis/helm.cattle.io/v1", "helmchartconfigs", True),
    "clusterpolicies": ("/apis/nvidia.com/v1", "clusterpolicies", False),
    "ciliumnodes": ("/apis/cilium.io/v2", "ciliumnodes", False),
}
# API groups every Kubernetes serves: a 404 there is a broken API, not an absent CRD
BUILTIN_PREFIXES = ("/api/v1/", "/apis/apps/v1/", "/apis/batch/v1/", "/apis/node.k8s.io/v1/")
# What a CRD's list answering 404 means: the API is whole, the custom resource definition is not installed.
NOT_SERVED = {
    "helmcharts": "RKE2's helm-controller is not serving helm.cattle.io/v1 (the HelmChart CRD is not installed), so no "
                  "HelmChart can exist or be installed on this cluster; look at rke2-server and its helm-controller",
    "helmchartconfigs": "RKE2's helm-controller is not serving helm.cattle.io/v1 (the HelmChartConfig CRD is not "
                        "installed), so no HelmChartConfig can exist on this cluster; look at rke2-server and its "
                        "helm-controller",
    "clusterpolicies": "nvidia.com/v1 ClusterPolicy is not served (the GPU Operator's CRD is not installed): the GPU "
                       "Operator chart was never installed here or its CRDs were removed",
    "ciliumnodes": "cilium.io/v2 CiliumNode is not served (Cilium's CRDs are not installed): Cilium is not running as "
                   "this cluster's CNI",
}
# The fix of a CRD that is not served: whatever serves it (English, Korean), not the rule that needed it re-applied.
_HELM_CRD_FIX = (
    "The HelmChart CRDs come with RKE2's helm-controller in rke2-server: check rke2-server on the server node "
    "(systemctl status rke2-server, journalctl -u rke2-server) and kubectl get crd helmcharts.helm.cattle.io; "
    "re-applying the GPU Operator's HelmChart cannot help until RKE2 serves it.",
    "HelmChart CRD는 rke2-server의 helm-controller가 제공한다. 서버 노드에서 rke2-server(systemctl status rke2-server, "
    "journalctl -u rke2-server)와 kubectl get crd helmcharts.helm.cattle.io를 확인한다. RKE2가 제공하기 전에는 GPU "
    "Operator HelmChart를 다시 적용해도 소용없다.")
NOT_SERVED_FIX = {
    "helmcharts": _HELM_CRD_FIX,
    "helmchartconfigs": _HELM_CRD_FIX,
    "clusterpolicies": (
        "The ClusterPolicy CRD comes with the GPU Operator chart: apply it with make rke2/gpu/operator/apply and read "
        "the helm-install-gpu-operator job's log in kube-system (kubectl -n kube-system logs job/helm-install-gpu-operator).",
        "ClusterPolicy CRD는 GPU Operator chart와 함께 설치된다. make rke2/gpu/operator/apply로 적용하고 kube-system의 "
        "helm-install-gpu-operator job 로그(kubectl -n kube-system logs job/helm-install-gpu-operator)를 읽는다."),
}
# kinds too sensitive or too large to list cluster-wide: always listed per namespace
_NAMESPACE_ONLY = {"secrets", "configmaps"}


_CALL = re.compile(r"^(list|read|create|delete|patch|replace)_(namespaced_)?([a-z_]+?)(_log|_status)?$")
_CALL_VERB = {"list": "list", "read": "read", "create": "create", "delete": "delete", "patch": "update",
              "replace": "update"}


def call_words(name: str, args: tuple[Any, ...]) -> tuple[str, str]:
    """A kubernetes client call in plain words, (verb, what): list_namespaced_pod('ns') -> ('list', 'the pods in
    namespace ns'), read_namespaced_pod_log('p', 'ns') -> ('read', 'the log of pod p in namespace ns')."""
    found = _CALL.match(name or "")
    if found is None:
        return "read", name or "a request"
    verb, namespaced, kind, part = found.groups()
    kind = kind.replace("_", " ")
    words = [str(a) for a in args if isinstance(a, str)]
    where = lambda i: f" in namespace {words[i]}" if namespaced and len(words) > i else ""  # noqa: E731
    if verb == "list":
        return "list", f"the {kind}s{where(0)}"
    if verb == "create":
        return "create", f"a {kind}{where(0)}"
    what = f"{kind} {words[0]}{where(1)}" if words else kind
    if part:
        what = f"the {part[1:]} of {what}"
    return _CALL_VERB[verb], what


class ClusterUnreachable(TargetError):
    """The Kubernetes API could not be reached or refused the request."""


class CrdNotServed(Finding):
    """A whole Kubernetes API answered 404 for a CRD's list: the CRD is not installed. That is an observation, not
    "none exist": the check that needed the kind fails with what it means (NOT_SERVED), never passes on []."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, *NOT_SERVED_FIX.get(kind, (None, None)))  # its own fix where the rule's is wrong
        self.kind = kind


def transient(error: BaseException) -> bool:
    """Whether an API error is worth retrying: 429, 5xx, a reset or dropped connection (not a refused connect)."""
    if isinstance(error, ApiException):
        return error.status in (429, 500, 502, 503, 504) or error.status == 0
    if isinstance(error, urllib3.exceptions.MaxRetryError):
        error = error.reason or error
    # a reset or dropped connection is transient; a refused or timed-out connect is not retried
    return isinstance(error, (urllib3.exceptions.ProtocolError, ConnectionResetError))


def _retrying() -> Retrying:
    return Retrying(
        stop=stop_after_attempt(RETRY_ATTEMPTS),
        wait=wait_exponential(multiplier=0.5, max=4),
        retry=retry_if_exception(transient),
        reraise=True,
    )


def with_retries(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """call(*args, **kwargs) (a kubernetes client method), retrying transient failures (5xx, 429, reset) as lists do.

    Other errors (4xx, refused or timed-out connections) and the last transient one propagate unchanged.
    """
    for attempt in _retrying():
        with attempt:
            return call(*args, **kwargs)
    raise AssertionError("unreachable")  # pragma: no cover


class Cluster:
    """One kubeconfig context. `list(kind)` returns plain dicts, fetched once per run per kind."""

    def __init__(self, kubeconfig: Path | str | None, context: str) -> None:
        self.kubeconfig = Path(kubeconfig) if kubeconfig else None
        self.context = context
        self._api: k8s_client.ApiClient | None = None
        self._core: Core | None = None
        self._cache: dict[tuple[str, str | None, str | None], list[dict[str, Any]]] = {}
        self.not_served: dict[str, str] = {}  # CRD kind -> the message of its 404 (asked once per run)
        self._version: dict[str, Any] | None = None
        self._failure: str | None = None
        self.cause: Any = None  # the Cause of the first failure that made the API unusable
        self.list_calls: dict[str, int] = {}
        self.management: Cluster | None = None  # the Argo CD management cluster, set by Connections
        self.is_management = False  # this is that management cluster (its faults get their own fix)

    def __repr__(self) -> str:
        return f"Cluster(context={self.context!r})"

    @property
    def target_id(self) -> str:
        """'api:<kubeconfig context>': the target named in this cluster's TargetErrors."""
        return f"api:{self.context}"

    @property
    def where(self) -> str:
        """'context X (https://host:6443)' for messages."""
        host = self._api.configuration.host if self._api is not None else "?"
        return f"Kubernetes API of context {self.context!r} ({host})"

    @property
    def server(self) -> str:
        """The API server URL of the context."""
        return self.api.configuration.host

    @property
    def api(self) -> k8s_client.ApiClient:
        """The ApiClient (built on first use, from the kubeconfig context)."""
        if self._api is None:
            configuration = k8s_client.Configuration()
            try:
                k8s_config.load_kube_config(
                    config_file=str(self.kubeconfig) if self.kubeconfig else None,
                    context=self.context,
                    client_configuration=configuration,
                )
            except (k8s_config.ConfigException, OSError, ValueError) as error:
                raise ClusterUnreachable(
                    f"kubeconfig {self.kubeconfig or '~/.kube/config'}: cannot use context {self.context!r}: {error}",
                    target=self.target_id, cause=API_CAUSES["kubeconfig"],
                ) from None
            configuration.retries = 1
            self._api = k8s_client.ApiClient(configuration)
        return self._api

    @property
    def core(self) -> Core:
        """The CUDA sample's core and coordination calls over the same client (targets/core.py: plain JSON)."""
        if self._core is None:
            self._core = Core(self.api)
        return self._core

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ClusterUnreachable(self._failure, target=self.target_id, cause=self.cause)

    def unreachable(self, error: BaseException, what: str, verb: str = "read") -> ClusterUnreachable:
        """The ClusterUnreachable for a failed request `what` (e.g. 'GET /api/v1/pods'); remembered unless 401/403.

        After a refused, dropped or 5xx request every later one fails at once with the same words (no retry storm);
        a credentials problem or a 403 (RBAC denies one verb on one resource) may be specific to one path, so it is
        not remembered: each check that meets a 403 is its own error, naming what its identity may not do.
        """
        cause = api_cause(error)
        if self.is_management:
            cause = for_management(cause, self.context)
        status = getattr(error, "status", None)
        if isinstance(status, int) and status:
            observed = observed_status(error)
        else:
            observed = f"{type(_innermost(error)).__name__}: {_innermost(error)}"
        message = f"{self.where}: cannot {verb} {what}: {cause.meaning} ({observed})"
        if cause.kind not in ("credentials-rejected", "forbidden"):
            self._failure = self._failure or message
            self.cause = self.cause or cause
        return ClusterUnreachable(message, target=self.target_id, cause=cause)

    def get(self, path: str, query: list[tuple[str, Any]] | None = None) -> Any:
        """GET an API path as parsed JSON, retrying transient failures; ClusterUnreachable otherwise."""
        self._raise_if_failed()
        api = self.api
        try:
            for attempt in _retrying():
                with attempt:
                    method, url, headers, _, _ = api.param_serialize(
                        "GET",
                        path,
                        query_params=query or [],
                        header_params={"Accept": "application/json"},
                        auth_settings=["BearerToken"],
                    )
                    response = api.call_api(method, url, header_params=headers, _request_timeout=REQUEST_TIMEOUT)
                    data = response.read()
                    if not 200 <= response.status <= 299:  # the Status body names a 403's user, verb and resource
                        raise ApiException(status=response.status, reason=response.reason,
                                           body=data.decode("utf-8", errors="replace") if data else None)
                    # the bounded loader: large lists pass, a document nested past the parser is refused by name
                    return loads_json(data, f"GET {path}", max_bytes=API_MAX_BYTES, max_depth=None)
        except ApiException as error:
            if error.status == 404:
                raise
            raise self.unreachable(error, f"GET {path}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self.unreachable(error, f"GET {path}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A direct client call (the CUDA sample's writes, logs, watches) with the same retries as `get`.

        Answers (2xx, and 4xx other than 401/403/429: 404, 409, 400...) come back or raise ApiException as the
        client does; failing to reach or read the API (refused, reset, timeouts, 5xx after retries, 401/403)
        raises ClusterUnreachable, never a raw client exception.
        """
        self._raise_if_failed()
        try:
            return with_retries(method, *args, **kwargs)
        except Exception as error:
            if is_transport_error(error):
                raise self.unreachable(error, *reversed(call_words(getattr(method, "__name__", ""), args))) from None
            raise

    def connect(self) -> Cluster:
        """Reach the API once (GET /version); ClusterUnreachable when it cannot."""
        self.version()
        return self

    def answers_credentials(self, bearer_token: str, ca_pem: str | None, verify: bool) -> tuple[int | None, str]:
        """GET /version on this API with other credentials, as Argo CD connects with a cluster Secret's: its bearer
        token, the serving certificate verified against `ca_pem` (its caData; None: the system's roots) unless
        `verify` is false (tlsClientConfig.insecure). (status, '') for a 2xx or a 401 (the token refused), (None, why)
        when TLS refused the certificate; ClusterUnreachable for anything else, a 5xx, 429 or 403 included (a fault of
        the API or of this run, not of the registration: this API answered this run's own credentials)."""
        self._raise_if_failed()
        pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED" if verify else "CERT_NONE", ca_cert_data=ca_pem if verify else None,
                                   retries=False, timeout=urllib3.Timeout(connect=REQUEST_TIMEOUT[0], read=REQUEST_TIMEOUT[1]))
        try:
            response = pool.request("GET", self.server.rstrip("/") + "/version", preload_content=True,
                                    headers={"Authorization": f"Bearer {bearer_token}", "Accept": "application/json"})
        except urllib3.exceptions.SSLError as error:
            return None, f"{type(_innermost(error)).__name__}: {_innermost(error)}"
        except urllib3.exceptions.MaxRetryError as error:
            if isinstance(error.reason, urllib3.exceptions.SSLError):
                return None, f"{type(_innermost(error.reason)).__name__}: {_innermost(error.reason)}"
            raise self.unreachable(error, "GET /version with the Argo CD registration's credentials") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise self.unreachable(error, "GET /version with the Argo CD registration's credentials") from None
        finally:
            pool.clear()
        if response.status == 401 or 200 <= response.status <= 299:
            return response.status, ""
        error = ApiException(status=response.status, reason=response.reason,
                             body=response.data.decode("utf-8", errors="replace") if response.data else None)
        raise self.unreachable(error, "GET /version with the Argo CD registration's credentials")

    def version(self) -> dict[str, Any]:
        """The /version document (fetched once)."""
        if self._version is None:
            self._version = self.get("/version")
        return self._version

    def list(
        self, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Objects of a kind as plain dicts; cluster-wide kinds are listed once and filtered locally.

        A CRD kind the API does not serve (404: the CRD is not installed) raises CrdNotServed, every time it is asked
        for: a check that needs it fails saying so, and none reads it as "there are none".
        """
        if kind not in KINDS:
            raise KeyError(f"unknown kind {kind!r}; known: {sorted(KINDS)}")
        if kind in self.not_served:
            raise CrdNotServed(kind, self.not_served[kind])
        prefix, resource, namespaced = KINDS[kind]
        scoped = kind in _NAMESPACE_ONLY
        key = (kind, namespace if scoped else None, label_selector if scoped else None)
        if key not in self._cache:
            if scoped and not namespace:
                raise ValueError(f"{kind} are only listed per namespace")
            path = f"{prefix}/namespaces/{namespace}/{resource}" if scoped else f"{prefix}/{resource}"
            self.list_calls[kind] = self.list_calls.get(kind, 0) + 1
            try:
                self._cache[key] = self._list_all(path, label_selector if scoped else None)
            except ApiException as error:
                if error.status != 404 or path.startswith(BUILTIN_PREFIXES):
                    raise
                self.not_served[kind] = (f"{self.where}: GET {path} answered 404 Not Found: "
                                         f"{NOT_SERVED.get(kind, 'its CustomResourceDefinition is not installed')}")
                raise CrdNotServed(kind, self.not_served[kind]) from None
        items = self._cache[key]
        if namespaced and namespace and not scoped:
            items = [i for i in items if (i.get("metadata") or {}).get("namespace") == namespace]
        if label_selector and not scoped:
            wanted = _parse_selector(label_selector)
            items = [i for i in items if _labels_match((i.get("metadata") or {}).get("labels") or {}, wanted)]
        return items

    def _list_all(self, path: str, label_selector: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query: list[tuple[str, Any]] = [("limit", 500)]
            if token:
                query.append(("continue", token))
            if label_selector:
                query.append(("labelSelector", label_selector))
            try:
                document = self.get(path, query)
            except ApiException as error:
                # 404 on a CRD's path: the CRD is not installed (list() says so to the check). On a built-in kind
                # (core, apps, batch, node.k8s.io) every Kubernetes serves, it is no list at all.
                if error.status == 404 and path.startswith(BUILTIN_PREFIXES):
                    raise ClusterUnreachable(
                        f"{self.where}: GET {path} answered 404 Not Found, which every Kubernetes API serves: this is "
                        "not a whole Kubernetes API (a proxy or a wrong server URL?), so its list cannot be read",
                        target=self.target_id, cause=api_cause(error)) from None
                raise
            items.extend(document.get("items") or [])
            token = (document.get("metadata") or {}).get("continue")
            if not token:
                return items

    def cached(self, kind: str) -> list[dict[str, Any]] | None:
        """A kind's cluster-wide list if it was already fetched, else None (never connects)."""
        return self._cache.get((kind, None, None))

    # --- conveniences -----------------------------------------------------------------------

    @property
    def nodes(self) -> list[dict[str, Any]]:
        """All Nodes."""
        return self.list("nodes")

    def node_for(self, spec: Any) -> dict[str, Any] | None:
        """The Node of an inventory host: same name, else the InternalIP equals the host's address."""
        nodes = self.nodes
        for node in nodes:
            if node["metadata"]["name"] == spec.name:
                return node
        for node in nodes:
            if spec.address in node_internal_ips(node):
                return node
        return None


def _innermost(error: BaseException) -> BaseException:
    """The exception underneath urllib3's MaxRetryError (its `reason`), for messages."""
    reason = getattr(error, "reason", None)
    return reason if isinstance(reason, BaseException) else error


def _parse_selector(selector: str) -> dict[str, str | None]:
    wanted: dict[str, str | None] = {}
    for part in selector.split(","):
        key, sep, value = part.partition("=")
        wanted[key.strip()] = value.strip().lstrip("=") if sep else None
    return wanted


def _labels_match(labels: dict[str, str], wanted: dict[str, str | None]) -> bool:
    return all(key in labels and (value is None or labels[key] == value) for key, value in wanted.items())


def node_internal_ips(node: Mapping[str, Any]) -> list[str]:
    """InternalIP addresses of a Node."""
    return [a["address"] for a in (node.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"]
