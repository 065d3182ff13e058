"""GitOps layer: the cluster is registered in the Argo CD management cluster (ADR 0001 §10)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_dgxspark.checking import not_verifiable, require
from pytest_dgxspark.judge.evidence import decode_b64
from pytest_dgxspark.kube.objects import same_endpoint

SECRET_TYPE = "argocd.argoproj.io/secret-type=cluster"


@pytest.mark.rule("ADR-0001.argocd-registered")
def test_cluster_secret_points_at_this_cluster(site: Any, connections: Any, evidence: Any) -> None:
    management = connections.management
    if management is None:  # ADR 0001 §10 requires the registration: without a context it cannot be checked
        not_verifiable(
            f"{site.root}/rke2/vars.yml names no Argo CD management cluster (argocd_context), so whether this cluster "
            "is registered in Argo CD cannot be checked",
            f"Set argocd_context in {site.root}/rke2/vars.yml (the management cluster's kubeconfig context) and rerun.",
            f"{site.root}/rke2/vars.yml에 argocd_context(management 클러스터의 kubeconfig context)를 설정하고 다시 실행한다.")
    server = connections.cluster.server.rstrip("/")
    namespace = site.argocd_namespace
    secrets = management.connect().list("secrets", namespace=namespace, label_selector=SECRET_TYPE)
    registered = {
        s["metadata"]["name"]: {
            "name": decode_b64((s.get("data") or {}).get("name", "")),
            "server": decode_b64((s.get("data") or {}).get("server", "")).rstrip("/"),
        }
        for s in secrets
    }
    evidence.record("this cluster's API endpoint", server)
    evidence.record(f"Argo CD cluster Secrets in {namespace}", registered)
    # a registration by DNS name and a kubeconfig by IP (or the reverse) name the same API
    mine = sorted(name for name, entry in registered.items() if same_endpoint(entry["server"], server))
    require(mine, (
        f"{management.where}: no Secret labelled {SECRET_TYPE} in namespace {namespace} has server {server}; "
        f"registered servers: {sorted(e['server'] for e in registered.values())}"
    ))
    # Argo CD manages the cluster with the Secret's own credentials: they must open this API as they are
    config = _config(next(s for s in secrets if s["metadata"]["name"] == mine[0]))
    token, tls = config.get("bearerToken"), config.get("tlsClientConfig") or {}
    where = f"{management.where}: the cluster Secret {namespace}/{mine[0]} names this cluster ({server})"
    if not isinstance(token, str) or not token:
        not_verifiable(
            f"{where}, but its config holds no bearerToken (an exec provider, client certificate or cloud login), so "
            "whether Argo CD can connect with it cannot be checked here",
            "Confirm in Argo CD (argocd cluster get, or the UI's Clusters page) that the connection status is Successful.",
            "Argo CD에서(argocd cluster get 또는 UI의 Clusters 화면) connection status가 Successful인지 확인한다.")
    verify = tls.get("insecure") is not True
    ca = decode_b64(str(tls.get("caData") or "")) or None
    status, refused = connections.cluster.answers_credentials(token, ca, verify)
    evidence.record("the registration's credentials against this API (GET /version)", {
        "tls": ("insecure: not verified" if not verify else refused or
                ("verified with its caData" if ca else "verified with the system's roots (no caData)")),
        "status": status})
    require(not refused, (
        f"{where}, but its tlsClientConfig.caData does not verify this API's serving certificate ({refused}): Argo "
        "CD cannot connect (x509: certificate signed by unknown authority); write the cluster's current CA with make "
        "rke2/argocd/register"))
    require(status is not None and 200 <= status < 300, (
        f"{where}, but {connections.cluster.where} refuses its bearer token (GET /version answered {status}): Argo CD "
        "cannot connect with it (the server has asked for the client to provide credentials); the argocd-manager "
        "token it holds was revoked or replaced: write the current one with make rke2/argocd/register"))


def _config(secret: dict[str, Any]) -> dict[str, Any]:
    """The cluster Secret's `config` (Argo CD's declarative-setup JSON: bearerToken, tlsClientConfig); {} when absent
    or unreadable (no credentials to check)."""
    try:
        value = json.loads(decode_b64((secret.get("data") or {}).get("config", "")) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
