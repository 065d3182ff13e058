"""GitOps layer: the cluster is registered in the Argo CD management cluster (ADR 0001 §10)."""

from __future__ import annotations

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
    require(any(same_endpoint(entry["server"], server) for entry in registered.values()), (
        f"{management.where}: no Secret labelled {SECRET_TYPE} in namespace {namespace} has server {server}; "
        f"registered servers: {sorted(e['server'] for e in registered.values())}"
    ))
