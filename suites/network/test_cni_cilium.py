"""Network layer: Cilium is the CNI, with a Ready agent on every node and no other CNI (ADR 0001 §5-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.kube.objects import pod_ready, pod_summary

OTHER_CNI_PREFIXES = ("rke2-canal", "canal-", "calico-node", "calico-kube-controllers", "kube-flannel", "flannel-")


def _cilium_agents(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p["metadata"].get("labels") or {}).get("k8s-app") == "cilium"]


@pytest.mark.rule("ADR-0001.cni-cilium")
def test_site_selects_cilium(site: Any, evidence: Any) -> None:
    evidence.record("rke2_cni", site.vars.get("rke2_cni"))
    require(site.vars.get("rke2_cni") == "cilium", (
        f"{site.root}/rke2/vars.yml: rke2_cni is {site.vars.get('rke2_cni')!r}, ADR 0001 requires 'cilium'"
    ))


@pytest.mark.rule("ADR-0001.cni-cilium")
def test_every_node_has_a_ready_cilium_agent(cluster: Any, evidence: Any) -> None:
    agents = _cilium_agents(cluster.list("pods"))
    nodes = [n["metadata"]["name"] for n in cluster.nodes]
    ready_on = {p["spec"].get("nodeName") for p in agents if pod_ready(p)}
    evidence.record("cilium agents", [pod_summary(p) for p in agents])
    missing = [n for n in nodes if n not in ready_on]
    require(nodes, f"{cluster.where}: the cluster has no Nodes")
    require(missing == [], f"{cluster.where}: no Ready cilium agent pod (k8s-app=cilium) on {', '.join(missing)}")


@pytest.mark.rule("ADR-0001.cni-cilium")
def test_no_other_cni_runs(cluster: Any, evidence: Any) -> None:
    others = [pod_summary(p) for p in cluster.list("pods") if p["metadata"]["name"].startswith(OTHER_CNI_PREFIXES)]
    evidence.record("other CNI pods", others)
    require(others == [], f"{cluster.where}: pods of another CNI run next to Cilium: {[p['name'] for p in others]}")
