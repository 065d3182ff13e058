"""RKE2 layer: the site's kubeconfig context is renamed, points at a routable server and reaches the API (ADR 0001 §5)."""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlparse

import pytest

from pytest_dgxspark.checking import require, unreadable
from pytest_dgxspark.data.yamlload import load_yaml


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@pytest.mark.rule("ADR-0001.kubeconfig-context")
def test_site_context_is_named_and_points_at_the_node(targets: Any, site: Any, evidence: Any) -> None:
    path = targets.kubeconfig
    if path is None:
        unreadable(f"no kubeconfig was given for the site (--dgxspark-kubeconfig, $KUBECONFIG or ~/.kube/config): "
                   f"context {site.context!r} cannot be read; run make rke2/kubeconfig")
    try:
        config = load_yaml(path) or {}
    except ValueError as error:
        unreadable(f"{path}: the kubeconfig cannot be read as YAML: {str(error).splitlines()[0]}")
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
    users = {u.get("name") for u in config.get("users") or []}
    require(
        site.context in contexts,
        f"{path}: no context {site.context!r} (contexts: {sorted(contexts)}); run make rke2/kubeconfig",
    )
    context = contexts[site.context]
    cluster_name, user_name = context.get("cluster"), context.get("user")
    server = (clusters.get(cluster_name) or {}).get("server", "")
    host = urlparse(server).hostname or ""
    evidence.record("context", {"name": site.context, "cluster": cluster_name, "user": user_name, "server": server})
    defaults = [f"{kind} {name!r}" for kind, name in (("cluster", cluster_name), ("user", user_name)) if name == "default"]
    require(
        defaults == [],
        f"{path}: context {site.context!r} still uses RKE2's default names: {defaults}; rename them",
    )
    require(
        cluster_name in clusters,
        f"{path}: context {site.context!r} names cluster {cluster_name!r}, which is not defined",
    )
    require(user_name in users, f"{path}: context {site.context!r} names user {user_name!r}, which is not defined")
    require(not _is_loopback(host), (
        f"{path}: cluster {cluster_name!r} server is {server} (loopback, as in rke2.yaml); point it at the node's address"
    ))


@pytest.mark.rule("ADR-0001.kubeconfig-context")
def test_site_context_reaches_the_api(cluster: Any, evidence: Any) -> None:
    version = cluster.version()
    evidence.record("/version", version)
    require(version.get("gitVersion"), f"{cluster.where}: /version answered without gitVersion: {version}")
