"""ADR-0001.argocd-registered opens this API with the cluster Secret's own credentials (its bearer token, its caData)
as Argo CD would: a refused token or certificate fails the rule, `insecure: true` skips only the certificate, a
config without a bearer token is not verifiable, and the token never reaches evidence. (The 401 and the unverified
certificate from a real kube-apiserver and the stand-in: the argocd-token-stale and argocd-ca-stale scenarios.)"""
from __future__ import annotations

import base64
import importlib.util
import json
from types import SimpleNamespace

import pytest

from pytest_dgxspark.checking import TargetError
from tests.conftest import REPO

SERVER = "https://127.0.0.1:6443"
TOKEN = "abcdef.0123456789abcdef"


def _check():
    spec = importlib.util.spec_from_file_location("argocd_check", REPO / "suites" / "gitops" / "test_argocd_registered.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.test_cluster_secret_points_at_this_cluster


class _Cluster:
    server, where = SERVER, f"Kubernetes API of context 'gpu' ({SERVER})"

    def __init__(self, status: int | None, refused: str = "") -> None:
        self.answer, self.calls = (status, refused), []

    def answers_credentials(self, token, ca, verify):
        self.calls.append((token, ca, verify))
        return self.answer


class _Evidence:
    def __init__(self) -> None:
        self.items: dict = {}

    def record(self, label, value) -> None:
        self.items[label] = value


def _run(config: dict, cluster: _Cluster) -> _Evidence:
    secret = {"metadata": {"name": "cluster-gpu"}, "data": {
        k: base64.b64encode(v.encode()).decode() for k, v in
        {"name": "gpu", "server": SERVER, "config": json.dumps(config)}.items()}}
    management = SimpleNamespace(where="Kubernetes API of context 'argocd'",
                                 connect=lambda: SimpleNamespace(list=lambda *a, **k: [secret]))
    evidence = _Evidence()
    site = SimpleNamespace(root="site", argocd_namespace="argocd")
    _check()(site, SimpleNamespace(management=management, cluster=cluster), evidence)
    return evidence


def test_the_token_and_ca_of_the_secret_open_this_api_and_the_token_is_never_evidence():
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    cluster = _Cluster(200)
    evidence = _run({"bearerToken": TOKEN, "tlsClientConfig": {"insecure": False,
                                                              "caData": base64.b64encode(ca.encode()).decode()}}, cluster)
    assert cluster.calls == [(TOKEN, ca, True)]
    assert TOKEN not in json.dumps(evidence.items)
    assert evidence.items["the registration's credentials against this API (GET /version)"] == {
        "tls": "verified with its caData", "status": 200}


def test_insecure_skips_only_the_certificate_and_a_refused_token_still_fails():
    cluster = _Cluster(401)
    with pytest.raises(pytest.fail.Exception, match="refuses its bearer token \\(GET /version answered 401\\)"):
        _run({"bearerToken": TOKEN, "tlsClientConfig": {"insecure": True}}, cluster)
    assert cluster.calls == [(TOKEN, None, False)]


def test_a_certificate_the_ca_data_does_not_verify_fails_naming_the_tls_error():
    cluster = _Cluster(None, "SSLError: certificate verify failed")
    with pytest.raises(pytest.fail.Exception, match="caData does not verify this API's serving certificate "
                                                    "\\(SSLError: certificate verify failed\\)"):
        _run({"bearerToken": TOKEN, "tlsClientConfig": {"caData": ""}}, cluster)
    assert cluster.calls == [(TOKEN, None, True)]  # no caData: the system's roots, as Argo CD would


def test_a_config_without_a_bearer_token_is_not_verifiable_never_a_pass():
    cluster = _Cluster(200)
    with pytest.raises(TargetError, match="not verifiable: .* holds no bearerToken"):
        _run({"execProviderConfig": {"command": "argocd-k8s-auth"}, "tlsClientConfig": {}}, cluster)
    assert cluster.calls == []


@pytest.mark.parametrize(("status", "cause"), [(503, "server-error"), (429, "throttled"), (500, "server-error")])
def test_a_server_fault_on_the_credential_request_is_an_error_never_the_registrations_finding(monkeypatch, status, cause):
    """Only a 401 says the token is refused; a 5xx or 429 (the API's own fault, the Status body kube-apiserver sends)
    is ClusterUnreachable, so the check ends as `error`, never `failed`."""
    import urllib3

    from pytest_dgxspark.targets.cluster import Cluster, ClusterUnreachable

    body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message":
                       "the server is currently unable to handle the request", "reason": "ServiceUnavailable",
                       "code": status}).encode()
    answers = {401: b"", 200: b"{}"}

    def request(self, method, url, **kwargs):
        assert (method, url) == ("GET", SERVER + "/version")
        code = kwargs["headers"]["Authorization"].removeprefix("Bearer ")
        return urllib3.HTTPResponse(body=answers.get(int(code), body), status=int(code), preload_content=True)

    monkeypatch.setattr(urllib3.PoolManager, "request", request)
    monkeypatch.setattr(Cluster, "server", property(lambda self: SERVER))
    cluster = Cluster(None, "gpu")
    assert cluster.answers_credentials("200", None, False) == (200, "")
    assert cluster.answers_credentials("401", None, False) == (401, "")
    with pytest.raises(ClusterUnreachable) as raised:
        cluster.answers_credentials(str(status), None, False)
    assert raised.value.cause.kind == cause and f"HTTP {status}" in str(raised.value)
