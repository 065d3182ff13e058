"""GitOps layer: the cluster is registered in the Argo CD management cluster (ADR 0001 §10)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.evidence import decode_b64
from pytest_dgxspark.parsing import same_endpoint
from pytest_dgxspark.checking import require

SECRET_TYPE = "argocd.argoproj.io/secret-type=cluster"


@pytest.mark.rule("ADR-0001.argocd-registered")
def test_cluster_secret_points_at_this_cluster(site: Any, connections: Any, evidence: Any) -> None:
    management = connections.management
    if management is None:
        not_applicable(f"{site.root}/rke2/vars.yml names no Argo CD management cluster (argocd_context)")
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
    require(any(same_endpoint(entry["server"], server) for entry in registered.values()), (
        f"{management.where}: no Secret labelled {SECRET_TYPE} in namespace {namespace} has server {server}; "
        f"registered servers: {sorted(e['server'] for e in registered.values())}"
    ))
